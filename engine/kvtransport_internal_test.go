package engine

import "testing"

// A slave process's data plane: direct TCP by default, encrypted (TLS)
// when the bus is; NATS only when asked for.
func TestSlaveKVTransportChoice(t *testing.T) {
	for _, tc := range []struct {
		name, transport, ca, serverCert, want string
		tls                                   bool
	}{
		{"auto, plain bus", "", "", "", "tcp", false},
		{"auto, TLS client", "auto", "/ca.pem", "", "tcp", true},
		{"auto, TLS server", "", "", "/cert.pem", "tcp", true},
		{"explicit tcp, TLS bus", "tcp", "/ca.pem", "", "tcp", true},
		{"explicit nats", "nats", "", "", "nats", false},
		{"explicit nats, TLS bus", "nats", "/ca.pem", "", "nats", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ClusterConfig{KV: KVSect{Transport: tc.transport}, NATS: NATSConfig{CAFile: tc.ca, ServerCertFile: tc.serverCert}}
			if got, tls := c.kvTransport(); got != tc.want || tls != tc.tls {
				t.Fatalf("kv transport %q tls %v, want %q %v", got, tls, tc.want, tc.tls)
			}
		})
	}
}
