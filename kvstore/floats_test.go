package kvstore

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestFloat32Bytes: the unrolled conversions write and read exactly what
// one PutUint32 / Uint32 per value does, at every length around the
// unrolled step and at an odd byte offset.
func TestFloat32Bytes(t *testing.T) {
	specials := []float64{0, math.Copysign(0, -1), 1, -1.5, math.MaxFloat32, math.SmallestNonzeroFloat32, math.Inf(1), math.Inf(-1), 1e-40, 3.14159265358979}
	for n := 0; n <= 19; n++ {
		src := make([]float64, n)
		for i := range src {
			src[i] = specials[i%len(specials)] * float64(i+1)
		}
		buf := make([]byte, 4*n+3)
		putFloat32s(buf[3:], src)
		for i, v := range src {
			if got, want := binary.LittleEndian.Uint32(buf[3+4*i:]), math.Float32bits(float32(v)); got != want {
				t.Fatalf("n=%d value %d: bytes %#x, want %#x", n, i, got, want)
			}
		}
		out := make([]float64, n)
		getFloat32s(out, buf[3:])
		for i, v := range src {
			if want := float64(float32(v)); out[i] != want && !(math.IsNaN(out[i]) && math.IsNaN(want)) {
				t.Fatalf("n=%d value %d: read %v, want %v", n, i, out[i], want)
			}
		}
		f32 := make([]float32, n)
		for i, v := range src {
			f32[i] = float32(v)
		}
		buf2 := make([]byte, 4*n)
		putFloat32s(buf2, f32)
		if string(buf2) != string(buf[3:]) {
			t.Fatalf("n=%d: float32 source wrote other bytes than float64", n)
		}
	}
}

func BenchmarkFloat32Bytes(b *testing.B) {
	const n = 1 << 16
	src := make([]float64, n)
	for i := range src {
		src[i] = float64(i) * 0.37
	}
	buf := make([]byte, 4*n)
	b.Run("put", func(b *testing.B) {
		b.SetBytes(4 * n)
		for range b.N {
			putFloat32s(buf, src)
		}
	})
	b.Run("get", func(b *testing.B) {
		b.SetBytes(4 * n)
		for range b.N {
			getFloat32s(src, buf)
		}
	})
	// add: a shard adding float32 deltas off the wire to float32 rows.
	dst := make([]float32, n)
	b.Run("add", func(b *testing.B) {
		b.SetBytes(4 * n)
		for range b.N {
			addFloat32sTo32(dst, buf)
		}
	})
	b.Run("add-loop", func(b *testing.B) {
		b.SetBytes(4 * n)
		for range b.N {
			for i := range dst {
				dst[i] += math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			}
		}
	})
}

// TestAddFloat32sTo32: adding raw float32s to float32s (a vector kernel
// on amd64) gives exactly the bits of one float32 + per value, for any
// bit patterns of both (NaNs, infinities, subnormals, cancellation), at
// every length around the kernel's step and at odd offsets.
func TestAddFloat32sTo32(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pool := make([]float32, 4096)
	for i := range pool {
		switch i % 3 {
		case 0: // any bit pattern
			pool[i] = math.Float32frombits(rng.Uint32())
		case 1: // ordinary values, some of them cancelling
			pool[i] = float32((rng.Float64() - 0.5) * math.Pow(2, float64(rng.IntN(60)-30)))
		default: // subnormal and near-overflow magnitudes
			pool[i] = float32(math.Pow(2, float64(rng.IntN(20)-149)) * (rng.Float64() + 0.5))
			if rng.IntN(2) == 0 {
				pool[i] = float32(math.Pow(2, float64(rng.IntN(4)+124)) * (rng.Float64() + 0.5))
			}
		}
	}
	for n := 0; n <= 41; n++ {
		for off := range 3 {
			base := pool[off+n*40 : off+n*40+n]
			deltas := pool[2000+off*n : 2000+off*n+n]
			raw := make([]byte, 4*n+off)[off:]
			for i, d := range deltas {
				binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(d))
			}
			got := make([]float32, n+off)[off:]
			copy(got, base)
			addFloat32sTo32(got, raw)
			for i := range got {
				want := base[i] + deltas[i]
				if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
					t.Fatalf("n=%d off=%d value %d: %v + %v = %v (%#x), want %v (%#x)", n, off, i, base[i], deltas[i], got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
				}
			}
		}
	}
}

// TestFloatKernelsMatchConversion: the bulk conversions (vector kernels
// on amd64) give exactly the bits of float32(x) and float64(f), for any
// bit pattern (NaN payloads, subnormals, overflow to Inf, rounding
// ties), at every length around the kernel's step, at odd offsets of
// both the bytes and the floats.
func TestFloatKernelsMatchConversion(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := make([]float64, 4096)
	for i := range pool {
		switch i % 4 {
		case 0: // any bit pattern
			pool[i] = math.Float64frombits(rng.Uint64())
		case 1: // in float32's range, not exact: rounding
			pool[i] = (rng.Float64() - 0.5) * math.Pow(2, float64(rng.IntN(300)-150))
		case 2: // a tie halfway between two float32s
			f := float64(float32(rng.Float64()))
			pool[i] = f + math.Abs(f)*math.Pow(2, -24)
		default: // subnormal float32s and beyond float32's range
			pool[i] = math.Pow(2, float64(rng.IntN(40)-155)) * (rng.Float64() + 0.5)
			if rng.IntN(2) == 0 {
				pool[i] = math.Pow(2, float64(rng.IntN(40)+110)) * (rng.Float64() + 0.5)
			}
		}
	}
	for n := 0; n <= 37; n++ {
		for off := range 3 {
			src := pool[off+n*50 : off+n*50+n]
			buf := make([]byte, 4*n+1)
			putFloat32s(buf[1:], src)
			for i, v := range src {
				if got, want := binary.LittleEndian.Uint32(buf[1+4*i:]), math.Float32bits(float32(v)); got != want {
					t.Fatalf("n=%d off=%d value %d (%v): bytes %#x, want %#x", n, off, i, v, got, want)
				}
			}
			out := make([]float64, n+off)[off:]
			getFloat32s(out, buf[1:])
			for i := range out {
				f := math.Float32frombits(binary.LittleEndian.Uint32(buf[1+4*i:]))
				if got, want := math.Float64bits(out[i]), math.Float64bits(float64(f)); got != want {
					t.Fatalf("n=%d off=%d value %d (%v): read %#x, want %#x", n, off, i, f, got, want)
				}
			}
		}
	}
}

// TestMaxKey: the branchless maximum is the largest key at every length
// around its step and every position of the largest; CheckKeys still
// names the first key out of range.
func TestMaxKey(t *testing.T) {
	for n := 0; n <= 11; n++ {
		for at := range max(n, 1) {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = uint64(i * 3)
			}
			want := uint64(0)
			if n > 0 {
				keys[at] = math.MaxUint64 - 1
				want = keys[at]
			}
			if got := maxKey(keys); got != want {
				t.Fatalf("n=%d largest at %d: maxKey %d, want %d", n, at, got, want)
			}
		}
	}
	spec := TableSpec{Name: "w", Size: 100, Width: 1}
	if err := CheckKeys(spec, []uint64{5, 99, 0}, 3, "add"); err != nil {
		t.Fatal(err)
	}
	err := CheckKeys(spec, []uint64{5, 150, 7, 100}, 4, "add")
	if err == nil || !strings.Contains(err.Error(), "key 150 out of range [0, 100)") {
		t.Fatalf("error %v, want the first key out of range named", err)
	}
}
