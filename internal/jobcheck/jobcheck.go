// Package jobcheck checks in tests how tasks.ParseJob judges a job file.
package jobcheck

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexps/flexps/tasks"
)

// Expect parses src as job.toml. With want empty it must be valid;
// otherwise it must be refused with an error that contains want and names
// line (0: no line).
func Expect(t testing.TB, src, want string, line int) {
	t.Helper()
	_, _, err := tasks.ParseJob("job.toml", []byte(src))
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
	var ce *tasks.ConfigError
	if err != nil && (!errors.As(err, &ce) || ce.Line != line) {
		t.Fatalf("error %q: want it on line %d", err, line)
	}
}
