package lr_test

import (
	"bytes"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
)

// localAdapter is a kvstore.LocalTable as lr's Table (a local stage's
// worker handle adds the consistency gate and key checks on top).
type localAdapter struct{ t *kvstore.LocalTable }

func (a localAdapter) Spec() kvstore.TableSpec                { return a.t.Spec() }
func (a localAdapter) Get(keys []uint64, out []float64) error { a.t.Get(keys, out); return nil }
func (a localAdapter) Add(keys []uint64, d []float64) error   { a.t.Add(keys, d); return nil }

// stepData is bench/lr's workload at a smaller row count: 1M features,
// 20 non-zeros per row drawn Zipf(1.1) (hot ids spread over the space).
func stepData(b *testing.B, rows, dim int) *datastore.Records {
	b.Helper()
	var buf bytes.Buffer
	if _, err := synth.WriteLIBSVM(&buf, synth.LIBSVMConfig{Rows: rows, Dim: dim, NNZ: 20, Zipf: 1.1, Seed: 1, Noise: 0.02}); err != nil {
		b.Fatal(err)
	}
	f, err := datastore.NewFormat("libsvm", datastore.DefaultFormatOptions())
	if err != nil {
		b.Fatal(err)
	}
	r := &datastore.Records{}
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if err := f.ParseLine(line, r); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// BenchmarkStepLocal is one local-kind worker's batch (Step on a chunk
// locked LocalTable, no intercept, raw features: bench/lr's setting) next
// to the plain loop's batch (bench/lr/plain.go: a float32 weight array, a
// stamped gradient array), one goroutine each, in ns per batch of 100
// rows. The ratio plain/local is what bench/lr measures without the
// engine (reading input, the gate, a second worker).
func BenchmarkStepLocal(b *testing.B) {
	const rows, dim, batch = 20000, 1 << 20, 100
	r := stepData(b, rows, dim)
	nb := rows / batch
	b.Run("plain", func(b *testing.B) {
		w := make([]float32, dim)
		grad := make([]float64, dim)
		stamp := make([]int32, dim)
		var touched []uint64
		var n int32
		for i := 0; b.Loop(); i++ {
			lo := (i % nb) * batch
			hi := lo + batch
			touched = touched[:0]
			n++
			for j := lo; j < hi; j++ {
				a, e := r.Offsets[j], r.Offsets[j+1]
				keys, vals := r.Keys[a:e], r.Vals[a:e]
				z := 0.0
				for q, k := range keys {
					z += float64(w[k]) * vals[q]
				}
				g := lr.Sigmoid(z) - r.Labels[j]
				_ = lr.LogLoss(z, r.Labels[j])
				for q, k := range keys {
					if stamp[k] != n {
						stamp[k] = n
						touched = append(touched, k)
					}
					grad[k] += g * vals[q]
				}
			}
			scale := -0.5 / batch
			for _, k := range touched {
				w[k] = float32(float64(w[k]) + scale*grad[k])
				grad[k] = 0
			}
		}
	})
	// steps runs batches of a MiniBatch over a fresh local table of
	// dtype dt under mode, set by how (its Occurrences or Merge).
	steps := func(b *testing.B, dt kvstore.DType, mode kvstore.LockMode, chunk int, how func(*lr.MiniBatch)) {
		lt, err := kvstore.NewLocalTable(kvstore.TableSpec{Name: "w", Size: dim, DType: dt}, mode, chunk)
		if err != nil {
			b.Fatal(err)
		}
		m := lr.NewMiniBatch(localAdapter{lt})
		how(m)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			lo := (i % nb) * batch
			if _, err := m.Step(r, lo, lo+batch, 0.5, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Distinct keys through the batch's index, a float64 table under
	// chunk locks.
	b.Run("local", func(b *testing.B) {
		steps(b, kvstore.Float64, kvstore.ChunkLocks, 4096, func(*lr.MiniBatch) {})
	})
	// The local kind's batch: a float32 table under chunk locks, keys
	// read and added as they occur (MiniBatch.Occurrences).
	b.Run("occurrences", func(b *testing.B) {
		steps(b, kvstore.Float32, kvstore.ChunkLocks, 4096, func(m *lr.MiniBatch) { m.Occurrences = true })
	})
	// The hogwild kind's batch: a float32 table without locks (plain
	// adds), repeats merged by the batch's filter (MiniBatch.Merge).
	b.Run("hogwild", func(b *testing.B) {
		steps(b, kvstore.Float32, kvstore.NoLocks, 1, func(m *lr.MiniBatch) { m.Merge = true })
	})
}
