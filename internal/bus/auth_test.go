package bus_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/testkit"
	"github.com/nats-io/nats.go"
)

// securedBus starts a loopback server that knows the role keys of a fresh
// state directory, as a master does by default.
func securedBus(t *testing.T) (srv *bus.Embedded, dir string, subj bus.Subjects) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "state", "c1")
	keys, created, err := bus.EnsureKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(created) != len(bus.Roles) {
		t.Fatalf("created %v, want one key per role", created)
	}
	subj = bus.For("c1")
	srv, err = bus.StartEmbedded(bus.EmbeddedOptions{Listen: fmt.Sprintf("127.0.0.1:%d", closedPort(t)), Nkeys: bus.NkeyUsers(keys, subj)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv, dir, subj
}

// asRole connects with role's key; violations are collected from the
// connection's asynchronous errors.
func asRole(t *testing.T, srv *bus.Embedded, dir string, r bus.Role) (*nats.Conn, func() []string) {
	t.Helper()
	nc, err := bus.Connect(bus.Options{URL: srv.URL(), NkeyFile: bus.KeyFile(dir, r), InboxPrefix: bus.InboxPrefix(r)})
	if err != nil {
		t.Fatalf("%s: %v", r, err)
	}
	var mu sync.Mutex
	var errs []string
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		errs = append(errs, err.Error())
		mu.Unlock()
	})
	t.Cleanup(nc.Close)
	return nc, func() []string {
		nc.Flush()
		time.Sleep(50 * time.Millisecond) // the server's -ERR arrives after the PONG
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

func TestAnonymousClientRefused(t *testing.T) {
	srv, _, _ := securedBus(t)
	_, err := bus.Connect(bus.Options{URL: srv.URL()})
	if !errors.Is(err, bus.ErrUnauthorized) || !strings.Contains(err.Error(), srv.URL()) {
		t.Fatalf("anonymous connect: %v", err)
	}
	// A key the server does not know is refused too.
	other, _, err := bus.EnsureKeys(filepath.Join(t.TempDir(), "other"))
	if err != nil || other == nil {
		t.Fatal(err)
	}
	_, err = bus.Connect(bus.Options{URL: srv.URL(), NkeyFile: bus.KeyFile(filepath.Join(t.TempDir(), "other"), bus.RoleMaster)})
	if err == nil {
		t.Fatal("a foreign key was accepted")
	}
}

func TestRolePermissions(t *testing.T) {
	srv, dir, s := securedBus(t)
	master, _ := asRole(t, srv, dir, bus.RoleMaster)
	slave, slaveErrs := asRole(t, srv, dir, bus.RoleSlave)
	submitter, subErrs := asRole(t, srv, dir, bus.RoleSubmitter)
	reader, readErrs := asRole(t, srv, dir, bus.RoleReader)

	// The master answers submit and status, and sees task events.
	for _, subject := range []string{s.Submit(), s.Status(), s.Join()} {
		if _, err := master.Subscribe(subject, func(m *nats.Msg) { m.Respond([]byte("ok")) }); err != nil {
			t.Fatal(err)
		}
	}
	events := make(chan string, 10)
	master.Subscribe(s.TaskEvents("*"), func(m *nats.Msg) { events <- string(m.Data) })
	kv := make(chan string, 10)
	master.Subscribe(s.SlaveKV("s1"), func(m *nats.Msg) { kv <- string(m.Data) })
	master.Flush()

	// Allowed: a submitter submits, a reader asks for status, a slave joins.
	for _, tc := range []struct {
		nc      *nats.Conn
		subject string
	}{{submitter, s.Submit()}, {submitter, s.Status()}, {reader, s.Status()}, {slave, s.Join()}} {
		if m, err := tc.nc.Request(tc.subject, []byte("x"), 2*time.Second); err != nil || string(m.Data) != "ok" {
			t.Errorf("request on %s: %v", tc.subject, err)
		}
	}

	// Denied: a submitter forging a task's done event or writing into the
	// data plane; a reader submitting; nobody but slaves reading KV traffic.
	submitter.Publish(s.TaskEvents("t1"), []byte("forged done"))
	submitter.Publish(s.SlaveKV("s1"), []byte("forged set"))
	if _, err := reader.Request(s.Submit(), []byte("x"), 300*time.Millisecond); err == nil {
		t.Error("a reader submitted a task")
	}
	if _, err := submitter.SubscribeSync(s.SlaveKV("s1")); err != nil {
		t.Fatal(err)
	}
	if _, err := submitter.SubscribeSync("_INBOX.slave.>"); err != nil {
		t.Fatal(err)
	}
	if got := subErrs(); len(got) < 4 || !allContain(got, "Permissions Violation") {
		t.Errorf("submitter violations: %q", got)
	}
	if got := readErrs(); len(got) == 0 || !allContain(got, "Permissions Violation") {
		t.Errorf("reader violations: %q", got)
	}
	// A slave may use the data plane but not publish task events.
	slave.Publish(s.SlaveKV("s1"), []byte("add"))
	slave.Publish(s.TaskEvents("t1"), []byte("forged by a slave"))
	if got := slaveErrs(); len(got) != 1 || !strings.Contains(got[0], "Permissions Violation") {
		t.Errorf("slave violations: %q", got)
	}
	master.Flush()
	select {
	case e := <-events:
		t.Errorf("a forged task event reached the master's subscribers: %q", e)
	case <-time.After(100 * time.Millisecond):
	}
	if got := <-kv; got != "add" {
		t.Errorf("kv got %q", got)
	}
	select {
	case m := <-kv:
		t.Errorf("a submitter's message reached the data plane: %q", m)
	default:
	}
}

func allContain(list []string, sub string) bool {
	for _, s := range list {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestEnsureKeysStableAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	a, created, err := bus.EnsureKeys(dir)
	if err != nil || len(created) != len(bus.Roles) {
		t.Fatalf("%v %v", created, err)
	}
	b, created, err := bus.EnsureKeys(dir)
	if err != nil || len(created) != 0 {
		t.Fatalf("second call created %v: %v", created, err)
	}
	for _, r := range bus.Roles {
		if a[r] != b[r] || !strings.HasPrefix(a[r], "U") {
			t.Errorf("%s: %q then %q", r, a[r], b[r])
		}
		fi, err := os.Stat(bus.KeyFile(dir, r))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v %v", r, fi.Mode(), err)
		}
	}
	// Keys others can read are refused, with the fix in the message.
	os.Chmod(bus.KeyFile(dir, bus.RoleSlave), 0o644)
	if _, _, err := bus.EnsureKeys(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key: %v", err)
	}
	os.Chmod(bus.KeyFile(dir, bus.RoleSlave), 0o600)
	os.WriteFile(bus.KeyFile(dir, bus.RoleReader), []byte("not a seed\n"), 0o600)
	if _, _, err := bus.EnsureKeys(dir); err == nil || !strings.Contains(err.Error(), "reader.nk") {
		t.Errorf("corrupt key: %v", err)
	}
}

func TestEnsureKeysConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	var wg sync.WaitGroup
	got := make([]bus.Keys, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _, errs[i] = bus.EnsureKeys(dir)
		}()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		for _, r := range bus.Roles {
			if got[i][r] != got[0][r] {
				t.Fatalf("caller %d sees a different %s key", i, r)
			}
		}
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, sc, sk, cc, ck := testkit.Certs(t, dir)
	for _, tc := range []struct {
		name     string
		clientCA string // server requires client certificates signed by it
		opt      bus.Options
		wantErr  string
	}{
		{name: "server cert, trusted", opt: bus.Options{CAFile: ca}},
		{name: "server cert, CA unknown to the client", opt: bus.Options{}, wantErr: "certificate"},
		{name: "client cert required and given", clientCA: ca, opt: bus.Options{CAFile: ca, CertFile: cc, KeyFile: ck}},
		{name: "client cert required, none given", clientCA: ca, opt: bus.Options{CAFile: ca}, wantErr: "tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: fmt.Sprintf("127.0.0.1:%d", closedPort(t)), CertFile: sc, KeyFile: sk, ClientCAFile: tc.clientCA})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Shutdown()
			// The master's own in-process connection needs no TLS, even
			// with TLS settings in its options (they are for TCP clients).
			in, err := srv.Connect(bus.Options{CAFile: ca})
			if err != nil {
				t.Fatalf("in-process connection with ca_file: %v", err)
			}
			in.Close()
			o := tc.opt
			o.URL = strings.Replace(srv.URL(), "nats://", "tls://", 1)
			nc, err := bus.Connect(o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.TLSConnectionState(); err != nil {
				t.Fatalf("connection is not TLS: %v", err)
			}
		})
	}
	if _, err := bus.StartEmbedded(bus.EmbeddedOptions{CertFile: sc}); err == nil {
		t.Error("a certificate without a key was accepted")
	}
}

// Every role hears the master's membership view; only the master may
// publish it (a slave must not forge a view that fences its peers), and
// only slaves announce a leave.
func TestMembershipPermissions(t *testing.T) {
	srv, dir, s := securedBus(t)
	master, _ := asRole(t, srv, dir, bus.RoleMaster)
	leaves := make(chan string, 4)
	if _, err := master.Subscribe(s.Leave(), func(m *nats.Msg) { leaves <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	master.Flush()
	var subs []*nats.Subscription
	errsOf := map[bus.Role]func() []string{}
	conns := map[bus.Role]*nats.Conn{}
	for _, r := range []bus.Role{bus.RoleSlave, bus.RoleSubmitter, bus.RoleReader} {
		nc, errs := asRole(t, srv, dir, r)
		conns[r], errsOf[r] = nc, errs
		sub, err := nc.SubscribeSync(s.Membership())
		if err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		subs = append(subs, sub)
	}
	if err := master.Publish(s.Membership(), []byte("view")); err != nil {
		t.Fatal(err)
	}
	for i, sub := range subs {
		if m, err := sub.NextMsg(2 * time.Second); err != nil || string(m.Data) != "view" {
			t.Errorf("subscriber %d did not hear the view: %v", i, err)
		}
	}
	conns[bus.RoleSlave].Publish(s.Leave(), []byte("bye"))
	if got := <-leaves; got != "bye" {
		t.Errorf("leave got %q", got)
	}
	for _, r := range []bus.Role{bus.RoleSlave, bus.RoleSubmitter, bus.RoleReader} {
		conns[r].Publish(s.Membership(), []byte("forged"))
		if got := errsOf[r](); len(got) != 1 || !strings.Contains(got[0], "Permissions Violation") {
			t.Errorf("%s publishing a view: violations %q", r, got)
		}
	}
	conns[bus.RoleSubmitter].Publish(s.Leave(), []byte("forged leave"))
	if got := errsOf[bus.RoleSubmitter](); len(got) != 2 {
		t.Errorf("submitter leave: violations %q", got)
	}
}
