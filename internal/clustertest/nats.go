package clustertest

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
)

// NATSEnv marks a re-executed test binary that must serve a bare NATS
// server on the address the variable holds (ServeNATS): the external
// nats-server of a cluster, as a process a drill can kill.
const NATSEnv = "FLEXPS_TEST_AS_NATS"

// ServeNATS serves a NATS server (the embedded one with its defaults, as a
// stock nats-server: no auth, 1 MiB max payload) on addr until SIGTERM or
// SIGINT, and returns the process's exit code. A test binary's TestMain
// calls it when NATSEnv is set.
func ServeNATS(addr string) int {
	srv, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: addr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("NATS server ready on", addr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Shutdown()
	return 0
}

// NATS is an external NATS server process on a loopback port, stopped at
// the test's cleanup.
type NATS struct {
	t       testing.TB
	command []string
	env     []string
	dir     string
	Addr    string // 127.0.0.1:port
	URL     string // nats://127.0.0.1:port
	Proc    *Proc
	starts  int
}

// StartNATS starts a NATS server process (command re-executed with
// NATSEnv set) on a free loopback port and waits until it accepts
// connections.
func StartNATS(t testing.TB, command, env []string) *NATS {
	t.Helper()
	port := FreePort(t)
	n := &NATS{t: t, command: command, env: env, dir: t.TempDir(), Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	n.URL = "nats://" + n.Addr
	t.Cleanup(func() {
		if n.Proc != nil {
			n.Proc.Stop()
		}
	})
	n.Start()
	return n
}

// Start starts the server again on its port (after Kill) and waits until
// it accepts connections; its log is nats-N.log.
func (n *NATS) Start() {
	n.t.Helper()
	n.starts++
	n.Proc = spawn(n.t, n.dir, "", n.command, append(append([]string(nil), n.env...), NATSEnv+"="+n.Addr), fmt.Sprintf("nats-%d", n.starts))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", n.Addr, time.Second); err == nil {
			c.Close()
			return
		}
		if n.Proc.Exited() || time.Now().After(deadline) {
			n.t.Fatalf("NATS server on %s did not start:\n%s", n.Addr, n.Proc.Output())
		}
	}
}

// Kill kills the server process (SIGKILL): every connection drops.
func (n *NATS) Kill() { n.Proc.Kill() }
