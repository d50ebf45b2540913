package tasks

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/flexps/flexps/kvstore"
)

// Model is a trained model as written to a task's output: a JSON header
// line, then for each table its keys and values in little-endian binary.
// Dense tables store every key; sparse tables store the keys held.
type Model struct {
	Kind   string            `json:"kind"`
	Task   string            `json:"task"`
	Name   string            `json:"name"`
	Meta   map[string]string `json:"meta,omitempty"`
	Tables []ModelTable      `json:"tables"`
}

// ModelTable is one table of a model. Keys is nil for a dense table that
// holds every key in [0, Size).
type ModelTable struct {
	Spec  kvstore.TableSpec `json:"spec"`
	Count int               `json:"count"` // keys stored
	Dense bool              `json:"dense"`
	Keys  []uint64          `json:"-"`
	Vals  []float64         `json:"-"`
}

const modelMagic = "flexps-model/1"

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

// Dense returns the table's values as a dense array of Size*Width.
func (t *ModelTable) DenseValues() []float64 {
	if t.Dense {
		return t.Vals
	}
	w := t.Spec.Width
	out := make([]float64, int(t.Spec.Size)*w)
	for i, k := range t.Keys {
		copy(out[int(k)*w:int(k+1)*w], t.Vals[i*w:(i+1)*w])
	}
	return out
}

// WriteTo writes the model.
func (m *Model) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	for i := range m.Tables {
		t := &m.Tables[i]
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
	for _, t := range m.Tables {
		for _, k := range t.Keys {
			binary.LittleEndian.PutUint64(buf[:], k)
			bw.Write(buf[:])
		}
		for _, v := range t.Vals {
			binary.LittleEndian.PutUint64(buf[:], math.Float64bits(v))
			bw.Write(buf[:])
		}
	}
	return 0, bw.Flush()
}

// ReadModel reads a model written by WriteTo.
func ReadModel(r io.Reader) (*Model, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: no header line", ErrModelFormat)
	}
	var hdr struct {
		Magic string `json:"magic"`
		Model
	}
	if err := json.Unmarshal(line, &hdr); err != nil || hdr.Magic != modelMagic {
		return nil, fmt.Errorf("%w: bad header", ErrModelFormat)
	}
	m := hdr.Model
	var buf [8]byte
	for i := range m.Tables {
		t := &m.Tables[i]
		if t.Count < 0 || t.Spec.Width <= 0 || uint64(t.Count) > t.Spec.Size {
			return nil, fmt.Errorf("%w: table %q: bad counts", ErrModelFormat, t.Spec.Name)
		}
		if !t.Dense {
			t.Keys = make([]uint64, t.Count)
			for j := range t.Keys {
				if _, err := io.ReadFull(br, buf[:]); err != nil {
					return nil, fmt.Errorf("%w: table %q truncated", ErrModelFormat, t.Spec.Name)
				}
				t.Keys[j] = binary.LittleEndian.Uint64(buf[:])
			}
		}
		t.Vals = make([]float64, t.Count*t.Spec.Width)
		for j := range t.Vals {
			if _, err := io.ReadFull(br, buf[:]); err != nil {
				return nil, fmt.Errorf("%w: table %q truncated", ErrModelFormat, t.Spec.Name)
			}
			t.Vals[j] = math.Float64frombits(binary.LittleEndian.Uint64(buf[:]))
		}
	}
	return &m, nil
}

// LoadModel reads the model file at path.
func LoadModel(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer f.Close()
	m, err := ReadModel(f)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	return m, nil
}
