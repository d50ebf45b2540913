package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The handshake proves, both ways, that each end holds the listening
// endpoint's key, which only reaches those allowed to request it on the
// authenticated bus (see TCP). The key itself never crosses the TCP
// connection: each side answers the other's fresh random nonce with an
// HMAC-SHA256 over both nonces and both names, so a recorded handshake
// cannot be replayed and a connection cannot be redirected to another
// node.
//
//	dialer -> listener  magic, nonce_c, node, dialer's name
//	listener -> dialer  nonce_s, mac("server")
//	dialer -> listener  mac("client")
//	listener -> dialer  'K'
const (
	handshakeMagic = "FXDP\x01"
	nonceSize      = 32
	macSize        = sha256.Size
	maxHelloName   = 1024
	handshakeOK    = 'K'
)

// ErrAuth is wrapped when a data-plane handshake fails: the other end does
// not hold the key (or is not a flexps data plane at all).
var ErrAuth = errors.New("transport: data-plane authentication failed")

type handshake struct {
	key            []byte
	nonceC, nonceS [nonceSize]byte
	node, dialer   string
}

func (h *handshake) mac(label string) []byte {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(label))
	m.Write(h.nonceC[:])
	m.Write(h.nonceS[:])
	for _, s := range []string{h.node, h.dialer} {
		var n [2]byte
		binary.LittleEndian.PutUint16(n[:], uint16(len(s)))
		m.Write(n[:])
		m.Write([]byte(s))
	}
	return m.Sum(nil)
}

// dialHandshake authenticates a fresh connection to node's endpoint with
// key, naming this endpoint dialer.
func dialHandshake(rw io.ReadWriter, key []byte, node, dialer string) error {
	if len(node) > maxHelloName || len(dialer) > maxHelloName {
		return fmt.Errorf("transport: node name longer than %d bytes", maxHelloName)
	}
	h := handshake{key: key, node: node, dialer: dialer}
	if _, err := rand.Read(h.nonceC[:]); err != nil {
		return fmt.Errorf("transport: nonce: %w", err)
	}
	msg := append([]byte(handshakeMagic), h.nonceC[:]...)
	msg = appendName(msg, node)
	msg = appendName(msg, dialer)
	if _, err := rw.Write(msg); err != nil {
		return err
	}
	var ch [nonceSize + macSize]byte
	if _, err := io.ReadFull(rw, ch[:]); err != nil {
		return fmt.Errorf("%w: no challenge: %v", ErrAuth, err)
	}
	copy(h.nonceS[:], ch[:nonceSize])
	if !hmac.Equal(ch[nonceSize:], h.mac("flexps-dp server")) {
		return fmt.Errorf("%w: the listener does not hold node %s's key", ErrAuth, node)
	}
	if _, err := rw.Write(h.mac("flexps-dp client")); err != nil {
		return err
	}
	var ok [1]byte
	if _, err := io.ReadFull(rw, ok[:]); err != nil || ok[0] != handshakeOK {
		return fmt.Errorf("%w: refused by the listener", ErrAuth)
	}
	return nil
}

// acceptHandshake authenticates a connection a dialer opened, returning
// the node it asked for and the dialer's name.
func acceptHandshake(rw io.ReadWriter, key []byte) (node, dialer string, err error) {
	// The magic first: a foreign protocol is refused as soon as its first
	// bytes arrive, not when the handshake deadline ends a read waiting
	// for more.
	var magic [len(handshakeMagic)]byte
	if _, err := io.ReadFull(rw, magic[:]); err != nil {
		return "", "", fmt.Errorf("%w: no hello: %v", ErrAuth, err)
	}
	if string(magic[:]) != handshakeMagic {
		return "", "", fmt.Errorf("%w: not a flexps data-plane hello (first bytes %q)", ErrAuth, magic[:])
	}
	h := handshake{key: key}
	if _, err := io.ReadFull(rw, h.nonceC[:]); err != nil {
		return "", "", fmt.Errorf("%w: truncated hello: %v", ErrAuth, err)
	}
	if h.node, err = readName(rw); err == nil {
		h.dialer, err = readName(rw)
	}
	if err != nil {
		return "", "", err
	}
	if _, err := rand.Read(h.nonceS[:]); err != nil {
		return "", "", fmt.Errorf("transport: nonce: %w", err)
	}
	if _, err := rw.Write(append(h.nonceS[:], h.mac("flexps-dp server")...)); err != nil {
		return "", "", err
	}
	var proof [macSize]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		return "", "", fmt.Errorf("%w: no proof from %q: %v", ErrAuth, h.dialer, err)
	}
	if !hmac.Equal(proof[:], h.mac("flexps-dp client")) {
		return "", "", fmt.Errorf("%w: %q does not hold the key", ErrAuth, h.dialer)
	}
	if _, err := rw.Write([]byte{handshakeOK}); err != nil {
		return "", "", err
	}
	return h.node, h.dialer, nil
}

func appendName(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func readName(r io.Reader) (string, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", fmt.Errorf("%w: truncated hello: %v", ErrAuth, err)
	}
	l := int(binary.LittleEndian.Uint16(n[:]))
	if l > maxHelloName {
		return "", fmt.Errorf("%w: name of %d bytes in hello", ErrAuth, l)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("%w: truncated hello: %v", ErrAuth, err)
	}
	return string(b), nil
}
