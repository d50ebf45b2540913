package engine_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/testkit"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A master started with no credentials configured generates role keys;
// a slave and a client on the same host use them with no configuration,
// and an anonymous client is refused.
func TestMasterSecuredByDefault(t *testing.T) {
	addr := freeAddr(t)
	cfg := engine.ClusterConfig{Cluster: "sec", NATS: engine.NATSConfig{Listen: addr, StateDir: filepath.Join(t.TempDir(), "state")}}
	m, err := engine.StartMaster(context.Background(), cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, r := range bus.Roles {
		if !strings.HasPrefix(bus.KeyFile(cfg.NATS.StateDir, r), cfg.NATS.StateDir) {
			t.Fatal(r)
		}
	}
	cfg.NATS.URL = m.URL
	s, err := engine.StartSlave(context.Background(), cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := engine.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.SubmitAndWait(context.Background(), tasks.NewTask("ok").SetStages(tasks.Stage{Func: "test.fill", Workers: 1}).
		AddTable(tableSpec()), nil)
	if err != nil {
		t.Fatalf("task on a secured cluster: %v %+v", err, st)
	}

	if _, err := bus.Connect(bus.Options{URL: m.URL}); !errors.Is(err, bus.ErrUnauthorized) {
		t.Fatalf("anonymous client: %v", err)
	}
	other := cfg
	other.NATS.StateDir = filepath.Join(t.TempDir(), "elsewhere") // another host: no keys
	_, err = engine.Dial(other)
	if !errors.Is(err, bus.ErrUnauthorized) || !strings.Contains(err.Error(), "nkey_file") {
		t.Fatalf("client without keys: %v", err)
	}
	// With the copied key it works.
	other.NATS.NkeyFile = bus.KeyFile(cfg.NATS.StateDir, bus.RoleReader)
	rc, err := engine.Dial(other)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.Status(context.Background(), ""); err != nil {
		t.Fatalf("reader status: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := rc.Submit(ctx, tasks.NewTask("nope").SetStages(tasks.Stage{Func: "test.fill"}).AddTable(tableSpec())); !errors.Is(err, engine.ErrDenied) {
		t.Fatalf("a read-only client submitting: %v, want ErrDenied", err)
	}
}

func TestEmbeddedAuthChoices(t *testing.T) {
	for _, tc := range []struct {
		name string
		nats engine.NATSConfig
		want string // "" means it starts
	}{
		{"no auth off loopback refused", engine.NATSConfig{Listen: "0.0.0.0:0", Auth: "none"}, "refusing to listen"},
		{"no auth off loopback forced", engine.NATSConfig{Listen: "0.0.0.0:0", Auth: "none", AllowInsecure: true}, ""},
		{"no auth on loopback", engine.NATSConfig{Listen: "127.0.0.1:0", Auth: "none"}, ""},
		{"user and password", engine.NATSConfig{Listen: "127.0.0.1:0", User: "u", Password: "p"}, ""},
		{"bad auth value", engine.NATSConfig{Listen: "127.0.0.1:0", Auth: "maybe"}, "nats.auth"},
		// A CA file for clients no longer stops the master (its own
		// connection is in-process and needs no TLS).
		{"ca_file set", engine.NATSConfig{Listen: "127.0.0.1:0", CAFile: "/nonexistent/ca.pem"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.nats.StateDir = filepath.Join(t.TempDir(), "state")
			m, err := engine.StartMaster(context.Background(), engine.ClusterConfig{NATS: tc.nats}, zerolog.Nop())
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				m.Close()
				return
			}
			if err == nil {
				m.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// With a server certificate the master serves TLS; clients trust it with
// ca_file, and must present a certificate when client_ca_file is set.
func TestMasterTLS(t *testing.T) {
	dir := t.TempDir()
	ca, sc, sk, cc, ck := testkit.Certs(t, dir)
	cfg := engine.ClusterConfig{Cluster: "tls", NATS: engine.NATSConfig{Listen: freeAddr(t), StateDir: filepath.Join(dir, "state"),
		ServerCertFile: sc, ServerKeyFile: sk, ClientCAFile: ca, CAFile: ca, CertFile: cc, KeyFile: ck}}
	m, err := engine.StartMaster(context.Background(), cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !strings.HasPrefix(m.URL, "tls://") {
		t.Fatalf("URL %s", m.URL)
	}
	cfg.NATS.URL = m.URL
	c, err := engine.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Status(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	// Two slaves: their data plane is direct and encrypted (TLS, each
	// one's certificate pinned through the bus), not the bus.
	var slaves []*engine.SlaveNode
	for _, id := range []string{"s1", "s2"} {
		scfg := cfg
		scfg.Slave.ID, scfg.Slave.Slots = id, 2
		s, err := engine.StartSlave(context.Background(), scfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		slaves = append(slaves, s)
	}
	task := tasks.NewTask("kv").AddTable(kvstore.TableSpec{Name: "t", Size: 16}).
		SetStages(tasks.Stage{Func: "test.barrier", Workers: 4, Params: tasks.Params{"rounds": 3}})
	if st, err := c.SubmitAndWait(context.Background(), task, nil); err != nil {
		t.Fatalf("task over TLS: %v %+v", err, st)
	}
	var direct uint64
	for _, s := range slaves {
		st, ok := s.Slave.DataPlane()
		if !ok || st.BusSends != 0 {
			t.Fatalf("slave %s: direct data plane %v, %+v; want every request direct", s.Slave.ID(), ok, st)
		}
		direct += st.DirectSends
	}
	if direct == 0 {
		t.Fatal("no request went over the direct data plane")
	}
	noCert := cfg
	noCert.NATS.CertFile, noCert.NATS.KeyFile = "", ""
	if c, err := engine.Dial(noCert); err == nil {
		c.Close()
		t.Fatal("a client without a certificate connected")
	}
}

func tableSpec() kvstore.TableSpec { return kvstore.TableSpec{Name: "t", Size: 4} }

// A refused client is told which of its settings the server refused.
func TestRefusedCredentialsNameTheSetting(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	m, err := engine.StartMaster(context.Background(), engine.ClusterConfig{NATS: engine.NATSConfig{Listen: "127.0.0.1:0", StateDir: state}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, tc := range []struct {
		nats engine.NATSConfig
		want string
	}{
		{engine.NATSConfig{Token: "nope"}, "[nats] token"},
		{engine.NATSConfig{User: "u", Password: "p"}, `[nats] user "u"`},
		{engine.NATSConfig{StateDir: filepath.Join(t.TempDir(), "other")}, "copy submitter.nk"},
	} {
		tc.nats.URL = m.URL
		_, err := engine.Dial(engine.ClusterConfig{NATS: tc.nats})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%+v: err = %v, want it to name %q", tc.nats, err, tc.want)
		}
	}
}

// A slave whose credentials the cluster refuses says so within seconds,
// naming the bus and the setting, instead of waiting its join_timeout:
// refused at connect (a wrong token or user), or let onto the bus but
// refused the slaves' subjects (another role's key, another cluster's).
func TestSlaveRefusedCredentialsFailFast(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	m, err := engine.StartMaster(context.Background(), engine.ClusterConfig{NATS: engine.NATSConfig{Listen: freeAddr(t), StateDir: state}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, tc := range []struct {
		name    string
		cluster string
		nats    engine.NATSConfig
		want    []string
	}{
		{"wrong token", "", engine.NATSConfig{Token: "nope"}, []string{"[nats] token", "refused the connection"}},
		{"wrong user", "", engine.NATSConfig{User: "u", Password: "p"}, []string{`[nats] user "u"`, "refused the connection"}},
		{"submitter key", "", engine.NATSConfig{NkeyFile: bus.KeyFile(state, bus.RoleSubmitter)},
			[]string{"submitter.nk", "not as a slave", "Permissions Violation", `cluster "default"`}},
		{"another cluster", "other", engine.NATSConfig{NkeyFile: bus.KeyFile(state, bus.RoleSlave)},
			[]string{"slave.nk", `cluster "other"`, "Permissions Violation"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.nats.URL = m.URL
			cfg := engine.ClusterConfig{Cluster: tc.cluster, NATS: tc.nats}
			cfg.Slave.ID, cfg.Slave.JoinTimeout = "s1", engine.Duration(30*time.Second)
			start := time.Now()
			n, err := engine.StartSlave(context.Background(), cfg, zerolog.Nop())
			if err == nil {
				n.Close()
				t.Fatal("the slave joined")
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("refused after %v, want within 5s", took)
			}
			for _, w := range append(tc.want, m.URL[len("nats://"):]) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to name %q", err, w)
				}
			}
		})
	}
}

// A client given no credentials offers the role key it finds in its state
// directory; a server that takes no keys (user/password, an external NATS)
// refused it with only "nats: nkeys not supported by the server", naming
// neither the key nor the setting to make.
func TestKeyOfferedToAServerWithoutKeysIsNamed(t *testing.T) {
	m, err := engine.StartMaster(context.Background(), engine.ClusterConfig{NATS: engine.NATSConfig{Listen: freeAddr(t), User: "flx", Password: "pw",
		StateDir: filepath.Join(t.TempDir(), "master")}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	keys := filepath.Join(t.TempDir(), "keys")
	if _, _, err := bus.EnsureKeys(keys); err != nil {
		t.Fatal(err)
	}
	cfg := engine.ClusterConfig{NATS: engine.NATSConfig{URL: m.URL, StateDir: keys}}
	cfg.Slave.ID, cfg.Slave.JoinTimeout = "s1", engine.Duration(30*time.Second)
	for _, tc := range []struct {
		name  string
		start func() error
		role  string
	}{
		{"submitter", func() error {
			c, err := engine.Dial(cfg)
			if err == nil {
				c.Close()
			}
			return err
		}, "submitter"},
		{"slave", func() error {
			n, err := engine.StartSlave(context.Background(), cfg, zerolog.Nop())
			if err == nil {
				n.Close()
			}
			return err
		}, "slave"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.start()
			for _, w := range []string{"offered the " + tc.role + " key it found in " + keys, "takes no keys", "[nats]", m.URL} {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to name %q", err, w)
				}
			}
		})
	}
}

// A client that does not trust the NATS server's TLS certificate is told
// to set [nats] ca_file, and which CA it trusted: it said only "x509:
// certificate signed by unknown authority".
func TestUntrustedServerCertificateNamesCAFile(t *testing.T) {
	dir := t.TempDir()
	ca, sc, sk, _, _ := testkit.Certs(t, dir)
	otherCA, _, _, _, _ := testkit.Certs(t, t.TempDir())
	m, err := engine.StartMaster(context.Background(), engine.ClusterConfig{NATS: engine.NATSConfig{Listen: freeAddr(t), StateDir: filepath.Join(dir, "state"),
		ServerCertFile: sc, ServerKeyFile: sk, CAFile: ca}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, tc := range []struct {
		name, caFile, want string
	}{
		{"no ca_file", "", "now unset: the system's CAs"},
		{"another CA", otherCA, "now " + otherCA},
	} {
		cfg := engine.ClusterConfig{NATS: engine.NATSConfig{URL: m.URL, StateDir: filepath.Join(dir, "state"), CAFile: tc.caFile}}
		cfg.Slave.ID, cfg.Slave.JoinTimeout = "s1", engine.Duration(30*time.Second)
		for role, start := range map[string]func() error{
			"client": func() error {
				c, err := engine.Dial(cfg)
				if err == nil {
					c.Close()
				}
				return err
			},
			"slave": func() error {
				n, err := engine.StartSlave(context.Background(), cfg, zerolog.Nop())
				if err == nil {
					n.Close()
				}
				return err
			},
		} {
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				err := start()
				for _, w := range []string{"set [nats] ca_file", tc.want, m.URL} {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v\nwant it to name %q", err, w)
					}
				}
			})
		}
	}
}

// A slave that finds no credentials and is refused waits for the keys a
// master on its host is about to generate, and says so at once: it waited
// join_timeout (30 s) without a word, then printed the hint.
func TestSlaveWaitingForKeysSaysSo(t *testing.T) {
	m, err := engine.StartMaster(context.Background(), engine.ClusterConfig{NATS: engine.NATSConfig{Listen: freeAddr(t),
		StateDir: filepath.Join(t.TempDir(), "master")}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, tc := range []struct {
		name string
		nats engine.NATSConfig
		warn bool
	}{
		{"no credentials found", engine.NATSConfig{StateDir: filepath.Join(t.TempDir(), "empty")}, true},
		{"wrong token", engine.NATSConfig{Token: "nope"}, false}, // refused at once instead
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			tc.nats.URL = m.URL
			cfg := engine.ClusterConfig{NATS: tc.nats}
			cfg.Slave.ID, cfg.Slave.JoinTimeout = "s1", engine.Duration(30*time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				n, err := engine.StartSlave(ctx, cfg, zerolog.New(&logs))
				if err == nil {
					n.Close()
				}
				done <- err
			}()
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(logs.String(), "found no credentials") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			<-done
			if got := strings.Contains(logs.String(), "found no credentials: it waits for the keys"); got != tc.warn {
				t.Fatalf("warned %v, want %v; log:\n%s", got, tc.warn, logs.String())
			}
		})
	}
}
