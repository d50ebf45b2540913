package kvstore

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"go.uber.org/goleak"
)

// testify's assert pulls go.yaml.in/yaml/v3, which go.sum lacks; these
// few helpers stand in for it.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func msg(args []any) string {
	if len(args) == 0 {
		return ""
	}
	if f, ok := args[0].(string); ok {
		return ": " + fmt.Sprintf(f, args[1:]...)
	}
	return ": " + fmt.Sprint(args...)
}

func equal[T any](t testing.TB, want, got T, args ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("want %v, got %v%s", want, got, msg(args))
	}
}

func check(t testing.TB, ok bool, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf("check failed%s", msg(args))
	}
}

func must(t testing.TB, ok bool, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf("check failed%s", msg(args))
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func isErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("want error wrapping %v, got %v", target, err)
	}
}
