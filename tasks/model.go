package tasks

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
)

// Model is a trained model as written to a task's output: a JSON header
// line, then for each table its keys and values in little-endian binary,
// then (format 2) a trailer with the CRC-32C of everything before it, so a
// corrupt or truncated file is refused rather than loaded. Dense tables
// store every key; sparse tables store the keys held. Files of format 1
// (no trailer) are still read.
type Model struct {
	Kind   string            `json:"kind"`
	Task   string            `json:"task"`
	Name   string            `json:"name"`
	Meta   map[string]string `json:"meta,omitempty"`
	Tables []ModelTable      `json:"tables"`
	// Checkpoint is set in checkpoint files (package checkpoint): the
	// task, its progress and the format version. A model reader ignores
	// it, so a checkpoint can be scored with flexps eval.
	Checkpoint json.RawMessage `json:"checkpoint,omitempty"`
}

// ModelTable is one table of a model. Keys is nil for a dense table that
// holds every key in [0, Size).
type ModelTable struct {
	Spec  kvstore.TableSpec `json:"spec"`
	Count int               `json:"count"` // keys stored
	Dense bool              `json:"dense"`
	Keys  []uint64          `json:"-"`
	Vals  []float64         `json:"-"`
	// Fill, when set (Keys and Vals nil), makes WriteTo write a dense
	// table of Spec.Size keys without holding its values: it asks Fill
	// for them a window at a time, in key order: out has room for the
	// Width values of len(out)/Width keys from first on. The master
	// writes its output so, reading the shards as it writes.
	Fill func(first uint64, out []float64) error `json:"-"`
	// Scan, when set (Keys, Vals and Fill nil, Count the keys it holds),
	// makes WriteTo write a keyed table without holding it: it calls Scan
	// twice, writing the keys of the first pass and the values of the
	// second, and each pass must hand emit the same Count keys in the
	// same order (pages of keys and their Width values each); a pass that
	// differs fails the write. The master writes sparse tables so.
	Scan func(emit func(keys []uint64, vals []float64) error) error `json:"-"`

	initRow func(key uint64, row []float64) // Lookup's init values, made on first use
}

// fillWindow is the values WriteTo asks a Fill for at a time (512 KiB).
const fillWindow = 1 << 16

const (
	modelMagic   = "flexps-model/2"
	modelMagicV1 = "flexps-model/1"
	// modelTrailer ends a format-2 file, after the 4-byte CRC.
	modelTrailer = "\nflexps-end\n"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrModelFormat is wrapped when a file is not a flexps model.
var ErrModelFormat = errors.New("not a flexps model file")

// Table finds a table by name.
func (m *Model) Table(name string) (*ModelTable, bool) {
	for i := range m.Tables {
		if m.Tables[i].Spec.Name == name {
			return &m.Tables[i], true
		}
	}
	return nil, false
}

// DenseValues returns the table's values as a dense array of Size*Width:
// a keyed (sparse) table's stored rows, and the init values of the keys
// it never stored. It allocates Size*Width values for a keyed table:
// use Values for a table that may be too large for that, Lookup to read
// single keys.
func (t *ModelTable) DenseValues() []float64 {
	if t.Keys == nil {
		return t.Vals
	}
	w := t.Spec.Width
	out := make([]float64, int(t.Spec.Size)*w)
	if in := t.Spec.WithDefaults(); in.Init != "zero" {
		initRow := in.InitRows()
		for k := range t.Spec.Size {
			initRow(k, out[int(k)*w:int(k+1)*w])
		}
	}
	for i, k := range t.Keys {
		copy(out[int(k)*w:int(k+1)*w], t.Vals[i*w:(i+1)*w])
	}
	return out
}

// Values is DenseValues, or the error of FitsDense.
func (t *ModelTable) Values() ([]float64, error) {
	if err := t.FitsDense(); err != nil {
		return nil, err
	}
	return t.DenseValues(), nil
}

// FitsDense reports, naming the table, a keyed (sparse) table a dense
// array of which would hold more than MaxModelValues values.
func (t *ModelTable) FitsDense() error {
	if t.Keys != nil && (t.Spec.Size > MaxModelValues || t.Spec.Size*uint64(max(t.Spec.Width, 1)) > MaxModelValues) {
		return fmt.Errorf("table %q is sparse with %d keys (%d stored): too large to read as a dense array (%d values at most)", t.Spec.Name, t.Spec.Size, len(t.Keys), uint64(MaxModelValues))
	}
	return nil
}

// FitsDense is the first error of its tables' FitsDense: an evaluator
// that reads every table as a dense array checks it first.
func (m *Model) FitsDense() error {
	for i := range m.Tables {
		if err := m.Tables[i].FitsDense(); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns the Width values of key: its row of Vals, or, for a key
// a keyed table (Keys set) does not hold, its init values in buf (which needs
// Width values of room). A key outside the table reads as its init
// values too (zeros for the default init). Keyed tables are looked up
// by binary search: their keys are sorted (LoadModel sorts them). Not
// safe for concurrent first use (it keeps the parsed init).
func (t *ModelTable) Lookup(key uint64, buf []float64) []float64 {
	w := max(t.Spec.Width, 1)
	if t.Keys == nil {
		if key < uint64(len(t.Vals)/w) {
			return t.Vals[int(key)*w : int(key+1)*w]
		}
	} else if i, ok := slices.BinarySearch(t.Keys, key); ok {
		return t.Vals[i*w : (i+1)*w]
	}
	buf = buf[:w]
	if t.initRow == nil {
		t.initRow = t.Spec.InitRows() // parsed once, not per key
	}
	t.initRow(key, buf)
	return buf
}

// sortKeyed sorts a keyed table's keys, moving their rows with them, in
// place, if they are not sorted already (the master writes a sparse
// table in its shards' order). It reports a key stored twice.
func (t *ModelTable) sortKeyed() error {
	if t.Keys != nil && !slices.IsSorted(t.Keys) {
		sort.Sort(keyedRows{keys: t.Keys, vals: t.Vals, w: max(t.Spec.Width, 1)})
	}
	return t.dupKey()
}

// keyedRows sorts keys with their rows of w values, in place.
type keyedRows struct {
	keys []uint64
	vals []float64
	w    int
}

func (r keyedRows) Len() int           { return len(r.keys) }
func (r keyedRows) Less(i, j int) bool { return r.keys[i] < r.keys[j] }
func (r keyedRows) Swap(i, j int) {
	r.keys[i], r.keys[j] = r.keys[j], r.keys[i]
	if r.w == 1 {
		r.vals[i], r.vals[j] = r.vals[j], r.vals[i]
		return
	}
	a, b := r.vals[i*r.w:(i+1)*r.w], r.vals[j*r.w:(j+1)*r.w]
	for c := range a {
		a[c], b[c] = b[c], a[c]
	}
}

// dupKey reports a key a sorted keyed table holds twice.
func (t *ModelTable) dupKey() error {
	for i := 1; i < len(t.Keys); i++ {
		if t.Keys[i] == t.Keys[i-1] {
			return fmt.Errorf("%w: table %q: key %d stored twice", ErrModelFormat, t.Spec.Name, t.Keys[i])
		}
	}
	return nil
}

// WriteTo writes the model.
func (m *Model) WriteTo(w io.Writer) (int64, error) {
	crc := crc32.New(castagnoli)
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(io.MultiWriter(cw, crc), 1<<20)
	for i := range m.Tables {
		t := &m.Tables[i]
		if t.Fill != nil {
			if t.Keys != nil || t.Vals != nil || t.Scan != nil {
				return 0, fmt.Errorf("model table %q: Fill with Keys, Vals or Scan", t.Spec.Name)
			}
			t.Count, t.Dense = int(t.Spec.Size), true
			continue
		}
		if t.Scan != nil {
			if t.Keys != nil || t.Vals != nil {
				return 0, fmt.Errorf("model table %q: Scan with Keys or Vals", t.Spec.Name)
			}
			t.Dense = false
			continue
		}
		t.Count = len(t.Vals) / max(t.Spec.Width, 1)
		t.Dense = t.Keys == nil
	}
	hdr, err := json.Marshal(struct {
		Magic string `json:"magic"`
		*Model
	}{modelMagic, m})
	if err != nil {
		return 0, err
	}
	bw.Write(hdr)
	bw.WriteByte('\n')
	var buf [8]byte
	var window []float64
	for _, t := range m.Tables {
		if t.Fill != nil {
			w := max(t.Spec.Width, 1)
			keys := uint64(max(fillWindow/w, 1))
			if need := int(min(keys, t.Spec.Size)) * w; cap(window) < need {
				window = make([]float64, need)
			}
			for first := uint64(0); first < t.Spec.Size; first += keys {
				out := window[:int(min(keys, t.Spec.Size-first))*w]
				if err := t.Fill(first, out); err != nil {
					return cw.n, fmt.Errorf("model table %q keys %d..%d: %w", t.Spec.Name, first, first+uint64(len(out)/w)-1, err)
				}
				for _, v := range out {
					binary.LittleEndian.PutUint64(buf[:], math.Float64bits(v))
					bw.Write(buf[:])
				}
				if _, err := bw.Write(nil); err != nil { // the writer's first error, if any: stop reading
					return cw.n, err
				}
			}
			continue
		}
		if t.Scan != nil {
			if err := writeScanned(bw, t); err != nil {
				return cw.n, err
			}
			continue
		}
		for _, k := range t.Keys {
			binary.LittleEndian.PutUint64(buf[:], k)
			bw.Write(buf[:])
		}
		for _, v := range t.Vals {
			binary.LittleEndian.PutUint64(buf[:], math.Float64bits(v))
			bw.Write(buf[:])
		}
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	var tail [4 + len(modelTrailer)]byte
	binary.LittleEndian.PutUint32(tail[:4], crc.Sum32())
	copy(tail[4:], modelTrailer)
	_, err = cw.Write(tail[:])
	return cw.n, err
}

// writeScanned writes a keyed table t.Scan hands out: its keys from one
// pass, its values from a second, which must visit the same t.Count keys
// in the same order (a running hash of the key sequence compares them).
func writeScanned(bw *bufio.Writer, t ModelTable) error {
	w := max(t.Spec.Width, 1)
	var buf [8]byte
	pass := func(keys bool) (n int, sum uint64, err error) {
		sum = 14695981039346656037
		err = t.Scan(func(ks []uint64, vs []float64) error {
			if len(vs) != len(ks)*w {
				return fmt.Errorf("a page of %d keys with %d values (width %d)", len(ks), len(vs), w)
			}
			if n += len(ks); n > t.Count {
				return fmt.Errorf("more than the %d keys it held a moment before", t.Count)
			}
			for _, k := range ks {
				sum = (sum ^ k) * 1099511628211
				if keys {
					binary.LittleEndian.PutUint64(buf[:], k)
					bw.Write(buf[:])
				}
			}
			if !keys {
				for _, v := range vs {
					binary.LittleEndian.PutUint64(buf[:], math.Float64bits(v))
					bw.Write(buf[:])
				}
			}
			_, err := bw.Write(nil) // the writer's first error, if any: stop reading
			return err
		})
		return n, sum, err
	}
	n, keySum, err := pass(true)
	if err == nil && n != t.Count {
		err = fmt.Errorf("%d keys, %d a moment before", n, t.Count)
	}
	if err != nil {
		return fmt.Errorf("model table %q: %w", t.Spec.Name, err)
	}
	n, valSum, err := pass(false)
	if err == nil && (n != t.Count || valSum != keySum) {
		err = errors.New("the keys changed between the pass that wrote them and the pass that wrote their values (a write or a failover meanwhile)")
	}
	if err != nil {
		return fmt.Errorf("model table %q: %w", t.Spec.Name, err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// readWords reads n little-endian 8-byte words as T. The result is
// allocated once, whole, when the bytes left in the file (left, -1 when
// unknown) hold them all; else it grows as data arrives, so a header
// claiming more than the file holds fails with io.ErrUnexpectedEOF
// instead of allocating what it claims. Words go straight into their
// final form: a 200M-value model read as []uint64 and then copied into
// []float64 made `flexps eval` peak at 2.9x the model file.
func readWords[T uint64 | float64](r io.Reader, n int, left int64, conv func(uint64) T) ([]T, error) {
	var out []T
	if left >= 0 && n <= math.MaxInt/8 && int64(n)*8 <= left {
		out = make([]T, 0, n)
	} else {
		out = make([]T, 0, min(n, 1<<16))
	}
	var buf [1 << 13]byte
	for len(out) < n {
		k := min(n-len(out), len(buf)/8)
		if _, err := io.ReadFull(r, buf[:k*8]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err // the file could not be read: no fault of its
		}
		for j := range k {
			out = append(out, conv(binary.LittleEndian.Uint64(buf[j*8:])))
		}
	}
	return out, nil
}

func asU64(v uint64) uint64 { return v }

// crcReader sums what is read through it and counts it.
type crcReader struct {
	r   io.Reader
	crc uint32
	n   int64
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

// truncated is the error of a table whose values could not be read: the
// file ends early (ErrModelFormat), or reading it failed (a namenode or
// datanode that died mid-read), which says nothing of the file: that was
// reported as "table truncated", and a resume skipped a good checkpoint
// as torn for it.
func truncated(table string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: table %q truncated", ErrModelFormat, table)
	}
	return readErr(fmt.Errorf("table %q: %w", table, err))
}

// readErr is a failure to read a model's bytes (ErrModelRead).
func readErr(err error) error { return fmt.Errorf("%w: %w", ErrModelRead, err) }

// ErrModelRead is wrapped when a model file could not be read (an I/O
// error), as opposed to read and found not a model (ErrModelFormat).
var ErrModelRead = errors.New("model file could not be read")

// ReadModel reads a model written by WriteTo.
func ReadModel(r io.Reader) (*Model, error) { return readModel(r, -1) }

// readModel is ReadModel of a file of size bytes (-1: unknown).
func readModel(r io.Reader, size int64) (*Model, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	line, err := br.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, readErr(err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: no header line", ErrModelFormat)
	}
	var hdr struct {
		Magic string `json:"magic"`
		Model
	}
	if err := json.Unmarshal(line, &hdr); err != nil || (hdr.Magic != modelMagic && hdr.Magic != modelMagicV1) {
		return nil, fmt.Errorf("%w: bad header", ErrModelFormat)
	}
	m := hdr.Model
	// The body is read through body, which sums what it consumes; the
	// trailer is read from br directly.
	body := &crcReader{r: br, crc: crc32.Update(0, castagnoli, line)}
	left := func() int64 {
		if size < 0 {
			return -1
		}
		return size - int64(len(line)) - body.n
	}
	for i := range m.Tables {
		t := &m.Tables[i]
		if t.Count < 0 || t.Spec.Width <= 0 || uint64(t.Count) > t.Spec.Size || t.Count > math.MaxInt/t.Spec.Width {
			return nil, fmt.Errorf("%w: table %q: bad counts", ErrModelFormat, t.Spec.Name)
		}
		if !t.Dense {
			keys, err := readWords(body, t.Count, left(), asU64)
			if err != nil {
				return nil, truncated(t.Spec.Name, err)
			}
			t.Keys = keys
		}
		vals, err := readWords(body, t.Count*t.Spec.Width, left(), math.Float64frombits)
		if err != nil {
			return nil, truncated(t.Spec.Name, err)
		}
		t.Vals = vals
		for _, k := range t.Keys {
			if k >= t.Spec.Size {
				return nil, fmt.Errorf("%w: table %q: key %d outside its %d keys", ErrModelFormat, t.Spec.Name, k, t.Spec.Size)
			}
		}
		if err := t.sortKeyed(); err != nil {
			return nil, err
		}
	}
	if hdr.Magic == modelMagicV1 {
		return &m, nil
	}
	rest, err := io.ReadAll(io.LimitReader(br, 4+int64(len(modelTrailer))+1))
	if err != nil {
		return nil, readErr(err)
	}
	if len(rest) != 4+len(modelTrailer) || string(rest[4:]) != modelTrailer {
		return nil, fmt.Errorf("%w: checksum trailer missing, or data after it (truncated or corrupt file)", ErrModelFormat)
	}
	if got := binary.LittleEndian.Uint32(rest[:4]); got != body.crc {
		return nil, fmt.Errorf("%w: checksum mismatch (file %08x, content %08x): the file is corrupt", ErrModelFormat, got, body.crc)
	}
	return &m, nil
}

// LoadModel reads the model file at path: a local file, or a URL of a
// registered scheme (hdfs:// in a program that imports datastore/hdfs),
// where a task's output may have gone.
func LoadModel(path string) (*Model, error) {
	var f io.ReadCloser
	var err error
	size := int64(-1) // unknown: tables grow as their values arrive
	if s := datastore.Scheme(path); s != "" && s != "file" {
		src := datastore.NewSources()
		defer src.Close()
		// The file's size (one block of it) lets each table be allocated
		// once, as for a local file.
		if bs, err := src.Blocks(context.Background(), path, 1<<62); err == nil && len(bs) > 0 {
			size = bs[0].FileSize
			for _, b := range bs {
				if b.Path != bs[0].Path { // not one file: Open says what is wrong
					size = -1
				}
			}
		}
		f, err = src.Open(context.Background(), path, 0)
	} else {
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer f.Close()
	if lf, ok := f.(*os.File); ok {
		if st, err := lf.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
	}
	m, err := readModel(f, size)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	return m, nil
}
