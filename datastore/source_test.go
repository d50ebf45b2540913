package datastore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestCreateIsAtomic(t *testing.T) {
	dir := t.TempDir()
	s := NewSources(HDFSConfig{})
	defer s.Close()
	final := filepath.Join(dir, "sub", "model")
	w, err := s.Create(context.Background(), final)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("half"))
	if _, err := os.Stat(final); !os.IsNotExist(err) {
		t.Fatal("the final name exists before Close")
	}
	Abort(w)
	if _, err := os.Stat(final); !os.IsNotExist(err) {
		t.Fatal("an aborted write left the final file")
	}
	if left, _ := os.ReadDir(filepath.Dir(final)); len(left) != 0 {
		t.Fatalf("an aborted write left %v", left)
	}
	w, err = s.Create(context.Background(), final)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("whole"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(final); err != nil || string(b) != "whole" {
		t.Fatalf("%q %v", b, err)
	}
}
