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
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/master"
	"github.com/flexps/flexps/slave"
	"github.com/flexps/flexps/tasks"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// DefaultListen is where a cluster master's embedded NATS server listens.
const DefaultListen = "127.0.0.1:4222"

func (c *ClusterConfig) masterConfig(log zerolog.Logger, paths *datastore.PathPolicy) master.Config {
	return master.Config{Paths: paths,
		Cluster: c.Cluster, Heartbeat: c.Heartbeat(), DeadAfter: c.FailureTimeout(),
		Policy: c.Master.Policy, Aging: c.Master.Aging, KeepTasks: c.Master.KeepTasks, KeepTasksFor: time.Duration(c.Master.KeepTasksFor), RequestTimeout: time.Duration(c.Master.RequestTimeout),
		DefaultReplicas: c.Master.DefaultReplicas,
		KVTimeout:       time.Duration(c.Slave.KVTimeout), BlockSize: int64(c.Data.BlockSize), HDFS: c.HDFSConfig(), Log: log,
	}
}

func (c *ClusterConfig) slaveConfig(log zerolog.Logger, paths *datastore.PathPolicy) slave.Config {
	kvt, kvTLS := c.kvTransport()
	return slave.Config{Paths: paths,
		Cluster: c.Cluster, ID: c.Slave.ID, Host: c.Slave.Host, Slots: c.Slave.Slots, JoinTimeout: time.Duration(c.Slave.JoinTimeout),
		KVTimeout: time.Duration(c.Slave.KVTimeout), KVWindow: c.Slave.KVWindow, ReadBuffer: int64(c.Data.ReadBuffer),
		ReadProducers: c.Data.ReadProducers, DataCache: int64(c.Data.Cache), HDFS: c.HDFSConfig(), Log: log,
		KVTransport: kvt, KVTLS: kvTLS, KVListen: c.KV.Listen, KVAdvertise: c.KV.Advertise,
	}
}

// kvTransport is the slave's data plane, and whether it encrypts: with
// TLS on the bus, the direct data plane uses TLS too (each slave's
// certificate pinned through the encrypted bus).
func (c *ClusterConfig) kvTransport() (transport string, tls bool) {
	tls = c.NATS.CAFile != "" || c.NATS.ServerCertFile != ""
	return c.KV.kvTransport(false), tls
}

// busOptions are the connection options of a process in role: the
// configured credentials, else the role's key from the cluster's state
// directory when this host has it.
// pathPolicy is [data] allowed_paths, checked on this host.
func (c *ClusterConfig) pathPolicy() (*datastore.PathPolicy, error) {
	if len(c.Data.AllowedPaths) == 0 {
		return nil, nil
	}
	p, err := datastore.NewPathPolicy(c.Data.AllowedPaths)
	if err != nil {
		return nil, fmt.Errorf("data.allowed_paths: %w", err)
	}
	return p, nil
}

func (c *ClusterConfig) busOptions(name string, role bus.Role, log *zerolog.Logger) (bus.Options, error) {
	n := c.NATS
	o := bus.Options{URL: n.URL, Name: name, User: n.User, Password: n.Password, Token: n.Token,
		CredsFile: n.CredsFile, NkeyFile: n.NkeyFile, CAFile: n.CAFile, CertFile: n.CertFile, KeyFile: n.KeyFile,
		ConnectTimeout: time.Duration(n.Timeout), InboxPrefix: bus.InboxPrefix(role), Log: log}
	if o.User != "" || o.Token != "" || o.CredsFile != "" || o.NkeyFile != "" || n.Auth == "none" {
		return o, nil
	}
	dir, err := c.stateDir()
	if err != nil {
		return o, err
	}
	roles := []bus.Role{role}
	if role == bus.RoleSubmitter { // a host given only the read-only key can still watch
		roles = append(roles, bus.RoleReader)
	}
	for _, r := range roles {
		if f := bus.KeyFile(dir, r); fileExists(f) {
			o.NkeyFile, o.InboxPrefix = f, bus.InboxPrefix(r)
			return o, nil
		}
	}
	return o, nil
}

func (c *ClusterConfig) stateDir() (string, error) {
	if c.NATS.StateDir != "" {
		return c.NATS.StateDir, nil
	}
	return bus.StateDir(c.Cluster)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// connectHint explains an authorization failure of a client in role.
func (c *ClusterConfig) connectHint(err error, role bus.Role) error {
	n := c.NATS
	if cve := (*tls.CertificateVerificationError)(nil); errors.As(err, &cve) {
		trusted := "unset: the system's CAs"
		if n.CAFile != "" {
			trusted = n.CAFile
		}
		return fmt.Errorf("%w\n  the NATS server's TLS certificate is not one this client trusts: set [nats] ca_file to the CA that signed it (now %s)", err, trusted)
	}
	if !errors.Is(err, bus.ErrUnauthorized) {
		return err
	}
	switch {
	case n.CredsFile != "":
		return fmt.Errorf("%w\n  the server does not accept the credentials in [nats] creds_file (%s)", err, n.CredsFile)
	case n.Token != "":
		return fmt.Errorf("%w\n  the server does not accept [nats] token: it must be the one the master's server was started with", err)
	case n.User != "":
		return fmt.Errorf("%w\n  the server does not accept [nats] user %q with this password: they must be the ones the master's server was started with", err, n.User)
	case n.NkeyFile != "":
		return fmt.Errorf("%w\n  the server does not accept the key in [nats] nkey_file (%s): copy %s.nk from the master's state directory", err, n.NkeyFile, role)
	}
	dir, _ := c.stateDir()
	if errors.Is(err, nats.ErrNkeysNotSupported) {
		// The key was found in the state directory, unasked for.
		return fmt.Errorf("%w\n  with no [nats] user, token, creds_file or nkey_file set, flexps offered the %s key it found in %s, and this server takes no keys "+
			"(an external NATS server, or a master started with user/password or token): set the credentials the server wants in [nats] (the master's cluster TOML)",
			err, role, dir)
	}
	return fmt.Errorf("%w\n  the master generates credentials in its state directory (%s on its host); on another host copy %s.nk from there and set [nats] nkey_file (or state_dir)",
		err, dir, role)
}

// permissionHint names the credentials behind a permissions violation:
// the server accepted them, but not for role's subjects of this cluster.
func (c *ClusterConfig) permissionHint(err error, role bus.Role) error {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return err
	}
	n := c.NATS
	var which string
	switch {
	case n.CredsFile != "":
		which = fmt.Sprintf("[nats] creds_file (%s)", n.CredsFile)
	case n.Token != "":
		which = "[nats] token"
	case n.User != "":
		which = fmt.Sprintf("[nats] user %q", n.User)
	case n.NkeyFile != "":
		which = fmt.Sprintf("the key in [nats] nkey_file (%s)", n.NkeyFile)
	default:
		dir, _ := c.stateDir()
		which = fmt.Sprintf("the key found in %s", dir)
	}
	cluster := c.Cluster
	if cluster == "" {
		cluster = "default"
	}
	return fmt.Errorf("%w\n  the server accepts %s but not as a %s of cluster %q: use %s.nk from the master's state directory, and the master's cluster name",
		err, which, role, cluster, role)
}

// Bounds on what one process starts: each slave of a local cluster is a
// full slave (its own connection, shards and readers), and each slot a
// worker goroutine with its own buffers.
const (
	MaxLocalSlaves = tasks.MaxLocalSlaves
	MaxSlots       = tasks.MaxLocalSlots
)

// Local is an in-process cluster: embedded NATS without a port, a master
// and N slaves, each with its own connection as if they were processes.
type Local struct {
	*Client
	Monitors *Monitors // status page and /metrics when the config asks (off by default)
	srv      *bus.Embedded
	master   *master.Master
	slaves   []*slave.Slave
	conns    []*nats.Conn
	closing  sync.Once
}

// LocalFailureTimeout is the failure timeout of a local cluster whose
// config sets neither heartbeat_interval nor failure_timeout.
const LocalFailureTimeout = 5 * time.Second

// LocalOptions size a local cluster.
type LocalOptions struct {
	Slaves int // 0: the default, 2 (a negative count is refused)
	Slots  int // per slave; 0: the default, 2
	Config ClusterConfig
	// Log is the cluster's logger; the zero Logger writes nothing (not
	// even a slave's warnings): NewLogger(os.Stderr, "warn", "auto")
	// gives the flexps commands' output.
	Log zerolog.Logger
}

// StartLocal starts an in-process cluster and waits until every slave has
// joined. ctx is the cluster's life, not only its start: when it ends, the
// master and the slaves stop (a submission is then refused, saying so), so
// a start-up timeout's context must not be cancelled while the cluster is
// in use. Close releases the cluster in any case.
func StartLocal(ctx context.Context, o LocalOptions) (l *Local, err error) {
	if o.Slaves < 0 || o.Slots < 0 {
		// Taken for the defaults until now, without a word.
		return nil, fmt.Errorf("local cluster: %d slaves of %d slots each: both must be at least 1 (0: the default, 2)", o.Slaves, o.Slots)
	}
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
	if cfg.FailureTimeout() == 0 && cfg.Heartbeat() == 0 {
		// In one process no slave dies alone: a short timeout would only
		// turn a stall of the whole process (GC, a loaded machine) into a
		// failed run.
		cfg.Membership.FailureTimeout = Duration(LocalFailureTimeout)
	}
	if cfg.Master.DefaultReplicas == 0 {
		// Its slaves share one process: a replica would only cost.
		cfg.Master.DefaultReplicas = 1
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
	paths, err := cfg.pathPolicy()
	if err != nil {
		return nil, err
	}
	l.master, err = master.New(mc, cfg.masterConfig(o.Log, paths))
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
		scfg := cfg.slaveConfig(o.Log, paths)
		scfg.ID, scfg.Slots = fmt.Sprintf("slave-%d", i), o.Slots
		scfg.KVTransport = cfg.KV.kvTransport(true)
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
	if l.Monitors, err = cfg.startMasterMonitors(l.master, o.Log, l.slaves...); err != nil {
		return nil, err
	}
	return l, nil
}

// Slaves are the cluster's slaves.
func (l *Local) Slaves() []*slave.Slave { return l.slaves }

// Close stops everything in reverse order. It waits for the workers to
// return: a stage function that ignores its context (info.Ctx) holds Close
// until it returns, and the slave logs it, naming its function. Close may
// be called more than once, from any goroutine; every call returns once
// the cluster is stopped.
func (l *Local) Close() {
	if l == nil {
		return
	}
	l.closing.Do(l.close)
}

func (l *Local) close() {
	l.Monitors.Close()
	// The master first: it ends its tasks and tells the slaves to drop
	// them while they still answer (closed first, they would leave it
	// waiting request_timeout on each).
	if l.master != nil {
		l.master.Close()
	}
	for _, s := range l.slaves {
		s.Close()
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
	Master   *master.Master
	Server   *bus.Embedded // nil with an external NATS
	URL      string        // where slaves and clients connect
	Monitors *Monitors     // status page and /metrics, when configured
	nc       *nats.Conn
	closing  sync.Once
}

// StartMaster starts a master: with an embedded NATS server listening on
// cfg.NATS.Listen when cfg.NATS.URL is empty, else on the external bus.
// The master stops when ctx ends, or at Close.
func StartMaster(ctx context.Context, cfg ClusterConfig, log zerolog.Logger) (*MasterNode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &MasterNode{}
	var nc *nats.Conn
	var err error
	if cfg.NATS.URL == "" {
		var eo bus.EmbeddedOptions
		eo, err = cfg.embeddedOptions(log)
		if err != nil {
			return nil, err
		}
		n.Server, err = bus.StartEmbedded(eo)
		if err != nil {
			return nil, err
		}
		n.URL = n.Server.URL()
		if cfg.NATS.ServerCertFile != "" {
			n.URL = strings.Replace(n.URL, "nats://", "tls://", 1)
		}
		var o bus.Options
		o, err = cfg.busOptions("flexps-master", bus.RoleMaster, &log)
		if err == nil && len(eo.Nkeys) > 0 {
			// The master's own connection always uses the master key, even
			// when the shared TOML names another role's nkey_file.
			dir, _ := cfg.stateDir()
			o.User, o.Password, o.Token, o.CredsFile = "", "", "", ""
			o.NkeyFile, o.InboxPrefix = bus.KeyFile(dir, bus.RoleMaster), bus.InboxPrefix(bus.RoleMaster)
		}
		if err == nil {
			nc, err = n.Server.Connect(o)
		}
	} else {
		n.URL = cfg.NATS.URL
		var o bus.Options
		o, err = cfg.busOptions("flexps-master", bus.RoleMaster, &log)
		if err == nil {
			nc, err = bus.Connect(o)
		}
		err = cfg.connectHint(err, bus.RoleMaster)
	}
	if err != nil {
		n.Close()
		return nil, err
	}
	n.nc = nc
	var paths *datastore.PathPolicy
	if paths, err = cfg.pathPolicy(); err == nil {
		mc := cfg.masterConfig(log, paths)
		// Running tasks with checkpoints are recorded in the cluster's
		// state directory, so a restarted master resumes them.
		if dir, derr := cfg.stateDir(); derr == nil {
			mc.StateDir = dir
		} else {
			log.Warn().Err(derr).Msg("no state directory: a restarted master will not resume running tasks")
		}
		mc.ExternalBus = n.Server == nil
		n.Master, err = master.New(nc, mc)
	}
	if err == nil {
		err = n.Master.Start(ctx)
	}
	if err == nil {
		n.Monitors, err = cfg.startMasterMonitors(n.Master, log)
	}
	if err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// embeddedOptions secure the master's embedded server: the configured
// user/password or token, else generated role nkeys; anonymous access
// ("none") only on loopback unless explicitly allowed.
func (cfg ClusterConfig) embeddedOptions(log zerolog.Logger) (bus.EmbeddedOptions, error) {
	n := cfg.NATS
	listen := n.Listen
	if listen == "" {
		listen = DefaultListen
	}
	eo := bus.EmbeddedOptions{Listen: listen, User: n.User, Password: n.Password, Token: n.Token,
		CertFile: n.ServerCertFile, KeyFile: n.ServerKeyFile, ClientCAFile: n.ClientCAFile}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return eo, fmt.Errorf("nats.listen: %q: %w", listen, err)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	if n.Auth == "none" {
		if !loopback && !n.AllowInsecure {
			return eo, fmt.Errorf("nats: refusing to listen on %s without authentication (auth = \"none\"): anyone who reaches that address could submit tasks and read or overwrite models; use auth = \"auto\", or set allow_insecure = true", listen)
		}
		if !loopback {
			log.Warn().Str("listen", listen).Msg("nats: listening off loopback WITHOUT authentication (allow_insecure = true)")
		}
		return eo, nil
	}
	if eo.Secured() {
		return eo, nil
	}
	dir, err := cfg.stateDir()
	if err != nil {
		return eo, err
	}
	keys, created, err := bus.EnsureKeys(dir)
	if err != nil {
		return eo, err
	}
	eo.Nkeys = bus.NkeyUsers(keys, bus.For(cfg.Cluster))
	if len(created) > 0 {
		log.Info().Str("dir", dir).Msg("nats: generated credentials for this cluster (slave.nk, submitter.nk, reader.nk); " +
			"flexps commands on this host use them without configuration; on another host copy the role's file and set [nats] nkey_file")
	}
	return eo, nil
}

// Close stops the master and its embedded server. It may be called more
// than once, from any goroutine, as Local.Close.
func (n *MasterNode) Close() { n.closing.Do(n.close) }

func (n *MasterNode) close() {
	n.Monitors.Close()
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
	Slave    *slave.Slave
	Monitors *Monitors // /metrics, when configured
	nc       *nats.Conn
	closing  sync.Once
}

// StartSlave connects to cfg.NATS.URL and joins the cluster's master.
// The slave stops when ctx ends, or at Close.
func StartSlave(ctx context.Context, cfg ClusterConfig, log zerolog.Logger) (*SlaveNode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.NATS.URL == "" {
		return nil, errors.New("slave: no NATS URL: give --nats nats://host:port or [nats] url in the cluster config")
	}
	retryFor := time.Duration(cfg.Slave.JoinTimeout)
	if retryFor <= 0 {
		retryFor = 30 * time.Second
	}
	deadline := time.Now().Add(retryFor)
	var nc *nats.Conn
	warned := false
	for {
		opts, err := cfg.busOptions("flexps-slave", bus.RoleSlave, &log)
		if err != nil {
			return nil, err
		}
		// A slave may start before its master: wait for the bus as long
		// as for the master, and on the master's host for the keys it is
		// about to generate.
		opts.RetryFor = time.Until(deadline)
		nc, err = bus.ConnectContext(ctx, opts)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, err
		}
		// Only a slave that found no credentials waits for the keys its
		// master is about to generate: configured credentials that the
		// server refuses will not be accepted later (a wrong token or
		// user waited the whole join_timeout, 30 s, before it said so).
		if !errors.Is(err, bus.ErrUnauthorized) || opts.NkeyFile != "" || opts.User != "" || opts.Token != "" ||
			opts.CredsFile != "" || time.Now().After(deadline) {
			return nil, cfg.connectHint(err, bus.RoleSlave)
		}
		if !warned { // it waited join_timeout without a word
			warned = true
			dir, _ := cfg.stateDir()
			log.Warn().Str("nats", cfg.NATS.URL).Str("state_dir", dir).Dur("join_timeout", retryFor).
				Msg("the bus refused this slave, which found no credentials: it waits for the keys a master on this host generates in its state directory; on another host copy slave.nk from the master's and set [nats] nkey_file")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	paths, err := cfg.pathPolicy()
	if err != nil {
		nc.Close()
		return nil, err
	}
	s := slave.New(nc, cfg.slaveConfig(log, paths))
	if err := s.Start(ctx); err != nil {
		nc.Close()
		return nil, cfg.permissionHint(err, bus.RoleSlave)
	}
	ms, err := cfg.startSlaveMonitors(log, s)
	if err != nil {
		s.Close()
		nc.Close()
		return nil, err
	}
	return &SlaveNode{Slave: s, Monitors: ms, nc: nc}, nil
}

// Close leaves the cluster. Like Local.Close, it waits for the workers to
// return (a stage function that ignores its context is logged, by name),
// and it may be called more than once, from any goroutine.
func (n *SlaveNode) Close() {
	n.closing.Do(func() {
		n.Monitors.Close()
		n.Slave.Close()
		n.nc.Close()
	})
}

// Dial connects a client to a cluster's bus.
func Dial(cfg ClusterConfig) (*Client, error) {
	if cfg.NATS.URL == "" {
		cfg.NATS.URL = "nats://" + DefaultListen
	}
	o, err := cfg.busOptions("flexps-client", bus.RoleSubmitter, nil)
	if err != nil {
		return nil, err
	}
	nc, err := bus.Connect(o)
	if err != nil {
		return nil, cfg.connectHint(err, bus.RoleSubmitter)
	}
	c := NewClient(nc, cfg.Cluster)
	c.owned = true
	return c, nil
}
