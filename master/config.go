// Package master runs a flexps cluster's control plane: slaves join and
// send heartbeats (a slave that stops is declared dead by the failure
// detector in master/membership), tasks are submitted over NATS, the
// TaskScheduler policy (package scheduler) decides when and where each
// stage runs, the FileAssigner (master/assign) hands input blocks to
// workers as they ask, and each task is driven by one goroutine that
// creates its tables, runs its stages one after another and writes the
// model. A stage's run is the pure state machine master/lifecycle.Stage:
// this package only turns NATS messages (worker events, barrier arrivals),
// timer ticks, cancellation and slave deaths into its events and carries
// out its actions (start or stop workers on slaves, publish task events,
// answer barrier waiters). Every timestamp comes from Config.Now. A task's
// first stage is queued at submission, so policies see tasks in
// submission order. The master runs no user code.
package master

import (
	"fmt"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/hdfs"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/master/membership"
	"github.com/rs/zerolog"
)

// Config configures a master. The zero value of each field means its
// default.
type Config struct {
	Cluster        string        // subject prefix flexps.<cluster>; default "default"
	Heartbeat      time.Duration // slaves beat at this interval; default 300ms
	DeadAfter      time.Duration // no heartbeat for this long = dead (the failure timeout); default 3 intervals
	Policy         string        // sequential (default), greedy, prioritized
	Aging          float64       // prioritized: priority points per second waited; default 1
	RequestTimeout time.Duration // control requests to slaves; default 10s
	KVTimeout      time.Duration // data-plane round trips (model dump); default 60s
	BlockSize      int64         // bytes per block of local files; default 8 MiB
	HDFS           hdfs.Config
	Paths          *datastore.PathPolicy // where tasks may read and write (nil: anywhere)
	KeepTasks      int                   // ended tasks kept for status, oldest dropped first; default 1000
	KeepTasksFor   time.Duration         // ended tasks are also dropped this long after they ended (0: never by age)
	// StateDir keeps a record of each queued or running task that has a
	// [checkpoint] dir, so a restarted master resumes it from its last
	// checkpoint; empty: off (flexps run's in-process master).
	StateDir string
	// DefaultReplicas is the replicas of a table that sets none, capped at
	// the slaves holding the task's tables; default 2 (a slave's death
	// loses nothing). flexps run's in-process cluster uses 1: its slaves
	// share one process, so a replica would protect nothing.
	DefaultReplicas int
	// ExternalBus: the bus is an external NATS server the master does not
	// own. Told to clients in the status answer: when such a bus is
	// lost, the master and its tasks wait for it, so a follower waits
	// longer before it gives up (with an embedded bus a lost bus is a
	// dead master).
	ExternalBus bool
	Log         zerolog.Logger
	Now         func() time.Time // injected clock: failure detector, scheduler, task and stage timestamps; default time.Now
}

func (c *Config) defaults() error {
	if c.Cluster == "" {
		c.Cluster = "default"
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = membership.DefaultHeartbeat
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = 3 * c.Heartbeat
	}
	if c.DeadAfter < 2*c.Heartbeat {
		return fmt.Errorf("master: failure_timeout (%v) must be at least twice the heartbeat interval (%v)", c.DeadAfter, c.Heartbeat)
	}
	if c.Policy == "" {
		c.Policy = "sequential"
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.KVTimeout <= 0 {
		c.KVTimeout = 60 * time.Second
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 8 << 20
	}
	if c.KeepTasks <= 0 {
		c.KeepTasks = 1000
	}
	if c.DefaultReplicas <= 0 {
		c.DefaultReplicas = 2
	}
	if c.DefaultReplicas > kvstore.MaxReplicas {
		return fmt.Errorf("master: default replicas %d is above %d", c.DefaultReplicas, kvstore.MaxReplicas)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}
