package bus

import "fmt"

// Subjects names every subject of one cluster.
type Subjects struct {
	Prefix string // "flexps.<cluster>"
}

// For returns the subjects of cluster name.
func For(cluster string) Subjects {
	if cluster == "" {
		cluster = "default"
	}
	return Subjects{Prefix: "flexps." + cluster}
}

// Master control subjects (JSON request-reply unless noted).
func (s Subjects) Join() string        { return s.Prefix + ".master.join" }
func (s Subjects) Heartbeat() string   { return s.Prefix + ".master.hb" } // publish
func (s Subjects) Submit() string      { return s.Prefix + ".master.submit" }
func (s Subjects) Status() string      { return s.Prefix + ".master.status" }
func (s Subjects) Cancel() string      { return s.Prefix + ".master.cancel" }
func (s Subjects) Event() string       { return s.Prefix + ".master.event" } // publish, from workers
func (s Subjects) Block() string       { return s.Prefix + ".master.block" }
func (s Subjects) Barrier() string     { return s.Prefix + ".master.barrier" }
func (s Subjects) MasterAlive() string { return s.Prefix + ".master.alive" } // publish, from the master
func (s Subjects) Leave() string       { return s.Prefix + ".master.leave" } // publish, from a slave shutting down

// Membership is where the master publishes the membership view (epoch and
// live slaves) to slaves and clients.
func (s Subjects) Membership() string { return s.Prefix + ".membership" }

// SlaveCtl is a slave's control subject (JSON request-reply).
func (s Subjects) SlaveCtl(slave string) string {
	return fmt.Sprintf("%s.slave.%s.ctl", s.Prefix, slave)
}

// SlaveKV is a slave's data-plane subject (binary codec).
func (s Subjects) SlaveKV(slave string) string { return fmt.Sprintf("%s.slave.%s.kv", s.Prefix, slave) }

// SlaveDP is where a slave's direct data-plane endpoint answers discovery
// (its TCP address and the key that authenticates connections to it; see
// kvstore/transport.TCP). Only roles that may use the slaves' subjects can
// ask.
func (s Subjects) SlaveDP(slave string) string { return fmt.Sprintf("%s.slave.%s.dp", s.Prefix, slave) }

// TaskEvents is where the master publishes a task's status changes.
func (s Subjects) TaskEvents(task string) string {
	return fmt.Sprintf("%s.task.%s.events", s.Prefix, task)
}

// SlaveXfer is where a slave serves a retained model to the next stage's
// slave (direct model transfer; binary codec).
func (s Subjects) SlaveXfer(slave string) string {
	return fmt.Sprintf("%s.slave.%s.xfer", s.Prefix, slave)
}

// SlaveModelInfo answers what a slave retains for a task (JSON).
func (s Subjects) SlaveModelInfo(slave string) string {
	return fmt.Sprintf("%s.slave.%s.modelinfo", s.Prefix, slave)
}
