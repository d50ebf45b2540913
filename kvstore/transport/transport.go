// Package transport is the seam between the KV store's clients and its
// shard servers. A node (a slave hosting shards) serves the requests
// addressed to it, one at a time in arrival order; a client sends requests
// to a node with a reply address naming one of its inboxes, and reads the
// answers from that inbox. Messages are opaque bytes (the kvstore codec).
//
// Guarantees every implementation gives: the requests one sender sends to
// one node are handled in the order they were sent (a worker's Adds land
// before its later Clock and Get); a server never drops a request (no
// slow-consumer limit: a dropped Add would be a lost update); a request to
// a node nobody serves fails naming that node, either at once from Send
// (an *UnreachableError) or as a NoResponder message on the reply address.
//
// Forwarding: a handler may re-send a request it received to another node
// with the reply address it came with (Send(other, reply, data)); the final
// handler then answers the original requester directly. Key relocation
// uses this: a node that no longer owns a key passes the request on.
//
// NATS carries every request through the bus; TCP carries them over
// direct connections between slave processes, found and authenticated
// through the bus, with NATS as the fallback; Mem connects the nodes of one
// process without a bus (tests, single-process runs).
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Transport carries KV requests to nodes and answers back.
type Transport interface {
	// Serve delivers every request sent to node to h, one at a time, in
	// arrival order, until the returned Closer is closed. It returns once
	// requests sent after it are sure to reach h.
	Serve(node string, h Handler) (io.Closer, error)
	// Send sends a request to node; answers go to reply ("" for none).
	// data may be reused once Send returns.
	Send(node, reply string, data []byte) error
	// Reply sends an answer to a reply address. An address whose inbox is
	// closed swallows it, as a requester that left no longer cares.
	Reply(addr string, data []byte) error
	// Listen opens an inbox for answers.
	Listen() (Inbox, error)
	// MaxPayload is the largest message Send and Reply accept, in bytes.
	MaxPayload() int
}

// Appender is a Transport that builds a message where it leaves from
// (TCP: in the connection's send buffer), so a large message is encoded
// once instead of encoded and then copied. build appends the message to
// its argument and returns the result; it must not keep either, and
// should append at most size bytes (more costs a copy). It runs before
// SendAppend or ReplyAppend returns, possibly twice (a connection broke
// under it and the message takes the bus), appending the same bytes.
type Appender interface {
	SendAppend(node, reply string, size int, build func([]byte) []byte) error
	ReplyAppend(addr string, size int, build func([]byte) []byte) error
}

// TailSender is an Appender that can also send a request whose last
// bytes are the caller's own (TCP: written to the socket from where they
// are, not copied into a send buffer). The message is what build appends
// followed by tail; done is called exactly once, when the transport no
// longer reads tail (it was written, copied, or will never be sent: the
// connection broke), possibly before SendTail returns and also when it
// returns an error. The caller must not change tail until then.
type TailSender interface {
	SendTail(node, reply string, size int, build func([]byte) []byte, tail []byte, done func()) error
}

// Handler serves one request. data is valid only during the call; reply
// is where answers go ("" when the sender wants none).
type Handler func(data []byte, reply string)

// Inbox receives answers sent to its address or to any address below it
// (Addr()+"."+tail), so one inbox tells many outstanding requests apart.
type Inbox interface {
	Addr() string
	// Next blocks for the next answer, until ctx is done.
	Next(ctx context.Context) (Msg, error)
	Close() error
}

// Msg is one answer taken from an Inbox.
type Msg struct {
	Tail string // the reply address without the inbox's Addr() and dot
	Data []byte
	// NoResponder: the request sent with this reply address reached no
	// server (its node is gone); Data is empty.
	NoResponder bool
	// Err: the request sent with this reply address may never be
	// answered: the connection that carried it broke (wraps
	// ErrConnLost). Data is empty.
	Err error
	// buf is Data's pooled buffer (large answers over TCP), given back by
	// Release.
	buf *[]byte
}

// Release gives m's Data back for reuse by later answers: call it once,
// when nothing refers to Data any more (optional: without it Data is
// garbage collected).
func (m Msg) Release() { putBuf(m.buf) }

// ErrUnreachable is wrapped by UnreachableError.
var ErrUnreachable = errors.New("transport: node unreachable")

// ErrClosed is returned by a closed inbox.
var ErrClosed = errors.New("transport: inbox closed")

// UnreachableError names a node no server answers for.
type UnreachableError struct{ Node string }

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("transport: node %s is unreachable: nothing serves it", e.Node)
}

func (e *UnreachableError) Unwrap() error { return ErrUnreachable }
