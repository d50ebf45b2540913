package slave

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sync"
	"time"

	"github.com/flexps/flexps/internal/proto"
	"github.com/flexps/flexps/kvstore"
	"github.com/nats-io/nats.go"
)

// Direct model transfer. A one-slave stage (local, hogwild, single) that
// the master marks Retain keeps its tables in memory when it ends instead
// of writing them back to the KV-store. The next one-slave stage takes
// them: on the same slave by handing the memory over, on another slave by
// pulling them in chunks on the holder's xfer subject, checked against a
// CRC-32C computed by the holder. Tables the retaining stage never
// touched are still current in the KV-store and are loaded from there.

// retainedModel is what a finished stage left behind for a task.
type retainedModel struct {
	tables map[string]*localEntry
	sums   map[string]uint32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum is the CRC-32C of the values as they travel: rounded to
// float32 for float32 tables (what the KV-store would have kept too).
func checksum(vals []float64, f32 bool) uint32 { return checksumUpdate(0, vals, f32) }

// tableChecksum is checksum of a local table's values, read a range at a
// time.
func tableChecksum(t *kvstore.LocalTable) uint32 {
	spec := t.Spec()
	buf := make([]float64, min(bulkKeys, spec.Size)*uint64(spec.Width))
	var sum uint32
	for first := uint64(0); first < spec.Size; first += bulkKeys {
		n := int(min(bulkKeys, spec.Size-first))
		t.GetRange(first, n, buf[:n*spec.Width])
		sum = checksumUpdate(sum, buf[:n*spec.Width], spec.DType == kvstore.Float32)
	}
	return sum
}

// checksumUpdate is checksum continued from sum over more values.
func checksumUpdate(sum uint32, vals []float64, f32 bool) uint32 {
	var buf [8 << 10]byte
	for i := 0; i < len(vals); {
		n := 0
		for ; n+8 <= len(buf) && i < len(vals); i++ {
			v := vals[i]
			if f32 {
				v = float64(float32(v))
			}
			binary.LittleEndian.PutUint64(buf[n:], math.Float64bits(v))
			n += 8
		}
		sum = crc32.Update(sum, castagnoli, buf[:n])
	}
	return sum
}

func (s *Slave) retain(task string, tables map[string]*localEntry) {
	r := &retainedModel{tables: map[string]*localEntry{}, sums: map[string]uint32{}}
	for name, e := range tables {
		if e.table != nil {
			r.tables[name] = e // checksums are computed if another slave asks
		}
	}
	s.xmu.Lock()
	s.retained[task] = r
	s.xmu.Unlock()
}

func (s *Slave) takeRetained(task string) *retainedModel {
	s.xmu.Lock()
	defer s.xmu.Unlock()
	r := s.retained[task]
	delete(s.retained, task)
	return r
}

func (s *Slave) dropRetained(task string) {
	s.xmu.Lock()
	delete(s.retained, task)
	s.xmu.Unlock()
}

func (s *Slave) retainedTable(task, table string) (*localEntry, uint32, bool) {
	s.xmu.Lock()
	defer s.xmu.Unlock()
	r := s.retained[task]
	if r == nil {
		return nil, 0, false
	}
	e, ok := r.tables[table]
	return e, r.sums[table], ok
}

// serveXfer answers chunk reads of retained tables (OpGetRange).
func (s *Slave) serveXfer(msg *nats.Msg) {
	if !s.awaitJoin() {
		return
	}
	var m kvstore.Message
	reply := func(r *kvstore.Message) {
		if err := msg.Respond(kvstore.AppendMessage(nil, r)); err != nil {
			s.log.Warn().Err(err).Str("task", m.Task).Str("table", m.Table).Msg("cannot send a transfer chunk")
		}
	}
	if err := kvstore.DecodeMessage(msg.Data, &m); err != nil || m.Op != kvstore.OpGetRange {
		reply(&kvstore.Message{Op: kvstore.OpError, Err: "malformed transfer request"})
		return
	}
	e, _, ok := s.retainedTable(m.Task, m.Table)
	if !ok {
		reply(&kvstore.Message{Op: kvstore.OpError, Err: fmt.Sprintf("slave %s retains no table %q of task %s", s.cfg.ID, m.Table, m.Task)})
		return
	}
	spec := e.table.Spec()
	if m.First > spec.Size || uint64(m.N) > spec.Size-m.First {
		reply(&kvstore.Message{Op: kvstore.OpError, Err: "transfer range out of bounds"})
		return
	}
	// A chunk is what one bus message carries (fetchRetained asks so):
	// a larger range could not be answered, and would be read into memory
	// first.
	if per := max(kvstore.MaxKeysPerMessage(int(s.nc.MaxPayload()), spec.Width, spec.DType), 1); int(m.N) > per {
		reply(&kvstore.Message{Op: kvstore.OpError, Err: fmt.Sprintf("transfer chunk of %d keys exceeds %d per message", m.N, per)})
		return
	}
	vals := make([]float64, int(m.N)*spec.Width)
	e.table.GetRange(m.First, int(m.N), vals)
	// Values travel in the table's type, as through the KV-store.
	reply(&kvstore.Message{Op: kvstore.OpReply, Width: uint16(spec.Width), DType: spec.DType, Vals: vals})
}

// serveModelInfo lists what this slave retains for a task.
func (s *Slave) serveModelInfo(msg *nats.Msg) {
	if !s.awaitJoin() {
		return
	}
	var req proto.SlaveCtl
	var info proto.ModelInfo
	s.xmu.Lock()
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		info.Error = fmt.Sprintf("slave %s: malformed model info request: %v", s.cfg.ID, err)
	} else if r := s.retained[req.Task]; r != nil {
		for name, e := range r.tables {
			sum, ok := r.sums[name]
			if !ok {
				sum = tableChecksum(e.table)
				r.sums[name] = sum
			}
			info.Tables = append(info.Tables, proto.RetainedTable{Name: name, Values: int(e.table.Spec().Size) * e.table.Spec().Width, Checksum: sum})
		}
	} else {
		info.Error = fmt.Sprintf("slave %s retains no model of task %s", s.cfg.ID, req.Task)
	}
	s.xmu.Unlock()
	data, err := json.Marshal(info)
	if err != nil {
		s.log.Error().Err(err).Str("task", req.Task).Msg("cannot encode the model info")
		return
	}
	if err := msg.Respond(data); err != nil {
		s.log.Warn().Err(err).Str("task", req.Task).Msg("cannot send the model info")
	}
}

// fetchRetained pulls the tables slave from retains for the task into
// fresh local tables, verifying each table's checksum.
func (m *localModel) fetchRetained(ctx context.Context, from string) (map[string][]float64, error) {
	s := m.s
	req, err := json.Marshal(proto.SlaveCtl{Task: m.req.Task})
	if err != nil {
		return nil, fmt.Errorf("direct transfer: encoding the request: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.KVTimeout)
	msg, err := s.nc.RequestWithContext(rctx, s.subj.SlaveModelInfo(from), req)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("direct transfer: slave %s does not answer: %w", from, err)
	}
	var info proto.ModelInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return nil, fmt.Errorf("direct transfer from slave %s: malformed model info", from)
	}
	if info.Error != "" {
		return nil, fmt.Errorf("direct transfer: %s", info.Error)
	}
	out := map[string][]float64{}
	for _, t := range info.Tables {
		vals, err := m.fetchTable(ctx, from, t)
		if err != nil {
			return nil, err
		}
		out[t.Name] = vals
	}
	return out, nil
}

func (m *localModel) fetchTable(ctx context.Context, from string, t proto.RetainedTable) ([]float64, error) {
	s := m.s
	var width int
	f32 := false
	for _, p := range m.req.Tables {
		if p.Spec.Name == t.Name {
			spec := p.Spec.WithDefaults()
			width, f32 = spec.Width, spec.DType == kvstore.Float32
		}
	}
	if width == 0 || t.Values%width != 0 {
		return nil, fmt.Errorf("direct transfer: table %q does not match the task's declaration", t.Name)
	}
	vals := make([]float64, t.Values)
	keys := t.Values / width
	dtype := kvstore.Float64
	if f32 {
		dtype = kvstore.Float32
	}
	per := max(kvstore.MaxKeysPerMessage(int(s.nc.MaxPayload()), width, dtype), 1)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, 8) // requests in flight
	for first := 0; first < keys; first += per {
		n := min(per, keys-first)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req := kvstore.AppendMessage(nil, &kvstore.Message{Op: kvstore.OpGetRange, Task: m.req.Task, Table: t.Name, First: uint64(first), N: uint32(n)})
			rctx, cancel := context.WithTimeout(ctx, s.cfg.KVTimeout)
			defer cancel()
			msg, err := s.nc.RequestWithContext(rctx, s.subj.SlaveXfer(from), req)
			var rep kvstore.Message
			if err == nil {
				err = kvstore.DecodeMessage(msg.Data, &rep)
			}
			if err == nil && rep.Op == kvstore.OpError {
				err = errors.New(rep.Err)
			}
			if err == nil && len(rep.Vals) != n*width {
				err = fmt.Errorf("got %d values, want %d", len(rep.Vals), n*width)
			}
			if err == nil {
				copy(vals[first*width:], rep.Vals)
				return
			}
			mu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("direct transfer of table %q from slave %s: %w", t.Name, from, err)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if sum := checksum(vals, f32); sum != t.Checksum {
		return nil, fmt.Errorf("direct transfer of table %q from slave %s: checksum %08x, want %08x", t.Name, from, sum, t.Checksum)
	}
	return vals, nil
}

// prepareFrom fills the model's tables from the previous stage's holder.
func (m *localModel) prepareFrom(ctx context.Context, from string) error {
	start := time.Now()
	defer func() { m.loadSeconds += time.Since(start).Seconds() }()
	if from == m.s.cfg.ID {
		r := m.s.takeRetained(m.req.Task)
		if r == nil {
			return fmt.Errorf("direct transfer: slave %s retains no model of task %s", from, m.req.Task)
		}
		for name, e := range r.tables {
			lt, err := e.table.Relock(m.mode, m.chunk)
			if err != nil {
				return err
			}
			ne := &localEntry{table: lt, loaded: e.loaded, place: e.place}
			ne.once.Do(func() {})
			m.tables[name] = ne
		}
		return nil
	}
	got, err := m.fetchRetained(ctx, from)
	if err != nil {
		return err
	}
	for name, vals := range got {
		var place *kvstore.Placement
		for i := range m.req.Tables {
			if m.req.Tables[i].Spec.Name == name {
				place = &m.req.Tables[i]
			}
		}
		if place == nil {
			return fmt.Errorf("direct transfer: unknown table %q", name)
		}
		lt, err := kvstore.NewLocalTable(place.Spec.WithDefaults(), m.mode, m.chunk)
		if err != nil {
			return err
		}
		spec := lt.Spec()
		if len(vals) != int(spec.Size)*spec.Width {
			return fmt.Errorf("direct transfer: table %q: %d values, want %d", name, len(vals), int(spec.Size)*spec.Width)
		}
		lt.SetRange(0, int(spec.Size), vals)
		// No baseline: the write-back overwrites the KV-store's values.
		ne := &localEntry{table: lt, place: *place}
		ne.once.Do(func() {})
		m.tables[name] = ne
	}
	return nil
}
