package kvstore

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Init kinds.
const (
	initZero    = "zero"
	initUniform = "uniform"
)

// errBadInit is wrapped by parseInit errors.
var errBadInit = errors.New("invalid init")

// initRule is a parsed TableSpec.Init: how a key's values start. Values are a
// pure function of (key, column), so every shard, replica or relocated copy
// of a key starts from the same numbers regardless of placement.
type initRule struct {
	Kind  string  // InitZero or InitUniform
	Scale float64 // a of U(-a, a) for InitUniform
}

// parseInit parses "zero" (also "") or "uniform:<a>" with a > 0 and finite.
func parseInit(s string) (initRule, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == initZero {
		return initRule{Kind: initZero}, nil
	}
	rest, ok := strings.CutPrefix(s, initUniform+":")
	if !ok {
		return initRule{}, fmt.Errorf("%w: %q: want \"zero\" or \"uniform:<a>\"", errBadInit, s)
	}
	a, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
	if err != nil || !(a > 0) || math.IsInf(a, 0) {
		return initRule{}, fmt.Errorf("%w: %q: the scale of uniform must be a finite number > 0", errBadInit, s)
	}
	return initRule{Kind: initUniform, Scale: a}, nil
}

// IsZero reports whether every value starts at 0.
func (i initRule) IsZero() bool { return i.Kind != initUniform }

// Value is the initial value of column col of key: 0 for zero, U(-a, a)
// for uniform, drawn from splitmix64 of (key, col).
func (i initRule) Value(key uint64, col int) float64 {
	if i.Kind != initUniform {
		return 0
	}
	h := splitmix64(splitmix64(key) ^ uint64(col))
	u := float64(h>>11) * (1.0 / (1 << 53)) // [0, 1)
	return (2*u - 1) * i.Scale
}

// splitmix64 is the finalizer of Vigna's SplitMix64 generator: a cheap,
// well-mixed bijection of uint64.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// InitRows returns what sets row (Width values) to the values key starts
// with before any write, as a shard stores them (a float32 table's
// rounded to float32): what a sparse table reads for a key it never
// stored. Init is parsed once, here; an invalid one gives zeros
// (Validate refuses it).
func (s TableSpec) InitRows() func(key uint64, row []float64) {
	in, _ := parseInit(s.Init)
	if in.IsZero() {
		return func(_ uint64, row []float64) { clear(row) }
	}
	f32 := s.DType == Float32
	return func(key uint64, row []float64) {
		for c := range row {
			v := in.Value(key, c)
			if f32 {
				v = float64(float32(v))
			}
			row[c] = v
		}
	}
}
