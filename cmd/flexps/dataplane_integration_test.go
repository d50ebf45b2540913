package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/clustertest"
)

// LR on a master and two slave processes gives the same model quality
// whether KV traffic goes over the direct TCP data plane or through NATS,
// and with tcp it really goes direct: every slave sent its remote KV
// requests over connections (authenticated with keys fetched over the
// nkey-secured bus), none over the bus.
func TestClusterLROverTCPMatchesNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	train, test := lrData(t, dir, 12000, 2000)
	command, env := cli()
	acc := map[string]float64{}
	for _, tr := range []string{"nats", "tcp"} {
		// A generous dead_after: heartbeats are not under test, and a
		// loaded machine must not fail the run for them.
		c := clustertest.Start(t, clustertest.Options{Command: command, Env: env, Slaves: 2, Slots: 2, DeadAfter: "15s",
			ExtraConfig: "[kv]\ntransport = \"" + tr + "\"\n"})
		model := filepath.Join(dir, tr+".model")
		job := lrJob(t, dir, tr, train, test, model, 2000, 4, 3, "bsp")
		r := c.Run(3*time.Minute, "submit", job)
		if r.Exit != 0 {
			t.Fatalf("%s: flexps submit failed (%d):\n%s\n%s", tr, r.Exit, r.Stdout, r.Stderr)
		}
		acc[tr] = accuracy(t, model, test)
		c.Stop() // the slaves log their data-plane counters as they close
		for _, s := range c.Slaves {
			direct, bus, found := dataPlaneCounters(t, s.Output())
			switch {
			case tr == "nats" && found:
				t.Fatalf("%s opened a direct data plane with transport = nats", s.Name)
			case tr == "tcp" && (!found || direct == 0 || bus != 0):
				t.Fatalf("%s over tcp: found %v, %d direct sends, %d over the bus; want all direct:\n%s", s.Name, found, direct, bus, s.Output())
			}
			if strings.Contains(s.Output(), "cannot reach this peer's data plane") {
				t.Fatalf("%s fell back to NATS:\n%s", s.Name, s.Output())
			}
		}
	}
	t.Logf("test accuracy: nats %.4f, tcp %.4f", acc["nats"], acc["tcp"])
	if acc["tcp"] < 0.75 {
		t.Fatalf("accuracy over tcp too low: %.4f", acc["tcp"])
	}
	if d := acc["tcp"] - acc["nats"]; d > 0.02 || d < -0.02 {
		t.Fatalf("accuracy over tcp %.4f differs from nats %.4f by more than 2 points", acc["tcp"], acc["nats"])
	}
}

// dataPlaneCounters reads the counters a slave logs when its direct data
// plane closes.
func dataPlaneCounters(t *testing.T, log string) (direct, bus uint64, found bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "direct data plane closed") {
			continue
		}
		var rec struct {
			Direct uint64 `json:"direct_sends"`
			Bus    uint64 `json:"bus_sends"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("malformed log line %q: %v", line, err)
		}
		return rec.Direct, rec.Bus, true
	}
	return 0, 0, false
}
