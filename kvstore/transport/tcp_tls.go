package transport

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Encryption (TCPConfig.TLS). An endpoint makes a private key and a
// self-signed certificate when it starts, and its hello answer carries the
// certificate's SHA-256 fingerprint next to the address and the key. A
// dialer runs TLS 1.3 over the connection and accepts only a certificate
// with that fingerprint (pinned through the bus, which is encrypted itself
// when this matters), then the key handshake of tcp_auth.go inside the
// encrypted channel, which authenticates the dialer. A listener that
// encrypts refuses a dialer that does not (its first bytes are not a TLS
// hello), and a dialer that encrypts does not dial a peer whose hello
// carries no fingerprint: it keeps that peer's traffic on the bus.

// tlsIdentity is an endpoint's certificate and its fingerprint.
type tlsIdentity struct {
	cert tls.Certificate
	pin  []byte // SHA-256 of the certificate's DER bytes
}

// newTLSIdentity makes a P-256 key and a self-signed certificate for name.
func newTLSIdentity(name string) (*tlsIdentity, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("transport: data-plane TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("transport: data-plane TLS certificate: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "flexps data plane " + name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0), // pinned, not trusted by date: lives as long as the process
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("transport: data-plane TLS certificate: %w", err)
	}
	pin := sha256.Sum256(der)
	return &tlsIdentity{cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pin: pin[:]}, nil
}

// server wraps an accepted connection.
func (id *tlsIdentity) server(nc net.Conn) net.Conn {
	return tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{id.cert}, MinVersion: tls.VersionTLS13})
}

// errPin is wrapped when a peer's certificate is not the one its hello
// named.
var errPin = errors.New("certificate does not match the fingerprint its hello gave")

// tlsDial runs a TLS 1.3 handshake as a client over nc, accepting only the
// certificate whose SHA-256 is pin.
func tlsDial(ctx context.Context, nc net.Conn, pin []byte) (net.Conn, error) {
	c := tls.Client(nc, &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: "flexps-data-plane",
		// The chain is not verified against any authority: the one
		// certificate the pin names is accepted, and only it.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return fmt.Errorf("%w: no certificate", ErrAuth)
			}
			if got := sha256.Sum256(raw[0]); !bytes.Equal(got[:], pin) {
				return fmt.Errorf("%w: %w", ErrAuth, errPin)
			}
			return nil
		},
	})
	if err := c.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return c, nil
}
