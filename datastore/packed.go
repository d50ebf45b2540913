package datastore

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strings"
	"sync"
	"unsafe"
)

// packedBatch is one batch of Records encoded for the BlockCache: parsed
// data kept for later epochs costs a few bytes per non-zero instead of the
// 16 of a uint64 key and a float64 value. Keys are varint deltas within
// each record (zigzag deltas when some record's keys are not ascending,
// so any uint64 survives); row lengths and line numbers are varints; each
// float column (labels, values) takes the smallest exact form: one
// constant (binary features), a dictionary of at most 256 distinct values
// with a byte per entry (labels, ratings), decimals of a few digits as
// 16-bit integers over a power of ten (LIBSVM text values like 0.4724),
// float32 when every value round-trips, decimals as 32-bit integers, else
// float64. Exact means bit for bit (-0, NaN payloads),
// so a replayed batch is indistinguishable from the parsed one.
type packedBatch struct {
	n, nnz   int
	unsorted bool   // keys are zigzag deltas
	keyBits  int    // 0: keys are varint deltas; else each key whole in keyBits bits (see packKeys)
	rows     []byte // per record: varint number of features
	keys     []byte // per feature: the key (keyBits) or a varint delta from the record's previous key (from 0 for its first)
	labels   floatColumn
	vals     floatColumn
	lineNo   []byte // per record: zigzag varint delta from the previous line number; nil when not located
	lines    string // text records' lines, concatenated
	lineLens []byte // varint length of each line
	nLines   int
	origins  []Origin
}

// packBatch encodes r; ok is false when r is not a well-formed batch
// (Offsets, Vals or LineNo disagreeing with the records), which the
// cache then simply does not keep.
func packBatch(r *Records) (p *packedBatch, ok bool) {
	n := r.Len()
	if n == 0 {
		if len(r.Offsets) > 1 || len(r.Keys) > 0 || len(r.Vals) > 0 || len(r.Lines) > 0 || len(r.LineNo) > 0 {
			return nil, false
		}
		return &packedBatch{origins: cloneOrigins(r.Origins)}, true
	}
	if len(r.Offsets) != n+1 || r.Offsets[0] != 0 || r.Offsets[n] != len(r.Keys) || len(r.Vals) != len(r.Keys) ||
		(len(r.LineNo) != 0 && len(r.LineNo) != n) {
		return nil, false
	}
	p = &packedBatch{n: n, nnz: len(r.Keys), nLines: len(r.Lines), origins: cloneOrigins(r.Origins)}
	rows := make([]byte, 0, n+n/8)
	for i := range n {
		lo, hi := r.Offsets[i], r.Offsets[i+1]
		if hi < lo || hi > len(r.Keys) {
			return nil, false
		}
		rows = appendUvarint(rows, uint64(hi-lo))
		for j := lo + 1; j < hi && !p.unsorted; j++ {
			p.unsorted = r.Keys[j] <= r.Keys[j-1]
		}
	}
	p.rows = clipBytes(rows)
	// Whole keys packed in as many bits as the largest needs decode
	// without a branch per key, several times faster than varints, and
	// are often smaller too (1M features: 20 bits against ~2.7 bytes);
	// varint deltas only when they are more than a quarter smaller.
	var maxKey uint64
	varLen := 0
	for i := range n {
		var prev uint64
		for _, k := range r.Keys[r.Offsets[i]:r.Offsets[i+1]] {
			varLen += uvarintLen(p.keyDelta(k, prev))
			maxKey = max(maxKey, k)
			prev = k
		}
	}
	if w := keyBits(maxKey); packedKeysLen(w, len(r.Keys)) <= varLen+varLen/4 {
		p.keyBits = w
		p.keys = packKeys(r.Keys, w)
	} else {
		keys := make([]byte, 0, varLen)
		for i := range n {
			var prev uint64
			for _, k := range r.Keys[r.Offsets[i]:r.Offsets[i+1]] {
				keys = appendUvarint(keys, p.keyDelta(k, prev))
				prev = k
			}
		}
		p.keys = keys
	}
	p.labels = packFloats(r.Labels)
	p.vals = packFloats(r.Vals)
	if len(r.LineNo) > 0 {
		ln := make([]byte, 0, n+n/4)
		var prev int64
		for _, l := range r.LineNo {
			ln = appendUvarint(ln, zigzag(l-prev))
			prev = l
		}
		p.lineNo = clipBytes(ln)
	}
	if len(r.Lines) > 0 {
		var sb strings.Builder
		lens := make([]byte, 0, len(r.Lines)+len(r.Lines)/4)
		size := 0
		for _, s := range r.Lines {
			size += len(s)
		}
		sb.Grow(size)
		for _, s := range r.Lines {
			sb.WriteString(s)
			lens = appendUvarint(lens, uint64(len(s)))
		}
		p.lines = sb.String()
		p.lineLens = clipBytes(lens)
	}
	return p, true
}

// keyDelta is what the varint form stores for key k after prev.
func (p *packedBatch) keyDelta(k, prev uint64) uint64 {
	d := k - prev // wraps: exact for any key
	if p.unsorted {
		d = zigzag(int64(d))
	}
	return d
}

// unpack decodes p into r, reusing its arrays (a new batch when r is nil),
// and returns it.
func (p *packedBatch) unpack(r *Records) *Records {
	if r == nil {
		r = &Records{}
	}
	clear(r.Lines) // let the strings be collected
	r.Origins = append(r.Origins[:0], p.origins...)
	r.Labels = resize(r.Labels, p.n)
	r.Keys = resize(r.Keys, p.nnz)
	r.Vals = resize(r.Vals, p.nnz)
	r.LineNo = r.LineNo[:0]
	r.Lines = r.Lines[:0]
	if p.n == 0 {
		r.Offsets = r.Offsets[:0]
		return r
	}
	p.labels.decode(r.Labels)
	r.Offsets = resize(r.Offsets, p.n+1)
	r.Offsets[0] = 0
	p.vals.decode(r.Vals)
	var pos, kpos int
	off := 0
	if p.keyBits > 0 {
		unpackKeys(r.Keys, p.keys, p.keyBits)
	}
	for i := range p.n {
		var l uint64
		l, pos = uvarint(p.rows, pos)
		if p.keyBits == 0 {
			row := r.Keys[off : off+int(l)]
			var prev uint64
			if p.unsorted {
				for j := range row {
					var d uint64
					d, kpos = uvarint(p.keys, kpos)
					prev += uint64(unzigzag(d))
					row[j] = prev
				}
			} else {
				for j := range row {
					var d uint64
					d, kpos = uvarint(p.keys, kpos)
					prev += d
					row[j] = prev
				}
			}
		}
		off += int(l)
		r.Offsets[i+1] = off
	}
	if p.lineNo != nil {
		r.LineNo = resize(r.LineNo, p.n)
		var prev int64
		pos = 0
		for i := range r.LineNo {
			var d uint64
			d, pos = uvarint(p.lineNo, pos)
			prev += unzigzag(d)
			r.LineNo[i] = prev
		}
	}
	if p.nLines > 0 {
		r.Lines = resize(r.Lines, p.nLines)
		pos, at := 0, 0
		for i := range r.Lines {
			var l uint64
			l, pos = uvarint(p.lineLens, pos)
			r.Lines[i] = p.lines[at : at+int(l)] // shares the cached string: strings are immutable
			at += int(l)
		}
	}
	return r
}

// bytes is what p holds, for the cache's budget.
func (p *packedBatch) bytes() int64 {
	return int64(cap(p.rows)+cap(p.keys)+cap(p.lineNo)+len(p.lines)+cap(p.lineLens)) +
		p.labels.bytes() + p.vals.bytes() + int64(cap(p.origins))*40 + packedBatchOverhead
}

// packedBatchOverhead is the size of a packedBatch and its pointer.
const packedBatchOverhead = 280

// Float column forms, smallest first.
const (
	colConst = iota // every value is c
	colDict         // dict[idx[i]]
	colDec16        // float64(d16[i]) / 10^digits: decimals of few digits (LIBSVM text values like 0.4724)
	colF32          // float32 that round-trips exactly
	colDec32        // float64(d32[i]) / 10^digits
	colF64
)

// floatColumn is a float64 column in its smallest exact form.
type floatColumn struct {
	form   uint8
	c      float64
	dict   []float64
	idx    []uint8
	f32    []float32
	f64    []float64
	digits uint8 // the decimal forms' digits after the point
	d16    []int16
	d32    []int32
}

// maxDict is the largest dictionary a column may use (byte indexes).
const maxDict = 256

func packFloats(v []float64) floatColumn {
	if len(v) == 0 {
		return floatColumn{form: colConst}
	}
	c0 := math.Float64bits(v[0])
	constant := true
	for _, x := range v[1:] {
		if math.Float64bits(x) != c0 {
			constant = false
			break
		}
	}
	if constant {
		return floatColumn{form: colConst, c: v[0]}
	}
	if dict, idx, ok := dictEncode(v); ok {
		return floatColumn{form: colDict, dict: dict, idx: idx}
	}
	digits, small, dec := decimalScale(v)
	div := pow10[digits]
	if dec && small {
		out := make([]int16, len(v))
		for i, x := range v {
			out[i] = int16(math.Round(x * div))
		}
		return floatColumn{form: colDec16, digits: digits, d16: out}
	}
	f32 := true
	for _, x := range v {
		if math.Float64bits(float64(float32(x))) != math.Float64bits(x) {
			f32 = false
			break
		}
	}
	if f32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return floatColumn{form: colF32, f32: out}
	}
	if dec {
		out := make([]int32, len(v))
		for i, x := range v {
			out[i] = int32(math.Round(x * div))
		}
		return floatColumn{form: colDec32, digits: digits, d32: out}
	}
	return floatColumn{form: colF64, f64: append([]float64(nil), v...)}
}

// maxDecimals is the most digits after the point a decimal column holds
// (its divisor is pow10[digits]).
const maxDecimals = 9

// decimalScale finds the fewest digits d such that every value of v is
// float64(n) / 10^d, bit for bit, for an integer n of 32 bits: a value
// parsed from a decimal of at most d digits after the point and 9 in all
// (LIBSVM text like 0.4724) is, because the parsed value and the
// quotient are both the real n / 10^d correctly rounded. It returns d;
// small reports that every n fits 16 bits. A value exact at d digits is
// exact at more (the same real, rounded the same way), so one pass that
// only ever raises d, and one that checks every value at the final d,
// suffice.
func decimalScale(v []float64) (digits uint8, small, ok bool) {
	d := 0
	for _, x := range v {
		for {
			if _, ok := decimalAt(x, pow10[d]); ok {
				break
			}
			if d++; d > maxDecimals {
				return 0, false, false
			}
		}
	}
	small = true
	for _, x := range v {
		n, ok := decimalAt(x, pow10[d])
		if !ok {
			return 0, false, false
		}
		small = small && n >= math.MinInt16 && n <= math.MaxInt16
	}
	return uint8(d), small, true
}

// dec16Tables hold, per number of digits, float64(n) / 10^digits for
// every 16-bit n (indexed by its bits): a lookup decodes a 16-bit decimal
// column at the speed of a dictionary, where a division per value cost LR
// a tenth of its speed. 512 KiB each, made on first use.
var dec16Tables [maxDecimals + 1]struct {
	once sync.Once
	t    *[1 << 16]float64
}

// dec16Values is the table of the given digits (at most maxDecimals).
func dec16Values(digits uint8) *[1 << 16]float64 {
	e := &dec16Tables[digits]
	e.once.Do(func() {
		e.t = new([1 << 16]float64)
		for i := range e.t {
			e.t[i] = float64(int16(i)) / pow10[digits]
		}
	})
	return e.t
}

// decimalAt returns n, the integer nearest x * div, and whether x is
// float64(n) / div, bit for bit, with n of 32 bits (NaN and infinities
// are not; nor is -0, which n = 0 would turn into +0).
func decimalAt(x, div float64) (n float64, ok bool) {
	n = math.Round(x * div)
	if !(n >= math.MinInt32 && n <= math.MaxInt32) {
		return n, false
	}
	return n, math.Float64bits(float64(int32(n))/div) == math.Float64bits(x)
}

// dictEncode maps v to at most maxDict distinct values (by bits) through
// an open-addressing table; ok is false past maxDict.
func dictEncode(v []float64) (dict []float64, idx []uint8, ok bool) {
	const slots = 2 * maxDict // at most half full
	var keys [slots]uint64
	var code [slots]int16 // index+1; 0 is empty
	idx = make([]uint8, len(v))
	for i, x := range v {
		b := math.Float64bits(x)
		h := (b * 0x9E3779B97F4A7C15) >> (64 - 9)
		for {
			if code[h] == 0 {
				if len(dict) == maxDict {
					return nil, nil, false
				}
				dict = append(dict, x)
				keys[h], code[h] = b, int16(len(dict))
				break
			}
			if keys[h] == b {
				break
			}
			h = (h + 1) & (slots - 1)
		}
		idx[i] = uint8(code[h] - 1)
	}
	return dict, idx, true
}

func (c *floatColumn) decode(out []float64) {
	switch c.form {
	case colConst:
		for i := range out {
			out[i] = c.c
		}
	case colDict:
		d := c.dict
		for i, x := range c.idx[:len(out)] {
			out[i] = d[x]
		}
	case colF32:
		for i, x := range c.f32[:len(out)] {
			out[i] = float64(x)
		}
	case colDec16:
		tab := dec16Values(c.digits)
		for i, x := range c.d16[:len(out)] {
			out[i] = tab[uint16(x)]
		}
	case colDec32:
		div := pow10[c.digits]
		for i, x := range c.d32[:len(out)] {
			out[i] = float64(x) / div
		}
	default:
		copy(out, c.f64)
	}
}

func (c *floatColumn) bytes() int64 {
	return int64(cap(c.dict))*8 + int64(cap(c.idx)) + int64(cap(c.f32))*4 + int64(cap(c.f64))*8 + int64(cap(c.d16))*2 + int64(cap(c.d32))*4
}

// resize returns s with length n, reusing its array when it is big enough.
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

func cloneOrigins(o []Origin) []Origin {
	if len(o) == 0 {
		return nil
	}
	return append([]Origin(nil), o...)
}

func clipBytes(b []byte) []byte {
	if cap(b)-len(b) > len(b)/16 {
		return append([]byte(nil), b...)
	}
	return b
}

// maxPackedBits is the widest key packKeys packs in bits: a key and its
// offset within a byte fit one 64-bit load. Wider keys take 64 bits.
const maxPackedBits = 57

// keyBits is the width packKeys uses for keys up to maxKey.
func keyBits(maxKey uint64) int {
	if w := max(1, bits.Len64(maxKey)); w <= maxPackedBits {
		return w
	}
	return 64
}

// packedKeysLen is the size of n keys packed in w bits.
func packedKeysLen(w, n int) int {
	if w == 64 {
		return 8 * n
	}
	return (w*n+7)/8 + 7 // 7 bytes of padding: unpackKeys loads 8 at a time
}

// packKeys packs keys, each in w bits (w <= maxPackedBits), or 8
// little-endian bytes (w = 64).
func packKeys(keys []uint64, w int) []byte {
	out := make([]byte, packedKeysLen(w, len(keys)))
	if w == 64 {
		for i, k := range keys {
			binary.LittleEndian.PutUint64(out[8*i:], k)
		}
		return out
	}
	for i, k := range keys {
		bit := i * w
		x := k << (bit & 7) // at most 57+7 bits
		for b := range (w + bit&7 + 7) / 8 {
			out[bit>>3+b] |= byte(x >> (8 * b))
		}
	}
	return out
}

// unpackKeys reads len(out) keys packed by packKeys in w bits.
func unpackKeys(out []uint64, src []byte, w int) {
	if w == 64 {
		for i := range out {
			out[i] = binary.LittleEndian.Uint64(src[8*i:])
		}
		return
	}
	if len(out) == 0 {
		return
	}
	// One bounds check for the last key's 8 bytes; each load is then an
	// 8-byte slice of src without one (1.5-2x the per-key check's speed).
	_ = src[(len(out)-1)*w>>3+7]
	base := unsafe.Pointer(unsafe.SliceData(src))
	mask := uint64(1)<<w - 1
	for i := range out {
		bit := i * w
		out[i] = binary.LittleEndian.Uint64(unsafe.Slice((*byte)(unsafe.Add(base, bit>>3)), 8)) >> (bit & 7) & mask
	}
}

func uvarintLen(x uint64) int { return max(1, (bits.Len64(x)+6)/7) }

func zigzag(x int64) uint64   { return uint64(x<<1) ^ uint64(x>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

func appendUvarint(b []byte, x uint64) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// uvarint decodes the varint at b[pos:]; the caller's data came from
// appendUvarint. Keys of a million-feature model take up to three bytes,
// unrolled.
func uvarint(b []byte, pos int) (uint64, int) {
	c := b[pos]
	if c < 0x80 {
		return uint64(c), pos + 1
	}
	x := uint64(c & 0x7f)
	if c = b[pos+1]; c < 0x80 {
		return x | uint64(c)<<7, pos + 2
	}
	x |= uint64(c&0x7f) << 7
	if c = b[pos+2]; c < 0x80 {
		return x | uint64(c)<<14, pos + 3
	}
	x |= uint64(c&0x7f) << 14
	pos += 2
	for s := uint(21); ; s += 7 {
		pos++
		c = b[pos]
		if c < 0x80 {
			return x | uint64(c)<<s, pos + 1
		}
		x |= uint64(c&0x7f) << s
	}
}
