// Package engine starts flexps clusters and talks to them. StartLocal runs
// an embedded NATS server, a master and N slaves in this process (the
// `flexps run` mode); StartMaster and StartSlave start one role each for a
// real cluster; a Client submits tasks to a running master and follows them
// to the end. A Go program that registers its own stage functions uses the
// same calls: SubmitAndWait on a Client, or StartSlave when started with a
// slave role.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/master"
	"github.com/flexps/flexps/slave"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// DefaultListen is where a cluster master's embedded NATS server listens.
const DefaultListen = "127.0.0.1:4222"

func (c *ClusterConfig) masterConfig(log zerolog.Logger) master.Config {
	return master.Config{
		Cluster: c.Cluster, Heartbeat: time.Duration(c.Master.Heartbeat), DeadAfter: time.Duration(c.Master.DeadAfter),
		Policy: c.Master.Policy, Aging: c.Master.Aging, RequestTimeout: time.Duration(c.Master.RequestTimeout),
		KVTimeout: time.Duration(c.Slave.KVTimeout), BlockSize: int64(c.Data.BlockSize), HDFS: c.HDFSConfig(), Log: log,
	}
}

func (c *ClusterConfig) slaveConfig(log zerolog.Logger) slave.Config {
	return slave.Config{
		Cluster: c.Cluster, ID: c.Slave.ID, Host: c.Slave.Host, Slots: c.Slave.Slots, JoinTimeout: time.Duration(c.Slave.JoinTimeout),
		KVTimeout: time.Duration(c.Slave.KVTimeout), KVWindow: c.Slave.KVWindow, ReadBuffer: int64(c.Data.ReadBuffer),
		ReadProducers: c.Data.ReadProducers, DataCache: int64(c.Data.Cache), HDFS: c.HDFSConfig(), Log: log,
	}
}

func (c *ClusterConfig) busOptions(name string) bus.Options {
	n := c.NATS
	return bus.Options{URL: n.URL, Name: name, User: n.User, Password: n.Password, Token: n.Token,
		CredsFile: n.CredsFile, CAFile: n.CAFile, CertFile: n.CertFile, KeyFile: n.KeyFile, ConnectTimeout: time.Duration(n.Timeout)}
}

// Bounds on what one process starts: each slave of a local cluster is a
// full slave (its own connection, shards and readers), and each slot a
// worker goroutine with its own buffers.
const (
	MaxLocalSlaves = 256
	MaxSlots       = 1024
)

// Local is an in-process cluster: embedded NATS without a port, a master
// and N slaves, each with its own connection as if they were processes.
type Local struct {
	*Client
	srv    *bus.Embedded
	master *master.Master
	slaves []*slave.Slave
	conns  []*nats.Conn
}

// LocalOptions size a local cluster.
type LocalOptions struct {
	Slaves int // default 2
	Slots  int // per slave; default 2
	Config ClusterConfig
	Log    zerolog.Logger
}

// StartLocal starts an in-process cluster and waits until every slave has
// joined.
func StartLocal(ctx context.Context, o LocalOptions) (l *Local, err error) {
	if o.Slaves <= 0 {
		o.Slaves = 2
	}
	if o.Slots <= 0 {
		o.Slots = 2
	}
	if o.Slaves > MaxLocalSlaves {
		return nil, fmt.Errorf("local cluster: %d slaves, at most %d in one process (a larger cluster runs `flexps master` and `flexps slave` processes)", o.Slaves, MaxLocalSlaves)
	}
	if o.Slots > MaxSlots {
		return nil, fmt.Errorf("local cluster: %d slots per slave, at most %d", o.Slots, MaxSlots)
	}
	cfg := o.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{})
	if err != nil {
		return nil, err
	}
	// Not the named result: "return nil, err" sets that to nil before the
	// deferred cleanup runs.
	started := &Local{srv: srv}
	l = started
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	conn := func(name string) (*nats.Conn, error) {
		nc, err := srv.Connect(bus.Options{Name: name})
		if err == nil {
			l.conns = append(l.conns, nc)
		}
		return nc, err
	}
	mc, err := conn("flexps-master")
	if err != nil {
		return nil, err
	}
	l.master, err = master.New(mc, cfg.masterConfig(o.Log))
	if err != nil {
		return nil, err
	}
	if err := l.master.Start(ctx); err != nil {
		return nil, err
	}
	for i := 0; i < o.Slaves; i++ {
		sc, err := conn(fmt.Sprintf("flexps-slave-%d", i))
		if err != nil {
			return nil, err
		}
		scfg := cfg.slaveConfig(o.Log)
		scfg.ID, scfg.Slots = fmt.Sprintf("slave-%d", i), o.Slots
		s := slave.New(sc, scfg)
		if err := s.Start(ctx); err != nil {
			return nil, err
		}
		l.slaves = append(l.slaves, s)
	}
	cc, err := conn("flexps-client")
	if err != nil {
		return nil, err
	}
	l.Client = NewClient(cc, cfg.Cluster)
	return l, nil
}

// Close stops everything in reverse order.
func (l *Local) Close() {
	if l == nil {
		return
	}
	for _, s := range l.slaves {
		s.Close()
	}
	if l.master != nil {
		l.master.Close()
	}
	for _, nc := range l.conns {
		nc.Close()
	}
	if l.srv != nil {
		l.srv.Shutdown()
	}
}

// MasterNode is a cluster master process's parts.
type MasterNode struct {
	Master *master.Master
	Server *bus.Embedded // nil with an external NATS
	URL    string        // where slaves and clients connect
	nc     *nats.Conn
}

// StartMaster starts a master: with an embedded NATS server listening on
// cfg.NATS.Listen when cfg.NATS.URL is empty, else on the external bus.
func StartMaster(ctx context.Context, cfg ClusterConfig, log zerolog.Logger) (*MasterNode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &MasterNode{}
	var nc *nats.Conn
	var err error
	if cfg.NATS.URL == "" {
		listen := cfg.NATS.Listen
		if listen == "" {
			listen = DefaultListen
		}
		n.Server, err = bus.StartEmbedded(bus.EmbeddedOptions{Listen: listen, User: cfg.NATS.User, Password: cfg.NATS.Password, Token: cfg.NATS.Token})
		if err != nil {
			return nil, err
		}
		n.URL = n.Server.URL()
		nc, err = n.Server.Connect(cfg.busOptions("flexps-master"))
	} else {
		n.URL = cfg.NATS.URL
		nc, err = bus.Connect(cfg.busOptions("flexps-master"))
	}
	if err != nil {
		n.Close()
		return nil, err
	}
	n.nc = nc
	n.Master, err = master.New(nc, cfg.masterConfig(log))
	if err == nil {
		err = n.Master.Start(ctx)
	}
	if err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Close stops the master and its embedded server.
func (n *MasterNode) Close() {
	if n.Master != nil {
		n.Master.Close()
	}
	if n.nc != nil {
		n.nc.Close()
	}
	if n.Server != nil {
		n.Server.Shutdown()
	}
}

// SlaveNode is a slave process's parts.
type SlaveNode struct {
	Slave *slave.Slave
	nc    *nats.Conn
}

// StartSlave connects to cfg.NATS.URL and joins the cluster's master.
func StartSlave(ctx context.Context, cfg ClusterConfig, log zerolog.Logger) (*SlaveNode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NATS.URL == "" {
		return nil, errors.New("slave: no NATS URL: give --nats nats://host:port or [nats] url in the cluster config")
	}
	opts := cfg.busOptions("flexps-slave")
	// A slave may start before its master: wait for the bus as long as
	// for the master.
	opts.RetryFor = time.Duration(cfg.Slave.JoinTimeout)
	if opts.RetryFor <= 0 {
		opts.RetryFor = 30 * time.Second
	}
	nc, err := bus.Connect(opts)
	if err != nil {
		return nil, err
	}
	s := slave.New(nc, cfg.slaveConfig(log))
	if err := s.Start(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return &SlaveNode{Slave: s, nc: nc}, nil
}

// Close leaves the cluster.
func (n *SlaveNode) Close() {
	n.Slave.Close()
	n.nc.Close()
}

// Dial connects a client to a cluster's bus.
func Dial(cfg ClusterConfig) (*Client, error) {
	if cfg.NATS.URL == "" {
		cfg.NATS.URL = "nats://" + DefaultListen
	}
	nc, err := bus.Connect(cfg.busOptions("flexps-client"))
	if err != nil {
		return nil, err
	}
	c := NewClient(nc, cfg.Cluster)
	c.owned = true
	return c, nil
}
