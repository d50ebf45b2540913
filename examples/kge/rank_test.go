package kge

import (
	"math"
	"math/cmplx"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

func records(ts ...Triple) *datastore.Records {
	r := &datastore.Records{}
	for _, t := range ts {
		r.Append(float64(t.T), []uint64{t.H, t.R}, []float64{1, 1})
	}
	return r
}

// realEmb has dim 1 with zero imaginary parts, so a triple scores h*r*t.
func realEmb(ents, rels []float64) *Embeddings {
	e := &Embeddings{Dim: 1}
	for _, x := range ents {
		e.Ent = append(e.Ent, x, 0)
	}
	for _, x := range rels {
		e.Rel = append(e.Rel, x, 0)
	}
	return e
}

func TestFilteredRank(t *testing.T) {
	// Entities score 1, 2, 3, -1, 2; relation 0 is 1. For (0 0 1) the
	// tail candidates score 1*e: e2 (3) beats the truth (2), e4 ties.
	// The head candidates score 2*e: e1, e2 and e4 beat the truth (2).
	emb := realEmb([]float64{1, 2, 3, -1, 2}, []float64{1})
	x := Triple{H: 0, R: 0, T: 1}
	for _, tc := range []struct {
		name  string
		head  bool
		known []Triple
		want  float64
	}{
		{"tail raw: one better, one tie", false, nil, 2.5},
		{"tail: the better one is true", false, []Triple{{0, 0, 2}}, 1.5},
		{"tail: better and tie are true", false, []Triple{{0, 0, 2}, {0, 0, 4}}, 1},
		{"tail: a true head-side triple does not filter", false, []Triple{{2, 0, 1}}, 2.5},
		{"head raw: three better", true, nil, 4},
		{"head: one better is true", true, []Triple{{2, 0, 1}}, 3},
		{"head: all better are true", true, []Triple{{1, 0, 1}, {2, 0, 1}, {4, 0, 1}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			known := Known{}
			for _, k := range tc.known {
				known[k] = struct{}{}
			}
			got, err := emb.FilteredRank(x, tc.head, known)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("rank %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRankAllMetrics(t *testing.T) {
	emb := realEmb([]float64{1, 2, 3, -1, 2}, []float64{1})
	// (0 0 1): tail rank 2.5, head rank 4 (nothing else is known but the
	// triple itself). (2 0 2): tail scores 3e, truth 9 is the best: 1;
	// head scores 3e, truth 9 is the best: 1.
	r := records(Triple{0, 0, 1}, Triple{2, 0, 2})
	known := Known{}
	if err := known.AddRecords(r); err != nil {
		t.Fatal(err)
	}
	st, err := emb.RankAll(r, 0, r.Len(), known)
	if err != nil {
		t.Fatal(err)
	}
	m := st.Metrics()
	want := map[string]float64{"mrr": (1/2.5 + 1/4.0 + 1 + 1) / 4, "hits1": 0.5, "hits3": 0.75, "hits10": 1}
	for k, w := range want {
		if math.Abs(m[k]-w) > 1e-12 {
			t.Errorf("%s = %v, want %v", k, m[k], w)
		}
	}
	if st.N != 4 {
		t.Errorf("ranked %d, want 4 (head and tail of 2 triples)", st.N)
	}
}

func TestRankErrors(t *testing.T) {
	emb := realEmb([]float64{1, 2}, []float64{1})
	for _, tc := range []struct {
		name string
		r    *datastore.Records
		want string
	}{
		{"entity beyond the model", records(Triple{0, 0, 5}), "beyond the model's 2 entities"},
		{"relation beyond the model", records(Triple{0, 3, 1}), "beyond the model's 2 entities and 1 relations"},
		{"fractional tail", func() *datastore.Records {
			r := &datastore.Records{}
			r.Append(1.5, []uint64{0, 0}, []float64{1, 1})
			return r
		}(), "not a non-negative integer"},
		{"one id", func() *datastore.Records {
			r := &datastore.Records{}
			r.Append(1, []uint64{0}, []float64{1})
			return r
		}(), "want \"head relation tail\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := emb.RankAll(tc.r, 0, tc.r.Len(), Known{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Errors about one triple of a file name the file and line.
func TestRankErrorsNameFileAndLine(t *testing.T) {
	emb := realEmb([]float64{1, 2}, []float64{1})
	for _, tc := range []struct {
		name string
		r    *datastore.Records
		want string
	}{
		{"entity beyond the model", records(Triple{0, 0, 1}, Triple{0, 0, 5}), "test.tsv line 2: triple (0 0 5) is beyond"},
		{"fractional tail", func() *datastore.Records {
			r := records(Triple{0, 0, 1})
			r.Append(1.5, []uint64{0, 0}, []float64{1, 1})
			return r
		}(), "test.tsv line 2: tail 1.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.r.Len() {
				tc.r.LineNo = append(tc.r.LineNo, int64(i+1))
			}
			tc.r.Origins = []datastore.Origin{{Path: "test.tsv"}}
			_, err := emb.RankAll(tc.r, 0, tc.r.Len(), Known{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if err := (Known{}).AddRecords(tc.r); tc.name == "fractional tail" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("AddRecords: error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestScoreIsComplEx checks score against complex arithmetic.
func TestScoreIsComplEx(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 100; trial++ {
		dim := 1 + rng.IntN(8)
		v := func() []float64 {
			x := make([]float64, 2*dim)
			for i := range x {
				x[i] = rng.NormFloat64()
			}
			return x
		}
		h, r, tt := v(), v(), v()
		var want complex128
		for k := 0; k < dim; k++ {
			want += complex(h[k], h[dim+k]) * complex(r[k], r[dim+k]) * cmplx.Conj(complex(tt[k], tt[dim+k]))
		}
		if got := score(h, r, tt, dim); math.Abs(got-real(want)) > 1e-9 {
			t.Fatalf("score %v, want Re %v", got, real(want))
		}
	}
}

func TestEvalModel(t *testing.T) {
	ents := []float64{1, 0, 2, 0, 3, 0, -1, 0, 2, 0}
	model := func(tables ...tasks.ModelTable) *tasks.Model { return &tasks.Model{Kind: "kge", Tables: tables} }
	et := tasks.ModelTable{Spec: kvstore.TableSpec{Name: "entities", Size: 5, Width: 2}, Dense: true, Vals: ents}
	rt := tasks.ModelTable{Spec: kvstore.TableSpec{Name: "relations", Size: 1, Width: 2}, Dense: true, Vals: []float64{1, 0}}
	m, err := EvalModel(model(et, rt), records(Triple{0, 0, 1}, Triple{2, 0, 2}))
	if err != nil {
		t.Fatal(err)
	}
	if want := (1/2.5 + 1/4.0 + 1 + 1) / 4; math.Abs(m["mrr"]-want) > 1e-12 {
		t.Errorf("mrr %v, want %v", m["mrr"], want)
	}
	wide := rt
	wide.Spec.Width = 4
	for _, tc := range []struct {
		name string
		m    *tasks.Model
		data *datastore.Records
		want string
	}{
		{"no entities", model(rt), records(Triple{0, 0, 1}), "no table \"entities\""},
		{"no relations", model(et), records(Triple{0, 0, 1}), "no table \"relations\""},
		{"widths differ", model(et, wide), records(Triple{0, 0, 1}), "want equal even widths"},
		{"no records", model(et, rt), &datastore.Records{}, "no records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := EvalModel(tc.m, tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// FuzzTripleAt feeds arbitrary "ratings" lines through the parser and
// TripleAt: either an error or a triple whose ids round-trip.
func FuzzTripleAt(f *testing.F) {
	for _, s := range []string{"0 1 2", "3\t0\t4", "1 2 3.5", "1 2 -1", "1 2 1e300", "5 5", "1 2 9007199254740993"} {
		f.Add(s)
	}
	format, err := datastore.NewFormat("ratings", datastore.DefaultFormatOptions())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r := &datastore.Records{}
		if err := format.ParseLine([]byte(line), r); err != nil || r.Len() == 0 {
			return
		}
		x, err := TripleAt(r, 0)
		if err != nil {
			return
		}
		if float64(x.T) != r.Labels[0] || x.H != r.Keys[0] || x.R != r.Keys[1] {
			t.Fatalf("%q -> %+v from %v %v", line, x, r.Keys, r.Labels)
		}
	})
}
