package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/rs/zerolog"
)

// Local starts an in-process cluster (engine.StartLocal: embedded NATS, a
// master and slaves with slots each, its log discarded) and returns it
// with a context that ends after timeout; both end with the test.
func Local(t testing.TB, slaves, slots int, timeout time.Duration) (context.Context, *engine.Local) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: slaves, Slots: slots, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	return ctx, local
}
