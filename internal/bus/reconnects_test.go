package bus_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/nats-io/nats.go"
)

// A request waiting when its connection loses the server (which the
// answering side got, and will never answer) ends with resend once the
// connection is back on the restarted server, instead of waiting out its
// timeout; the connection's own reconnect handler (the log) still runs;
// Within says how recent the reconnection is; asked again, the request is
// answered.
func TestRequestAcrossAReconnectionSaysResend(t *testing.T) {
	b := startRestartable(t, "asker")
	nc := b.nc
	other, err := bus.Connect(bus.Options{URL: b.srv.URL(), Name: "answerer"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var answer atomic.Bool
	sub, err := other.Subscribe("q", func(msg *nats.Msg) {
		if answer.Load() {
			msg.Respond([]byte("ok"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	r := bus.WatchReconnects(nc)
	if r.Within(time.Hour) {
		t.Fatal("Within before any reconnection")
	}
	type result struct {
		resend bool
		err    error
	}
	done := make(chan result, 1)
	go func() {
		_, resend, err := r.Request(context.Background(), "q", nil, time.Minute)
		done <- result{resend, err}
	}()
	time.Sleep(100 * time.Millisecond) // the request reached the answerer, who drops it
	b.srv.Shutdown()
	b.start()
	select {
	case res := <-done:
		if !res.resend || res.err == nil {
			t.Fatalf("request across the reconnection: resend %v, err %v", res.resend, res.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request waited on after the reconnection")
	}
	if !r.Within(time.Minute) {
		t.Fatal("Within after a reconnection")
	}
	waitFor(t, &b.log, "reconnected to NATS")
	// Asked again once both sides are back, the request is answered.
	answer.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg, resend, err := r.Request(context.Background(), "q", nil, time.Second)
		if err == nil && !resend && string(msg.Data) == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("asked again: %v (resend %v)", err, resend)
		}
		if err != nil && !strings.Contains(err.Error(), "no responders") && !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("asked again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
