package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/testkit"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// consCase is one configuration of the consistency checker stage.
type consCase struct {
	name     string
	kind     string
	cons     kvstore.Consistency
	workers  int
	replicas int
	cache    string
	read     string
	iters    string
	localize int
	spec     kvstore.TableSpec
	input    bool // iterations are records of an uneven input
	records  int  // with input: its record count
}

func (c consCase) task(dir string) *tasks.MultiStageTask {
	spec := c.spec
	spec.Name = "t"
	if spec.Size == 0 {
		spec.Size = uint64(c.workers * 12)
	}
	spec.Replicas = c.replicas
	params := tasks.Params{"iters": c.iters, "read": c.read, "skew": 300, "localize": c.localize}
	if c.iters == "" {
		params["iters"] = "25"
	}
	task := tasks.NewTask("cons-" + c.name).AddTable(spec)
	if c.input {
		params["input"] = "train"
		params["epochs"] = 2
		params["epoch_records"] = c.records
		if c.kind == tasks.KindPS && c.replicas >= 2 { // workers survive deaths
			params["epoch_check"] = "settled"
		}
		task.SetInput("train", tasks.InputSpec{Path: dir})
	}
	st := tasks.Stage{Name: "check", Func: testkit.ConsCheck, Workers: c.workers, WorkerKind: c.kind,
		Consistency: c.cons, Cache: c.cache, Params: params}
	if c.cache != "" {
		st.CacheSize = 1000
	}
	return task.SetStages(st)
}

// writeUneven writes files of very different lengths (one block each), so
// workers run out of data at different times.
func writeUneven(t *testing.T) (dir string, records int) {
	dir = t.TempDir()
	for i, n := range []int{30, 3, 1, 12, 0, 7} {
		var b strings.Builder
		for j := range n {
			fmt.Fprintf(&b, "1 %d:1\n", j+1)
		}
		if n == 0 {
			b.WriteString("\n")
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part-%d.libsvm", i)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		records += n
	}
	return dir, records
}

func TestConsistencyCheckerMatrix(t *testing.T) {
	l, err := engine.StartLocal(context.Background(), engine.LocalOptions{Slaves: 3, Slots: 4, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir, records := writeUneven(t)
	bsp := kvstore.Consistency{Kind: kvstore.BSP}
	ssp := kvstore.Consistency{Kind: kvstore.SSP, Staleness: 2}
	asp := kvstore.Consistency{Kind: kvstore.ASP}
	sparse := kvstore.Consistency{Kind: kvstore.SparseSSP, Staleness: 1, Speculation: 1}
	var cases []consCase
	for _, cons := range []kvstore.Consistency{bsp, ssp, asp, sparse} {
		for _, rep := range []int{1, 2, 3} {
			for _, cache := range []string{"", "lru"} {
				if cache != "" && cons.Kind == kvstore.SparseSSP {
					continue // refused: a cache hides reads from the controller
				}
				for _, read := range []string{"get", "async", "next", "chunk"} {
					cases = append(cases, consCase{
						name: fmt.Sprintf("%s-r%d-%s-%s", cons.Kind, rep, cache, read), kind: tasks.KindPS, cons: cons,
						workers: 5, replicas: rep, cache: cache, read: read, iters: "25,3,0,25,10",
						spec: kvstore.TableSpec{ChunkSize: 7},
					})
				}
			}
		}
		for _, kind := range []string{tasks.KindLocal, tasks.KindHogwild} {
			cases = append(cases, consCase{name: fmt.Sprintf("%s-%s", cons.Kind, kind), kind: kind, cons: cons,
				workers: 3, replicas: 1, read: "get", iters: "25,3,0"})
		}
	}
	cases = append(cases, consCase{name: "single", kind: tasks.KindSingle, cons: bsp, workers: 1, replicas: 1, read: "get"})
	for _, cons := range []kvstore.Consistency{bsp, ssp, asp} {
		for _, spec := range []kvstore.TableSpec{
			{DType: kvstore.Float32},
			{Storage: kvstore.Sparse, Partition: kvstore.HashPartition},
			{Storage: kvstore.Sparse, Partition: kvstore.HashPartition, DType: kvstore.Float32},
		} {
			cases = append(cases, consCase{name: fmt.Sprintf("%s-%s-%s-%s", cons.Kind, spec.DType, spec.Storage, spec.Partition),
				kind: tasks.KindPS, cons: cons, workers: 5, replicas: 2, cache: "lru", read: "get", iters: "25,3,0,25,10", spec: spec})
		}
		// Relocation mid-stage.
		for _, read := range []string{"get", "async", "next"} {
			cases = append(cases, consCase{name: fmt.Sprintf("%s-localize-%s", cons.Kind, read), kind: tasks.KindPS, cons: cons,
				workers: 5, replicas: 1, read: read, iters: "25,3,0,25,10", localize: 3})
		}
		// More workers than shards' worth, on every slave.
		cases = append(cases, consCase{name: fmt.Sprintf("%s-many", cons.Kind), kind: tasks.KindPS, cons: cons,
			workers: 12, replicas: 2, read: "get", iters: "20,1,0,20,5,20,0,20,3,20,20,7", spec: kvstore.TableSpec{Size: 24}})
		// Uneven input: workers starve at each epoch's end and tick idle
		// clocks until it is over (where workers survive deaths; elsewhere
		// until the epoch before is), with more workers than blocks too.
		for _, rep := range []int{1, 2} {
			for _, w := range []int{4, 8} {
				cases = append(cases, consCase{name: fmt.Sprintf("%s-input-w%d-r%d", cons.Kind, w, rep), kind: tasks.KindPS, cons: cons,
					workers: w, replicas: rep, read: "get", input: true, records: records})
			}
		}
		for _, kind := range []string{tasks.KindLocal, tasks.KindHogwild} {
			cases = append(cases, consCase{name: fmt.Sprintf("%s-input-%s", cons.Kind, kind), kind: kind, cons: cons,
				workers: 4, replicas: 1, read: "get", input: true, records: records})
		}
	}
	filter := os.Getenv("CONS_FILTER")
	for _, c := range cases {
		if filter != "" && !strings.Contains(c.name, filter) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			st, err := l.SubmitAndWait(ctx, c.task(dir), nil)
			if err != nil {
				t.Fatal(err)
			}
			ep := st.Results[0].Epochs
			if len(ep) != 1 || ep[0].Metrics[testkit.ConsChecked] == 0 {
				t.Fatalf("no reads checked: %+v", ep)
			}
			if c.input && ep[0].Metrics[testkit.ConsTotal] != float64(2*records) {
				t.Fatalf("total %v, want %d", ep[0].Metrics[testkit.ConsTotal], 2*records)
			}
		})
	}
}
