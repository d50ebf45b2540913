package scheduler

import "reflect"

// testify's assert needs a go.sum entry the module does not carry yet, so
// the tests use these two helpers.
// tb is the part of testing.TB that *rapid.T also has.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Error(args ...any)
	Fatal(args ...any)
}

func eq(t tb, got, want any, what string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func check(t tb, ok bool, what string) {
	t.Helper()
	if !ok {
		t.Error(what)
	}
}
