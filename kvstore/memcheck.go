package kvstore

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
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

// checkAlloc refuses to allocate bytes for what when this host does not
// have them: a slave must answer with an error naming the table, not die
// in makeslice or be killed by the kernel.
func checkAlloc(what string, keys uint64, width int, elemBytes uint64) error {
	if width < 1 || keys > uint64(maxInt)/uint64(width)/elemBytes {
		return fmt.Errorf("%w: %s: %d x %d values do not fit in memory", ErrBadSpec, what, keys, width)
	}
	need := keys * uint64(width) * elemBytes
	if avail, ok := memAvailable(); ok && need > avail {
		return fmt.Errorf("%w: %s needs %s of memory, this host has %s available", ErrBadSpec, what, humanBytes(need), humanBytes(avail))
	}
	return nil
}

// memAvailable is MemAvailable from /proc/meminfo (Linux); ok is false
// where it is unknown.
func memAvailable() (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
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
