package kvstore

import "golang.org/x/sys/cpu"

// float64sTo32 writes n float64s from src as little-endian float32s to
// dst, n a multiple of 4 (floats_amd64.s: CVTPD2PS, two values per
// instruction, rounded as float32(x) rounds).
//
//go:noescape
func float64sTo32(dst *byte, src *float64, n int)

// float64sTo32AVX2 is float64sTo32 of n a multiple of 16, four values per
// instruction (VCVTPD2PS on 256 bits), for CPUs with AVX2: a float64 Add
// converts every delta it sends, and this runs about 1.3x as fast as the
// SSE2 loop over a 32 MB array (BenchmarkFloat64sTo32Large).
//
//go:noescape
func float64sTo32AVX2(dst *byte, src *float64, n int)

// cpuAVX2: the CPU has AVX2; hasAVX2: putFloat64sTo32 uses it (tests
// switch it off to run the SSE2 loop).
var (
	cpuAVX2 = cpu.X86.HasAVX2
	hasAVX2 = cpuAVX2
)

// putFloat64sTo32 converts the longest prefix of src whose length is a
// multiple of 4 into dst and returns its length.
func putFloat64sTo32(dst []byte, src []float64) int {
	n := len(src) &^ 3
	if n == 0 {
		return 0
	}
	_ = dst[4*n-1]
	done := 0
	if m := n &^ 15; hasAVX2 && m > 0 {
		float64sTo32AVX2(&dst[0], &src[0], m)
		done = m
	}
	if done < n {
		float64sTo32(&dst[4*done], &src[done], n-done)
	}
	return n
}

// float32sTo64 reads n little-endian float32s from src into dst as
// float64s, n a multiple of 4 (floats_amd64.s: CVTPS2PD, exact).
//
//go:noescape
func float32sTo64(dst *float64, src *byte, n int)

// getFloat32sPrefix reads the longest prefix of out whose length is a
// multiple of 4 from raw and returns its length.
func getFloat32sPrefix(out []float64, raw []byte) int {
	n := len(out) &^ 3
	if n == 0 {
		return 0
	}
	_ = raw[4*n-1]
	float32sTo64(&out[0], &raw[0], n)
	return n
}

// float32sAdd adds n little-endian float32s from src to dst, n a multiple
// of 8 (floats_amd64.s: ADDPS, four sums per instruction, each rounded as
// a float32 + does).
//
//go:noescape
func float32sAdd(dst *float32, src *byte, n int)

// addFloat32sTo32Prefix adds the longest prefix of raw's float32s whose
// length is a multiple of 8 to dst and returns its length.
func addFloat32sTo32Prefix(dst []float32, raw []byte) int {
	n := len(dst) &^ 7
	if n == 0 {
		return 0
	}
	_ = raw[4*n-1]
	float32sAdd(&dst[0], &raw[0], n)
	return n
}
