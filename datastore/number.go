package datastore

import (
	"math"
	"strconv"
	"unsafe"
)

// pow10 holds the powers of ten that are exact in a float64.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseFloat parses a finite decimal float without allocating. Simple
// decimals (at most 15 significant digits, small exponent) take Clinger's
// fast path, which is exact: both the mantissa and the power of ten are
// exact float64s and one multiplication or division rounds correctly.
// Anything else goes to strconv.ParseFloat on a string that aliases b
// (strconv does not keep it). NaN and infinities are rejected.
func parseFloat(b []byte) (float64, bool) {
	if f, ok := fastFloat(b); ok {
		return f, true
	}
	if len(b) == 0 {
		return 0, false
	}
	f, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

func fastFloat(b []byte) (float64, bool) {
	i, n := 0, len(b)
	neg := false
	if i < n && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	var mant uint64
	digits, sig, exp := 0, 0, 0
	for ; i < n && b[i] >= '0' && b[i] <= '9'; i++ {
		if mant != 0 || b[i] != '0' {
			sig++
		}
		mant = mant*10 + uint64(b[i]-'0')
		digits++
		if sig > 15 {
			return 0, false
		}
	}
	if i < n && b[i] == '.' {
		i++
		for ; i < n && b[i] >= '0' && b[i] <= '9'; i++ {
			if mant != 0 || b[i] != '0' {
				sig++
			}
			mant = mant*10 + uint64(b[i]-'0')
			digits++
			exp--
			if sig > 15 {
				return 0, false
			}
		}
	}
	if digits == 0 {
		return 0, false
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < n && (b[i] == '-' || b[i] == '+') {
			eneg = b[i] == '-'
			i++
		}
		if i == n {
			return 0, false
		}
		e := 0
		for ; i < n && b[i] >= '0' && b[i] <= '9'; i++ {
			e = e*10 + int(b[i]-'0')
			if e > 1000 {
				return 0, false
			}
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if i != n || exp < -22 || exp > 22 {
		return 0, false
	}
	f := float64(mant)
	if exp < 0 {
		f /= pow10[-exp]
	} else {
		f *= pow10[exp]
	}
	if neg {
		f = -f
	}
	return f, true
}

// parseUint parses a non-empty run of decimal digits.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// quote renders a token for an error message, truncated.
func quote(b []byte) string {
	const max = 64
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}
