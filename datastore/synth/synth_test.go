package synth

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

type sample struct {
	y    float64
	ids  []int
	vals []float64
}

func parse(t *testing.T, data []byte, base int) []sample {
	t.Helper()
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var s sample
		s.y, _ = strconv.ParseFloat(f[0], 64)
		prev := -1
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, ":")
			id, err := strconv.Atoi(k)
			if err != nil || id-base < 0 || id <= prev {
				t.Fatalf("bad or unsorted id %q in %q", k, sc.Text())
			}
			prev = id
			x, _ := strconv.ParseFloat(v, 64)
			if x <= 0 || x > 1 {
				t.Fatalf("value %v out of (0,1]", x)
			}
			s.ids = append(s.ids, id-base)
			s.vals = append(s.vals, x)
		}
		out = append(out, s)
	}
	return out
}

func TestWriteLIBSVMShape(t *testing.T) {
	tests := []LIBSVMConfig{
		{Rows: 2000, Dim: 50, NNZ: 50, Seed: 1},
		{Rows: 2000, Dim: 1000, NNZ: 10, Zipf: 1.1, Seed: 2},
		{Rows: 2000, Dim: 1000, NNZ: 10, Zipf: 2.5, Seed: 2, ZeroBased: true},
		{Rows: 10, Dim: 100, NNZ: 3, Seed: 3, IndexBase: 5},
	}
	for _, cfg := range tests {
		var a, b bytes.Buffer
		w, err := WriteLIBSVM(&a, cfg)
		if err != nil {
			t.Fatal(err)
		}
		WriteLIBSVM(&b, cfg)
		if !bytes.Equal(a.Bytes(), b.Bytes()) || len(w) != cfg.Dim {
			t.Fatalf("%+v: not deterministic", cfg)
		}
		base := 1
		if cfg.ZeroBased {
			base = 0
		} else if cfg.IndexBase > 0 {
			base = cfg.IndexBase
		}
		rows := parse(t, a.Bytes(), base)
		pos := 0
		hits := make([]int, cfg.Dim)
		for _, r := range rows {
			if len(r.ids) != cfg.NNZ {
				t.Fatalf("row with %d ids", len(r.ids))
			}
			if r.y == 1 {
				pos++
			}
			for _, id := range r.ids {
				if id >= cfg.Dim {
					t.Fatalf("id %d >= dim", id)
				}
				hits[id]++
			}
		}
		if frac := float64(pos) / float64(len(rows)); len(rows) > 100 && (frac < 0.4 || frac > 0.6) {
			t.Fatalf("%+v: %.2f positive", cfg, frac)
		}
		if cfg.Zipf > 0 {
			// Hot ids are spread over the id space, not packed at 0.
			hotLow, hot := 0, 0
			for id, h := range hits {
				if h > len(rows)/20 {
					hot++
					if id < cfg.Dim/10 {
						hotLow++
					}
				}
			}
			if hot < 3 || hotLow == hot {
				t.Fatalf("zipf: %d hot ids, %d of them in the first tenth", hot, hotLow)
			}
		}
	}
	if _, err := WriteLIBSVM(&bytes.Buffer{}, LIBSVMConfig{Rows: 1, Dim: 5, NNZ: 6}); err == nil {
		t.Fatal("nnz > dim accepted")
	}
	if _, err := WriteLIBSVM(&bytes.Buffer{}, LIBSVMConfig{Rows: 1, Dim: 5, NNZ: 2, Zipf: 0.5}); err == nil {
		t.Fatal("zipf 0.5 accepted")
	}
}

// TestWriteLIBSVMLearnable trains a tiny full-batch logistic regression
// (gradient descent on the L2-regularised log loss, each coordinate's step
// scaled by 1/(its count + lambda)) and checks its held-out accuracy.
func TestWriteLIBSVMLearnable(t *testing.T) {
	for _, zipf := range []float64{1.1, 0} {
		var buf bytes.Buffer
		cfg := LIBSVMConfig{Rows: 20000, Dim: 10000, NNZ: 20, Zipf: zipf, Seed: 7}
		wt, err := WriteLIBSVM(&buf, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rows := parse(t, buf.Bytes(), 1)
		train, test := rows[:16000], rows[16000:]
		w := make([]float64, cfg.Dim)
		count := make([]float64, cfg.Dim)
		for _, r := range train {
			for _, id := range r.ids {
				count[id]++
			}
		}
		g := make([]float64, cfg.Dim)
		const lr, l2 = 0.5, 1.0
		for range 150 {
			clear(g)
			for _, r := range train {
				z := 0.0
				for k, id := range r.ids {
					z += w[id] * r.vals[k]
				}
				d := 1/(1+math.Exp(-z)) - r.y
				for k, id := range r.ids {
					g[id] += d * r.vals[k]
				}
			}
			for j := range w {
				if count[j] > 0 {
					w[j] -= lr * (g[j] + l2*w[j]) / (count[j] + l2)
				}
			}
		}
		correct := 0
		for _, r := range test {
			z := 0.0
			for k, id := range r.ids {
				z += w[id] * r.vals[k]
			}
			if (z > 0) == (r.y == 1) {
				correct++
			}
		}
		acc := float64(correct) / float64(len(test))
		accOn := func(w []float64, rs []sample) float64 {
			c := 0
			for _, r := range rs {
				z := 0.0
				for k, id := range r.ids {
					z += w[id] * r.vals[k]
				}
				if (z > 0) == (r.y == 1) {
					c++
				}
			}
			return float64(c) / float64(len(rs))
		}
		t.Logf("true weights: %.3f, train acc %.3f", accOn(wt, test), accOn(w, train))
		t.Logf("zipf %v: test accuracy %.3f", zipf, acc)
		if zipf > 0 && acc < 0.85 {
			t.Fatalf("zipf %v: test accuracy %.3f, want >= 0.85", zipf, acc)
		}
		if zipf == 0 && acc < 0.75 {
			t.Fatalf("uniform: test accuracy %.3f, want >= 0.75", acc)
		}
	}
}

func TestWriteLIBSVMSpeed(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("timing")
	}
	t0 := time.Now()
	var buf bytes.Buffer
	if _, err := WriteLIBSVM(&buf, LIBSVMConfig{Rows: 200000, Dim: 1000000, NNZ: 20, Zipf: 1.1, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	t.Logf("200k rows x 20 nnz: %v, %d MB", time.Since(t0), buf.Len()>>20)
}

func TestWriteRatings(t *testing.T) {
	var a, b bytes.Buffer
	cfg := RatingsConfig{Users: 100, Items: 50, Rank: 5, Ratings: 5000, Seed: 3, Noise: 0.1}
	if err := WriteRatings(&a, cfg); err != nil {
		t.Fatal(err)
	}
	WriteRatings(&b, cfg)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("not deterministic")
	}
	lines := strings.Split(strings.TrimSuffix(a.String(), "\n"), "\n")
	if len(lines) != 5000 {
		t.Fatalf("%d lines", len(lines))
	}
	sum, sq := 0.0, 0.0
	for _, l := range lines {
		f := strings.Split(l, "\t")
		u, e1 := strconv.Atoi(f[0])
		i, e2 := strconv.Atoi(f[1])
		r, e3 := strconv.ParseFloat(f[2], 64)
		if len(f) != 3 || e1 != nil || e2 != nil || e3 != nil || u >= 100 || i >= 50 || r < 1 || r > 5 {
			t.Fatalf("bad line %q", l)
		}
		sum += r
		sq += r * r
	}
	mean := sum / 5000
	if sd := math.Sqrt(sq/5000 - mean*mean); mean < 2.5 || mean > 3.5 || sd < 0.4 {
		t.Fatalf("ratings mean %.2f sd %.2f", mean, sd)
	}
	if err := WriteRatings(&a, RatingsConfig{Users: 1, Items: 1, Rank: 1, Min: 5, Max: 1}); err == nil {
		t.Fatal("min > max accepted")
	}
}

// Generate writes local files: a URL is refused, not taken for a relative
// path (hdfs://nn/x became ./hdfs:/nn/x); file:// URLs are local paths.
func TestGenerateRefusesURLs(t *testing.T) {
	tmp := t.TempDir()
	t.Chdir(tmp)
	err := Generate("hdfs://nn:8020/x.libsvm", Spec{Rows: 10, Dim: 5, NNZ: 2})
	if err == nil || !strings.Contains(err.Error(), "hdfs://nn:8020/x.libsvm") {
		t.Fatalf("got %v, want an error naming the URL", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "hdfs:")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a local hdfs: directory was made: %v", err)
	}
	if err := Generate("file://"+filepath.Join(tmp, "y.libsvm"), Spec{Rows: 10, Dim: 5, NNZ: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "y.libsvm")); err != nil {
		t.Fatal(err)
	}
}

// An output that is a directory ("gen --out .") was generated whole, then
// refused at the rename with "file exists"; now refused first, by name.
func TestGenerateRefusesADirectory(t *testing.T) {
	tmp := t.TempDir()
	t.Chdir(tmp)
	for _, tc := range []struct{ out, test, named string }{
		{".", "", "gen .: is a directory"},
		{tmp, "", "gen " + tmp + ": is a directory"},
		{"a.libsvm", ".", "gen .: is a directory"},
	} {
		err := Generate(tc.out, Spec{Rows: 10, Dim: 5, NNZ: 2, TestPath: tc.test})
		if err == nil || !strings.Contains(err.Error(), tc.named) {
			t.Errorf("out %q test %q: %v, want %q", tc.out, tc.test, err, tc.named)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("files left behind: %v", left)
	}
}

// A held-out file that is the training file (--test-out equal to --out,
// or test_path = path) was written second and renamed over the training
// rows: "wrote a", and a held the test rows alone. Now refused, whatever
// the spelling of the path, and the existing file is left as it was.
func TestGenerateRefusesATestFileThatIsTheTrainingFile(t *testing.T) {
	tmp := t.TempDir()
	t.Chdir(tmp)
	old := []byte("1 1:1\n")
	if err := os.WriteFile("old.libsvm", old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link("old.libsvm", "link.libsvm"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, test string
		refused          bool
	}{
		{"same name", "a.libsvm", "a.libsvm", true},
		{"same file spelled two ways", "a.libsvm", "./sub/../a.libsvm", true},
		{"absolute and relative", filepath.Join(tmp, "a.libsvm"), "a.libsvm", true},
		{"file URL of the training file", "a.libsvm", "file://" + filepath.Join(tmp, "a.libsvm"), true},
		{"an existing file and its hard link", "old.libsvm", "link.libsvm", true},
		{"two files", "b.libsvm", "b.test.libsvm", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Generate(tc.path, Spec{Rows: 10, Dim: 5, NNZ: 2, TestPath: tc.test, TestRows: 3})
			if !tc.refused {
				if err != nil {
					t.Fatal(err)
				}
				for p, want := range map[string]int{tc.path: 10, tc.test: 3} {
					if b, err := os.ReadFile(p); err != nil || bytes.Count(b, []byte("\n")) != want {
						t.Fatalf("%s: %d lines (err %v), want %d", p, bytes.Count(b, []byte("\n")), err, want)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "is the training file") {
				t.Fatalf("got %v, want the held-out file refused", err)
			}
			if b, err := os.ReadFile("old.libsvm"); err != nil || !bytes.Equal(b, old) {
				t.Fatalf("old.libsvm now %q (err %v)", b, err)
			}
			if _, err := os.Stat("a.libsvm"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a.libsvm written: %v", err)
			}
		})
	}
}

// Parameters no generator can honour are refused, NaN and infinities
// included: comparisons with NaN are false, so "zipf <= 1" let a NaN
// exponent through (uniform ids, silently), an infinite one made
// rand.Zipf loop for ever (flexps gen --zipf inf never returned), a NaN
// label noise flipped nothing, and a NaN rating noise wrote "NaN" ratings
// that no reader takes.
func TestGeneratorsRefuseParametersOutOfRange(t *testing.T) {
	lib := LIBSVMConfig{Rows: 5, Dim: 50, NNZ: 3, Seed: 1}
	rat := RatingsConfig{Users: 4, Items: 4, Rank: 2, Ratings: 5, Seed: 1}
	for _, tc := range []struct {
		name string
		gen  func() error
		want string // "" : accepted
	}{
		{"zipf 0 (uniform)", func() error { c := lib; c.Zipf = 0; _, err := WriteLIBSVM(io.Discard, c); return err }, ""},
		{"zipf 1.1", func() error { c := lib; c.Zipf = 1.1; _, err := WriteLIBSVM(io.Discard, c); return err }, ""},
		{"zipf 1e300", func() error { c := lib; c.Zipf = 1e300; _, err := WriteLIBSVM(io.Discard, c); return err }, ""},
		{"zipf 1", func() error { c := lib; c.Zipf = 1; _, err := WriteLIBSVM(io.Discard, c); return err }, "zipf 1:"},
		{"zipf NaN", func() error { c := lib; c.Zipf = math.NaN(); _, err := WriteLIBSVM(io.Discard, c); return err }, "zipf NaN"},
		{"zipf +Inf", func() error { c := lib; c.Zipf = math.Inf(1); _, err := WriteLIBSVM(io.Discard, c); return err }, "zipf +Inf"},
		{"label noise 1", func() error { c := lib; c.Noise = 1; _, err := WriteLIBSVM(io.Discard, c); return err }, ""},
		{"label noise NaN", func() error { c := lib; c.Noise = math.NaN(); _, err := WriteLIBSVM(io.Discard, c); return err }, "noise NaN"},
		{"label noise 1.5", func() error { c := lib; c.Noise = 1.5; _, err := WriteLIBSVM(io.Discard, c); return err }, "noise 1.5"},
		{"rating noise 0.5", func() error { c := rat; c.Noise = 0.5; return WriteRatings(io.Discard, c) }, ""},
		{"rating noise NaN", func() error { c := rat; c.Noise = math.NaN(); return WriteRatings(io.Discard, c) }, "noise NaN"},
		{"rating noise +Inf", func() error { c := rat; c.Noise = math.Inf(1); return WriteRatings(io.Discard, c) }, "noise +Inf"},
		{"rating noise -1", func() error { c := rat; c.Noise = -1; return WriteRatings(io.Discard, c) }, "noise -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- tc.gen() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the generator did not return in 10s")
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// Spec.Check refuses what Generate would refuse or silently replace,
// naming the key: a job file's [input.NAME.generate] is refused when the
// job is read (naming the line), not once its file is written.
func TestSpecCheckNamesTheKey(t *testing.T) {
	lib := Spec{Rows: 10, Dim: 5, NNZ: 2, Zipf: 1.1, Noise: 0.1}
	rat := Spec{Kind: "ratings", Rows: 10, Users: 3, Items: 4, Rank: 2, Noise: 0.1}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		base Spec
		key  string // "": accepted
	}{
		{"libsvm ok", func(*Spec) {}, lib, ""},
		{"ratings ok", func(*Spec) {}, rat, ""},
		{"ratings rank 0 means 1", func(s *Spec) { s.Rank = 0 }, rat, ""},
		{"bad kind", func(s *Spec) { s.Kind = "csv" }, lib, "kind"},
		{"negative rows", func(s *Spec) { s.Rows = -1 }, lib, "rows"},
		{"no dim", func(s *Spec) { s.Dim = 0 }, lib, "dim"},
		{"no nnz", func(s *Spec) { s.NNZ = 0 }, lib, "nnz"},
		{"nnz past dim", func(s *Spec) { s.NNZ = 6 }, lib, "nnz"},
		{"zipf 0.5", func(s *Spec) { s.Zipf = 0.5 }, lib, "zipf"},
		{"zipf NaN", func(s *Spec) { s.Zipf = math.NaN() }, lib, "zipf"},
		{"label noise 2", func(s *Spec) { s.Noise = 2 }, lib, "noise"},
		{"negative test rows", func(s *Spec) { s.TestRows = -3 }, lib, "test_rows"},
		{"no users", func(s *Spec) { s.Users = 0 }, rat, "users"},
		{"no items", func(s *Spec) { s.Items = -1 }, rat, "items"},
		{"negative rank", func(s *Spec) { s.Rank = -2 }, rat, "rank"},
		{"rating noise +Inf", func(s *Spec) { s.Noise = math.Inf(1) }, rat, "noise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.base
			tc.edit(&s)
			key, err := s.Check()
			if key != tc.key || (err == nil) != (tc.key == "") {
				t.Fatalf("Check: key %q, err %v; want key %q", key, err, tc.key)
			}
			if err != nil && !strings.HasPrefix(err.Error(), tc.key+": ") {
				t.Fatalf("error %q does not start with its key %q", err, tc.key)
			}
			if err == nil {
				return
			}
			gerr := Generate(filepath.Join(t.TempDir(), "d"), s)
			if gerr == nil || !strings.Contains(gerr.Error(), err.Error()) {
				t.Fatalf("Generate: %v, want the error of Check %q", gerr, err)
			}
		})
	}
}

// A generation stops when its context ends (the first Ctrl-C of `flexps
// gen`, which went unheeded until the file was complete; the second one
// ended the process and left the hidden temporary file behind, hundreds
// of MB): it returns ctx's error and leaves no file, neither the
// temporary ones nor the outputs.
func TestGenerateStopsWhenCancelled(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
	}{
		{"libsvm", Spec{Rows: 50_000_000, Dim: 1000, NNZ: 20, TestPath: "t.libsvm"}},
		{"ratings", Spec{Kind: "ratings", Rows: 500_000_000, Users: 100, Items: 100, Rank: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			err := GenerateContext(ctx, "out", tc.spec)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v after %v, want the context's error", err, time.Since(t0))
			}
			if d := time.Since(t0); d > 10*time.Second {
				t.Errorf("stopped %v after the context ended", d)
			}
			left, _ := os.ReadDir(dir)
			for _, e := range left {
				t.Errorf("left %s behind", e.Name())
			}
		})
	}
}
