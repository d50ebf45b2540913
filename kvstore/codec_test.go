package kvstore

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// sameMessage compares messages treating nil and empty slices alike and
// floats by bits (NaN payloads included).
func sameMessage(a, b *Message) bool {
	if a.Op != b.Op || a.Task != b.Task || a.Table != b.Table || a.Stage != b.Stage ||
		a.Worker != b.Worker || a.Clock != b.Clock || a.First != b.First || a.N != b.N ||
		a.Width != b.Width || a.DType != b.DType || a.Err != b.Err || a.From != b.From ||
		len(a.Keys) != len(b.Keys) || len(a.Vals) != len(b.Vals) || a.Node != b.Node ||
		len(a.Pos) != len(b.Pos) || len(a.Versions) != len(b.Versions) {
		return false
	}
	if len(a.Pos) > 0 && !reflect.DeepEqual(a.Pos, b.Pos) || len(a.Versions) > 0 && !reflect.DeepEqual(a.Versions, b.Versions) {
		return false
	}
	if len(a.Keys) > 0 && !reflect.DeepEqual(a.Keys, b.Keys) {
		return false
	}
	for i := range a.Vals {
		if math.Float64bits(a.Vals[i]) != math.Float64bits(b.Vals[i]) {
			return false
		}
	}
	return true
}

func TestCodecRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    Message
	}{
		{"get", Message{Op: OpGet, Task: "t1", Table: "w", Stage: 2, Worker: 7, Clock: 13, Keys: []uint64{1, 2, 3, 100, 99}, Width: 1, DType: Float64}},
		{"add f64", Message{Op: OpAdd, Task: "t", Table: "w", Keys: []uint64{0, math.MaxUint64, 5}, Width: 2, DType: Float64, Vals: []float64{1.5, -2, math.Inf(1), math.SmallestNonzeroFloat64, 0, math.MaxFloat64}}},
		{"add f32", Message{Op: OpAdd, Table: "w", Keys: []uint64{4}, Width: 3, DType: Float32, Vals: []float64{0.1, -1e30, math.Inf(-1)}}},
		{"scan", Message{Op: OpScan, Task: "t", Table: "w", Worker: -1, First: 7 << 56, N: 4096}},
		{"scan page", Message{Op: OpReply, Keys: []uint64{9, 3, 1 << 40}, Width: 1, DType: Float32, Vals: []float64{1, 2, 3}, First: 12, N: 1}},
		{"get range", Message{Op: OpGetRange, Table: "w", First: 1 << 40, N: 1000, Width: 64, DType: Float32}},
		{"add range", Message{Op: OpAddRange, Table: "w", First: 0, N: 2, Width: 1, DType: Float64, Vals: []float64{1, 2}}},
		{"clock", Message{Op: OpClock, Task: "t", Stage: -1, Worker: math.MaxInt32, Clock: math.MinInt64}},
		{"finish", Message{Op: OpFinish, Worker: 3}},
		{"reply", Message{Op: OpReply, DType: Float64, Vals: []float64{3}}},
		{"error", Message{Op: OpError, Err: "shard moved"}},
		{"set", Message{Op: OpSet, Table: "ü", Keys: []uint64{9}, Vals: []float64{math.Copysign(0, -1)}, DType: Float64, Width: 1}},
		{"no dtype", Message{Op: OpReply, Vals: []float64{1.25}}},
		{"forwarded get", Message{Op: OpGet, Table: "w", Keys: []uint64{5, 2}, Pos: []int{7, 0}, Clock: 3}},
		{"partial reply", Message{Op: OpReply, DType: Float32, Vals: []float64{1, 2}, Pos: []int{3, 1}}},
		{"localize", Message{Op: OpLocalize, Table: "w", Keys: []uint64{1, 9}, Node: 2}},
		{"transfer", Message{Op: OpTransfer, Table: "w", Keys: []uint64{1, 9}, Node: 1, Versions: []uint64{1, 1 << 40}}},
		{"values", Message{Op: OpValues, Table: "w", Keys: []uint64{9}, Width: 2, DType: Float64, Vals: []float64{1, 2}, Versions: []uint64{3}}},
		{"from", Message{Op: OpAdd, Task: "t", Table: "w", Keys: []uint64{1}, Width: 1, DType: Float64, Vals: []float64{2}, From: 1 << 40}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendMessage(nil, &tt.m)
			check(t, len(b) <= encodedSize(&tt.m), "EncodedSize %d < %d", encodedSize(&tt.m), len(b))
			check(t, b[0] == codecVersion, "starts with the version")
			var got Message
			noErr(t, DecodeMessage(b, &got))
			want := tt.m
			if want.DType == Float32 {
				want.Vals = make([]float64, len(tt.m.Vals))
				for i, v := range tt.m.Vals {
					want.Vals[i] = float64(float32(v))
				}
			}
			check(t, sameMessage(&want, &got), "got %+v want %+v", got, want)
		})
	}
}

func TestCodecSortedKeysAreCompact(t *testing.T) {
	m := Message{Op: OpGet, Table: "w"}
	for k := range uint64(1000) {
		m.Keys = append(m.Keys, 1_000_000+k*3)
	}
	b := AppendMessage(nil, &m)
	check(t, len(b) < 1000+20, "sorted keys cost ~1 byte: %d bytes", len(b))
}

func TestCodecDecodeReusesBuffers(t *testing.T) {
	m := Message{Op: OpAdd, Task: "task", Table: "w", Keys: []uint64{1, 2, 3}, DType: Float32, Vals: []float64{1, 2, 3}}
	b := AppendMessage(nil, &m)
	var got Message
	noErr(t, DecodeMessage(b, &got))
	allocs := testing.AllocsPerRun(100, func() {
		if err := DecodeMessage(b, &got); err != nil {
			t.Fatal(err)
		}
	})
	equal(t, 0.0, allocs, "decode into a warm message allocates")
	buf := make([]byte, 0, encodedSize(&m))
	allocs = testing.AllocsPerRun(100, func() { buf = AppendMessage(buf[:0], &m) })
	equal(t, 0.0, allocs, "encode into a sized buffer allocates")
}

func TestCodecErrors(t *testing.T) {
	good := AppendMessage(nil, &Message{Op: OpAdd, Table: "w", Keys: []uint64{1, 2}, DType: Float64, Vals: []float64{1, 2}, Err: "x"})
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short header", good[:3]},
		{"version", mut(func(b []byte) []byte { b[0] = 9; return b })},
		{"op zero", mut(func(b []byte) []byte { b[1] = 0; return b })},
		{"op high", mut(func(b []byte) []byte { b[1] = byte(OpFailover) + 1; return b })},
		{"flags", mut(func(b []byte) []byte { b[2] |= 0x80; return b })},
		{"dtype", mut(func(b []byte) []byte { b[3] = 7; return b })},
		{"trailing", append(bytes.Clone(good), 0)},
	}
	// A hand-made message claiming 2^40 values in a few bytes.
	huge := []byte{codecVersion, byte(OpReply), flagVals, 2, 0, 0, 0, 0, 0, 0}
	huge = append(huge, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 1, 2, 3)
	tests = append(tests, struct {
		name string
		b    []byte
	}{"oversize count", huge})
	for i := 4; i < len(good); i++ {
		tests = append(tests, struct {
			name string
			b    []byte
		}{"truncated", good[:i]})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Message
			err := DecodeMessage(tt.b, &m)
			must(t, err != nil, "decoded garbage")
			check(t, errors.Is(err, ErrCodec), "error wraps ErrCodec: %v", err)
		})
	}
}

func TestMaxKeysPerMessage(t *testing.T) {
	for _, width := range []int{1, 16, 64, 1 << 16} {
		for _, dt := range []DType{Float32, Float64} {
			const payload = 1 << 20
			n := MaxKeysPerMessage(payload, width, dt)
			must(t, n > 0, "width %d %s", width, dt)
			m := Message{Op: OpAdd, Task: "some-task-name", Table: "table", Stage: 1, Worker: 2, Clock: 3,
				Width: uint16(width), DType: dt, Keys: make([]uint64, n), Vals: make([]float64, n*width)}
			for i := range m.Keys {
				m.Keys[i] = uint64(i) * (1 << 62) // worst-case deltas
			}
			check(t, len(AppendMessage(nil, &m)) <= payload, "width %d %s: %d keys overflow", width, dt, n)
		}
	}
	equal(t, 0, MaxKeysPerMessage(100, 1, Float64))
}

func genMessage() *rapid.Generator[*Message] {
	return rapid.Custom(func(t *rapid.T) *Message {
		m := &Message{
			Op:     Op(rapid.IntRange(int(OpGet), int(OpSet)).Draw(t, "op")),
			Task:   rapid.String().Draw(t, "task"),
			Table:  rapid.String().Draw(t, "table"),
			Stage:  rapid.Int32().Draw(t, "stage"),
			Worker: rapid.Int32().Draw(t, "worker"),
			Clock:  rapid.Int64().Draw(t, "clock"),
			Keys:   rapid.SliceOf(rapid.Uint64()).Draw(t, "keys"),
			First:  rapid.Uint64().Draw(t, "first"),
			N:      rapid.Uint32().Draw(t, "n"),
			Width:  rapid.Uint16().Draw(t, "width"),
			DType:  rapid.SampledFrom([]DType{"", Float32, Float64}).Draw(t, "dtype"),
			Err:    rapid.String().Draw(t, "err"),
			From:   rapid.Uint64().Draw(t, "from"),
		}
		m.Vals = rapid.SliceOf(rapid.Float64()).Draw(t, "vals")
		if m.DType == Float32 {
			for i, v := range m.Vals {
				m.Vals[i] = float64(float32(v))
			}
		}
		return m
	})
}

func TestCodecRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genMessage().Draw(t, "m")
		prefix := []byte("prefix")
		b := AppendMessage(bytes.Clone(prefix), m)
		if !bytes.Equal(b[:len(prefix)], prefix) {
			t.Fatal("AppendMessage clobbered dst")
		}
		if len(b)-len(prefix) > encodedSize(m) {
			t.Fatalf("EncodedSize %d < %d", encodedSize(m), len(b)-len(prefix))
		}
		got := &Message{Keys: []uint64{1, 2, 3}, Vals: []float64{4}, Err: "stale"}
		if err := DecodeMessage(b[len(prefix):], got); err != nil {
			t.Fatal(err)
		}
		if !sameMessage(m, got) {
			t.Fatalf("got %+v want %+v", got, m)
		}
	})
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add(AppendMessage(nil, &Message{Op: OpAdd, Task: "t", Table: "w", Keys: []uint64{1, 5, 3}, DType: Float32, Vals: []float64{1, 2, 3}}))
	f.Add(AppendMessage(nil, &Message{Op: OpGetRange, First: 10, N: 5, Width: 4, DType: Float64}))
	f.Add(AppendMessage(nil, &Message{Op: OpError, Err: "boom"}))
	f.Add(AppendMessage(nil, &Message{Op: OpScan, Task: "t", Table: "w", First: 3 << 56, N: 100}))
	f.Add(AppendMessage(nil, &Message{Op: OpReply, Keys: []uint64{7, 1}, Width: 1, DType: Float64, Vals: []float64{1, 2}, First: 9, N: 1}))
	f.Add([]byte{})
	f.Add([]byte{1, 1, 0xff, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if err := DecodeMessage(b, &m); err != nil {
			if !errors.Is(err, ErrCodec) {
				t.Fatalf("error does not wrap ErrCodec: %v", err)
			}
			return
		}
		b2 := AppendMessage(nil, &m)
		var m2 Message
		if err := DecodeMessage(b2, &m2); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !sameMessage(&m, &m2) {
			t.Fatalf("re-encode changed the message:\n%+v\n%+v", m, m2)
		}
	})
}

func BenchmarkCodec(b *testing.B) {
	for _, dt := range []DType{Float32, Float64} {
		m := Message{Op: OpAdd, Task: "task-1", Table: "weights", Stage: 1, Worker: 3, Clock: 42, Width: 1, DType: dt}
		for k := range uint64(10000) {
			m.Keys = append(m.Keys, k*7)
			m.Vals = append(m.Vals, float64(k)*0.5)
		}
		buf := make([]byte, 0, encodedSize(&m))
		buf = AppendMessage(buf, &m)
		b.Run("encode/"+string(dt), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendMessage(buf[:0], &m)
			}
		})
		b.Run("decode/"+string(dt), func(b *testing.B) {
			var got Message
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeMessage(buf, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCodecKeysRoundTrip: keys come back exactly whatever mix of one-byte
// and longer deltas they have (the decoder's inline path and its varint
// path), at lengths 1-70, sorted or not.
func TestCodecKeysRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for n := 1; n <= 70; n++ {
		for _, mix := range []int{0, 1, 3, 9, 100} { // one delta in mix is long (0: none)
			keys := make([]uint64, n)
			var k uint64
			for i := range keys {
				if mix > 0 && rng.IntN(mix) == 0 {
					k += 64 + rng.Uint64N(1<<40) // two bytes or more
				} else {
					k += rng.Uint64N(64) // one byte
				}
				keys[i] = k
			}
			if n%7 == 0 {
				rng.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			}
			m := Message{Op: OpGet, Table: "w", Keys: keys, DType: Float32}
			var got Message
			noErr(t, DecodeMessage(AppendMessage(nil, &m), &got))
			if !slices.Equal(got.Keys, keys) {
				t.Fatalf("n=%d mix=%d: keys %v, want %v", n, mix, got.Keys, keys)
			}
		}
	}
}

func BenchmarkDecodeKeys(b *testing.B) {
	m := Message{Op: OpGet, Table: "w"}
	for k := range uint64(100000) {
		m.Keys = append(m.Keys, k*4+k%3)
	}
	buf := AppendMessage(nil, &m)
	var got Message
	b.SetBytes(int64(8 * len(m.Keys)))
	for b.Loop() {
		if err := DecodeMessage(buf, &got); err != nil {
			b.Fatal(err)
		}
	}
}
