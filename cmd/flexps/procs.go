package main

import (
	"runtime"
	"strconv"
)

// slaveProcs is the GOMAXPROCS a `flexps slave` process runs with, and
// where it comes from: the GOMAXPROCS environment variable when set (then
// n is 0: leave the runtime alone), else [slave] procs when set, else the
// slave's worker slots (default 2), at most cpus (the runtime's default,
// which follows the machine and the container's CPU limit). A slave given
// N slots is given N cores: several slaves sharing a machine that each ran
// a scheduler over all of it kept their idle threads spinning on the
// cores the others needed (LR, 2 slave processes on 2 cores: 1.2x the
// samples/s with one core each).
func slaveProcs(getenv func(string) string, procs, slots, cpus int) (n int, from string) {
	switch {
	case getenv("GOMAXPROCS") != "":
		return 0, "the GOMAXPROCS environment variable"
	case procs > 0:
		return procs, "[slave] procs"
	}
	if slots <= 0 {
		slots = 2
	}
	return max(1, min(slots, cpus)), "[slave] slots = " + strconv.Itoa(slots) + ", at most the CPUs ([slave] procs overrides)"
}

// setSlaveProcs applies slaveProcs and returns the GOMAXPROCS in force
// and where it came from.
func setSlaveProcs(getenv func(string) string, procs, slots int) (int, string) {
	n, from := slaveProcs(getenv, procs, slots, runtime.GOMAXPROCS(0))
	if n > 0 {
		runtime.GOMAXPROCS(n)
	}
	return runtime.GOMAXPROCS(0), from
}
