package datastore

import (
	"math"
	"strconv"
	"testing"
)

func TestParseFloat(t *testing.T) {
	tests := []string{"0", "-0", "1", "+1", "-1", "0.5", ".5", "1.", "3.14159", "1e5", "1E-5", "-2.5e+3",
		"123456789012345", "1234567890123456789", "0.1", "0.3", "9007199254740993", "1e22", "1e23", "1e-22",
		"1e-23", "4.9e-324", "1.7976931348623157e308", "0.000001", "00012", "2.2250738585072014e-308",
		"123.456e-10", "7e-3"}
	for _, s := range tests {
		want, _ := strconv.ParseFloat(s, 64)
		got, ok := parseFloat([]byte(s))
		if !ok || math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("parseFloat(%q) = %v, %v; want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "-", ".", "e5", "1e", "1e+", "abc", "1.2.3", "1,5", "nan", "inf", "-Inf", "1e400", " 1", "1 "} {
		if f, ok := parseFloat([]byte(s)); ok {
			t.Errorf("parseFloat(%q) = %v, want error", s, f)
		}
	}
}

func TestParseUint(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"18446744073709551615", math.MaxUint64, true},
		{"18446744073709551616", 0, false}, {"", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1a", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseUint([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseUint(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseFloat(f *testing.F) {
	for _, s := range []string{"1", "-0.5", "1e10", "3.14159", "1e-300", ".", "0x1p3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseFloat([]byte(s))
		want, err := strconv.ParseFloat(s, 64)
		finite := err == nil && !math.IsInf(want, 0) && !math.IsNaN(want)
		if ok != finite {
			t.Fatalf("parseFloat(%q) ok=%v, strconv err=%v value %v", s, ok, err, want)
		}
		if ok && math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("parseFloat(%q) = %v, strconv %v", s, got, want)
		}
	})
}
