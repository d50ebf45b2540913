package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/checkpoint"
	"github.com/flexps/flexps/datastore/hdfs"
	"github.com/flexps/flexps/internal/clustertest"
)

// TestHDFSCheckpointsAndResume: checkpoints go to hdfs:// (atomic
// create-and-rename there, old ones deleted past keep); a torn newest file
// on HDFS is skipped with a warning naming it, and `flexps submit
// --resume hdfs://...` finishes the task from the one before, naming the
// temporary checkpoint file a killed writer left there.
func TestHDFSCheckpointsAndResume(t *testing.T) {
	h := miniHDFS(t)
	dir := t.TempDir()
	train, test := lrData(t, dir, 2000, 300)
	command, env := cli()
	c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, ExtraConfig: hdfsConfig(h)})
	ckdir := h.URL("/ck/" + strings.ReplaceAll(t.Name(), "/", "_"))
	output := filepath.Join(dir, "m.model")
	submitOK(t, c, ckJob(t, dir, "hdfsck", train, test, output, 4, "1 epoch", ckdir))

	st := hdfs.NewSources(hdfs.Config{Namenodes: []string{h.Namenode}, HTTPAddr: h.HTTP, User: h.Superuser, Timeout: 10 * time.Second})
	defer st.Close()
	ctx := context.Background()
	paths, err := checkpoint.List(ctx, st, ckdir)
	if err != nil {
		t.Fatal(err)
	}
	// Checkpoints after epochs 1, 2, 3 and the stage's end (4); keep 2.
	newest, older := ckdir+"/"+checkpoint.Name(4), ckdir+"/"+checkpoint.Name(3)
	if len(paths) != 2 || paths[0] != older || paths[1] != newest {
		t.Fatalf("checkpoints on HDFS %v, want %s and %s (keep 2)", paths, older, newest)
	}
	// Tear the newest: rewrite it with its first half.
	r, err := st.Open(ctx, newest, 0)
	if err != nil {
		t.Fatal(err)
	}
	var head [4096]byte
	n, _ := r.Read(head[:])
	r.Close()
	w, err := st.Create(ctx, newest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(head[:n/2]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A temporary checkpoint file a writer killed mid-write left: an
	// hdfs:// dir is not locked, so it is not removed, but the resume
	// names it (it stayed hidden for good).
	ckpath := "/ck/" + strings.ReplaceAll(t.Name(), "/", "_")
	h.WriteFile(t, ckpath+"/.ckpt-000005.flexps.tmp-0123456789ab", []byte("cut off"))
	temp := ckdir + "/.ckpt-000005.flexps.tmp-0123456789ab"
	res := c.Run(2*time.Minute, "submit", "--resume", ckdir)
	if res.Exit != 0 {
		t.Fatalf("submit --resume failed (%d):\n%s\n%s", res.Exit, res.Stdout, lastBytes(res.Stderr, 4000))
	}
	if !strings.Contains(res.Stderr, "warning: skipping checkpoint "+newest+":") || !strings.Contains(res.Stdout, "resumed from checkpoint "+older) {
		t.Fatalf("no fallback to %s with a warning naming %s:\n%s\n%s", older, newest, res.Stdout, res.Stderr)
	}
	if !strings.Contains(res.Stderr, "warning: checkpoint dir "+ckdir+" holds 1 temporary checkpoint file(s)") || !strings.Contains(res.Stderr, temp) {
		t.Fatalf("no warning naming the temporary file %s:\n%s", temp, res.Stderr)
	}
	if rows := epochRows(res.Stdout); len(rows) != 1 || rows[0] != 4 {
		t.Fatalf("resumed epochs %v, want [4]", rows)
	}
}
