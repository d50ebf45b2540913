package tasks

import (
	"fmt"
	"math"
	"strings"
)

// Size is a TOML byte size: an integer or a string like "64MiB".
type Size int64

// UnmarshalTOML accepts an integer or a string with a unit.
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("size %d is negative", x)
		}
		*s = Size(x)
		return nil
	case string:
		n, err := ParseSize(x)
		if err != nil {
			return err
		}
		*s = Size(n)
		return nil
	}
	return fmt.Errorf("bad size %v (want e.g. 8388608 or \"8MiB\")", v)
}

// ParseSize parses "123", "64KiB", "8MiB", "1GiB", "10MB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.m
			break
		}
	}
	var n int64
	if _, err := fmt.Sscanf(t, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != t {
		return 0, fmt.Errorf("bad size %q (want e.g. 8388608 or \"8MiB\")", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large (at most 8 EiB)", s)
	}
	return n * mult, nil
}
