package kvstore

import (
	"errors"
	"fmt"
)

// DType is the element type a table stores.
type DType string

const (
	Float32 DType = "float32"
	Float64 DType = "float64"
)

// Storage is how a shard keeps its values.
type Storage string

const (
	Dense  Storage = "dense"  // an array over the shard's key range
	Sparse Storage = "sparse" // a hash map of the keys ever written
)

// Partition is how keys are spread over shards initially. The Directory,
// not call sites, answers who owns a key, so keys can move later.
type Partition string

const (
	RangePartition Partition = "range" // contiguous key ranges, one per shard
	HashPartition  Partition = "hash"  // key k on shard k mod n: spreads Zipf-hot low ids
)

// TableSpec declares a table of a task.
type TableSpec struct {
	Name      string    `json:"name" toml:"name"`
	Size      uint64    `json:"size" toml:"size"`             // keys are in [0, Size)
	Width     int       `json:"width" toml:"width"`           // values per key (default 1)
	DType     DType     `json:"dtype" toml:"dtype"`           // float32 or float64 (default float64)
	Storage   Storage   `json:"storage" toml:"storage"`       // dense or sparse (default dense)
	Partition Partition `json:"partition" toml:"partition"`   // range or hash (default range)
	ChunkSize uint64    `json:"chunk_size" toml:"chunk_size"` // keys per chunk for GetChunk/AddChunk (default 1024)
	Init      string    `json:"init" toml:"init"`             // "zero" (default) or "uniform:<a>" for U(-a, a), seeded by key
	// Replicas is how many slaves hold each shard: the owner and
	// Replicas-1 backups that apply every Add before it is acknowledged,
	// so a slave's death loses no acknowledged update. 0 lets the master
	// choose (ResolveReplicas).
	Replicas int `json:"replicas" toml:"replicas"`
	// Relocate declares that a stage may move the table's keys to the
	// slaves that use them (Localize) while its consistency model counts
	// clocks (BSP, SSP, SparseSSP). Every worker's Clock then waits for
	// the worker's Adds in flight to be applied: an Add to a key that
	// moved travels home -> owner, and a Clock sent straight to the owner
	// could otherwise overtake it, also from a worker that never learned
	// that any key moved. Tables that do not set it pay nothing, and under
	// ASP (no clocks) any unreplicated table may be localized. Relocation
	// moves unreplicated keys only: Replicas must be 1 or unset (unset
	// then means 1).
	Relocate bool `json:"relocate,omitempty" toml:"relocate"`
}

// MaxReplicas bounds TableSpec.Replicas.
const MaxReplicas = 8

// ResolveReplicas is the number of replicas a table placed on hosts slaves
// gets: its own setting, or def (the cluster's default, capped at the
// number of hosts) when it has none. A setting above the number of hosts
// is an error naming the table.
func (s TableSpec) ResolveReplicas(hosts, def int) (int, error) {
	if s.Replicas == 0 && s.Relocate {
		return 1, nil
	}
	if s.Replicas == 0 {
		return max(1, min(def, hosts)), nil
	}
	if s.Replicas > hosts {
		return 0, fmt.Errorf("%w: table %q: replicas = %d, but the task's tables are on %d slave(s): each replica needs its own slave", ErrBadSpec, s.Name, s.Replicas, hosts)
	}
	return s.Replicas, nil
}

// ErrBadSpec is wrapped by every TableSpec validation error.
var ErrBadSpec = errors.New("invalid table spec")

// WithDefaults fills unset fields with their defaults.
func (s TableSpec) WithDefaults() TableSpec {
	if s.Width == 0 {
		s.Width = 1
	}
	if s.DType == "" {
		s.DType = Float64
	}
	if s.Storage == "" {
		s.Storage = Dense
	}
	if s.Partition == "" {
		s.Partition = RangePartition
	}
	if s.ChunkSize == 0 {
		s.ChunkSize = 1024
	}
	if s.Init == "" {
		s.Init = "zero"
	}
	return s
}

// SpecError is an invalid field of a table spec (it wraps ErrBadSpec).
// Field is the spec's key as a job file spells it; Also, when set, is
// another key the problem is about, where a job file may have set it
// instead (a table declared relocate by a stage function: replicas).
type SpecError struct {
	Table, Field, Also string
	Msg                string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("%v: table %q: %s: %s", ErrBadSpec, e.Table, e.Field, e.Msg)
}

func (e *SpecError) Unwrap() error { return ErrBadSpec }

// Validate reports the first invalid field, naming the table and the field
// (a *SpecError).
func (s TableSpec) Validate() error {
	bad := func(field, format string, a ...any) error {
		return &SpecError{Table: s.Name, Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	if s.Name == "" {
		return fmt.Errorf("%w: a table needs a name", ErrBadSpec)
	}
	if s.Size == 0 {
		return bad("size", "must be > 0")
	}
	if s.Size > MaxSize {
		return bad("size", "%d is out of range [1, 2^62] (a negative size wraps around)", s.Size)
	}
	if s.Width < 1 || s.Width > 1<<16-1 {
		return bad("width", "must be in [1, 65535], got %d", s.Width)
	}
	switch s.DType {
	case Float32, Float64:
	default:
		return bad("dtype", "must be float32 or float64, got %q", s.DType)
	}
	switch s.Storage {
	case Dense, Sparse:
	default:
		return bad("storage", "must be dense or sparse, got %q", s.Storage)
	}
	switch s.Partition {
	case RangePartition, HashPartition:
	default:
		return bad("partition", "must be range or hash, got %q", s.Partition)
	}
	if s.ChunkSize == 0 {
		return bad("chunk_size", "must be > 0")
	}
	if s.ChunkSize > MaxSize {
		return bad("chunk_size", "%d is out of range [1, 2^62] (a negative chunk_size wraps around)", s.ChunkSize)
	}
	if _, err := parseInit(s.Init); err != nil {
		return bad("init", "%v", err)
	}
	if s.Replicas < 0 || s.Replicas > MaxReplicas {
		return bad("replicas", "must be in [1, %d] (0 or unset: the cluster's default), got %d", MaxReplicas, s.Replicas)
	}
	if s.Relocate && s.Replicas > 1 {
		err := bad("relocate", "the table's keys move (Localize; declared by the table, or by a stage function that moves them, such as mf.blocked or kge.complex with localize = true), which unreplicated tables only allow, but replicas = %d: set replicas = 1 or leave it unset", s.Replicas)
		err.(*SpecError).Also = "replicas"
		return err
	}
	return nil
}

// ConsistencyKind names a consistency model.
type ConsistencyKind string

const (
	BSP       ConsistencyKind = "bsp"
	SSP       ConsistencyKind = "ssp"
	ASP       ConsistencyKind = "asp"
	SparseSSP ConsistencyKind = "sparse_ssp"
)

// Consistency is a stage's consistency model. A worker's clock counts the
// iterations it has finished; a read at clock c may proceed once every
// worker of the stage has reached clock c - Staleness (BSP: Staleness 0;
// ASP: never waits). SparseSSP lets a worker up to Staleness+Speculation
// ahead go on when its keys do not intersect the slowest worker's.
type Consistency struct {
	Kind        ConsistencyKind `json:"kind"`
	Staleness   int             `json:"staleness"`
	Speculation int             `json:"speculation"`
}

// Bound is the staleness a read may see: 0 for BSP, Staleness for SSP and
// SparseSSP, -1 (unbounded) for ASP.
func (c Consistency) Bound() int {
	switch c.Kind {
	case BSP:
		return 0
	case ASP:
		return -1
	default:
		return c.Staleness
	}
}
