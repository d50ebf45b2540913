package engine

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/datastore/hdfs"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/master/membership"
	"github.com/flexps/flexps/tasks"
)

// ClusterConfig is configs/cluster.toml: one struct per TOML table, each
// knob documented beside its field. Zero values mean the defaults.
type ClusterConfig struct {
	Cluster string     `toml:"cluster"` // subject prefix flexps.<cluster>; default "default"
	NATS    NATSConfig `toml:"nats"`
	Master  MasterSect `toml:"master"`
	// Membership configures failure detection (see master/membership).
	Membership MembershipSect `toml:"membership"`
	Slave      SlaveSect      `toml:"slave"`
	KV         KVSect         `toml:"kv"`
	Data       DataSect       `toml:"data"`
	HDFS       HDFSSect       `toml:"hdfs"`
	Log        LogSect        `toml:"log"`
	Metrics    ListenSect     `toml:"metrics"`
	HTTP       ListenSect     `toml:"http"`
}

// ListenSect is an HTTP listen address: [metrics] listen serves Prometheus
// /metrics on every process that reads the file (use port 0, or a flag per
// process, when several share a host); [http] listen serves the master's
// status page (with /metrics and /api/status). Empty: off.
type ListenSect struct {
	Listen string `toml:"listen"`
	// Flag is the command-line flag that set Listen ("--http"), if one
	// did: errors name it rather than the TOML key the user never wrote.
	Flag string `toml:"-" json:"-"`
}

// setting names what chose the address: Flag, else key ("[http] listen").
func (l ListenSect) setting(key string) string {
	if l.Flag != "" {
		return l.Flag
	}
	return key
}

// NATSConfig says where the bus is.
type NATSConfig struct {
	URL       string   `toml:"url"`    // external nats:// URL(s); empty: the master embeds a server
	Listen    string   `toml:"listen"` // embedded server's listen address (master); default 127.0.0.1:4222; port 0: any free port
	User      string   `toml:"user"`
	Password  string   `toml:"password"`
	Token     string   `toml:"token"`
	CredsFile string   `toml:"creds_file"`
	CAFile    string   `toml:"ca_file"`
	CertFile  string   `toml:"cert_file"`
	KeyFile   string   `toml:"key_file"`
	Timeout   Duration `toml:"connect_timeout"` // default 5s
	// Auth of the master's embedded server: "auto" (default) uses
	// user/password or token when set, else role nkeys the master
	// generates in StateDir; "none" accepts anonymous clients, refused
	// off loopback unless AllowInsecure.
	Auth          string `toml:"auth"`
	AllowInsecure bool   `toml:"allow_insecure"`
	// NkeyFile is this process's nkey seed (a role key copied from the
	// master's host); default: the role's key in StateDir when present.
	NkeyFile string `toml:"nkey_file"`
	// StateDir holds the cluster's generated role keys; default
	// $FLEXPS_STATE_DIR/<cluster>, else ~/.local/state/flexps/<cluster>.
	StateDir string `toml:"state_dir"`
	// TLS of the embedded server: its certificate and key, and optionally
	// the CA that client certificates must be signed by.
	ServerCertFile string `toml:"server_cert_file"`
	ServerKeyFile  string `toml:"server_key_file"`
	ClientCAFile   string `toml:"client_ca_file"`
}

// MembershipSect configures the failure detector: slaves beat every
// heartbeat_interval, and one not heard from for failure_timeout is
// declared dead, fenced, and must rejoin as a fresh instance. The same
// timeout bounds how long slaves wait for the master's sign of life.
type MembershipSect struct {
	HeartbeatInterval Duration `toml:"heartbeat_interval"` // default 300ms
	FailureTimeout    Duration `toml:"failure_timeout"`    // default 3 heartbeat intervals (900ms); at least 2
}

// MinHeartbeat is the shortest heartbeat interval a cluster file may set.
const MinHeartbeat = time.Millisecond

// Heartbeat is the effective heartbeat interval ([membership], or the older
// [master] heartbeat); 0 means the default.
func (c *ClusterConfig) Heartbeat() time.Duration {
	if c.Membership.HeartbeatInterval > 0 {
		return time.Duration(c.Membership.HeartbeatInterval)
	}
	return time.Duration(c.Master.Heartbeat)
}

// FailureTimeout is the effective failure timeout ([membership], or the
// older [master] dead_after); 0 means the default.
func (c *ClusterConfig) FailureTimeout() time.Duration {
	if c.Membership.FailureTimeout > 0 {
		return time.Duration(c.Membership.FailureTimeout)
	}
	return time.Duration(c.Master.DeadAfter)
}

// MasterSect configures the master.
type MasterSect struct {
	Heartbeat      Duration `toml:"heartbeat"`       // older name of [membership] heartbeat_interval
	DeadAfter      Duration `toml:"dead_after"`      // older name of [membership] failure_timeout
	Policy         string   `toml:"policy"`          // sequential, greedy, prioritized
	Aging          float64  `toml:"aging"`           // prioritized: points per second waited; default 1
	RequestTimeout Duration `toml:"request_timeout"` // control requests; default 10s
	KeepTasks      int      `toml:"keep_tasks"`      // ended tasks kept for status; default 1000
	KeepTasksFor   Duration `toml:"keep_tasks_for"`  // and for at most this long after they ended; 0: no age limit
	// DefaultReplicas: replicas of a table that sets none (capped at the
	// task's slaves); default 2 for a cluster, 1 for flexps run.
	DefaultReplicas int `toml:"default_replicas"`
}

// SlaveSect configures a slave.
type SlaveSect struct {
	ID    string `toml:"id"`    // default <hostname>-<pid>
	Host  string `toml:"host"`  // host name matched against block replica hosts for locality; default os.Hostname
	Slots int    `toml:"slots"` // worker slots; default 2
	// Procs is the GOMAXPROCS of a `flexps slave` process: the cores it
	// runs Go code on. Default (0): its slots, at most the CPUs Go sees
	// (a slave given N slots is given N cores; several slaves sharing a
	// machine then do not each spin a scheduler over all of it). The
	// GOMAXPROCS environment variable wins over both.
	Procs       int      `toml:"procs"`
	JoinTimeout Duration `toml:"join_timeout"` // wait this long for a master; default 30s
	KVTimeout   Duration `toml:"kv_timeout"`   // data-plane round trip; default 60s
	KVWindow    int      `toml:"kv_window"`    // unacknowledged Adds in flight per worker; default 64
}

// KVSect says how KV requests travel between slaves.
type KVSect struct {
	// Transport: "tcp" sends them over direct, pipelined connections
	// between slave processes, found and authenticated through the bus
	// (NATS stays the control plane and the fallback for a peer that
	// cannot be dialed); "nats" sends them through the bus; "auto"
	// (default) is tcp between processes and nats inside `flexps run`,
	// whose slaves share one process.
	Transport string `toml:"transport"`
	// Listen is where a slave accepts its peers' connections; default
	// "127.0.0.1:0" (loopback, any free port). Slaves on several hosts
	// listen on a routable address ("0.0.0.0:0" or a fixed port).
	Listen string `toml:"listen"`
	// Advertise is the host:port peers dial; default the listener's
	// address (the host name when listening on every interface).
	Advertise string `toml:"advertise"`
}

// kvTransport resolves [kv] transport for slaves in their own process
// (local false) or sharing one (local true).
func (k KVSect) kvTransport(local bool) string {
	if k.Transport == "" || k.Transport == "auto" {
		if local {
			return "nats"
		}
		return "tcp"
	}
	return k.Transport
}

// DataSect configures reading.
type DataSect struct {
	BlockSize     Size `toml:"block_size"`     // local files are split in blocks of this size; default 8MiB
	ReadBuffer    Size `toml:"read_buffer"`    // AsyncReader buffer per worker and input; default 4MiB
	ReadProducers int  `toml:"read_producers"` // parsing goroutines per worker and input; default 2
	Cache         Size `toml:"cache"`          // parsed blocks kept per slave for later epochs; default 1GiB
	// AllowedPaths are the directories (and hdfs:// prefixes) tasks may
	// read inputs from and write outputs to; empty allows any path the
	// process can reach.
	AllowedPaths []string `toml:"allowed_paths"`
}

// HDFSSect says how to reach HDFS (else HADOOP_CONF_DIR is read).
type HDFSSect struct {
	Namenodes []string `toml:"namenodes"` // host:port
	User      string   `toml:"user"`
	HTTP      string   `toml:"http"` // namenode HTTP address for WebHDFS block locations
	Timeout   Duration `toml:"timeout"`
}

// LogSect configures logging.
type LogSect struct {
	Level  string `toml:"level"`  // debug, info (default), warn, error
	Format string `toml:"format"` // auto (default: console on a terminal, else JSON), console, json
}

// LoadClusterConfig reads a cluster TOML file; unknown keys are errors.
func LoadClusterConfig(path string) (*ClusterConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	var c ClusterConfig
	if err := tasks.DecodeStrict(path, data, &c); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		// Validate's errors start with the setting: "kv.listen: ...".
		line := 0
		if m := settingName.FindStringSubmatch(err.Error()); m != nil {
			line = tasks.KeyLine(data, strings.Split(m[1], ".")...)
		}
		return nil, &tasks.ConfigError{File: path, Line: line, Msg: err.Error(), Err: err}
	}
	return &c, nil
}

var settingName = regexp.MustCompile(`^([a-z_]+(?:\.[a-z_]+)?)[: ]`)

// Validate checks values the TOML types cannot.
func (c *ClusterConfig) Validate() error {
	switch c.Master.Policy {
	case "", "sequential", "greedy", "prioritized":
	default:
		return fmt.Errorf("master.policy: must be sequential, greedy or prioritized, got %q", c.Master.Policy)
	}
	if c.Slave.Slots < 0 || c.Slave.Slots > MaxSlots {
		return fmt.Errorf("slave.slots: must be in [1, %d], got %d", MaxSlots, c.Slave.Slots)
	}
	if a := c.Master.Aging; !(a >= 0) || math.IsInf(a, 0) {
		return fmt.Errorf("master.aging: must be a finite number >= 0 (priority points per second waited), got %v", a)
	}
	if c.Master.KeepTasks < 0 {
		return fmt.Errorf("master.keep_tasks: must be >= 1 (0 or unset: 1000), got %d", c.Master.KeepTasks)
	}
	if r := c.Master.DefaultReplicas; r < 0 || r > kvstore.MaxReplicas {
		return fmt.Errorf("master.default_replicas: must be in [1, %d] (0 or unset: 2), got %d", kvstore.MaxReplicas, r)
	}
	if c.Slave.KVWindow < 0 {
		return fmt.Errorf("slave.kv_window: must be >= 1 (0 or unset: 64), got %d", c.Slave.KVWindow)
	}
	if c.Data.ReadProducers < 0 {
		return fmt.Errorf("data.read_producers: must be >= 1 (0 or unset: 2), got %d", c.Data.ReadProducers)
	}
	if c.Slave.Procs < 0 || c.Slave.Procs > MaxSlots {
		return fmt.Errorf("slave.procs: must be in [1, %d] (0: the slave's slots), got %d", MaxSlots, c.Slave.Procs)
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error", "trace":
	default:
		return fmt.Errorf("log.level: must be debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "", "auto", "console", "json":
	default:
		return fmt.Errorf("log.format: must be auto, console or json, got %q", c.Log.Format)
	}
	switch c.NATS.Auth {
	case "", "auto", "none":
	default:
		return fmt.Errorf("nats.auth: must be auto or none, got %q", c.NATS.Auth)
	}
	switch c.KV.Transport {
	case "", "auto", "tcp", "nats":
	default:
		return fmt.Errorf("kv.transport: must be auto, tcp or nats, got %q", c.KV.Transport)
	}
	for _, r := range c.Data.AllowedPaths {
		// Whether it exists is checked on each host as its process
		// starts; this much is the file's, so it names the line.
		r = strings.TrimSpace(r)
		if s := datastore.Scheme(r); r != "" && (s == "" || s == "file") && !filepath.IsAbs(strings.TrimPrefix(r, "file://")) {
			return fmt.Errorf("data.allowed_paths: %q must be an absolute directory (or an hdfs:// prefix)", r)
		}
	}
	for _, a := range []struct{ key, addr string }{{"kv.listen", c.KV.Listen}, {"kv.advertise", c.KV.Advertise}} {
		if a.addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(a.addr)
		if err != nil {
			return fmt.Errorf("%s: %q is not host:port: %w", a.key, a.addr, err)
		}
		// Found before a slave starts: "127.0.0.1:99999" passed, and
		// every slave failed to listen (flexps run, which does not use
		// it, ran).
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && a.key == "kv.advertise") {
			want := "0 to 65535 (0: any free port)"
			if a.key == "kv.advertise" {
				want = "1 to 65535 (the port peers dial)"
			}
			return fmt.Errorf("%s: %q: port %q, want %s", a.key, a.addr, port, want)
		}
	}
	// Found when the file is read, naming its line: a namenode without a
	// port failed the first task, naming no file ("hdfs namenode \"nn\":
	// want host:port"), and a bad http address only lost locality, with
	// a warning per task.
	hdfsAddrs := []struct{ key, addr string }{{"hdfs.http", c.HDFS.HTTP}}
	for _, nn := range c.HDFS.Namenodes {
		hdfsAddrs = append(hdfsAddrs, struct{ key, addr string }{"hdfs.namenodes", nn})
	}
	for _, a := range hdfsAddrs {
		if a.addr == "" && a.key == "hdfs.http" {
			continue
		}
		if h, p, err := net.SplitHostPort(a.addr); err != nil || h == "" || p == "" {
			what := "the namenode's RPC address, e.g. \"nn:8020\""
			if a.key == "hdfs.http" {
				what = "the namenode's HTTP (WebHDFS) address, e.g. \"nn:9870\""
			}
			return fmt.Errorf("%s: %q is not host:port (%s)", a.key, a.addr, what)
		}
	}
	if c.Membership.HeartbeatInterval > 0 && c.Master.Heartbeat > 0 {
		return errors.New("membership.heartbeat_interval and master.heartbeat are the same setting; keep only [membership] heartbeat_interval")
	}
	if c.Membership.FailureTimeout > 0 && c.Master.DeadAfter > 0 {
		return errors.New("membership.failure_timeout and master.dead_after are the same setting; keep only [membership] failure_timeout")
	}
	if hb := c.Heartbeat(); hb > 0 && hb < MinHeartbeat {
		// "1ns" panicked the master: it checks every quarter beat, and a
		// ticker of 0 is refused by the runtime.
		key := "membership.heartbeat_interval"
		if c.Membership.HeartbeatInterval == 0 {
			key = "master.heartbeat"
		}
		return fmt.Errorf("%s: %v is below the least heartbeat interval, %v", key, hb, MinHeartbeat)
	}
	hb := c.Heartbeat()
	if hb == 0 {
		hb = membership.DefaultHeartbeat
	}
	if ft := c.FailureTimeout(); ft > 0 && ft < 2*hb {
		// Named as the file sets it, so the error finds its line.
		key := "membership.failure_timeout"
		if c.Membership.FailureTimeout == 0 {
			key = "master.dead_after"
		}
		return fmt.Errorf("%s: %v must be at least twice the heartbeat interval (%v)", key, ft, hb)
	}
	if strings.ContainsAny(c.Cluster, ".*> ") {
		return fmt.Errorf("cluster: name %q may not contain '.', '*', '>' or spaces", c.Cluster)
	}
	return nil
}

// HDFSConfig merges the [hdfs] table over HADOOP_CONF_DIR.
func (c *ClusterConfig) HDFSConfig() hdfs.Config {
	h, err := hdfs.ConfigFromEnv()
	if err != nil {
		h = hdfs.Config{}
	}
	if len(c.HDFS.Namenodes) > 0 {
		h.Namenodes = c.HDFS.Namenodes
	}
	if c.HDFS.User != "" {
		h.User = c.HDFS.User
	}
	if c.HDFS.HTTP != "" {
		h.HTTPAddr = c.HDFS.HTTP
	}
	if c.HDFS.Timeout > 0 {
		h.Timeout = time.Duration(c.HDFS.Timeout)
	}
	return h
}

// Duration is a TOML string like "500ms" or "3s".
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. \"500ms\", \"3s\")", b)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	*d = Duration(v)
	return nil
}

// Size is a TOML byte size: an integer or a string like "64MiB"
// (tasks.Size: job files take the same sizes).
type Size = tasks.Size

// ParseSize parses "123", "64KiB", "8MiB", "1GiB", "10MB".
func ParseSize(s string) (int64, error) { return tasks.ParseSize(s) }
