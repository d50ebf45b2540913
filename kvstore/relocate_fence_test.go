package kvstore_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/kvstore/transport"
	"github.com/rs/zerolog"
)

// slowLink is a Transport whose requests to one node arrive late once
// slow is set (in order, each delay after the one before): the forwarding
// hop home -> owner of a moved key on a congested link.
type slowLink struct {
	transport.Transport
	to    string
	delay time.Duration
	slow  atomic.Bool
	q     chan func()
	done  sync.WaitGroup
}

func newSlowLink(tr transport.Transport, to string, delay time.Duration) *slowLink {
	l := &slowLink{Transport: tr, to: to, delay: delay, q: make(chan func(), 64)}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		for f := range l.q {
			f()
		}
	}()
	return l
}

func (l *slowLink) Send(node, reply string, data []byte) error {
	if node != l.to || !l.slow.Load() {
		return l.Transport.Send(node, reply, data)
	}
	d := append([]byte(nil), data...)
	l.q <- func() {
		time.Sleep(l.delay)
		l.Transport.Send(node, reply, d)
	}
	return nil
}

func (l *slowLink) close() {
	close(l.q)
	l.done.Wait()
}

// A worker on a slave that takes no part in any move (no key moves to or
// from it, it learns no route) adds to a key that moved; its Add goes to
// the key's home, which forwards it to the owner, while its Clock goes to
// the owner directly. Under BSP the owner's worker must not read the key
// at the next clock without that Add: on a table declared Relocate the
// Clock waits for the Add to be applied.
func TestRelocateClockWaitsForForwardedAdd(t *testing.T) {
	spec := kvstore.TableSpec{Name: "w", Size: 30, Relocate: true}.WithDefaults()
	bsp := kvstore.Consistency{Kind: kvstore.BSP}
	c := &cluster{t: t, mem: transport.NewMem()}
	t.Cleanup(c.close)
	c.hosts = []string{"s0", "s1", "s2"}
	link := newSlowLink(c.mem, "s1", 300*time.Millisecond)
	t.Cleanup(link.close)
	for i, h := range c.hosts {
		var tr transport.Transport = c.mem
		if i == 0 {
			tr = link // the home of keys 0..9 forwards to s1 slowly
		}
		s, err := kvstore.NewServer(tr, h, zerolog.Nop())
		ok(t, err)
		ok(t, s.CreateTables("task", h, []kvstore.Placement{{Spec: spec, Hosts: c.hosts}}))
		c.servers = append(c.servers, s)
	}
	c.prepare(0, bsp, 3)
	cl := []*kvstore.Client{c.client(0, 0, 0, bsp), c.client(1, 0, 1, bsp), c.client(2, 0, 2, bsp)}
	w := []*kvstore.TableClient{c.table(cl[0], spec), c.table(cl[1], spec), c.table(cl[2], spec)}

	// Worker 1 moves key 0 (home s0) to its slave s1 at clock 0.
	ok(t, w[1].Localize([]uint64{0}))
	same(t, true, w[1].Owned(0), "key 0 owned by slave 1")
	link.slow.Store(true)

	// Iteration 0: worker 2 adds 1 to key 0 (it goes to s0, which
	// forwards it to s1 late) and clocks; the others only clock.
	errs := make(chan error, 2)
	go func() {
		if err := w[2].Add([]uint64{0}, []float64{1}); err != nil {
			errs <- err
			return
		}
		errs <- cl[2].Clock()
	}()
	go func() { errs <- cl[0].Clock() }()
	ok(t, cl[1].Clock())
	for range 2 {
		ok(t, <-errs)
	}
	// Worker 1 at clock 1 under BSP: every Add of clock 0 is in.
	got := make([]float64, 1)
	ok(t, w[1].Get([]uint64{0}, got))
	same(t, 1.0, got[0], "key 0 read by its owner's worker at clock 1 (worker 2's Add of clock 0)")
	for _, x := range cl {
		ok(t, x.Finish())
	}
}

// Under a consistency model that counts clocks a stage localizes only
// tables declared Relocate; under ASP any unreplicated table.
func TestLocalizeNeedsRelocateUnderClocks(t *testing.T) {
	for _, tc := range []struct {
		cons     kvstore.Consistency
		relocate bool
		want     string // "" = moves
	}{
		{kvstore.Consistency{Kind: kvstore.ASP}, false, ""},
		{kvstore.Consistency{Kind: kvstore.BSP}, false, "relocate = true"},
		{kvstore.Consistency{Kind: kvstore.SSP, Staleness: 2}, false, "relocate = true"},
		{kvstore.Consistency{Kind: kvstore.SSP, Staleness: 2}, true, ""},
		{kvstore.Consistency{Kind: kvstore.BSP}, true, ""},
	} {
		t.Run(string(tc.cons.Kind)+map[bool]string{true: " relocate", false: ""}[tc.relocate], func(t *testing.T) {
			spec := kvstore.TableSpec{Name: "w", Size: 30, Relocate: tc.relocate}.WithDefaults()
			c := newCluster(t, 2, spec)
			c.prepare(0, tc.cons, 1)
			cl := c.client(1, 0, 0, tc.cons)
			err := c.table(cl, spec).Localize([]uint64{0, 1})
			if tc.want == "" {
				ok(t, err)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"w"`) {
				t.Fatalf("localize: %v, want an error naming table w and %q", err, tc.want)
			}
		})
	}
}
