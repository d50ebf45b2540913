package tasks

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Params are a stage's free-form parameters (the TOML [stage.params]
// table). Values arrive as JSON numbers, strings or booleans; the getters
// convert and fall back to a default when the key is absent.
type Params map[string]any

func (p Params) num(key string) (float64, bool, error) {
	f, ok, err := p.rawNum(key)
	if err == nil && ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		// Also: a task holding one cannot travel as JSON.
		return 0, true, fmt.Errorf("param %q: want a finite number, got %v", key, f)
	}
	return f, ok, err
}

func (p Params) rawNum(key string) (float64, bool, error) {
	v, ok := p[key]
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case float64:
		return x, true, nil
	case float32:
		return float64(x), true, nil
	case int:
		return float64(x), true, nil
	case int64:
		return float64(x), true, nil
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, true, fmt.Errorf("param %q: want a number, got %q", key, x)
		}
		return f, true, nil
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0, true, fmt.Errorf("param %q: want a number, got %q", key, x)
		}
		return f, true, nil
	}
	return 0, true, fmt.Errorf("param %q: want a number, got %T", key, v)
}

// Float returns a float parameter.
func (p Params) Float(key string, def float64) float64 {
	f, ok, err := p.num(key)
	if !ok || err != nil {
		return def
	}
	return f
}

// Int returns an integer parameter.
func (p Params) Int(key string, def int) int {
	f, ok, err := p.num(key)
	if !ok || err != nil || f != math.Trunc(f) || !inIntRange(f) {
		return def
	}
	return int(f)
}

// maxIntFloat is 2^63, the least float64 above every int64.
const maxIntFloat = float64(1 << 63)

// inIntRange reports that int(f) keeps f's value.
func inIntRange(f float64) bool {
	return f >= -maxIntFloat && f < maxIntFloat
}

// String returns a string parameter.
func (p Params) String(key, def string) string {
	v, ok := p[key]
	if !ok {
		return def
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// Bool returns a boolean parameter.
func (p Params) Bool(key string, def bool) bool {
	v, ok := p[key].(bool)
	if !ok {
		return def
	}
	return v
}

// Check reports a parameter of the wrong type; stage functions call it for
// the keys they read so that a typo'd value is an error, not a default.
// A number written as a string (epochs = "3" in a job file) is refused
// too: the getters would read it, but a quoted number is most often a
// value meant for another key or a file edited by a program, and the
// README documents these params as numbers.
func (p Params) Check(numeric ...string) error {
	for _, k := range numeric {
		if err := p.notString(k, "a number"); err != nil {
			return err
		}
		if _, _, err := p.num(k); err != nil {
			return err
		}
	}
	return nil
}

// notString refuses a numeric param given as a string.
func (p Params) notString(key, want string) error {
	if s, ok := p[key].(string); ok {
		return fmt.Errorf("param %q: want %s, got the string %q (write it without quotes)", key, want, s)
	}
	return nil
}

// Known reports a param whose name is not in known (nor "round", which
// RepeatStages sets), naming the near miss when there is one: a typo'd
// name is an error, not a parameter that silently keeps its default.
func (p Params) Known(known ...string) error {
	var unknown []string
	for k := range p {
		if k != "round" && !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	k := unknown[0]
	names := slices.Clone(known)
	sort.Strings(names)
	hint := ""
	best := 3 // at most 2 edits away
	for _, n := range names {
		if d := editDistance(k, n); d < best {
			best, hint = d, fmt.Sprintf("did you mean %q? ", n)
		}
	}
	return fmt.Errorf("unknown param %q (%sknown: %s)", k, hint, strings.Join(names, ", "))
}

// CheckInt reports a param of keys that is not an integer (Int would
// fall back to its default), a string among them.
func (p Params) CheckInt(keys ...string) error {
	for _, k := range keys {
		if err := p.notString(k, "an integer"); err != nil {
			return err
		}
		f, ok, err := p.num(k)
		if err != nil {
			return err
		}
		if ok && f != math.Trunc(f) {
			return fmt.Errorf("param %q: want an integer, got %v", k, f)
		}
		if ok && !inIntRange(f) {
			// int(f) wrapped: epochs = 1e300 was refused as "epochs
			// must be >= 1, got -9223372036854775808".
			return fmt.Errorf("param %q: %v is beyond the integers (at most 2^63 - 1024)", k, f)
		}
	}
	return nil
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
