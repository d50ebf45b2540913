package tasks

import (
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Checkpoint is a task's [checkpoint] table: where and how often the
// master snapshots the task's tables and progress, so that `flexps run
// --resume DIR` (or `flexps submit --resume DIR`) continues it after a
// Ctrl-C or a crash. Checkpoints are taken at epoch boundaries of ps
// stages (every worker waits at the end of its epoch while the master
// reads the tables) and between stages.
type Checkpoint struct {
	// Every is how often: a duration ("30s", "10m") or a number of epochs
	// ("2 epochs", "1 epoch"). Empty with Dir set: DefaultCheckpointEvery.
	Every string `json:"every,omitempty" toml:"every"`
	// Dir is a local directory or an hdfs:// URL; it must be inside the
	// cluster's [data] allowed_paths when those are set. Empty: off.
	Dir string `json:"dir,omitempty" toml:"dir"`
	// Keep is how many checkpoints are kept (default 2: the newest, and
	// the one before it in case the newest is found corrupt).
	Keep int `json:"keep,omitempty" toml:"keep"`
}

// DefaultCheckpointEvery is Every when only Dir is set.
const DefaultCheckpointEvery = "5m"

// DefaultCheckpointKeep is Keep when unset.
const DefaultCheckpointKeep = 2

// Enabled reports whether the task takes checkpoints.
func (c Checkpoint) Enabled() bool { return c.Dir != "" }

// Schedule parses Every: exactly one of epochs and period is > 0.
func (c Checkpoint) Schedule() (epochs int, period time.Duration, err error) {
	s := strings.TrimSpace(c.Every)
	if s == "" {
		s = DefaultCheckpointEvery
	}
	if n, unit, ok := strings.Cut(s, " "); ok {
		unit = strings.TrimSpace(unit)
		if unit != "epoch" && unit != "epochs" {
			return 0, 0, fmt.Errorf("checkpoint every %q: want a duration (\"30s\") or \"N epochs\"", c.Every)
		}
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 {
			return 0, 0, fmt.Errorf("checkpoint every %q: the number of epochs must be an integer >= 1", c.Every)
		}
		return k, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, 0, fmt.Errorf("checkpoint every %q: want a duration (\"30s\") or \"N epochs\"", c.Every)
	}
	if d < time.Second {
		return 0, 0, fmt.Errorf("checkpoint every %q: at least 1s (each checkpoint pauses the workers)", c.Every)
	}
	return 0, d, nil
}

// KeepOrDefault is Keep with its default.
func (c Checkpoint) KeepOrDefault() int {
	if c.Keep <= 0 {
		return DefaultCheckpointKeep
	}
	return c.Keep
}

func (c Checkpoint) validate() error {
	if c.Dir == "" {
		if c.Every != "" || c.Keep != 0 {
			return fmt.Errorf("checkpoint: every and keep need a dir")
		}
		return nil
	}
	if c.Keep < 0 {
		return fmt.Errorf("checkpoint keep: must be >= 1 (0 or unset: %d), got %d", DefaultCheckpointKeep, c.Keep)
	}
	_, _, err := c.Schedule()
	return err
}

// sameLocation reports whether two paths name one place: local paths
// cleaned, URLs (hdfs://host:port/p) with their paths cleaned.
func sameLocation(a, b string) bool { return cleanLocation(a) == cleanLocation(b) }

func cleanLocation(p string) string {
	if scheme, rest, ok := strings.Cut(p, "://"); ok {
		auth, rest, _ := strings.Cut(rest, "/")
		return scheme + "://" + auth + path.Clean("/"+rest)
	}
	return filepath.Clean(p)
}

// readsCheckpoints reports whether an input path lists the files a
// checkpoint dir holds: the dir itself, or a glob of its files that a
// checkpoint's name (ckpt-NNNNNN.flexps) matches.
func readsCheckpoints(input, dir string) bool {
	if sameLocation(input, dir) {
		return true
	}
	in := cleanLocation(input)
	i := strings.LastIndexByte(in, '/')
	if i < 0 {
		return false
	}
	base := in[i+1:]
	ok, _ := path.Match(base, "ckpt-000001.flexps")
	return ok && strings.ContainsAny(base, "*?[") && sameLocation(in[:i+1], dir)
}
