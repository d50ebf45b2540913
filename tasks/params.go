package tasks

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Params are a stage's free-form parameters (the TOML [stage.params]
// table). Values arrive as JSON numbers, strings or booleans; the getters
// convert and fall back to a default when the key is absent.
type Params map[string]any

func (p Params) num(key string) (float64, bool, error) {
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
	if !ok || err != nil || f != math.Trunc(f) {
		return def
	}
	return int(f)
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
func (p Params) Check(numeric ...string) error {
	for _, k := range numeric {
		if _, _, err := p.num(k); err != nil {
			return err
		}
	}
	return nil
}
