package engine

import (
	"testing"

	"github.com/rs/zerolog"
)

// A slave process's data plane: direct TCP by default, but never a
// plaintext one next to an encrypted bus unless asked for explicitly.
func TestSlaveKVTransportChoice(t *testing.T) {
	for _, tc := range []struct {
		name, transport, ca, serverCert, want string
	}{
		{"auto, plain bus", "", "", "", "tcp"},
		{"auto, TLS client", "auto", "/ca.pem", "", "nats"},
		{"auto, TLS server", "", "", "/cert.pem", "nats"},
		{"explicit tcp, TLS bus", "tcp", "/ca.pem", "", "tcp"},
		{"explicit nats", "nats", "", "", "nats"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ClusterConfig{KV: KVSect{Transport: tc.transport}, NATS: NATSConfig{CAFile: tc.ca, ServerCertFile: tc.serverCert}}
			if got := c.kvTransport(zerolog.Nop()); got != tc.want {
				t.Fatalf("kv transport %q, want %q", got, tc.want)
			}
		})
	}
}
