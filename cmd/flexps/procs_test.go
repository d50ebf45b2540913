package main

import (
	"strings"
	"testing"
)

func TestSlaveProcs(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMAXPROCS" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		name               string
		gomaxprocs         string
		procs, slots, cpus int
		want               int
		from               string
	}{
		{"slots below the CPUs", "", 0, 1, 2, 1, "slots = 1"},
		{"slots above the CPUs", "", 0, 8, 2, 2, "slots = 8"},
		{"default slots", "", 0, 0, 16, 2, "slots = 2"},
		{"default slots on one CPU", "", 0, 0, 1, 1, "slots = 2"},
		{"procs set", "", 3, 1, 2, 3, "[slave] procs"},
		{"the environment wins", "4", 3, 1, 2, 0, "environment"},
	} {
		n, from := slaveProcs(env(c.gomaxprocs), c.procs, c.slots, c.cpus)
		if n != c.want || !strings.Contains(from, c.from) {
			t.Errorf("%s: %d from %q, want %d from %q", c.name, n, from, c.want, c.from)
		}
	}
}

// The master's "slaves connect with" line names the cluster TOML it was
// started with: it said only --nats URL, and a slave started so used the
// cluster "default" and no credentials, and was refused or joined no master.
func TestSlaveHintNamesTheConfig(t *testing.T) {
	for _, tc := range []struct{ config, url, want string }{
		{"", "nats://127.0.0.1:4222", "flexps slave --nats nats://127.0.0.1:4222"},
		{"configs/cluster.toml", "nats://127.0.0.1:24222", "flexps slave --config configs/cluster.toml --nats nats://127.0.0.1:24222"},
	} {
		if got := slaveHint(tc.config, tc.url); got != tc.want {
			t.Errorf("slaveHint(%q, %q) = %q, want %q", tc.config, tc.url, got, tc.want)
		}
	}
}
