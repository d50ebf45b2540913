package kvstore

import (
	"encoding/binary"
	"math"
)

// Bulk conversions between float values and little-endian float32 bytes,
// the wire and raw-store form of float32 tables. Four values per step, as
// two 8-byte words, with the bounds checked once per step: about 1.5x a
// loop of PutUint32 / Uint32 (BenchmarkFloat32Bytes).

// putFloat32s writes src as float32s into dst[:4*len(src)].
func putFloat32s[T float](dst []byte, src []T) {
	dst = dst[:4*len(src)]
	if s32, ok := any(src).([]float32); ok && littleEndian { // the bytes are the values
		copy(dst, float32Bytes(s32))
		return
	}
	if s64, ok := any(src).([]float64); ok { // the vector kernel where there is one
		n := putFloat64sTo32(dst, s64)
		dst, src = dst[4*n:], src[n:]
	}
	for len(src) >= 4 {
		b, s := dst[:16:16], src[:4:4]
		binary.LittleEndian.PutUint64(b[0:], uint64(math.Float32bits(float32(s[0])))|uint64(math.Float32bits(float32(s[1])))<<32)
		binary.LittleEndian.PutUint64(b[8:], uint64(math.Float32bits(float32(s[2])))|uint64(math.Float32bits(float32(s[3])))<<32)
		dst, src = dst[16:], src[4:]
	}
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(float32(v)))
	}
}

// getFloat32s reads len(out) float32s from raw into out.
func getFloat32s(out []float64, raw []byte) {
	raw = raw[:4*len(out)]
	n := getFloat32sPrefix(out, raw) // the vector kernel where there is one
	out, raw = out[n:], raw[4*n:]
	for len(out) >= 4 {
		b, o := raw[:16:16], out[:4:4]
		x := binary.LittleEndian.Uint64(b[0:])
		y := binary.LittleEndian.Uint64(b[8:])
		o[0] = float64(math.Float32frombits(uint32(x)))
		o[1] = float64(math.Float32frombits(uint32(x >> 32)))
		o[2] = float64(math.Float32frombits(uint32(y)))
		o[3] = float64(math.Float32frombits(uint32(y >> 32)))
		raw, out = raw[16:], out[4:]
	}
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
	}
}

// addFloat32s adds the float32s in raw to dst (len(dst) of them), each
// sum rounded to T as T(float64(x) + float64(d)) would.
func addFloat32s[T float](dst []T, raw []byte) {
	raw = raw[:4*len(dst)]
	for len(dst) >= 4 {
		b, o := raw[:16:16], dst[:4:4]
		x := binary.LittleEndian.Uint64(b[0:])
		y := binary.LittleEndian.Uint64(b[8:])
		o[0] = T(float64(o[0]) + float64(math.Float32frombits(uint32(x))))
		o[1] = T(float64(o[1]) + float64(math.Float32frombits(uint32(x>>32))))
		o[2] = T(float64(o[2]) + float64(math.Float32frombits(uint32(y))))
		o[3] = T(float64(o[3]) + float64(math.Float32frombits(uint32(y>>32))))
		raw, dst = raw[16:], dst[4:]
	}
	for i := range dst {
		dst[i] = T(float64(dst[i]) + float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))))
	}
}

// addFloat32sTo32 is addFloat32s into float32s, in float32 arithmetic:
// the sum of two float32s rounded once to float32 is the float64 sum
// rounded to float32 (double rounding is innocuous when the wider format
// has at least 2*24+2 bits of precision; float64 has 53).
func addFloat32sTo32(dst []float32, raw []byte) {
	raw = raw[:4*len(dst)]
	n := addFloat32sTo32Prefix(dst, raw) // the vector kernel where there is one
	dst, raw = dst[n:], raw[4*n:]
	for len(dst) >= 4 {
		b, o := raw[:16:16], dst[:4:4]
		x := binary.LittleEndian.Uint64(b[0:])
		y := binary.LittleEndian.Uint64(b[8:])
		o[0] += math.Float32frombits(uint32(x))
		o[1] += math.Float32frombits(uint32(x >> 32))
		o[2] += math.Float32frombits(uint32(y))
		o[3] += math.Float32frombits(uint32(y >> 32))
		raw, dst = raw[16:], dst[4:]
	}
	for i := range dst {
		dst[i] += math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
}
