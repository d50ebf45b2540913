package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/rs/zerolog"
)

// A slave started before its bus waits up to join_timeout for it; Ctrl-C
// (its context) ended that wait only once the timeout ran out: flexps
// slave ignored the first Ctrl-C for 30 s and then exited 1, "NATS server
// unreachable", instead of 130.
func TestStartSlaveStopsWaitingForTheBusWhenCancelled(t *testing.T) {
	cfg := engine.ClusterConfig{NATS: engine.NATSConfig{URL: "nats://" + freeAddr(t)}}
	cfg.Slave.ID, cfg.Slave.JoinTimeout = "s1", engine.Duration(30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	n, err := engine.StartSlave(ctx, cfg, zerolog.Nop())
	if err == nil {
		n.Close()
		t.Fatal("the slave joined a bus that is not there")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("StartSlave returned %v after it was cancelled, want within about a second", took-300*time.Millisecond)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want it to wrap context.Canceled", err)
	}
}
