package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/testkit"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// With [data] allowed_paths, a task cannot read a file outside them, and
// the error does not quote the file.
func TestAllowedPaths(t *testing.T) {
	base := t.TempDir()
	data, secret := filepath.Join(base, "data"), filepath.Join(base, "secret")
	os.MkdirAll(data, 0o755)
	os.MkdirAll(secret, 0o755)
	os.WriteFile(filepath.Join(data, "ok.libsvm"), []byte("1 1:1\n0 2:1\n"), 0o644)
	os.WriteFile(filepath.Join(secret, "shadow"), []byte("root:SECRET-HASH\n"), 0o600)
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 1, Slots: 2, Log: zerolog.Nop(),
		Config: engine.ClusterConfig{Data: engine.DataSect{AllowedPaths: []string{data}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	read := func(path string) error {
		task := tasks.NewTask("read").SetInput("train", tasks.InputSpec{Path: path}).
			SetStages(tasks.Stage{Func: testkit.Count, Workers: 1})
		_, err := l.SubmitAndWait(context.Background(), task, nil)
		return err
	}
	if err := read(filepath.Join(data, "ok.libsvm")); err != nil {
		t.Fatalf("inside: %v", err)
	}
	err = read(filepath.Join(secret, "shadow"))
	if err == nil || !strings.Contains(err.Error(), datastore.ErrPathNotAllowed.Error()) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("outside: %v", err)
	}

	if _, err := engine.StartLocal(context.Background(), engine.LocalOptions{Log: zerolog.Nop(),
		Config: engine.ClusterConfig{Data: engine.DataSect{AllowedPaths: []string{filepath.Join(base, "missing")}}}}); err == nil || !strings.Contains(err.Error(), "data.allowed_paths") {
		t.Fatalf("a missing root: %v", err)
	}
}
