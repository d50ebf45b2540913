package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Frames of the TCP data plane. After the handshake each direction of a
// connection is a stream of frames:
//
//	u32 length of what follows (little endian)
//	u8  kind
//	u16 len(a), a   request: the node the request is for; otherwise empty
//	u16 len(b), b   request: the reply address; reply/no-responder: the address answered
//	data            the kvstore codec's bytes, untouched
//
// The payload is carried as is: the reader hands requests to the handler
// straight out of its read buffer, and replies are read once into the
// slice the inbox keeps.
const (
	frameRequest     byte = 1 // a request for node a, answers to b
	frameReply       byte = 2 // an answer for address b
	frameNoResponder byte = 3 // the request answered at b named a node not served here
)

// frameHeader is the length prefix; frameFixed the fixed part after it.
const (
	frameHeader = 4
	frameFixed  = 1 + 2 + 2
	// maxFrame bounds what a reader accepts: well above any payload the
	// transport lets through (MaxPayload), far below what would let a
	// broken or hostile peer make it allocate without limit.
	maxFrame = 64 << 20
	maxName  = 1<<16 - 1
)

var errFrame = errors.New("transport: malformed data-plane frame")

// appendFrame appends one frame to dst.
func appendFrame(dst []byte, kind byte, a, b string, data []byte) []byte {
	n := frameFixed + len(a) + len(b) + len(data)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, kind)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(a)))
	dst = append(dst, a...)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(b)))
	dst = append(dst, b...)
	return append(dst, data...)
}

// frameSize is the size appendFrame needs.
func frameSize(a, b string, data []byte) int {
	return frameHeader + frameFixed + len(a) + len(b) + len(data)
}

// checkFrame says whether a frame with these parts may be sent.
func checkFrame(a, b string, data []byte) error {
	if len(a) > maxName || len(b) > maxName {
		return fmt.Errorf("transport: node name or reply address longer than %d bytes", maxName)
	}
	if frameFixed+len(a)+len(b)+len(data) > maxFrame {
		return fmt.Errorf("transport: message of %d bytes is larger than a frame (%d)", len(data), maxFrame)
	}
	return nil
}

// frameLen decodes a length prefix, refusing lengths no valid frame has.
func frameLen(hdr []byte) (int, error) {
	n := binary.LittleEndian.Uint32(hdr)
	if n < frameFixed || n > maxFrame {
		return 0, fmt.Errorf("%w: length %d", errFrame, n)
	}
	return int(n), nil
}

// decodeFrame splits a frame's body (what follows the length prefix). The
// parts alias body.
func decodeFrame(body []byte) (kind byte, a, b, data []byte, err error) {
	if len(body) < frameFixed {
		return 0, nil, nil, nil, fmt.Errorf("%w: %d bytes", errFrame, len(body))
	}
	kind = body[0]
	if kind < frameRequest || kind > frameNoResponder {
		return 0, nil, nil, nil, fmt.Errorf("%w: kind %d", errFrame, kind)
	}
	rest := body[1:]
	if a, rest, err = cutName(rest); err != nil {
		return 0, nil, nil, nil, err
	}
	if b, rest, err = cutName(rest); err != nil {
		return 0, nil, nil, nil, err
	}
	if kind == frameRequest && len(a) == 0 {
		return 0, nil, nil, nil, fmt.Errorf("%w: request for no node", errFrame)
	}
	if kind != frameRequest && len(b) == 0 {
		return 0, nil, nil, nil, fmt.Errorf("%w: answer to no address", errFrame)
	}
	return kind, a, b, rest, nil
}

func cutName(b []byte) (name, rest []byte, err error) {
	if len(b) < 2 {
		return nil, nil, fmt.Errorf("%w: truncated", errFrame)
	}
	n := int(binary.LittleEndian.Uint16(b))
	if len(b)-2 < n {
		return nil, nil, fmt.Errorf("%w: name of %d bytes, %d left", errFrame, n, len(b)-2)
	}
	return b[2 : 2+n], b[2+n:], nil
}
