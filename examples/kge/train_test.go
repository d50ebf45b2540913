package kge

import (
	"math/rand/v2"
	"testing"

	"github.com/flexps/flexps/datastore"
)

// planted is a graph with learnable structure: relations 0 and 1 are
// random permutations of the entities, relations 2 and 3 their inverses.
// Every triple of relations 0 and 1 is in train; a quarter of the inverse
// triples is held out as test, so ranking them needs the model to learn
// that 2 undoes 0 and 3 undoes 1 (in ComplEx: w_2 = conj(w_0)).
func planted(n int, seed uint64) (train, test *datastore.Records, known Known) {
	rng := rand.New(rand.NewPCG(seed, 7))
	train, test, known = &datastore.Records{}, &datastore.Records{}, Known{}
	add := func(r *datastore.Records, x Triple) {
		r.Append(float64(x.T), []uint64{x.H, x.R}, []float64{1, 1})
		known[x] = struct{}{}
	}
	var all []Triple
	for r := uint64(0); r < 2; r++ {
		perm := rng.Perm(n)
		for e, p := range perm {
			all = append(all, Triple{uint64(e), r, uint64(p)})
			x := Triple{uint64(p), r + 2, uint64(e)}
			if rng.IntN(4) == 0 {
				add(test, x)
			} else {
				all = append(all, x)
			}
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, x := range all {
		add(train, x)
	}
	return train, test, known
}

func TestBatchKeysCoverNegatives(t *testing.T) {
	train, _, _ := planted(30, 1)
	E, R := newLocal(t, "entities", 30, 4), newLocal(t, "relations", 4, 4)
	for _, tc := range []struct{ lo, hi, neg int }{{0, 1, 1}, {0, 10, 4}, {5, 60, 16}} {
		m := NewMiniBatch(E, R, 2, tc.neg, 3)
		b, err := m.sample(train, tc.lo, tc.hi)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.ex) != (tc.hi-tc.lo)*(1+tc.neg) {
			t.Fatalf("%d examples, want %d", len(b.ex), (tc.hi-tc.lo)*(1+tc.neg))
		}
		ents, rels := batchKeys(b)
		in := func(keys []uint64) map[uint64]bool {
			s := map[uint64]bool{}
			for _, k := range keys {
				if s[k] {
					t.Fatalf("key %d twice in %v", k, keys)
				}
				s[k] = true
			}
			return s
		}
		es, rs := in(ents), in(rels)
		for i, ex := range b.ex {
			if !es[ex.x.H] || !es[ex.x.T] || !rs[ex.x.R] {
				t.Fatalf("example %d %+v not covered by %v %v", i, ex.x, ents, rels)
			}
			if pos := b.ex[i-i%(1+tc.neg)].x; ex.label < 0 && (ex.x.R != pos.R || (ex.x.H != pos.H && ex.x.T != pos.T)) {
				t.Fatalf("negative %+v is not a corruption of one side of %+v", ex.x, pos)
			}
		}
	}
}

// TestPlantedBeatsRandom trains on the planted graph without a cluster
// and compares the filtered MRR of the held-out inverse triples with
// that of the untrained (random) embeddings.
func TestPlantedBeatsRandom(t *testing.T) {
	const n, dim = 50, 16
	train, test, known := planted(n, 2)
	E, R := newLocal(t, "entities", n, 2*dim), newLocal(t, "relations", 4, 2*dim)
	mrr := func() float64 {
		emb := Embeddings{Dim: dim, Ent: E.Values(), Rel: R.Values()}
		st, err := emb.RankAll(test, 0, test.Len(), known)
		if err != nil {
			t.Fatal(err)
		}
		return st.Metrics()["mrr"]
	}
	random := mrr()
	m := NewMiniBatch(E, R, dim, 8, 1)
	var first, last Stats
	for epoch := 0; epoch < 60; epoch++ {
		var st Stats
		for lo := 0; lo < train.Len(); lo += 32 {
			bs, err := m.Step(train, lo, min(lo+32, train.Len()), Hyper{LR: 0.2, L2: 1e-4})
			if err != nil {
				t.Fatal(err)
			}
			st.Add(bs)
		}
		if epoch == 0 {
			first = st
		}
		last = st
	}
	got := mrr()
	t.Logf("held-out filtered MRR: trained %.3f, untrained %.3f; loss %.3f -> %.3f", got, random,
		first.LossSum/float64(first.N), last.LossSum/float64(last.N))
	if got < 0.5 || got < 4*random {
		t.Fatalf("trained MRR %.3f does not clearly beat the untrained %.3f (want >= 0.5 and >= 4x)", got, random)
	}
	if last.LossSum/float64(last.N) >= first.LossSum/float64(first.N) {
		t.Fatalf("training loss did not fall")
	}
}
