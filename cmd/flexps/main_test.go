package main

import (
	"os"
	"testing"

	"github.com/flexps/flexps/internal/clustertest"
	"go.uber.org/goleak"
)

// TestMain lets the test binary play the flexps CLI when re-executed by
// the cluster harness, so integration tests need no separate build.
func TestMain(m *testing.M) {
	if os.Getenv(clustertest.ReexecEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stderr))
	}
	if addr := os.Getenv(clustertest.NATSEnv); addr != "" {
		os.Exit(clustertest.ServeNATS(addr))
	}
	goleak.VerifyTestMain(m,
		// The progress bar library and the signal handler keep these.
		goleak.IgnoreTopFunction("os/signal.signal_recv"),
		goleak.IgnoreTopFunction("os/signal.loop"),
	)
}

// cli is the command line that plays flexps in subprocesses.
func cli() ([]string, []string) {
	return []string{os.Args[0]}, []string{clustertest.ReexecEnv + "=1"}
}
