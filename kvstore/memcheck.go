package kvstore

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// MaxSize bounds a table's key space. Sizes come from user files, and a
// negative size in TOML wraps around to nearly 2^64.
const MaxSize = 1 << 62

// elemBytes is the size of one stored value.
func (s TableSpec) elemBytes() uint64 {
	if s.DType == Float32 {
		return 4
	}
	return 8
}

// denseHeld is the bytes of the dense value arrays this process's live
// shards and local tables hold (counted at their allocation, released by
// a cleanup when the array is collected). Go maps a fresh large array
// without touching it, so the kernel's MemAvailable does not count what
// a table created a moment ago will take once trained on: without this,
// every shard was checked alone, and two tables of 16 GiB, or two
// in-process slaves' halves of one 32 GiB table, were all accepted on a
// host with 22 GiB available, to be killed by the kernel as they filled.
var denseHeld atomic.Int64

// memAvailableFunc reports the host's available memory (a test hook).
var memAvailableFunc = memAvailable

// checkAlloc refuses to allocate bytes for what when this host does not
// have them: a slave must answer with an error naming the table, not die
// in makeslice or be killed by the kernel. The bytes dense tables of this
// process hold but may not have touched yet (at most what they hold
// beyond the process's resident size) count as taken.
func checkAlloc(what string, keys uint64, width int, elemBytes uint64) error {
	if width < 1 || keys > uint64(maxInt)/uint64(width)/elemBytes {
		return fmt.Errorf("%w: %s: %d x %d values do not fit in memory", ErrBadSpec, what, keys, width)
	}
	need := keys * uint64(width) * elemBytes
	avail, ok := memAvailableFunc()
	if !ok {
		return nil
	}
	promised := untouchedHeld()
	if need+promised > avail {
		// Tables of ended tasks may be garbage not yet collected, or
		// collected and not yet returned to the kernel.
		settleHeld()
		if avail, ok = memAvailableFunc(); !ok {
			return nil
		}
		promised = untouchedHeld()
	}
	if need+promised > avail {
		if promised > 0 {
			return fmt.Errorf("%w: %s needs %s of memory, this host has %s available of which %s are promised to tables this process already holds",
				ErrBadSpec, what, humanBytes(need), humanBytes(avail), humanBytes(promised))
		}
		return fmt.Errorf("%w: %s needs %s of memory, this host has %s available", ErrBadSpec, what, humanBytes(need), humanBytes(avail))
	}
	return nil
}

// holdDense counts vals, a dense table's new value array, in denseHeld
// until it is collected.
func holdDense[T any](vals []T, elemBytes uint64) {
	if len(vals) == 0 {
		return
	}
	n := int64(uint64(len(vals)) * elemBytes)
	denseHeld.Add(n)
	runtime.AddCleanup(&vals[0], func(n int64) { denseHeld.Add(-n) }, n)
}

// settleHeld collects garbage, returns the freed pages to the kernel (a
// table of an ended task, once collected, stays resident in Go's heap
// until the scavenger gets to it, and the kernel counts it as taken), and
// gives the cleanups of collected arrays (which run on their own
// goroutine) up to 100ms to count them out. Only a check about to refuse
// pays it.
func settleHeld() {
	debug.FreeOSMemory()
	prev := denseHeld.Load()
	for i := 0; i < 20; i++ {
		time.Sleep(5 * time.Millisecond)
		cur := denseHeld.Load()
		if cur == prev && i >= 1 {
			return
		}
		prev = cur
	}
}

// untouchedHeld bounds the bytes of denseHeld not yet resident: what it
// holds beyond the process's resident size.
func untouchedHeld() uint64 {
	held := denseHeld.Load()
	if held <= 0 {
		return 0
	}
	rss, ok := residentBytes()
	if !ok {
		return uint64(held)
	}
	return uint64(max(held-int64(rss), 0))
}

// residentBytes is this process's VmRSS (Linux).
func residentBytes() (uint64, bool) {
	return procField("/proc/self/status", "VmRSS:")
}

// memAvailable is MemAvailable from /proc/meminfo (Linux); ok is false
// where it is unknown.
func memAvailable() (uint64, bool) { return procField("/proc/meminfo", "MemAvailable:") }

// procField reads a "Name: N kB" line of a /proc file, in bytes.
func procField(path, name string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == name {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}

func humanBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit && exp < 5; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
