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

// An output the master may not or cannot write fails the submission, before
// any training.
func TestOutputCheckedAtSubmit(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	os.MkdirAll(data, 0o755)
	readonly := filepath.Join(data, "ro")
	os.MkdirAll(readonly, 0o555)
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 1, Slots: 1, Log: zerolog.Nop(),
		Config: engine.ClusterConfig{Data: engine.DataSect{AllowedPaths: []string{data}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tc := range []struct {
		output, want string
	}{
		{filepath.Join(base, "elsewhere", "m.model"), "outside the allowed paths"},
		{filepath.Join(readonly, "m.model"), "permission denied"},
	} {
		task := tasks.NewTask("out").SetStages(tasks.Stage{Func: testkit.Count, Workers: 1})
		task.Output = tc.output
		_, err := l.Submit(context.Background(), task)
		if os.Geteuid() == 0 && tc.want == "permission denied" {
			continue // root writes anywhere
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("output %s: err = %v, want %q", tc.output, err, tc.want)
		}
	}
	if left, _ := os.ReadDir(data); len(left) != 1 {
		t.Errorf("the probe left files: %v", left)
	}
}
