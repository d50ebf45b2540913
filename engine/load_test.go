package engine_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

func heapMB() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// A thousand small tasks: the master keeps only keep_tasks ended tasks,
// the status answer stays whole, and memory after the load is back near
// where it was after the first hundred (no per-task leak: before, every
// ended task kept a 4096-slot event channel, ~0.9 MB each).
func TestThousandTasksMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 1,000 tasks")
	}
	const total, keep, parallel = 1000, 50, 8
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 2, Slots: 4, Log: zerolog.Nop(),
		Config: engine.ClusterConfig{Master: engine.MasterSect{KeepTasks: keep}}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	run := func(n int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, parallel)
		for i := 0; i < n; i++ {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				task := tasks.NewTask("small").AddTable(kvstore.TableSpec{Name: "t", Size: 4}).
					SetStages(tasks.Stage{Name: "fill", Func: "test.fill", Workers: 1})
				st, err := l.SubmitAndWait(context.Background(), task, nil)
				if err != nil || st.State != status.Done {
					t.Errorf("task: %v %+v", err, st)
				}
			}()
		}
		wg.Wait()
	}
	run(100)
	base := heapMB()
	run(total - 100)
	after := heapMB()
	rep, err := l.Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("heap after 100 tasks %.1f MB, after %d: %.1f MB; status lists %d tasks (%d omitted)", base, total, after, len(rep.Tasks), rep.Omitted)
	if len(rep.Tasks) > keep {
		t.Errorf("status lists %d ended tasks, keep_tasks is %d", len(rep.Tasks), keep)
	}
	// Paging through the list: ten at a time, newest first.
	page, err := l.StatusPage(context.Background(), 10, "")
	if err != nil || len(page.Tasks) != 10 || page.Omitted != len(rep.Tasks)-10 {
		t.Fatalf("first page: %d tasks, %d omitted, %v", len(page.Tasks), page.Omitted, err)
	}
	next, err := l.StatusPage(context.Background(), 10, page.Tasks[0].ID)
	if err != nil || len(next.Tasks) != 10 || next.Omitted != len(rep.Tasks)-20 || next.Tasks[9].ID == page.Tasks[0].ID {
		t.Fatalf("second page: %d tasks, %d omitted, %v", len(next.Tasks), next.Omitted, err)
	}
	if after > base+20 {
		t.Errorf("heap grew from %.1f MB to %.1f MB over %d more tasks: ended tasks leak", base, after, total-100)
	}
}
