package benchkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadRecords(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.jsonl")
	good := `{"type":"epoch","epoch":1,"seconds":2.5,"metrics":{"localize_calls":4}}
{"type":"stage","seconds":9,"state":"done","metrics":{"kv_local_keys":3}}
`
	if err := os.WriteFile(p, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadRecords(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Seconds != 2.5 || recs[0].Metrics["localize_calls"] != 4 || recs[1].State != "done" {
		t.Fatalf("records %+v", recs)
	}
	if err := os.WriteFile(p, []byte(good+"{oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRecords(p); err == nil || !strings.Contains(err.Error(), "m.jsonl:3") {
		t.Fatalf("error %v, want one naming m.jsonl:3", err)
	}
}
