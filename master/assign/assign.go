// Package assign is the master's FileAssigner: a state machine that hands
// the input's blocks to a stage's workers one at a time, as each worker asks
// for its next block. Pulling, rather than a fixed split, balances load: a
// fast worker asks more often and so reads more. Each epoch is an
// independent full pass over all blocks, with its own queue created on first
// use, so workers in different epochs never take each other's blocks.
//
// Next prefers locality. A worker first gets a block with a replica on its
// own host; among those it takes the one the fewest other active workers'
// hosts also hold (so widely replicated blocks stay available to others),
// then the largest, then the earliest listed. Without a local block it takes
// a remote one, preferring blocks no active worker's host holds (nobody would
// read them locally), then the largest, then the earliest listed. A worker is
// active in an epoch until Next tells it the epoch is empty or Release
// recovers its blocks.
//
// A worker Confirms each block when it has processed its records. When a
// worker dies the master calls Remove: the blocks handed to it and not
// confirmed, in every epoch, go back to their epochs' queues for the
// survivors, and the dead rank is refused from then on (a fenced worker
// that still runs must not take or confirm blocks). Every block is then
// processed exactly once per epoch by a live worker or confirmed by one
// before it died, provided no live worker is told an epoch is over while
// blocks of it may still come back: Settled says when none can (nothing
// queued, nothing handed out unconfirmed), and the master holds a
// worker's "epoch empty" answer until then. The Assigner is not safe for
// concurrent use; the master owns it.
package assign

import (
	"slices"

	"github.com/flexps/flexps/datastore"
)

// Worker is one worker of the stage reading the input, and the host it runs
// on (compared with datastore.Block.Hosts).
type Worker struct {
	Rank int
	Host string
}

// Assigner hands out blocks per epoch. Create it with New.
type Assigner struct {
	blocks []datastore.Block
	host   map[int]string // rank -> host
	ranks  []int          // sorted
	epochs map[int]*epoch
	gone   map[int]bool // ranks removed (dead)
}

type epoch struct {
	left     []bool // left[i]: block i is still queued
	nLeft    int
	out      map[int][]int // rank -> blocks handed and not confirmed, in hand order
	stats    map[int]*RankStats
	inactive map[int]bool // ranks done with the epoch or released
	holder   []int        // holder[i]: the rank block i was last handed to (-1: none)
}

// RankStats counts what one rank was handed in an epoch. Blocks released
// after the rank died are not counted.
type RankStats struct {
	Blocks      int
	Bytes       int64
	LocalBlocks int
	LocalBytes  int64
	Confirmed   int // blocks confirmed read
}

// Stats is one epoch's progress.
type Stats struct {
	Epoch          int
	PerRank        map[int]RankStats
	Remaining      int   // blocks still queued
	RemainingBytes int64 // bytes still queued
	Outstanding    int   // blocks handed out and not confirmed
}

// LocalFraction is the share of handed-out bytes that were local to the
// worker that got them (0 when nothing was handed out).
func (s Stats) LocalFraction() float64 {
	var local, total int64
	for _, r := range s.PerRank {
		local += r.LocalBytes
		total += r.Bytes
	}
	if total == 0 {
		return 0
	}
	return float64(local) / float64(total)
}

// New returns an Assigner over blocks for workers. Blocks are handed out as
// given (a block listed twice is read twice); a rank listed twice keeps its
// last host.
func New(blocks []datastore.Block, workers []Worker) *Assigner {
	a := &Assigner{
		blocks: slices.Clone(blocks),
		host:   map[int]string{},
		epochs: map[int]*epoch{},
		gone:   map[int]bool{},
	}
	for _, w := range workers {
		if _, dup := a.host[w.Rank]; !dup {
			a.ranks = append(a.ranks, w.Rank)
		}
		a.host[w.Rank] = w.Host
	}
	slices.Sort(a.ranks)
	return a
}

func (a *Assigner) epoch(n int) *epoch {
	e := a.epochs[n]
	if e == nil {
		e = &epoch{
			left:     make([]bool, len(a.blocks)),
			nLeft:    len(a.blocks),
			out:      map[int][]int{},
			stats:    map[int]*RankStats{},
			inactive: map[int]bool{},
			holder:   make([]int, len(a.blocks)),
		}
		for i := range e.left {
			e.left[i] = true
			e.holder[i] = -1
		}
		a.epochs[n] = e
	}
	return e
}

// Next hands rank the next block of epoch; local reports whether the block
// has a replica on rank's host. ok is false when the epoch has no blocks
// left to hand out (blocks may still come back through Release or Remove
// until Settled). A rank not given to New gets blocks without locality; a
// removed rank gets none.
func (a *Assigner) Next(rank int, epoch int) (b datastore.Block, local bool, ok bool) {
	e := a.epoch(epoch)
	if e.nLeft == 0 || a.gone[rank] {
		e.inactive[rank] = true
		return datastore.Block{}, false, false
	}
	delete(e.inactive, rank)
	host := a.host[rank]
	// How many active workers, other than rank, sit on each host.
	others := map[string]int{}
	for _, r := range a.ranks {
		if r != rank && !e.inactive[r] && !a.gone[r] {
			others[a.host[r]]++
		}
	}
	// Affinity: a block this rank read in the previous epoch is likely in
	// its slave's cache of parsed records; prefer it above all.
	var prevHolder []int
	if prev := a.epochs[epoch-1]; prev != nil {
		prevHolder = prev.holder
	}
	best, bestLocal, bestScore, bestAff := -1, false, 0, false
	for i, l := range e.left {
		if !l {
			continue
		}
		blk := a.blocks[i]
		aff := prevHolder != nil && prevHolder[i] == rank
		isLocal := host != "" && slices.Contains(blk.Hosts, host)
		score := 0 // active workers elsewhere that could read blk locally
		for _, h := range blk.Hosts {
			if h != host {
				score += others[h]
			}
		}
		if best >= 0 {
			switch {
			case aff != bestAff:
				if !aff {
					continue
				}
			case isLocal != bestLocal:
				if !isLocal {
					continue
				}
			case score != bestScore:
				if score > bestScore {
					continue
				}
			case blk.Length <= a.blocks[best].Length:
				continue
			}
		}
		best, bestLocal, bestScore, bestAff = i, isLocal, score, aff
	}
	e.left[best] = false
	e.holder[best] = rank
	e.nLeft--
	e.out[rank] = append(e.out[rank], best)
	st := e.rank(rank)
	b = a.blocks[best]
	st.Blocks++
	st.Bytes += b.Length
	if bestLocal {
		st.LocalBlocks++
		st.LocalBytes += b.Length
	}
	return b, bestLocal, true
}

func (e *epoch) rank(r int) *RankStats {
	st := e.stats[r]
	if st == nil {
		st = &RankStats{}
		e.stats[r] = st
	}
	return st
}

// Confirm records that rank has processed b in epoch, so Release will not
// hand it out again; it reports whether b was outstanding for rank (a
// block confirmed twice, never handed to rank, or confirmed by a removed
// rank is not).
func (a *Assigner) Confirm(rank int, epoch int, b datastore.Block) bool {
	e := a.epochs[epoch]
	if e == nil || a.gone[rank] {
		return false
	}
	out := e.out[rank]
	for k, i := range out {
		blk := a.blocks[i]
		if blk.Path == b.Path && blk.Offset == b.Offset && blk.Length == b.Length {
			e.out[rank] = slices.Delete(out, k, k+1)
			e.rank(rank).Confirmed++
			return true
		}
	}
	return false
}

// Abandon confirms every block of epoch handed to rank and not confirmed
// yet: the worker closed its pass early, by choice, so nobody is to wait
// for those blocks or read them again. It returns how many there were.
func (a *Assigner) Abandon(rank int, epoch int) int {
	e := a.epochs[epoch]
	if e == nil || a.gone[rank] {
		return 0
	}
	n := len(e.out[rank])
	delete(e.out, rank)
	e.rank(rank).Confirmed += n
	return n
}

// AbandonAll is Abandon in every epoch: rank's stage function returned,
// so whatever it still held it will not finish, and nobody is to wait.
func (a *Assigner) AbandonAll(rank int) int {
	n := 0
	for e := range a.epochs {
		n += a.Abandon(rank, e)
	}
	return n
}

// Remove is the recovery step after rank died: its unconfirmed blocks of
// every epoch go back to their queues (Release), and the rank gets and
// confirms no block from then on. It returns the blocks released, by
// epoch.
func (a *Assigner) Remove(rank int) map[int][]datastore.Block {
	out := map[int][]datastore.Block{}
	for n := range a.epochs {
		if b := a.Release(rank, n); len(b) > 0 {
			out[n] = b
		}
	}
	a.gone[rank] = true
	return out
}

// Settled reports whether epoch is over for good: no block is queued and
// none is handed out unconfirmed, so none can come back.
func (a *Assigner) Settled(epoch int) bool { return a.SettledBut(epoch, nil) }

// Began reports whether a block of epoch was asked for.
func (a *Assigner) Began(epoch int) bool { return a.epochs[epoch] != nil }

// SettledBut is Settled not counting the unconfirmed blocks of the ranks
// in skip (workers that wait at a barrier, which finish nothing before
// the others arrive there).
func (a *Assigner) SettledBut(epoch int, skip map[int]bool) bool {
	e := a.epochs[epoch]
	if e == nil {
		return len(a.blocks) == 0
	}
	if e.nLeft > 0 {
		return false
	}
	for rank, out := range e.out {
		if len(out) > 0 && !skip[rank] {
			return false
		}
	}
	return true
}

// Release returns the blocks handed to rank in epoch that it did not
// Confirm, in the order they were handed out, and puts them back in the
// epoch's queue: the recovery step after a worker dies. The rank counts as
// inactive until it calls Next again, and its stats no longer include the
// released blocks.
func (a *Assigner) Release(rank int, epoch int) []datastore.Block {
	e := a.epochs[epoch]
	if e == nil {
		return nil
	}
	e.inactive[rank] = true
	out := e.out[rank]
	delete(e.out, rank)
	if len(out) == 0 {
		return nil
	}
	st := e.rank(rank)
	host := a.host[rank]
	res := make([]datastore.Block, 0, len(out))
	for _, i := range out {
		b := a.blocks[i]
		e.left[i] = true
		e.nLeft++
		st.Blocks--
		st.Bytes -= b.Length
		if host != "" && slices.Contains(b.Hosts, host) {
			st.LocalBlocks--
			st.LocalBytes -= b.Length
		}
		res = append(res, b)
	}
	return res
}

// Stats reports epoch's progress. An epoch not used yet has every block
// remaining.
func (a *Assigner) Stats(epoch int) Stats {
	s := Stats{Epoch: epoch, PerRank: map[int]RankStats{}}
	e := a.epochs[epoch]
	for i, b := range a.blocks {
		if e == nil || e.left[i] {
			s.Remaining++
			s.RemainingBytes += b.Length
		}
	}
	if e == nil {
		return s
	}
	for r, st := range e.stats {
		s.PerRank[r] = *st
	}
	for _, out := range e.out {
		s.Outstanding += len(out)
	}
	return s
}
