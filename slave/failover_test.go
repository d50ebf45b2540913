package slave

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/master"
	"github.com/flexps/flexps/status"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// The failover drill in one process: the workers of one slave stop dead
// in the middle of a block and the slave goes away; the survivors re-run
// what it left unfinished, and every block is processed exactly once per
// epoch by a live worker or confirmed by the dead one before it died.

const (
	drillEpochs = 2
	drillVictim = "slave-2"
	drillLines  = 3000
)

// drill is what the stage function of the failover drill records.
type drill struct {
	mu sync.Mutex
	// seen[epoch][line] counts, per slave kind (live or victim), the
	// times a record was processed; block[line] is its block's offset.
	live, dead [drillEpochs + 1]map[uint64]int
	block      map[uint64]int64
	shares     map[int][2]int // rank -> Share after the first epoch's barrier
	hanging    int            // victim workers stopped dead
	hung       chan struct{}  // closed when both victim workers stopped dead
}

var theDrill *drill

func newDrill() *drill {
	d := &drill{block: map[uint64]int64{}, shares: map[int][2]int{}, hung: make(chan struct{})}
	for e := range d.live {
		d.live[e], d.dead[e] = map[uint64]int{}, map[uint64]int{}
	}
	return d
}

func init() {
	// slave.test.drill reads its share of the input for drillEpochs
	// epochs, counting every record, with a barrier after each epoch.
	// On the victim slave, each worker processes a few batches of the
	// first epoch, then stops dead, holding its blocks, until it is
	// cancelled.
	tasks.Register("slave.test.drill", func(info *tasks.Info) error {
		d := theDrill
		in, err := info.Input("train")
		if err != nil {
			return err
		}
		victim := info.Slave == drillVictim
		for epoch := 1; epoch <= drillEpochs; epoch++ {
			pass, err := in.Pass(info.Ctx)
			if err != nil {
				return err
			}
			batches := 0
			for {
				rec, err := pass.Next(info.Ctx)
				if err == io.EOF {
					break
				}
				if err != nil {
					pass.Close()
					return err
				}
				if !victim && epoch == 1 && batches == 1 {
					// A survivor takes one batch, then waits for the
					// victim's workers to stop dead: on a loaded machine
					// they could otherwise start after the survivors
					// took every block of the epoch, and never stop.
					select {
					case <-d.hung:
					case <-info.Ctx.Done():
						pass.Close()
						return info.Ctx.Err()
					}
				}
				if victim && epoch == 1 && batches == 2 {
					d.mu.Lock()
					if d.hanging++; d.hanging == 2 {
						close(d.hung)
					}
					d.mu.Unlock()
					<-info.Ctx.Done() // stopped dead mid-block
					pass.Close()
					return info.Ctx.Err()
				}
				batches++
				d.count(epoch, victim, rec)
			}
			if err := pass.Close(); err != nil {
				return err
			}
			if err := info.Barrier(); err != nil {
				return err
			}
			if epoch == 1 {
				idx, n := info.Share()
				d.mu.Lock()
				d.shares[info.Rank] = [2]int{idx, n}
				d.mu.Unlock()
			}
		}
		return nil
	})
}

func (d *drill) count(epoch int, victim bool, rec *datastore.Records) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := d.live[epoch]
	if victim {
		seen = d.dead[epoch]
	}
	origin := 0
	for i := range rec.Len() {
		for origin+1 < len(rec.Origins) && rec.Origins[origin+1].First <= i {
			origin++
		}
		_, keys, _ := rec.Row(i)
		id := keys[0]
		seen[id]++
		d.block[id] = rec.Origins[origin].Block
	}
}

// drillInput writes drillLines LIBSVM records, record i holding feature
// i+1, and returns the file.
func drillInput(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for i := range drillLines {
		fmt.Fprintf(&b, "1 %d:1 %d:0.5\n", i+1, drillLines+i%7+1)
	}
	path := filepath.Join(t.TempDir(), "train.libsvm")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSurvivableStageReRunsTheDeadSlavesBlocks(t *testing.T) {
	theDrill = newDrill()
	d := theDrill
	c, _ := startClusterWith(t, 3, 2, master.Config{Log: zerolog.Nop()})
	task := tasks.NewTask("drill").
		SetInput("train", tasks.InputSpec{Path: drillInput(t), BlockSize: 1500}).
		SetStages(tasks.Stage{Name: "read", Func: "slave.test.drill", Workers: 6, MaxSlaves: 3,
			Consistency: kvstore.Consistency{Kind: kvstore.ASP}})
	id, err := c.m.Submit(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	victim := c.slave(drillVictim)
	eventually(t, "the victim's workers stopped dead", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.hanging == 2
	}, func() any { return c.m.Slaves() })
	// Let the survivors run out of epoch 1's blocks before the victim
	// goes: they must then wait for its blocks, not finish the epoch
	// without them. Quiet for half a second is taken as run out (a
	// survivor still reading only makes the test weaker, never wrong).
	for last, quiet := -1, 0; quiet < 5; time.Sleep(100 * time.Millisecond) {
		d.mu.Lock()
		n := len(d.live[1])
		d.mu.Unlock()
		if n == last && n > 0 {
			quiet++
		} else {
			last, quiet = n, 0
		}
	}
	victim.Close() // it leaves: to the stage, the same as a death

	st := c.wait(t, id)
	if st.State != status.Done {
		t.Fatalf("task %s: %s", st.State, st.Reason)
	}
	res := st.Results[0]
	if len(res.Failovers) != 1 {
		t.Fatalf("failovers %+v, want the victim's", res.Failovers)
	}
	f := res.Failovers[0]
	if f.Slave != drillVictim || len(f.Ranks) != 2 || f.Survivors != 4 || f.Blocks < 2 {
		t.Fatalf("failover %+v, want slave-2's 2 workers with at least 2 unfinished blocks, 4 survivors", f)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for e := 1; e <= drillEpochs; e++ {
		// Per block: the live workers processed every record once, or
		// none and the victim every record once (it confirmed it).
		liveInBlock := map[int64]int{}
		for id, n := range d.live[e] {
			liveInBlock[d.block[id]] += n
		}
		for i := range drillLines {
			id := uint64(i)
			live, dead := d.live[e][id], d.dead[e][id]
			switch {
			case live == 1:
			case live == 0 && dead == 1 && liveInBlock[d.block[id]] == 0:
			default:
				t.Fatalf("epoch %d: record %d processed %d times by live workers, %d by the dead one (block %d)", e, id, live, dead, d.block[id])
			}
		}
		if e == 1 {
			// Each victim worker finished its first block and asked for
			// more before it stopped: confirmed, so nobody re-ran it.
			kept := map[int64]bool{}
			for id := range d.dead[1] {
				if liveInBlock[d.block[id]] == 0 {
					kept[d.block[id]] = true
				}
			}
			if len(kept) < 2 {
				t.Fatalf("%d blocks the victim confirmed were left alone, want at least 2", len(kept))
			}
		}
	}
	var idx []int
	for rank, sh := range d.shares {
		if sh[1] != 4 {
			t.Fatalf("rank %d: share %v after the death, want one of 4", rank, sh)
		}
		idx = append(idx, sh[0])
	}
	slices.Sort(idx)
	if !slices.Equal(idx, []int{0, 1, 2, 3}) {
		t.Fatalf("survivors' share indices %v, want 0..3", idx)
	}
}

// A stage of a task whose table has one replica cannot survive: it fails
// saying what to set.
func TestUnsurvivableStageSaysWhatToSet(t *testing.T) {
	c, _ := startClusterWith(t, 2, 2, master.Config{Log: zerolog.Nop()})
	waiting.Store(0)
	task := tasks.NewTask("fragile").AddTable(kvstore.TableSpec{Name: "w", Size: 100, Replicas: 1}).
		SetStages(tasks.Stage{Name: "train", Func: "slave.test.wait", Workers: 4})
	id, err := c.m.Submit(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	for waiting.Load() < 4 {
		time.Sleep(5 * time.Millisecond)
	}
	c.slaves[1].Close()
	st := c.wait(t, id)
	if st.State != status.Failed || !strings.Contains(st.Reason, "table w has replicas = 1: set replicas = 2 to survive a slave's death") {
		t.Fatalf("state %s reason %q", st.State, st.Reason)
	}
}
