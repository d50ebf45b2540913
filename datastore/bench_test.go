package datastore

import (
	"bytes"
	"context"
	"testing"

	"github.com/flexps/flexps/datastore/synth"
)

func synthLIBSVM(b *testing.B, rows int) []byte {
	var buf bytes.Buffer
	if _, err := synth.WriteLIBSVM(&buf, synth.LIBSVMConfig{Rows: rows, Dim: 1_000_000, NNZ: 20, Zipf: 1.1, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkParseLIBSVM measures ParseLine alone over in-memory lines.
func BenchmarkParseLIBSVM(b *testing.B) {
	data := synthLIBSVM(b, 20_000)
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	f := mustFormat(b, "libsvm", DefaultFormatOptions())
	var r Records
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		for i, l := range lines {
			if i%1024 == 0 {
				r.Reset()
			}
			if err := f.ParseLine(l, &r); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkReadBlockLIBSVM measures a whole block read from a file (page cache).
func BenchmarkReadBlockLIBSVM(b *testing.B) {
	data := synthLIBSVM(b, 50_000)
	p := writeFile(b, b.TempDir(), "bench.libsvm", string(data))
	src := NewLocalSource()
	f := mustFormat(b, "libsvm", DefaultFormatOptions())
	blk := Block{Path: p, Length: int64(len(data)), FileSize: int64(len(data))}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadBlock(context.Background(), src, blk, f, ReadOptions{}, func(*Records) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
