package master

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

func TestTaskRecordsRoundTripAndRefuseStrangers(t *testing.T) {
	dir := t.TempDir()
	m := &Master{cfg: Config{StateDir: dir}, log: zerolog.Nop()}
	spec := tasks.NewTask("lr")
	spec.ID = "t1"
	spec.Checkpoint = tasks.Checkpoint{Dir: "/ck"}
	tr := &taskRun{m: m, spec: spec, ckpt: &checkpointer{dir: "/ck"}}
	tr.status.Submitted = time.Unix(100, 0)
	if err := tr.persist(); err != nil {
		t.Fatal(err)
	}
	older := *spec
	older.ID = "t0"
	if err := writeFileAtomic(m.recordPath("t0"), []byte(`{"task":{"id":"t0","name":"lr","checkpoint":{"dir":"/ck0"}},"submitted":"1970-01-01T00:00:50Z"}`)); err != nil {
		t.Fatal(err)
	}
	// A record under another task's name, one without checkpoints, a
	// torn one, and a temporary file of an interrupted write.
	for name, body := range map[string]string{
		"t2.json":         `{"task":{"id":"t9","name":"x","checkpoint":{"dir":"/c"}}}`,
		"t3.json":         `{"task":{"id":"t3","name":"x"}}`,
		"t4.json":         `{"task":{"id":`,
		".t5.json.tmp123": `{}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, "tasks", name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	recs, errs := m.readRecords()
	if len(recs) != 2 || recs[0].Task.ID != "t0" || recs[1].Task.ID != "t1" || recs[1].Task.Checkpoint.Dir != "/ck" {
		t.Fatalf("records %+v", recs)
	}
	if len(errs) != 3 {
		t.Fatalf("errors %v, want 3", errs)
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), filepath.Join(dir, "tasks")) {
			t.Fatalf("error %q does not name the file", err)
		}
	}
	tr.unpersist()
	if _, err := os.Stat(m.recordPath("t1")); !os.IsNotExist(err) {
		t.Fatalf("record still there: %v", err)
	}
	// Tasks without checkpoints, or a master without a state dir, keep
	// no record.
	tr.ckpt = nil
	if err := tr.persist(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.recordPath("t1")); !os.IsNotExist(err) {
		t.Fatal("a task without checkpoints was recorded")
	}
}
