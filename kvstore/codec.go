package kvstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Op is the kind of a data-plane message.
type Op uint8

const (
	OpGet Op = iota + 1
	OpAdd
	OpGetRange
	OpAddRange
	OpClock
	OpFinish
	OpReply
	OpError
	OpSet
	OpSetRange // overwrite keys First..First+N-1
	// OpScan reads a page of a shard: First is the cursor (0 to start),
	// N the most keys wanted. The reply holds the page's Keys and Vals,
	// First the next page's cursor and N 1 when there is a next page.
	OpScan
	// Relocation (see ownership): OpLocalize asks a key's home to move the
	// keys to Node (from a worker to its own slave, then slave to home);
	// OpTransfer tells the current owner to send them to Node; OpValues
	// carries their values (and Versions) to the new owner.
	OpLocalize
	OpTransfer
	OpValues
	// Replication (see replica.go): OpSnapshot carries a page of a shard's
	// values from its primary to a new backup (Keys, Vals), and, with
	// N = 1 and no keys, the end of the snapshot with the applied request
	// ids in Blob; OpFailover is a node's note to itself that the task's
	// membership changed (handled in line with its requests).
	OpSnapshot
	OpFailover
)

var opNames = [...]string{"", "get", "add", "get_range", "add_range", "clock", "finish", "reply", "error", "set", "set_range", "scan", "localize", "transfer", "values", "snapshot", "failover"}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Message is one data-plane request or reply between a KV client and a
// shard. Every field travels; empty sections cost one flag bit.
type Message struct {
	Op     Op
	Task   string
	Table  string
	Stage  int32
	Worker int32
	Clock  int64
	Keys   []uint64 // Get/Add/Set: delta from the previous key, zigzag varint
	First  uint64   // range ops
	N      uint32   // range ops: number of keys
	Width  uint16
	DType  DType     // how Vals travel: Float32 -> 4 bytes LE each, otherwise 8 bytes LE
	Vals   []float64 // values (Add/AddRange/Set/Reply)
	Err    string    // OpError
	// From is the sender's membership incarnation (0: none); a server
	// refuses requests of a fenced one (Server.SetFence).
	From uint64
	// Raw, when set instead of Vals, holds the values already encoded in
	// DType (little-endian): AppendMessage copies it as is. DecodeRaw
	// leaves values there (a slice of the input) instead of converting.
	Raw []byte
	// Pos, when set, are the positions in the client's original request
	// of this message's keys: a request a non-owner forwarded carries
	// them, and the reply names which of the reader's values it answers.
	Pos      []int
	Versions []uint64 // OpTransfer/OpValues: each key's move count
	// Node is a shard index: OpLocalize's requester, OpTransfer's
	// destination; in a reply, the serving node's index + 1 (0: not said),
	// which the reader's location cache learns.
	Node int32
	// Repl marks a message of a replicated table (the flagRepl section):
	// ReqID is the client's request id (echoed by the acknowledgement),
	// Shard the shard the request is for (a node may hold several), Hop 0
	// from the client and 1, 2, ... down the replica chain; Blob is
	// OpSnapshot's end marker payload.
	Repl  bool
	ReqID uint64
	Floor uint64 // every request id of the client below it is acknowledged
	Epoch uint64 // the membership epoch of the sender's view (deaths it knows of)
	Shard int32
	Hop   uint8
	Blob  []byte
}

// ErrCodec is wrapped by every decoding error.
var ErrCodec = errors.New("kvstore codec")

// Wire format, version 2:
//
//	version byte | op byte | flags byte | dtype byte
//	uvarint len + Task | uvarint len + Table
//	varint Stage | varint Worker | varint Clock | uvarint Width
//	[flagKeys]  uvarint count, count x uvarint zigzag(key - prev), prev starts at 0
//	[flagRange] uvarint First | uvarint N
//	[flagErr]   uvarint len + Err
//	[flagOwn]   uvarint Node | uvarint count, count x uvarint Pos |
//	            uvarint count, count x uvarint Versions
//	[flagFrom]  uvarint From
//	[flagRepl]  uvarint ReqID | uvarint Floor | uvarint Epoch | uvarint Shard | byte Hop |
//	            uvarint len + Blob
//	[flagVals]  uvarint count, count x 4 or 8 bytes little-endian
//
// dtype: 0 unset (values travel as float64), 1 float32, 2 float64. The
// values come last (version 1 had them after the range), so a message's
// raw values can follow its head as the caller's own bytes (appendHead,
// transport.TailSender).
const codecVersion = 2

const (
	flagKeys = 1 << iota
	flagRange
	flagVals
	flagErr
	flagOwn
	flagFrom
	flagRepl
	flagAll = flagKeys | flagRange | flagVals | flagErr | flagOwn | flagFrom | flagRepl
)

func dtypeByte(d DType) byte {
	switch d {
	case Float32:
		return 1
	case Float64:
		return 2
	}
	return 0
}

// AppendMessage appends m's encoding to dst. It allocates only when dst is
// too small; encodedSize bounds its size.
func AppendMessage(dst []byte, m *Message) []byte {
	dst, tail := appendHead(dst, m)
	return append(dst, tail...)
}

// appendHead appends m's encoding to dst but for m.Raw's bytes, which are
// its last ones: the encoding is dst's new bytes then tail (nil without
// m.Raw).
func appendHead(dst []byte, m *Message) (head, tail []byte) {
	dst = appendHeadRaw(dst, m, len(m.Raw))
	if len(m.Raw) > 0 {
		return dst, rawTail(m)
	}
	return dst, nil
}

// appendHeadRaw is appendHead's head of m as if m.Raw held rawLen bytes
// of values: a sender that writes the values itself (a shard encoding its
// rows straight into the send buffer) appends them right after.
func appendHeadRaw(dst []byte, m *Message, rawLen int) []byte {
	var flags byte
	if len(m.Keys) > 0 {
		flags |= flagKeys
	}
	if m.First != 0 || m.N != 0 {
		flags |= flagRange
	}
	if len(m.Vals) > 0 || rawLen > 0 {
		flags |= flagVals
	}
	if m.Err != "" {
		flags |= flagErr
	}
	if m.Node != 0 || len(m.Pos) > 0 || len(m.Versions) > 0 {
		flags |= flagOwn
	}
	if m.From != 0 {
		flags |= flagFrom
	}
	if m.Repl {
		flags |= flagRepl
	}
	dt := dtypeByte(m.DType)
	dst = append(dst, codecVersion, byte(m.Op), flags, dt)
	dst = appendString(dst, m.Task)
	dst = appendString(dst, m.Table)
	dst = binary.AppendVarint(dst, int64(m.Stage))
	dst = binary.AppendVarint(dst, int64(m.Worker))
	dst = binary.AppendVarint(dst, m.Clock)
	dst = binary.AppendUvarint(dst, uint64(m.Width))
	if flags&flagKeys != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(m.Keys)))
		var prev uint64
		for _, k := range m.Keys {
			d := int64(k - prev)
			z := uint64(d<<1) ^ uint64(d>>63)
			if z < 0x80 { // most deltas of a sorted batch (see decoder.keys)
				dst = append(dst, byte(z))
			} else {
				dst = binary.AppendUvarint(dst, z)
			}
			prev = k
		}
	}
	if flags&flagRange != 0 {
		dst = binary.AppendUvarint(dst, m.First)
		dst = binary.AppendUvarint(dst, uint64(m.N))
	}
	if flags&flagErr != 0 {
		dst = appendString(dst, m.Err)
	}
	if flags&flagOwn != 0 {
		dst = binary.AppendUvarint(dst, uint64(m.Node))
		dst = binary.AppendUvarint(dst, uint64(len(m.Pos)))
		for _, p := range m.Pos {
			dst = binary.AppendUvarint(dst, uint64(p))
		}
		dst = binary.AppendUvarint(dst, uint64(len(m.Versions)))
		for _, v := range m.Versions {
			dst = binary.AppendUvarint(dst, v)
		}
	}
	if flags&flagFrom != 0 {
		dst = binary.AppendUvarint(dst, m.From)
	}
	if flags&flagRepl != 0 {
		dst = binary.AppendUvarint(dst, m.ReqID)
		dst = binary.AppendUvarint(dst, m.Floor)
		dst = binary.AppendUvarint(dst, m.Epoch)
		dst = binary.AppendUvarint(dst, uint64(m.Shard))
		dst = append(dst, m.Hop)
		dst = binary.AppendUvarint(dst, uint64(len(m.Blob)))
		dst = append(dst, m.Blob...)
	}
	if flags&flagVals != 0 && rawLen > 0 {
		size := 8
		if dt == 1 {
			size = 4
		}
		return binary.AppendUvarint(dst, uint64(rawLen/size))
	} else if flags&flagVals != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(m.Vals)))
		if dt == 1 {
			dst = growBytes(dst, 4*len(m.Vals))
			putFloat32s(dst[len(dst)-4*len(m.Vals):], m.Vals)
		} else {
			dst = growBytes(dst, 8*len(m.Vals))
			b := dst[len(dst)-8*len(m.Vals):]
			for i, v := range m.Vals {
				binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
			}
		}
	}
	return dst
}

// rawTail is the part of m's encoding appendHead leaves out: m.Raw's
// whole values.
func rawTail(m *Message) []byte {
	size := 8
	if dtypeByte(m.DType) == 1 {
		size = 4
	}
	return m.Raw[:len(m.Raw)/size*size]
}

// growBytes extends b by n bytes (contents unspecified).
func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// encodedSize is a cheap upper bound of len(AppendMessage(nil, m)).
func encodedSize(m *Message) int {
	n := 4 + 2*binary.MaxVarintLen64 + len(m.Task) + len(m.Table) + // header, names
		3*binary.MaxVarintLen64 + 3 + // stage, worker, clock, width
		binary.MaxVarintLen64 + binary.MaxVarintLen64*len(m.Keys) +
		2*binary.MaxVarintLen64 + // range
		binary.MaxVarintLen64 + valSize(m.DType)*len(m.Vals) + len(m.Raw) +
		binary.MaxVarintLen64 + len(m.Err) +
		binary.MaxVarintLen64*(4+len(m.Pos)+len(m.Versions)) +
		5*binary.MaxVarintLen64 + 1 + len(m.Blob)
	return n
}

// valSize is the size of one value of dtype on the wire.
func valSize(d DType) int {
	if d == Float32 {
		return 4
	}
	return 8
}

// headerSlack is what MaxKeysPerMessage leaves for the fixed fields and
// the task and table names (names up to ~400 bytes each).
const headerSlack = 1024

// MaxKeysPerMessage is how many keys (each with width values of dtype)
// surely fit in a message of at most maxPayload bytes, whatever their key
// deltas, leaving headerSlack bytes for the header. It is 0 when not even
// one key surely fits.
func MaxKeysPerMessage(maxPayload int, width int, dtype DType) int {
	if width < 1 {
		width = 1
	}
	size := 8
	if dtype == Float32 {
		size = 4
	}
	per := binary.MaxVarintLen64 + width*size
	avail := maxPayload - headerSlack
	if avail < per {
		return 0
	}
	return avail / per
}

// DecodeMessage decodes b into m, reusing m.Keys and m.Vals capacity (and
// m.Task/m.Table when unchanged). It never panics; errors wrap ErrCodec.
// Counts are checked against the remaining bytes before anything is
// allocated, so a garbage length cannot cause a huge allocation.
func DecodeMessage(b []byte, m *Message) error { return decodeMessage(b, m, false) }

// decodeRaw is DecodeMessage leaving the values encoded in m.Raw (a slice
// of b, valid while b is) for the caller to convert where they belong.
func decodeRaw(b []byte, m *Message) error { return decodeMessage(b, m, true) }

// rawInto converts raw values encoded in dtype into out (len(out) values).
func rawInto(out []float64, raw []byte, dtype DType) {
	if dtype == Float32 {
		getFloat32s(out, raw)
		return
	}
	raw = raw[:8*len(out)]
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
	}
}

func decodeMessage(b []byte, m *Message, raw bool) error {
	d := decoder{b: b}
	if len(b) < 4 {
		return fmt.Errorf("%w: truncated header (%d bytes)", ErrCodec, len(b))
	}
	if b[0] != codecVersion {
		return fmt.Errorf("%w: unknown version %d", ErrCodec, b[0])
	}
	op, flags, dt := Op(b[1]), b[2], b[3]
	if op < OpGet || op > OpFailover {
		return fmt.Errorf("%w: bad op %d", ErrCodec, b[1])
	}
	if flags&^flagAll != 0 {
		return fmt.Errorf("%w: bad flags %#x", ErrCodec, flags)
	}
	if dt > 2 {
		return fmt.Errorf("%w: bad dtype %d", ErrCodec, dt)
	}
	d.i = 4
	m.Op = op
	m.DType = [...]DType{"", Float32, Float64}[dt]
	m.Task = d.str("task", m.Task)
	m.Table = d.str("table", m.Table)
	m.Stage = int32(d.varint32("stage"))
	m.Worker = int32(d.varint32("worker"))
	m.Clock = d.varint("clock")
	m.Width = uint16(d.uvarintMax("width", math.MaxUint16))
	m.Keys = m.Keys[:0]
	if flags&flagKeys != 0 {
		n := d.count("keys", 1)
		if d.err == nil && n == 0 {
			d.fail("keys flag with zero keys")
		}
		m.Keys = grow(m.Keys, n)
		if d.err == nil {
			d.keys(m.Keys)
		}
	}
	m.First, m.N = 0, 0
	if flags&flagRange != 0 {
		m.First = d.uvarint("first")
		m.N = uint32(d.uvarintMax("n", math.MaxUint32))
		if d.err == nil && m.First == 0 && m.N == 0 {
			d.fail("range flag with empty range")
		}
	}
	m.Err = ""
	if flags&flagErr != 0 {
		m.Err = d.str("err", "")
		if d.err == nil && m.Err == "" {
			d.fail("err flag with empty error")
		}
	}
	m.Node, m.Pos, m.Versions = 0, m.Pos[:0], m.Versions[:0]
	if flags&flagOwn != 0 {
		m.Node = int32(d.uvarintMax("node", math.MaxInt32))
		n := d.count("pos", 1)
		m.Pos = grow(m.Pos, n)
		for i := 0; i < n && d.err == nil; i++ {
			m.Pos[i] = int(d.uvarintMax("pos", math.MaxInt32))
		}
		n = d.count("versions", 1)
		m.Versions = grow(m.Versions, n)
		for i := 0; i < n && d.err == nil; i++ {
			m.Versions[i] = d.uvarint("version")
		}
	}
	m.From = 0
	if flags&flagFrom != 0 {
		if m.From = d.uvarint("from"); d.err == nil && m.From == 0 {
			d.fail("from flag with zero incarnation")
		}
	}
	m.Repl, m.ReqID, m.Floor, m.Epoch, m.Shard, m.Hop, m.Blob = false, 0, 0, 0, 0, 0, nil
	if flags&flagRepl != 0 {
		m.Repl = true
		m.ReqID = d.uvarint("request id")
		m.Floor = d.uvarint("floor")
		m.Epoch = d.uvarint("epoch")
		m.Shard = int32(d.uvarintMax("shard", math.MaxInt32))
		if d.err == nil {
			if d.i >= len(d.b) {
				d.fail("truncated hop")
			} else {
				m.Hop = d.b[d.i]
				d.i++
			}
		}
		if n := d.count("blob", 1); d.err == nil && n > 0 {
			m.Blob = d.b[d.i : d.i+n]
			d.i += n
		}
	}
	m.Vals, m.Raw = m.Vals[:0], nil
	if flags&flagVals != 0 {
		size := 8
		if dt == 1 {
			size = 4
		}
		n := d.count("vals", size)
		if d.err == nil && n == 0 {
			d.fail("vals flag with zero values")
		}
		if d.err == nil && raw {
			m.Raw = d.b[d.i : d.i+n*size]
			d.i += n * size
		} else if d.err == nil {
			m.Vals = grow(m.Vals, n)
			src := d.b[d.i : d.i+n*size]
			if size == 4 {
				for i := range m.Vals {
					m.Vals[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:])))
				}
			} else {
				for i := range m.Vals {
					m.Vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))
				}
			}
			d.i += n * size
		}
	}
	if d.err == nil && d.i != len(b) {
		d.fail("%d trailing bytes", len(b)-d.i)
	}
	if d.err != nil {
		m.Keys, m.Vals, m.Raw, m.Pos, m.Versions = m.Keys[:0], m.Vals[:0], nil, m.Pos[:0], m.Versions[:0]
	}
	return d.err
}

type decoder struct {
	b   []byte
	i   int
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", ErrCodec, d.i, fmt.Sprintf(format, a...))
	}
}

// badVarint fails the decoding of what, whose varint read returned n <= 0.
func (d *decoder) badVarint(n int, what string) {
	if n == 0 {
		d.fail("truncated %s", what)
	} else {
		d.fail("%s overflows 64 bits", what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.i:])
	if n <= 0 {
		d.badVarint(n, what)
		return 0
	}
	d.i += n
	return v
}

// keys decodes len(keys) zigzag deltas into keys. Most deltas of a
// sorted batch fit one byte, and a width-1 message is mostly keys: the
// loop keeps its position in a local and decodes one-byte varints inline
// (a call per key cost 37% of a shard serving 1M-key pulls).
func (d *decoder) keys(keys []uint64) {
	b, i := d.b, d.i
	var prev uint64
	for k := range keys {
		var z uint64
		if i < len(b) && b[i] < 0x80 {
			z = uint64(b[i])
			i++
		} else {
			v, n := binary.Uvarint(b[min(i, len(b)):])
			if n <= 0 {
				d.i = i
				d.badVarint(n, "key")
				return
			}
			z, i = v, i+n
		}
		prev += uint64(int64(z>>1) ^ -int64(z&1))
		keys[k] = prev
	}
	d.i = i
}

func (d *decoder) uvarintMax(what string, max uint64) uint64 {
	v := d.uvarint(what)
	if v > max {
		d.fail("%s %d out of range", what, v)
		return 0
	}
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.i:])
	if n <= 0 {
		d.badVarint(n, what)
		return 0
	}
	d.i += n
	return v
}

func (d *decoder) varint32(what string) int64 {
	v := d.varint(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("%s %d out of int32 range", what, v)
		return 0
	}
	return v
}

// count reads an element count and checks that count elements of at
// least minSize bytes each fit in what is left.
func (d *decoder) count(what string, minSize int) int {
	v := d.uvarint(what)
	if d.err != nil {
		return 0
	}
	if left := uint64(len(d.b) - d.i); v > left/uint64(minSize) {
		d.fail("%s count %d exceeds the %d bytes left", what, v, left)
		return 0
	}
	return int(v)
}

// str reads a length-prefixed string, reusing old when the bytes match.
func (d *decoder) str(what, old string) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)-d.i) {
		d.fail("%s length %d exceeds the %d bytes left", what, n, len(d.b)-d.i)
		return ""
	}
	b := d.b[d.i : d.i+int(n)]
	d.i += int(n)
	if string(b) == old { // no allocation
		return old
	}
	return string(b)
}
