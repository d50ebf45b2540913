package kvstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
)

// Routes is one task's view of which of its shard hosts are alive, shared
// by a slave's server and its workers' clients (and by the master's model
// readers). A replicated shard i is held by a chain of replicas: the first
// R live hosts in ring order from host i (Chain). Its head serves reads
// and takes writes; each member applies a write and passes it on; the
// tail acknowledges it. A death (MarkDead, from the membership view)
// shortens every chain it was in: the first surviving member becomes the
// head, and the next live host joins at the end (re-replication), so a
// chain is the same function of (hosts, dead) on every node.
type Routes struct {
	hosts []string

	mu    sync.Mutex
	dead  []bool
	epoch atomic.Uint64
	ctx   context.Context // done at the next change
	done  context.CancelFunc
	subs  []func()
}

// NewRoutes returns the routes of a task whose shard i lives on hosts[i],
// every host alive.
func NewRoutes(hosts []string) *Routes {
	r := &Routes{hosts: slices.Clone(hosts), dead: make([]bool, len(hosts))}
	r.ctx, r.done = context.WithCancel(context.Background())
	return r
}

// Hosts are the task's shard hosts (do not modify).
func (r *Routes) Hosts() []string { return r.hosts }

// MarkDead records that host died; it reports whether that was news.
// Subscribers run (on the caller's goroutine) after the change.
func (r *Routes) MarkDead(host string) bool {
	r.mu.Lock()
	i := slices.Index(r.hosts, host)
	if i < 0 || r.dead[i] {
		r.mu.Unlock()
		return false
	}
	r.dead[i] = true
	r.epoch.Add(1)
	r.done()
	r.ctx, r.done = context.WithCancel(context.Background())
	subs := slices.Clone(r.subs)
	r.mu.Unlock()
	for _, f := range subs {
		f()
	}
	return true
}

// Subscribe runs f after every change.
func (r *Routes) Subscribe(f func()) {
	r.mu.Lock()
	r.subs = append(r.subs, f)
	r.mu.Unlock()
}

// View is a snapshot of the routes: which hosts are dead, at which epoch
// (one per death), and a context done at the next change.
type View struct {
	Epoch   uint64
	Dead    []bool
	Changed context.Context
}

// View returns the current view.
func (r *Routes) View() View {
	r.mu.Lock()
	defer r.mu.Unlock()
	return View{Epoch: r.epoch.Load(), Dead: slices.Clone(r.dead), Changed: r.ctx}
}

// Epoch counts the deaths seen so far.
func (r *Routes) Epoch() uint64 { return r.epoch.Load() }

// Alive reports whether host is alive in the current view (unknown hosts
// are).
func (r *Routes) Alive(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.hosts, host)
	return i < 0 || !r.dead[i]
}

// Head is the host serving shard i of a table with replicas copies, and
// whether any host is left. (Whether it holds the data is for its server
// to say: a backup that had not received its snapshot answers
// ErrShardLost.)
func (r *Routes) Head(shard, replicas int) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := Chain(len(r.hosts), r.dead, shard, replicas)
	if len(c) == 0 {
		return "", false
	}
	return r.hosts[c[0]], true
}

// Chain is the replica chain of shard among n hosts: the first replicas
// live hosts in ring order from shard, head first. dead[i] marks dead
// hosts.
func Chain(n int, dead []bool, shard, replicas int) []int {
	out := make([]int, 0, replicas)
	for k := 0; k < n && len(out) < replicas; k++ {
		h := (shard + k) % n
		if !dead[h] {
			out = append(out, h)
		}
	}
	return out
}

// ErrShardLost is wrapped when every replica of a shard died.
var ErrShardLost = errors.New("kvstore: every replica of a shard died")
