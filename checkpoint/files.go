package checkpoint

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

const (
	namePrefix = "ckpt-"
	nameSuffix = ".flexps"
	// pattern lists a directory's checkpoints; temporary files being
	// written start with '.' and never match.
	pattern = namePrefix + "*" + nameSuffix
)

// Name is the file name of checkpoint seq.
func Name(seq int) string { return fmt.Sprintf("%s%06d%s", namePrefix, seq, nameSuffix) }

// FileDir is the directory of a checkpoint file's path (DIR/ckpt-NNNNNN.flexps,
// local or an hdfs:// URL); ok is false for any other path, a directory.
// A task resumed from one file (an older checkpoint than the newest)
// writes its own checkpoints into that directory.
func FileDir(p string) (dir string, ok bool) {
	if _, ok := ParseName(p); !ok {
		return "", false
	}
	switch i := strings.LastIndexByte(p, '/'); {
	case i < 0:
		return ".", true
	case i == 0:
		return "/", true
	default:
		return p[:i], true
	}
}

// ParseName returns the sequence number of a checkpoint file name (the
// last element of p), and false for any other name.
func ParseName(p string) (int, bool) {
	base := path.Base(p)
	num, ok := strings.CutPrefix(base, namePrefix)
	if !ok {
		return 0, false
	}
	num, ok = strings.CutSuffix(num, nameSuffix)
	if !ok || num == "" {
		return 0, false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// Entry is a checkpoint file found in a directory.
type Entry struct {
	Path string
	Seq  int
}

// Newest orders the checkpoint files among paths newest first (highest
// sequence number); other names are ignored, and a sequence number seen
// twice (the same file listed twice) counts once.
func Newest(paths []string) []Entry {
	var out []Entry
	for _, p := range paths {
		if seq, ok := ParseName(p); ok {
			out = append(out, Entry{Path: p, Seq: seq})
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := cmp.Compare(b.Seq, a.Seq); c != 0 {
			return c
		}
		return cmp.Compare(a.Path, b.Path)
	})
	return slices.CompactFunc(out, func(a, b Entry) bool { return a.Seq == b.Seq })
}

// Stale are the checkpoint files among paths beyond the newest keep: the
// ones to delete after writing a new checkpoint.
func Stale(paths []string, keep int) []Entry {
	all := Newest(paths)
	if keep < 1 {
		keep = 1
	}
	if len(all) <= keep {
		return nil
	}
	return all[keep:]
}

// NextSeq is the sequence number after the highest among paths (1 for
// none), so a new checkpoint is always the newest.
func NextSeq(paths []string) int {
	all := Newest(paths)
	if len(all) == 0 {
		return 1
	}
	return all[0].Seq + 1
}

// Pick chooses the checkpoint to resume from: the newest entry whose load
// succeeds. load is called newest first and stops at the first success;
// every failure before it is returned as a skipped file with its error,
// so the caller can warn naming each. It returns -1 when none loads.
func Pick(entries []Entry, load func(Entry) error) (chosen int, skipped []Skipped) {
	for i, e := range entries {
		err := load(e)
		if err == nil {
			return i, skipped
		}
		skipped = append(skipped, Skipped{Entry: e, Err: err})
	}
	return -1, skipped
}

// Skipped is a checkpoint file that could not be used, and why.
type Skipped struct {
	Entry
	Err error
}

// join puts a file name under dir, for local paths and URLs alike.
func join(dir, name string) string {
	return strings.TrimRight(dir, "/") + "/" + name
}
