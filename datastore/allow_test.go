package datastore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPathPolicy(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	secret := filepath.Join(base, "secret")
	for _, d := range []string{data, secret, filepath.Join(data, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(data, "train.libsvm"), []byte("1 1:1\n"), 0o644)
	os.WriteFile(filepath.Join(secret, "shadow"), []byte("root:SECRET-HASH:0:0\n"), 0o600)
	// A link inside the allowed root pointing outside it.
	if err := os.Symlink(filepath.Join(secret, "shadow"), filepath.Join(data, "link")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(secret, filepath.Join(data, "dirlink"))
	p, err := NewPathPolicy([]string{data, "HDFS://nn:8020/models/"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{filepath.Join(data, "train.libsvm"), true},
		{data, true},
		{"file://" + filepath.Join(data, "train.libsvm"), true},
		{filepath.Join(data, "sub", "new-output.model"), true}, // need not exist
		{filepath.Join(data, "newdir", "deeper", "out.model"), true},
		{filepath.Join(data, "*.libsvm"), true},
		{filepath.Join(secret, "shadow"), false},
		{filepath.Join(data, "..", "secret", "shadow"), false},
		{filepath.Join(data, "link"), false},
		{filepath.Join(data, "dirlink", "shadow"), false},
		{filepath.Join(data, "dirlink", "*"), false},
		{data + "-other/x", false},
		{"/etc/shadow", false},
		{"relative/path", false},
		{"hdfs://nn:8020/models/lr.model", true},
		{"hdfs://NN:8020/models", true},
		{"hdfs://nn:8020/models/../etc/x", false},
		{"hdfs://nn:8020/modelsx/y", false},
		{"hdfs://other:8020/models/y", false},
	} {
		err := p.Check(tc.path)
		if tc.ok != (err == nil) {
			t.Errorf("Check(%q) = %v, want ok=%v", tc.path, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrPathNotAllowed) {
			t.Errorf("Check(%q): %v does not wrap ErrPathNotAllowed", tc.path, err)
		}
	}
	var none *PathPolicy
	if err := none.Check("/etc/shadow"); err != nil {
		t.Errorf("no policy: %v", err)
	}
	for _, bad := range []string{"relative", filepath.Join(base, "missing"), filepath.Join(data, "train.libsvm")} {
		if _, err := NewPathPolicy([]string{bad}); err == nil {
			t.Errorf("root %q accepted", bad)
		}
	}

	// Through a router: nothing outside is listed, opened or created, and
	// no error quotes the content of a file outside.
	s := NewSources()
	s.Restrict(p)
	ctx := context.Background()
	if _, err := s.Blocks(ctx, filepath.Join(data, "train.libsvm"), 0); err != nil {
		t.Fatal(err)
	}
	for _, pth := range []string{filepath.Join(secret, "shadow"), filepath.Join(data, "link"), filepath.Join(data, "dirlink")} {
		_, err := s.Blocks(ctx, pth, 0)
		if !errors.Is(err, ErrPathNotAllowed) || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("Blocks(%s): %v", pth, err)
		}
		if _, err := s.Open(ctx, pth, 0); !errors.Is(err, ErrPathNotAllowed) {
			t.Errorf("Open(%s): %v", pth, err)
		}
	}
	// A directory whose files include a link out is refused as a whole.
	if _, err := s.Blocks(ctx, data, 0); !errors.Is(err, ErrPathNotAllowed) {
		t.Errorf("a directory holding a link out: %v", err)
	}
	if _, err := s.Create(ctx, filepath.Join(secret, "overwritten")); !errors.Is(err, ErrPathNotAllowed) {
		t.Errorf("Create outside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(secret, "overwritten")); !os.IsNotExist(err) {
		t.Error("a refused Create left a file")
	}
}
