package datastore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sameRecords reports how a and b differ, bit for bit (floats by their
// bits, so -0 and NaN count), treating nil and empty slices alike; "" when
// they are the same.
func sameRecords(a, b *Records) string {
	switch {
	case a.Len() != b.Len():
		return "Len"
	case !eqInts(a.Offsets, b.Offsets):
		return "Offsets"
	case !eqFloatBits(a.Labels, b.Labels):
		return "Labels"
	case !eqInts(a.Keys, b.Keys):
		return "Keys"
	case !eqFloatBits(a.Vals, b.Vals):
		return "Vals"
	case !eqInts(a.LineNo, b.LineNo):
		return "LineNo"
	case len(a.Lines) != len(b.Lines):
		return "Lines"
	case len(a.Origins) != len(b.Origins):
		return "Origins"
	}
	for i := range a.Lines {
		if a.Lines[i] != b.Lines[i] {
			return "Lines"
		}
	}
	for i := range a.Origins {
		if a.Origins[i] != b.Origins[i] {
			return "Origins"
		}
	}
	return ""
}

func eqInts[T int | int64 | uint64](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func eqFloatBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

func textBatch() *Records {
	r := &Records{}
	r.AppendLine("first line")
	r.AppendLine("")
	r.AppendLine("ünïcode\ttab")
	return r
}

// dirtyBatch is a decoded batch of n records with values everywhere, to
// decode into again.
func dirtyBatch(n int) *Records {
	r := &Records{}
	for i := range n {
		r.Append(float64(i)+0.3, []uint64{uint64(i), uint64(i) + 3, 1 << 50}, []float64{0.7, 2, 3})
	}
	p, _ := packBatch(located(r, 1))
	return p.unpack(nil)
}

// located gives r line numbers and an origin, as ReadBlock does.
func located(r *Records, first int64) *Records {
	for i := range r.Len() {
		r.LineNo = append(r.LineNo, first+int64(i)*2)
	}
	r.Origins = []Origin{{Path: "f", Block: 4096}, {Path: "g", First: r.Len() / 2}}
	return r
}

func TestPackedBatchReplaysExactly(t *testing.T) {
	negZero := math.Copysign(0, -1)
	nan := math.Float64frombits(0x7ff8_0000_dead_beef)
	big := uint64(1) << 40
	text := textBatch()
	tests := []struct {
		name     string
		build    func(r *Records)
		vals     uint8 // the form the values should take
		labels   uint8
		unsorted bool
	}{
		{"binary", func(r *Records) {
			r.Append(1, []uint64{3, 70, 900_000}, nil)
			r.Append(-1, []uint64{0, 1, 2, 5}, nil)
		}, colConst, colDict, false},
		{"float32 exact", func(r *Records) {
			for i := range 300 { // more distinct values than a dictionary holds
				r.Append(float64(i), []uint64{uint64(i), uint64(i) + 1000}, []float64{float64(i) + 0.5, -float64(i) * 0.25})
			}
		}, colF32, colDec16, false},
		{"decimals of 4 digits (LIBSVM text values)", func(r *Records) {
			for i := range 300 {
				r.Append(float64(i%2), []uint64{uint64(i), uint64(i) + 1000}, []float64{parsed(fmt.Sprintf("0.%04d", i*33)), parsed(fmt.Sprintf("-3.%04d", i))})
			}
		}, colDec16, colDict, false},
		{"decimals of 6 digits (tf-idf)", func(r *Records) {
			for i := range 300 {
				r.Append(1, []uint64{uint64(i)}, []float64{parsed(fmt.Sprintf("0.%06d", i*3331))})
			}
		}, colDec32, colConst, false},
		{"float64", func(r *Records) {
			for i := range 300 {
				r.Append(0.1, []uint64{uint64(i)}, []float64{float64(i) / 3})
			}
			r.Append(1, []uint64{7}, []float64{math.MaxFloat64})
		}, colF64, colDict, false},
		{"few distinct values", func(r *Records) {
			r.Append(5, []uint64{1, 2}, []float64{0.1, 0.2})
			r.Append(4.5, []uint64{1, 9}, []float64{0.2, 0.1})
		}, colDict, colDict, false},
		{"negative zero and NaN bits", func(r *Records) {
			r.Append(negZero, []uint64{1, 2, 3}, []float64{0, negZero, nan})
			r.Append(0, []uint64{4}, []float64{nan})
		}, colDict, colDict, false},
		{"empty rows", func(r *Records) {
			r.Append(1, nil, nil)
			r.Append(0, []uint64{8}, nil)
			r.Append(1, nil, nil)
		}, colConst, colDict, false},
		{"only empty rows", func(r *Records) {
			r.Append(1, nil, nil)
			r.Append(1, nil, nil)
		}, colConst, colConst, false},
		{"keys above 2^32", func(r *Records) {
			r.Append(1, []uint64{big, big + 1, 1 << 62, math.MaxUint64}, nil)
			r.Append(1, []uint64{math.MaxUint64}, nil)
		}, colConst, colConst, false},
		{"unsorted keys (ratings: user, item)", func(r *Records) {
			r.Append(4, []uint64{900, 3}, nil)
			r.Append(2, []uint64{math.MaxUint64, 0, 1 << 63}, nil)
		}, colConst, colDict, true},
		{"equal adjacent keys", func(r *Records) {
			r.Append(1, []uint64{5, 5}, nil)
		}, colConst, colConst, true},
		{"empty batch", func(r *Records) {}, colConst, colConst, false},
	}
	for _, tc := range tests {
		for _, loc := range []bool{false, true} {
			name := tc.name
			if loc {
				name += "/located"
			}
			t.Run(name, func(t *testing.T) {
				r := &Records{}
				tc.build(r)
				if loc && r.Len() > 0 {
					located(r, 7)
				}
				p, ok := packBatch(r)
				if !ok {
					t.Fatal("not packed")
				}
				if p.vals.form != tc.vals || p.labels.form != tc.labels || p.unsorted != tc.unsorted {
					t.Fatalf("forms: vals %d labels %d unsorted %v, want %d %d %v",
						p.vals.form, p.labels.form, p.unsorted, tc.vals, tc.labels, tc.unsorted)
				}
				for range 2 { // decoding twice gives the same
					if d := sameRecords(p.unpack(nil), r); d != "" {
						t.Fatalf("replayed %s differ:\n got %+v\nwant %+v", d, p.unpack(nil), r)
					}
				}
				// Into a batch that held more, or other, records.
				for _, dirty := range []*Records{dirtyBatch(1000), dirtyBatch(1), located(textBatch(), 3)} {
					if d := sameRecords(p.unpack(dirty), r); d != "" {
						t.Fatalf("replayed into a used batch: %s differ:\n got %+v\nwant %+v", d, dirty, r)
					}
				}
			})
		}
	}
	t.Run("text", func(t *testing.T) {
		r := located(text, 1)
		p, ok := packBatch(r)
		if !ok {
			t.Fatal("not packed")
		}
		if d := sameRecords(p.unpack(nil), r); d != "" {
			t.Fatalf("replayed %s differ", d)
		}
		if d := sameRecords(p.unpack(dirtyBatch(5)), r); d != "" {
			t.Fatalf("replayed into a used batch: %s differ", d)
		}
	})
}

func TestPackedBatchIsSmall(t *testing.T) {
	// Binary features with sorted keys below 2^14 apart: a byte or two
	// per non-zero, nothing for the values.
	r := &Records{}
	for i := range 1000 {
		keys := make([]uint64, 20)
		for j := range keys {
			keys[j] = uint64(i + j*1000)
		}
		r.Append(float64(i%2), keys, nil)
	}
	located(r, 1)
	p, ok := packBatch(r)
	if !ok {
		t.Fatal("not packed")
	}
	if per := float64(p.bytes()) / float64(len(r.Keys)); per > 2.5 {
		t.Fatalf("%.2f bytes per non-zero encoded, want <= 2.5 (parsed: %.1f)", per, float64(r.Bytes())/float64(len(r.Keys)))
	}
}

func TestPackedBatchKeyForm(t *testing.T) {
	tests := []struct {
		name string
		keys func(i, j int) uint64
		bits int // 0: varint deltas
	}{
		{"ids below 2^19: 19 bits", func(i, j int) uint64 { return uint64(j*40_000 + i) }, 19},
		{"ids below 2^15: 15 bits", func(i, j int) uint64 { return uint64(j*3000 + i) }, 15},
		{"one id: 1 bit", func(i, j int) uint64 { return 0 }, 1},
		{"ids of 57 bits", func(i, j int) uint64 { return 1<<56 + uint64(i*1e9+j*1e12) }, 57},
		{"large ids close together: deltas", func(i, j int) uint64 { return 1<<40 + uint64(i*100+j) }, 0},
		{"ids up to 2^64: 64 bits", func(i, j int) uint64 { return uint64(j+1) << 60 >> uint(i%3) }, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Records{}
			for i := range 50 {
				keys := make([]uint64, 10)
				for j := range keys {
					keys[j] = tc.keys(i, j)
				}
				r.Append(1, keys, nil)
			}
			p, ok := packBatch(r)
			if !ok {
				t.Fatal("not packed")
			}
			if p.keyBits != tc.bits {
				t.Fatalf("key bits %d, want %d", p.keyBits, tc.bits)
			}
			if d := sameRecords(p.unpack(dirtyBatch(7)), r); d != "" {
				t.Fatalf("replayed %s differ", d)
			}
		})
	}
}

func TestPackBatchRefusesMalformed(t *testing.T) {
	good := func() *Records {
		r := &Records{}
		r.Append(1, []uint64{1, 2}, nil)
		r.Append(1, []uint64{3}, nil)
		return r
	}
	tests := []struct {
		name  string
		spoil func(r *Records)
	}{
		{"vals shorter", func(r *Records) { r.Vals = r.Vals[:2] }},
		{"offsets past keys", func(r *Records) { r.Offsets[1] = 9 }},
		{"offsets decreasing", func(r *Records) { r.Append(1, []uint64{4}, nil); r.Offsets[2] = 1 }},
		{"offsets not from 0", func(r *Records) { r.Offsets[0] = 1 }},
		{"last offset short", func(r *Records) { r.Offsets[2] = 2 }},
		{"line numbers short", func(r *Records) { r.LineNo = []int64{1} }},
		{"features without records", func(r *Records) { *r = Records{Keys: []uint64{1}, Vals: []float64{1}} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.spoil(r)
			if _, ok := packBatch(r); ok {
				t.Fatal("packed a malformed batch")
			}
			c := NewBlockCache(1 << 20)
			if c.Put("s", Block{Path: "f", Length: 1}, []*Records{good(), r}) {
				t.Fatal("cache admitted a block with a malformed batch")
			}
			if st := c.Stats(); st.Used != 0 || st.Blocks != 0 {
				t.Fatalf("stats %+v after a refused block", st)
			}
		})
	}
}

// binaryBatch is n LIBSVM-like records of binary features.
func binaryBatch(n, first int) *Records {
	r := newBatch(n, nil, false) // the parser's slack
	for i := range n {
		k := uint64(first + i)
		r.Append(float64(i%2*2-1), []uint64{k, k + 500, k + 70_000}, nil)
	}
	return located(r, int64(first))
}

func TestBlockCacheBudgetCountsEncodedBytes(t *testing.T) {
	b1 := Block{Path: "f", Offset: 0, Length: 10}
	b2 := Block{Path: "f", Offset: 10, Length: 10}
	blk1 := []*Records{binaryBatch(100, 0), binaryBatch(50, 100)}
	blk2 := []*Records{binaryBatch(100, 200)}
	var parsed int64
	for _, r := range blk1 {
		parsed += r.Bytes()
	}
	before := blk1[0].Bytes()

	c := NewBlockCache(1 << 20)
	if !c.Put("task/in", b1, blk1) {
		t.Fatal("not admitted")
	}
	if blk1[0].Bytes() != before {
		t.Fatal("Put changed the caller's records")
	}
	cb, ok := c.Get("task/in", b1)
	if !ok || cb.Batches() != 2 || cb.Records() != 150 {
		t.Fatalf("Get = %v, %v", cb, ok)
	}
	var want int64 = blockOverhead
	for i, r := range blk1 {
		if d := sameRecords(cb.Batch(i, nil), r); d != "" {
			t.Fatalf("batch %d: %s differ", i, d)
		}
		p, _ := packBatch(r)
		want += p.bytes()
	}
	st := c.Stats()
	if st.Used != cb.Bytes() || st.Used != want {
		t.Fatalf("cache accounts %d bytes, block %d, encoded batches %d", st.Used, cb.Bytes(), want)
	}
	if st.Used*4 > parsed {
		t.Fatalf("encoded block %d bytes, parsed %d: want under a quarter", st.Used, parsed)
	}
	if _, ok := c.Get("task/other", b1); ok {
		t.Fatal("hit under another scope")
	}

	// A budget that holds the first block but not the second.
	small := NewBlockCache(st.Used + 10)
	if !small.Put("task/in", b1, blk1) || small.Stats().Full {
		t.Fatal("first block not admitted")
	}
	if small.Put("task/in", b2, blk2) {
		t.Fatal("second block admitted past the budget")
	}
	if s := small.Stats(); !s.Full || s.Used != st.Used || s.Blocks != 1 {
		t.Fatalf("stats after a refused block: %+v", s)
	}
	if !small.Put("task/in", b1, blk1) {
		t.Fatal("a block already cached is reported not kept")
	}
	small.Drop("task/")
	if s := small.Stats(); s.Used != 0 || s.Blocks != 0 {
		t.Fatalf("stats after Drop: %+v", s)
	}
	if !small.Put("task/in", b2, blk2) {
		t.Fatal("budget not given back by Drop")
	}

	var nilCache *BlockCache
	if nilCache.Put("s", b1, blk1) {
		t.Fatal("nil cache admitted a block")
	}
	if NewBlockCache(0).Put("s", b1, blk1) {
		t.Fatal("disabled cache admitted a block")
	}
}

// TestAsyncReaderReplaysCachedBlocks reads a directory twice through one
// cache: the second pass reads nothing and hands over the same records.
func TestAsyncReaderReplaysCachedBlocks(t *testing.T) {
	dir := t.TempDir()
	var sb strings.Builder
	for i := range 3000 {
		switch i % 3 {
		case 0:
			sb.WriteString("1 5:1 70000:1 5000000000:1\n")
		case 1:
			sb.WriteString("# a comment line\n-1 2:0.25 3:0.1\n")
		default:
			sb.WriteString("0\n")
		}
	}
	writeFile(t, dir, "part-0", sb.String())
	cache := NewBlockCache(64 << 20)
	pass := func() (kept []*Records, st PassStats, distinct int) {
		cfg := asyncConfig(t, dir, 8<<10)
		cfg.Cache, cfg.CacheScope = cache, "t/train"
		cfg.Producers = 2
		r := NewAsyncReader(context.Background(), cfg)
		defer r.Close()
		time.Sleep(20 * time.Millisecond) // a slow consumer: the producers run ahead
		seen := map[*Records]bool{}
		for {
			rec, err := r.Next(context.Background())
			if err == io.EOF {
				return kept, r.Stats(), len(seen)
			}
			if err != nil {
				t.Fatal(err)
			}
			seen[rec] = true
			kept = append(kept, cloneBatch(rec))
			// Done with it: a replayed batch is decoded into again; a
			// parsed one must not be (the cache encodes it at its
			// block's end).
			r.Release(rec)
		}
	}
	first, st1, seen1 := pass()
	second, st2, seen2 := pass()
	if seen1 != len(first) || seen2 > maxReplayAhead+2 {
		t.Fatalf("%d distinct batches of %d parsed (want all), %d of %d replayed (want at most %d)",
			seen1, len(first), seen2, len(second), maxReplayAhead+2)
	}
	if st1.CachedBlocks != 0 || st2.CachedBlocks != st2.Blocks || st2.Blocks < 2 || st2.Bytes != 0 {
		t.Fatalf("first pass %+v, second %+v", st1, st2)
	}
	if st1.Records != st2.Records || len(first) != len(second) {
		t.Fatalf("records %d then %d, batches %d then %d", st1.Records, st2.Records, len(first), len(second))
	}
	// Two producers: blocks come in either order.
	type at struct {
		block int64
		line  int64
	}
	parsed := map[at]*Records{}
	for _, r := range first {
		parsed[at{r.Origins[0].Block, r.LineNo[0]}] = r
	}
	for i, r := range second {
		p := parsed[at{r.Origins[0].Block, r.LineNo[0]}]
		if p == nil {
			t.Fatalf("replayed batch %d (%s) was not parsed", i, r.Where(0))
		}
		if d := sameRecords(r, p); d != "" {
			t.Fatalf("batch %d: %s differ", i, d)
		}
	}
	var biggest int64
	for _, r := range second {
		biggest = max(biggest, r.Bytes())
	}
	if st2.PeakBuffered > maxReplayAhead*biggest {
		t.Fatalf("replay buffered %d bytes, more than %d batches of at most %d", st2.PeakBuffered, maxReplayAhead, biggest)
	}
	if w := second[len(second)-1].Where(0); !strings.Contains(w, "line") {
		t.Fatalf("replayed records lost their origin: %q", w)
	}
}

func cloneBatch(r *Records) *Records {
	return &Records{Labels: append([]float64(nil), r.Labels...), Offsets: append([]int(nil), r.Offsets...),
		Keys: append([]uint64(nil), r.Keys...), Vals: append([]float64(nil), r.Vals...),
		Lines: append([]string(nil), r.Lines...), LineNo: append([]int64(nil), r.LineNo...),
		Origins: append([]Origin(nil), r.Origins...)}
}

// FuzzPackedBatch builds Records from arbitrary bytes (keys, values and
// labels of any bits, rows of any length, text lines) and checks that the
// cache's encoding replays them exactly.
// parsed is the value of decimal text s as the LIBSVM parser reads it.
func parsed(s string) float64 {
	v, ok := parseFloat([]byte(s))
	if !ok {
		panic("not a number: " + s)
	}
	return v
}

func TestDecimalScale(t *testing.T) {
	negZero := math.Copysign(0, -1)
	for _, tc := range []struct {
		name   string
		v      []float64
		digits uint8
		small  bool
		ok     bool
	}{
		{"integers", []float64{0, 1, -7, 32767}, 0, true, true},
		{"past 16 bits", []float64{0, 32768}, 0, false, true},
		{"past 16 bits below", []float64{-32768, -32769}, 0, false, true},
		{"four digits", []float64{parsed("0.4724"), parsed("0.1"), parsed("1.0000")}, 4, true, true},
		{"nine digits", []float64{parsed("0.123456789")}, 9, false, true},
		{"ten digits", []float64{parsed("0.1234567891")}, 0, false, false},
		{"past 32 bits", []float64{parsed("3.5"), 3e8}, 0, false, false},
		{"a third", []float64{1.0 / 3}, 0, false, false},
		{"negative zero", []float64{1, negZero}, 0, false, false},
		{"NaN", []float64{math.NaN()}, 0, false, false},
		{"infinity", []float64{math.Inf(1)}, 0, false, false},
		{"tiny", []float64{5e-324}, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			digits, small, ok := decimalScale(tc.v)
			if digits != tc.digits || small != tc.small || ok != tc.ok {
				t.Fatalf("decimalScale(%v) = %d, %v, %v; want %d, %v, %v", tc.v, digits, small, ok, tc.digits, tc.small, tc.ok)
			}
		})
	}
}

// Every decimal of up to 9 digits after the point parses to n / 10^d:
// the column takes the decimal form and replays every bit.
func TestDecimalColumnRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for d := 0; d <= maxDecimals; d++ {
		v := make([]float64, 2000)
		for i := range v {
			n := rng.Int64N(2*math.MaxInt32) - math.MaxInt32
			if d < 4 {
				n %= 30000
			}
			text := strconv.FormatInt(n, 10)
			if d > 0 {
				neg := n < 0
				if neg {
					n = -n
				}
				digits := fmt.Sprintf("%0*d", d+1, n)
				text = digits[:len(digits)-d] + "." + digits[len(digits)-d:]
				if neg {
					text = "-" + text
				}
			}
			v[i] = parsed(text)
		}
		c := packFloats(v)
		if c.form != colDec16 && c.form != colDec32 {
			t.Fatalf("%d digits: form %d, want a decimal form", d, c.form)
		}
		out := make([]float64, len(v))
		c.decode(out)
		for i := range v {
			if math.Float64bits(out[i]) != math.Float64bits(v[i]) {
				t.Fatalf("%d digits: value %d replayed as %v, want %v", d, i, out[i], v[i])
			}
		}
	}
}

func FuzzPackedBatch(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3, 0, 0, 0, 0, 0, 0, 240, 63})
	f.Add(bytes.Repeat([]byte{0xff, 0x00, 0x7f, 0x80}, 40))
	f.Add([]byte("2 hello\nworld"))
	f.Fuzz(func(t *testing.T, data []byte) {
		take := func(n int) []byte {
			if len(data) < n {
				out := append(make([]byte, 0, n), data...)
				data = nil
				return append(out, make([]byte, n-len(out))...)
			}
			out := data[:n]
			data = data[n:]
			return out
		}
		u64 := func() uint64 {
			var x uint64
			for i, c := range take(8) {
				x |= uint64(c) << (8 * i)
			}
			return x
		}
		r := &Records{}
		if len(data) > 0 && data[0]%5 == 0 { // text records
			for _, l := range strings.Split(string(data[1:]), "\n") {
				r.AppendLine(l)
			}
		} else {
			for len(data) > 0 {
				ctl := take(1)[0]
				n := int(ctl % 8)
				keys := make([]uint64, n)
				vals := make([]float64, n)
				for j := range keys {
					switch ctl >> 6 { // small keys and values, decimals, or any bits
					case 0:
						keys[j] = uint64(take(1)[0])
						vals[j] = float64(int8(take(1)[0])) / 4
					case 1:
						keys[j] = uint64(take(1)[0])
						n := int32(uint32(u64()))
						if ctl&16 != 0 {
							n = int32(int16(n))
						}
						vals[j] = float64(n) / pow10[take(1)[0]%12]
					default:
						keys[j] = u64()
						vals[j] = math.Float64frombits(u64())
					}
				}
				if ctl&8 != 0 {
					vals = nil
				}
				r.Append(float64(int8(ctl)), keys, vals)
			}
		}
		if r.Len()%2 == 1 {
			located(r, -3)
		}
		p, ok := packBatch(r)
		if !ok {
			t.Fatal("a well-formed batch was not packed")
		}
		if d := sameRecords(p.unpack(nil), r); d != "" {
			t.Fatalf("replayed %s differ", d)
		}
		if d := sameRecords(p.unpack(dirtyBatch(5)), r); d != "" {
			t.Fatalf("replayed into a used batch: %s differ", d)
		}
	})
}

// BenchmarkUnpack measures replaying a cached batch of 1024 LIBSVM rows
// (20 binary features, Zipf keys over 1M) against copying the parsed
// batch; B/nnz is the memory each takes per non-zero.
func BenchmarkUnpack(b *testing.B) {
	data := synthLIBSVM(b, 1024)
	f := mustFormat(b, "libsvm", DefaultFormatOptions())
	parsedRecs := &Records{}
	for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if err := f.ParseLine(l, parsedRecs); err != nil {
			b.Fatal(err)
		}
		parsedRecs.LineNo = append(parsedRecs.LineNo, int64(len(parsedRecs.LineNo)+1))
	}
	for _, vals := range []struct {
		name string
		v    func(i int) float64
	}{
		{"binary", func(int) float64 { return 1 }},                                               // as in the LR job of the README
		{"decimal4", func(i int) float64 { return parsed(fmt.Sprintf("0.%04d", i*7919%10000)) }}, // flexps gen's values
		{"float64", func(i int) float64 { return float64(i) / 3 }},
	} {
		r := *parsedRecs
		r.Vals = make([]float64, len(parsedRecs.Vals))
		for i := range r.Vals {
			r.Vals[i] = vals.v(i)
		}
		p, ok := packBatch(&r)
		if !ok {
			b.Fatal("not packed")
		}
		b.Run(vals.name+"/packed", func(b *testing.B) {
			for b.Loop() {
				p.unpack(nil)
			}
			b.ReportMetric(float64(p.bytes())/float64(len(r.Keys)), "B/nnz")
		})
		b.Run(vals.name+"/packed-into-released", func(b *testing.B) {
			into := p.unpack(nil)
			for b.Loop() {
				p.unpack(into)
			}
		})
		b.Run(vals.name+"/copy", func(b *testing.B) {
			for b.Loop() {
				_ = &Records{Labels: append([]float64(nil), r.Labels...), Offsets: append([]int(nil), r.Offsets...),
					Keys: append([]uint64(nil), r.Keys...), Vals: append([]float64(nil), r.Vals...), LineNo: append([]int64(nil), r.LineNo...)}
			}
			b.ReportMetric(float64(r.Bytes())/float64(len(r.Keys)), "B/nnz")
		})
		b.Run(vals.name+"/pack", func(b *testing.B) {
			for b.Loop() {
				packBatch(&r)
			}
		})
	}
}
