package kvstore

import (
	"math"
	"testing"
)

func TestParseInit(t *testing.T) {
	tests := []struct {
		in      string
		want    initRule
		wantErr bool
	}{
		{"", initRule{Kind: initZero}, false},
		{"zero", initRule{Kind: initZero}, false},
		{"uniform:0.5", initRule{Kind: initUniform, Scale: 0.5}, false},
		{" uniform: 2 ", initRule{Kind: initUniform, Scale: 2}, false},
		{"uniform:0", initRule{}, true},
		{"uniform:-1", initRule{}, true},
		{"uniform:NaN", initRule{}, true},
		{"uniform:Inf", initRule{}, true},
		{"uniform:", initRule{}, true},
		{"uniform", initRule{}, true},
		{"normal:1", initRule{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseInit(tt.in)
			if tt.wantErr {
				must(t, err != nil, "want an error")
				isErr(t, err, errBadInit)
				return
			}
			noErr(t, err)
			equal(t, tt.want, got)
		})
	}
}

func TestInitValue(t *testing.T) {
	z := initRule{Kind: initZero}
	equal(t, 0.0, z.Value(7, 3))

	u := initRule{Kind: initUniform, Scale: 0.1}
	var sum float64
	seen := map[float64]bool{}
	const n = 20000
	for k := range uint64(n) {
		v := u.Value(k, 0)
		equal(t, v, u.Value(k, 0), "deterministic")
		must(t, v > -0.1 && v < 0.1, "in (-a, a): %v", v)
		sum += v
		seen[v] = true
	}
	check(t, len(seen) > n-5, "values look distinct")
	check(t, math.Abs(sum/n) < 0.005, "mean near 0")
	check(t, u.Value(1, 0) != u.Value(1, 1), "columns differ")
	check(t, u.Value(1, 0) != u.Value(0, 1), "(key, col) not symmetric")
}

func TestSpecValidateUsesParseInit(t *testing.T) {
	s := TableSpec{Name: "w", Size: 10}.WithDefaults()
	noErr(t, s.Validate())
	s.Init = "uniform:x"
	isErr(t, s.Validate(), ErrBadSpec)
	s.Init = "zero"
	s.ChunkSize = 1<<64 - 5 // chunk_size = -5 in TOML
	isErr(t, s.Validate(), ErrBadSpec)
}
