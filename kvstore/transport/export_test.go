package transport

import (
	"context"
	"io"
	"net"
)

// DropConns breaks every connection of t, as a network failure would.
func DropConns(t *TCP) {
	t.mu.Lock()
	var cs []*tcpConn
	for c := range t.conns {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.nc.Close()
	}
}

// DialHandshake runs the dialer's side of the handshake with key.
func DialHandshake(rw io.ReadWriter, key []byte, node, dialer string) error {
	return dialHandshake(rw, key, node, dialer)
}

// AppendFrame and DecodeFrame expose the frame codec.
var (
	AppendFrame = appendFrame
	DecodeFrame = decodeFrame
	FrameLen    = frameLen
)

const (
	FrameRequest     = frameRequest
	FrameReply       = frameReply
	FrameNoResponder = frameNoResponder
)

// AcceptHandshake runs the listener's side of the handshake with key.
func AcceptHandshake(rw io.ReadWriter, key []byte) (node, dialer string, err error) {
	return acceptHandshake(rw, key)
}

// MaxHandshakes is how many handshakes a listener runs at once.
const MaxHandshakes = maxHandshakes

// TLSDial runs the dialer's TLS handshake over nc, accepting only the
// certificate whose SHA-256 is pin.
func TLSDial(nc net.Conn, pin []byte) (net.Conn, error) {
	return tlsDial(context.Background(), nc, pin)
}
