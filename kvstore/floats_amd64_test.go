package kvstore

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestFloat64sTo32BothLoops: the AVX2 and the SSE2 conversion write what
// float32(x) does, at every length around their steps (16 and 4) and at
// an odd byte offset; on a CPU without AVX2 only the SSE2 loop runs.
func TestFloat64sTo32BothLoops(t *testing.T) {
	specials := []float64{0, math.Copysign(0, -1), 1, -1.5, math.MaxFloat32, math.MaxFloat64, math.SmallestNonzeroFloat32, math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), 1e-40, 3.14159265358979, 1 + 1e-9}
	loops := []struct {
		name string
		avx2 bool
	}{{"sse2", false}, {"avx2", true}}
	defer func(v bool) { hasAVX2 = v }(hasAVX2)
	for _, l := range loops {
		if l.avx2 && !cpuAVX2 {
			t.Logf("this CPU has no AVX2: the %s loop is not run", l.name)
			continue
		}
		hasAVX2 = l.avx2
		for n := 0; n <= 70; n++ {
			src := make([]float64, n)
			for i := range src {
				src[i] = specials[i%len(specials)] * float64(1+i%7)
			}
			buf := make([]byte, 4*n+3)
			done := putFloat64sTo32(buf[3:], src)
			if done != n&^3 {
				t.Fatalf("%s n=%d: converted %d values, want %d", l.name, n, done, n&^3)
			}
			for i, v := range src[:done] {
				if got, want := binary.LittleEndian.Uint32(buf[3+4*i:]), math.Float32bits(float32(v)); got != want {
					t.Fatalf("%s n=%d value %d (%v): bytes %#x, want %#x", l.name, n, i, v, got, want)
				}
			}
		}
	}
}

// BenchmarkFloat64sTo32Large converts a 32 MB array, as a float64 Add of
// 62.5k keys x 64 values does, with each loop.
func BenchmarkFloat64sTo32Large(b *testing.B) {
	const n = 4 << 20
	src := make([]float64, n)
	for i := range src {
		src[i] = float64(i) * 0.37
	}
	buf := make([]byte, 4*n)
	defer func(v bool) { hasAVX2 = v }(hasAVX2)
	for _, avx2 := range []bool{false, true} {
		name := "sse2"
		if avx2 {
			name = "avx2"
		}
		b.Run(name, func(b *testing.B) {
			if avx2 && !cpuAVX2 {
				b.Skip("no AVX2 on this CPU")
			}
			hasAVX2 = avx2
			b.SetBytes(4 * n)
			for range b.N {
				putFloat64sTo32(buf, src)
			}
		})
	}
}
