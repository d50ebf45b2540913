package slave

import (
	"math"
	"testing"
)

func TestChecksumSeesEveryValueAndRoundsFloat32(t *testing.T) {
	vals := make([]float64, 3000) // more than one 8 KiB buffer
	for i := range vals {
		vals[i] = float64(i) * 0.1
	}
	base := checksum(vals, false)
	if base != checksum(append([]float64(nil), vals...), false) {
		t.Fatal("checksum is not deterministic")
	}
	for _, i := range []int{0, 1023, 1024, 2999} {
		changed := append([]float64(nil), vals...)
		changed[i] = math.Nextafter(changed[i], math.Inf(1))
		if checksum(changed, false) == base {
			t.Fatalf("a change at %d is not seen", i)
		}
	}
	// A float32 table keeps float32 values: a float64 difference below
	// float32 precision is not a difference.
	near := append([]float64(nil), vals...)
	near[7] = math.Nextafter(near[7], math.Inf(1))
	if checksum(near, true) != checksum(vals, true) {
		t.Fatal("float32 checksum sees a difference float32 cannot hold")
	}
	if checksum(nil, false) != 0 {
		t.Fatal("checksum of nothing is not 0")
	}
}
