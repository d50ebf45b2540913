// Package tasks is the user API of flexps: a MultiStageTask is an ordered
// list of stages; each stage names a stage function registered in every
// process of the cluster (the same binary runs everywhere, as in ps-lite and
// FlexPS), its parallelism, consistency model and worker kind, and its
// parameters. A worker is one goroutine running the stage function with an
// Info that hands it its tables, its share of the inputs, a logger and a
// context. Tasks are plain data: they travel to the master as JSON.
package tasks

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/kvstore"
)

// Worker kinds: how a stage's workers reach the model.
const (
	KindPS      = "ps"      // model in the sharded KV-store
	KindLocal   = "local"   // one slave, model in its memory, chunk locks
	KindHogwild = "hogwild" // one slave, shared model, no locks
	KindSingle  = "single"  // one worker
)

// Model transfer between stages.
const (
	TransferKVStore = "kvstore"
	TransferDirect  = "direct"
)

// ErrInvalid is wrapped by every task validation error.
var ErrInvalid = errors.New("invalid task")

// MultiStageTask is a task: tables, inputs and stages.
type MultiStageTask struct {
	ID            string               `json:"id,omitempty"` // set by the master
	Name          string               `json:"name"`
	Kind          string               `json:"kind,omitempty"` // model kind written to the output header, e.g. "lr"
	Priority      int                  `json:"priority"`       // 0..100, for the prioritized scheduler
	Tables        []kvstore.TableSpec  `json:"tables"`
	Inputs        map[string]InputSpec `json:"inputs,omitempty"`
	Stages        []Stage              `json:"stages"`
	Output        string               `json:"output,omitempty"` // model path (local or hdfs://); empty: not written
	ModelTransfer string               `json:"model_transfer,omitempty"`
	Meta          map[string]string    `json:"meta,omitempty"`
	Checkpoint    Checkpoint           `json:"checkpoint,omitzero"`
}

// InputSpec names data a stage reads.
type InputSpec struct {
	Path      string `json:"path"`                 // file, directory, glob, or hdfs:// URL
	Format    string `json:"format"`               // libsvm (default), csv, ratings, text
	IndexBase *int   `json:"index_base,omitempty"` // libsvm feature ids start at 1 (default) or 0
	Label     int    `json:"label_column"`         // csv: label column (-1: none)
	Delimiter string `json:"delimiter"`            // csv
	Header    bool   `json:"header"`               // csv/ratings: first line of each file is a header
	OnError   string `json:"on_error"`             // fail (default) or skip
	// MaxBadFraction: with on_error "skip", a worker's pass fails when more
	// than this share of its lines is malformed (0: 1%; 1: any).
	MaxBadFraction float64 `json:"max_bad_fraction,omitempty"`
	BlockSize      int64   `json:"block_size"` // bytes per block for local files (0: the cluster default)
}

// Stage is one stage of a task.
type Stage struct {
	Name             string              `json:"name"`
	Func             string              `json:"func"`                         // registered stage function
	Workers          int                 `json:"workers"`                      // parallelism
	Auto             bool                `json:"auto,omitempty"`               // parallelism "auto": measured trials pick it
	AutoTrialSeconds float64             `json:"auto_trial_seconds,omitempty"` // length of each auto trial (default 2)
	MaxSlaves        int                 `json:"max_slaves,omitempty"`         // spread over at most this many slaves (0: any)
	Slaves           []string            `json:"slaves,omitempty"`             // pin to these slaves
	Consistency      kvstore.Consistency `json:"consistency"`
	WorkerKind       string              `json:"worker_kind,omitempty"`
	Cache            string              `json:"cache,omitempty"` // none, lru, lfu (ps workers)
	CacheSize        int                 `json:"cache_size,omitempty"`
	ChunkSize        int                 `json:"chunk_size,omitempty"` // chunk locks in local stages
	Inputs           []string            `json:"inputs,omitempty"`     // inputs this stage reads (default: all)
	Params           Params              `json:"params,omitempty"`
}

// NewTask returns an empty task called name.
func NewTask(name string) *MultiStageTask {
	return &MultiStageTask{Name: name, Inputs: map[string]InputSpec{}}
}

// SetStages replaces the task's stages.
func (t *MultiStageTask) SetStages(stages ...Stage) *MultiStageTask {
	t.Stages = append([]Stage(nil), stages...)
	return t
}

// RepeatStages repeats the current list of stages n times in order (n <=
// 1 leaves it as is); repeated stages are named "<name>.<round>" and get
// the parameter "round" (0-based) so a stage function knows its round.
func (t *MultiStageTask) RepeatStages(n int) *MultiStageTask {
	if n <= 1 {
		return t
	}
	base := t.Stages
	t.Stages = nil
	for r := 0; r < n; r++ {
		for _, s := range base {
			s.Params = maps.Clone(s.Params)
			if s.Params == nil {
				s.Params = Params{}
			}
			s.Params["round"] = float64(r)
			if s.Name != "" {
				s.Name = fmt.Sprintf("%s.%d", s.Name, r)
			}
			t.Stages = append(t.Stages, s)
		}
	}
	return t
}

// AddTable declares a table.
func (t *MultiStageTask) AddTable(spec kvstore.TableSpec) *MultiStageTask {
	t.Tables = append(t.Tables, spec)
	return t
}

// SetInput declares a named input.
func (t *MultiStageTask) SetInput(name string, in InputSpec) *MultiStageTask {
	if t.Inputs == nil {
		t.Inputs = map[string]InputSpec{}
	}
	t.Inputs[name] = in
	return t
}

// Normalize fills defaults in place.
func (t *MultiStageTask) Normalize() {
	for i := range t.Tables {
		t.Tables[i] = t.Tables[i].WithDefaults()
	}
	for name, in := range t.Inputs {
		if in.Format == "" {
			in.Format = "libsvm"
		}
		if in.OnError == "" {
			in.OnError = "fail"
		}
		if in.IndexBase == nil && in.Format == "libsvm" {
			one := 1
			in.IndexBase = &one
		}
		t.Inputs[name] = in
	}
	if t.ModelTransfer == "" {
		t.ModelTransfer = TransferKVStore
	}
	for i := range t.Stages {
		s := &t.Stages[i]
		if s.Name == "" {
			s.Name = fmt.Sprintf("stage%d", i)
		}
		if s.WorkerKind == "" {
			s.WorkerKind = KindPS
		}
		if s.Consistency.Kind == "" {
			s.Consistency.Kind = kvstore.ASP
		}
		if s.Workers == 0 && !s.Auto {
			s.Workers = 1
		}
		if s.Cache == "" {
			s.Cache = "none"
		}
	}
	// Tables the stages' algorithms add (after the stage defaults, which
	// the hooks may read).
	for _, s := range t.Stages {
		fn, ok := lookupTables(s.Func)
		if !ok {
			continue
		}
		for _, spec := range fn(s, t.Tables) {
			if !t.hasTable(spec.Name) {
				t.Tables = append(t.Tables, spec.WithDefaults())
			}
		}
	}
	// Tables the stages' functions move keys of.
	for _, s := range t.Stages {
		fn, ok := lookupRelocates(s.Func)
		if !ok {
			continue
		}
		for _, name := range fn(s) {
			for i := range t.Tables {
				if t.Tables[i].Name == name {
					t.Tables[i].Relocate = true
				}
			}
		}
	}
}

func (t *MultiStageTask) hasTable(name string) bool {
	_, ok := t.TableSpec(name)
	return ok
}

// TableSpec is the declared table name with its defaults filled in
// (kvstore.TableSpec.WithDefaults); ok is false when the task declares
// no such table. For task checks (RegisterTaskParams) that compare a
// stage's params with the tables they name.
func (t *MultiStageTask) TableSpec(name string) (spec kvstore.TableSpec, ok bool) {
	for _, s := range t.Tables {
		if s.Name == name {
			return s.WithDefaults(), true
		}
	}
	return kvstore.TableSpec{}, false
}

// Validate reports the first problem, naming the stage and the field,
// including stage functions not registered in this process. It checks the
// task as it stands: call Normalize first to fill defaults (Submit does).
func (t *MultiStageTask) Validate() error { return t.validate(true) }

// ValidateShape is Validate without the registry check: the master runs no
// user code and may not have the stage functions a user program registers.
func (t *MultiStageTask) ValidateShape() error { return t.validate(false) }

// FieldError is an invalid setting of a task, with where it is: the
// section and key a job file holds it under, so a loader can name the
// line (tasks.ParseJob does). Its text is Err's; it unwraps to Err.
type FieldError struct {
	// Section is "stage" (a [[stage]], Index its position in the task),
	// "table" (the [[table]] named Name, Index its position in the
	// task), "input" ([input.Name]),
	// "checkpoint", or "" for the task's own keys.
	Section string
	Index   int
	Name    string
	// Keys are the keys the problem is about, the likeliest first; a
	// stage function's parameter is "params.<name>". None, or none
	// written in the file: the section's header.
	Keys []string
	Err  error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// keyErr is an error about a stage's key: its text starts with the key;
// also is another key it is about (where a file may have set it).
// controlWhy is why a name with a control character is refused.
const controlWhy = "holds a control character (a newline, a tab, a terminal escape): names are printed in flexps status tables, progress lines and logs"

// hasControl reports whether a name holds a control character: a newline
// broke the status table's row, a terminal escape was run by the terminal
// of whoever listed the cluster's tasks.
func hasControl(name string) bool { return strings.IndexFunc(name, unicode.IsControl) >= 0 }

type keyErr struct {
	key, also string
	err       error
}

func (e *keyErr) Error() string { return e.key + ": " + e.err.Error() }
func (e *keyErr) Unwrap() error { return e.err }

func keyErrf(key, format string, a ...any) error {
	return &keyErr{key: key, err: fmt.Errorf(format, a...)}
}

// paramName finds the parameter a stage function's parameter check names.
var paramName = regexp.MustCompile(`param "([^"]+)"`)

// paramLead is the first word of a parameter check's message after the
// function's prefix: "lr: epochs must be >= 1, got 0" is about epochs.
var paramLead = regexp.MustCompile(`^(?:[\w.]+: )?([A-Za-z_]\w*)\b`)

// checkedParam is the parameter a stage's "params" error is about, so
// that the error names its line: the one it quotes (param "x"), else the
// one its message starts with when the stage sets it (the built-in
// functions' range checks: "lr: epochs must be >= 1, got 0" named the
// stage's header, not the epochs line); "" when neither.
func checkedParam(ke *keyErr, params Params) string {
	if ke.key != "params" {
		return ""
	}
	msg := ke.err.Error()
	if m := paramName.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	if m := paramLead.FindStringSubmatch(msg); m != nil {
		if _, ok := params[m[1]]; ok {
			return m[1]
		}
	}
	return ""
}

func (t *MultiStageTask) validate(registry bool) error {
	inv := func(format string, a ...any) error {
		return fmt.Errorf("%w: task %q: %s", ErrInvalid, t.Name, fmt.Sprintf(format, a...))
	}
	// bad is a problem with key of section (see FieldError).
	bad := func(section, name, key, format string, a ...any) error {
		fe := &FieldError{Section: section, Name: name, Err: inv(format, a...)}
		if key != "" {
			fe.Keys = []string{key}
		}
		return fe
	}
	if t.Name == "" {
		// A FieldError, so that name = "" is named by its line.
		return &FieldError{Keys: []string{"name"}, Err: fmt.Errorf("%w: a task needs a name", ErrInvalid)}
	}
	if hasControl(t.Name) {
		return &FieldError{Keys: []string{"name"}, Err: fmt.Errorf("%w: task name %q: %s", ErrInvalid, t.Name, controlWhy)}
	}
	if len(t.Stages) == 0 {
		return inv("no stages")
	}
	if t.Priority < 0 || t.Priority > 100 {
		return bad("", "", "priority", "priority %d out of range [0, 100]", t.Priority)
	}
	switch t.ModelTransfer {
	case "", TransferKVStore, TransferDirect:
	default:
		return bad("", "", "model_transfer", "model_transfer must be %q or %q, got %q", TransferKVStore, TransferDirect, t.ModelTransfer)
	}
	if err := t.Checkpoint.validate(); err != nil {
		key := "every"
		if t.Checkpoint.Keep < 0 {
			key = "keep"
		}
		return bad("checkpoint", "", key, "%v", err)
	}
	seen := map[string]bool{}
	for j, spec := range t.Tables {
		if err := spec.WithDefaults().Validate(); err != nil {
			// ErrInvalid too, as every validation error (it wrapped only
			// kvstore.ErrBadSpec).
			fe := &FieldError{Section: "table", Index: j, Name: spec.Name, Err: fmt.Errorf("%w: task %q: %w", ErrInvalid, t.Name, err)}
			if se := (*kvstore.SpecError)(nil); errors.As(err, &se) {
				fe.Keys = []string{se.Field}
				if se.Also != "" {
					fe.Keys = append(fe.Keys, se.Also)
				}
			}
			return fe
		}
		if hasControl(spec.Name) {
			fe := bad("table", spec.Name, "name", "table name %q: %s", spec.Name, controlWhy)
			fe.(*FieldError).Index = j
			return fe
		}
		if seen[spec.Name] {
			fe := bad("table", spec.Name, "name", "table %q declared twice", spec.Name)
			fe.(*FieldError).Index = j
			return fe
		}
		seen[spec.Name] = true
		if err := fitsModel(spec.WithDefaults(), t); err != nil {
			fe := bad("table", spec.Name, "size", "%v", err)
			fe.(*FieldError).Index = j
			return fe
		}
	}
	for name, in := range t.Inputs {
		if strings.TrimSpace(name) == "" {
			// [input.""]: no stage can name it (a param naming "" means
			// its default).
			return bad("input", name, "path", "task %q: an input needs a name (got %q)", t.Name, name)
		}
		if hasControl(name) {
			return bad("input", name, "path", "input name %q: %s", name, controlWhy)
		}
		if in.Path == "" {
			return bad("input", name, "path", "input %q: path is required", name)
		}
		switch in.Format {
		case "", "libsvm", "csv", "ratings", "text":
		default:
			return bad("input", name, "format", "input %q: format must be libsvm, csv, ratings or text, got %q", name, in.Format)
		}
		switch in.OnError {
		case "", "fail", "skip":
		default:
			return bad("input", name, "on_error", "input %q: on_error must be fail or skip, got %q", name, in.OnError)
		}
		if f := in.MaxBadFraction; f < 0 || f > 1 || f != f {
			return bad("input", name, "max_bad_fraction", "input %q: max_bad_fraction must be in [0, 1], got %v", name, f)
		}
		if in.MaxBadFraction != 0 && in.OnError != "skip" {
			// on_error = "fail" stops at the first malformed line, so the
			// fraction would be silently ignored.
			return bad("input", name, "max_bad_fraction", "input %q: max_bad_fraction applies only with on_error = \"skip\" (without it the first malformed line fails the pass)", name)
		}
		if in.BlockSize < 0 {
			return bad("input", name, "block_size", "input %q: block_size must be > 0 bytes (0 or unset: the cluster's), got %d", name, in.BlockSize)
		}
		if in.IndexBase != nil && *in.IndexBase != 0 && *in.IndexBase != 1 {
			return bad("input", name, "index_base", "input %q: index_base must be 0 or 1, got %d", name, *in.IndexBase)
		}
		// (label_column is checked on job files: the Go API's Label
		// cannot tell 0 from unset.)
		if key, err := foreignOption(name, in.Format, in.IndexBase != nil, false, in.Delimiter != "", in.Header); err != nil {
			return bad("input", name, key, "%v", err)
		}
		if len(in.Delimiter) > 1 {
			// FormatOptions keeps one byte: "tab" would split on 't'.
			return bad("input", name, "delimiter", "input %q: delimiter must be one character, got %q (a tab is \"\\t\")", name, in.Delimiter)
		}
		if in.Format == "csv" {
			// The checks the workers' parser makes when it starts, made
			// here so that they name the line.
			opt := datastore.DefaultFormatOptions()
			if in.Delimiter != "" {
				opt.Delimiter = in.Delimiter[0]
			}
			if _, err := datastore.NewFormat("csv", opt); err != nil {
				return bad("input", name, "delimiter", "input %q: %v", name, err)
			}
			opt = datastore.DefaultFormatOptions()
			opt.LabelColumn = in.Label
			if _, err := datastore.NewFormat("csv", opt); err != nil {
				return bad("input", name, "label_column", "input %q: %v", name, err)
			}
		}
	}
	if d := t.Checkpoint.Dir; d != "" {
		if t.Output != "" && sameLocation(t.Output, d) {
			// The submission made the dir, then refused the output as a
			// directory.
			return bad("", "", "output", "output %s is the checkpoint dir: name a file for the model (one in that dir will do)", t.Output)
		}
		for _, name := range slices.Sorted(maps.Keys(t.Inputs)) {
			if p := t.Inputs[name].Path; readsCheckpoints(p, d) {
				// The next run, or a resume, read the checkpoints as records.
				return bad("input", name, "path", "input %q (%s) would read the checkpoints of the checkpoint dir %s as data: give the checkpoints a dir of their own", name, p, d)
			}
		}
	}
	stageNamed := map[string]int{}
	for i, s := range t.Stages {
		if j, ok := stageNamed[s.Name]; ok && s.Name != "" {
			// Status, metrics, logs and errors name stages by name: two
			// of one name read as one stage.
			return &FieldError{Section: "stage", Index: i, Keys: []string{"name"}, Err: fmt.Errorf("%w: task %q: stage %d (%s): stage %d is named %q too: give each stage a name of its own", ErrInvalid, t.Name, i, s.Name, j, s.Name)}
		}
		stageNamed[s.Name] = i
		if err := s.validate(t, registry); err != nil {
			fe := &FieldError{Section: "stage", Index: i, Err: fmt.Errorf("%w: task %q: stage %d (%s): %v", ErrInvalid, t.Name, i, s.Name, err)}
			if ke := (*keyErr)(nil); errors.As(err, &ke) {
				fe.Keys = []string{ke.key}
				if ke.also != "" {
					fe.Keys = append(fe.Keys, ke.also)
				}
				if name := checkedParam(ke, s.Params); name != "" {
					fe.Keys = []string{"params." + name, "params"}
				}
			}
			return fe
		}
	}
	for i, s := range t.Stages {
		if name, ip, ok := unlabeledInput(t, s); ok {
			return bad("input", name, "label_column", "input %q: label_column = -1 reads no label, but stage %d (%s) learns from the labels of its %s input (%s): name the label's column",
				name, i, s.Name, ip.Param, s.Func)
		}
	}
	checked := map[string]bool{}
	for _, s := range t.Stages {
		fn, ok := taskParamHooks.get(s.Func)
		if !ok || checked[s.Func] {
			continue
		}
		checked[s.Func] = true
		if i, key, err := fn(t); err != nil {
			at := &FieldError{Section: "stage", Index: i, Keys: []string{"params." + key, "params"}}
			if fe := (*FieldError)(nil); errors.As(err, &fe) { // about another section (a table)
				at = &FieldError{Section: fe.Section, Index: fe.Index, Name: fe.Name, Keys: fe.Keys}
			}
			at.Err = fmt.Errorf("%w: task %q: stage %d (%s): %v", ErrInvalid, t.Name, i, t.Stages[i].Name, err)
			return at
		}
	}
	return nil
}

// MaxModelValues bounds the values of one dense table a model file (a
// task's output, a checkpoint) holds: `flexps eval` and a resume load
// every one of them, as float64.
const MaxModelValues = 1 << 28

// fitsModel refuses a dense table too large for the model file or the
// checkpoints the task writes: found only once training ended, it failed
// the task and lost the model. Sparse tables are checked when written
// (their size is what they hold).
func fitsModel(spec kvstore.TableSpec, t *MultiStageTask) error {
	if spec.Storage != kvstore.Dense || (t.Output == "" && t.Checkpoint.Dir == "") {
		return nil
	}
	w := uint64(max(spec.Width, 1))
	if spec.Size <= MaxModelValues/w {
		return nil
	}
	what := "the model written to output"
	if t.Output == "" {
		what = "a checkpoint"
	}
	return fmt.Errorf("table %q: %d keys x %d = %d values, more than the %d (2^28) of one table %s holds (set no output and no [checkpoint], or make the table smaller)",
		spec.Name, spec.Size, w, new(big.Int).Mul(new(big.Int).SetUint64(spec.Size), new(big.Int).SetUint64(w)), MaxModelValues, what)
}

func (s Stage) validate(t *MultiStageTask, registry bool) error {
	if hasControl(s.Name) {
		return keyErrf("name", "stage name %q: %s", s.Name, controlWhy)
	}
	if s.Func == "" {
		return keyErrf("func", "a stage names its registered stage function")
	}
	if _, ok := Lookup(s.Func); registry && !ok {
		return keyErrf("func", "no stage function registered as %q (registered: %s)", s.Func, strings.Join(Registered(), ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Params)) {
		// A task travels as JSON, which has no NaN or infinity.
		if f, ok := s.Params[k].(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return keyErrf("params", "param %q: want a finite number, got %v", k, f)
		}
		if _, err := json.Marshal(s.Params[k]); err != nil {
			// Submit failed with the bare "json: unsupported type:
			// func()", naming neither the stage nor the param.
			return keyErrf("params", "param %q: %v: a task travels as JSON (numbers, strings, booleans, lists and maps of them)", k, err)
		}
	}
	if check, ok := lookupParams(s.Func); ok {
		if err := check(s.Params); err != nil {
			return keyErrf("params", "%w", err)
		}
	}
	if s.AutoTrialSeconds < 0 {
		return keyErrf("auto_trial_seconds", "must be > 0, got %v", s.AutoTrialSeconds)
	}
	if s.Workers < 0 || (!s.Auto && s.Workers == 0) {
		return keyErrf("workers", "must be >= 1, got %d", s.Workers)
	}
	if s.MaxSlaves < 0 {
		return keyErrf("max_slaves", "must be >= 0, got %d", s.MaxSlaves)
	}
	c := s.Consistency
	switch c.Kind {
	case kvstore.BSP, kvstore.ASP:
		if c.Staleness != 0 {
			return keyErrf("staleness", "only meaningful with ssp or sparse_ssp, got %d with %s", c.Staleness, c.Kind)
		}
	case kvstore.SSP, kvstore.SparseSSP:
	default:
		return keyErrf("consistency", "must be bsp, ssp, asp or sparse_ssp, got %q", c.Kind)
	}
	if c.Staleness < 0 {
		return keyErrf("staleness", "must be >= 0, got %d", c.Staleness)
	}
	if c.Speculation < 0 {
		return keyErrf("speculation", "must be >= 0, got %d", c.Speculation)
	}
	if c.Speculation > 0 && c.Kind != kvstore.SparseSSP {
		return keyErrf("speculation", "only valid with consistency = \"sparse_ssp\", got %q", c.Kind)
	}
	if c.Kind != kvstore.BSP && (s.Workers > 1 || s.Auto) && needsBSP(s.Func) {
		workers := fmt.Sprintf("its %d workers", s.Workers)
		if s.Auto {
			workers = "the workers auto parallelism may choose"
		}
		return keyErrf("consistency", "%s relies on BSP barriers between %s; set consistency = \"bsp\" (got %q)", s.Func, workers, c.Kind)
	}
	switch s.WorkerKind {
	case KindPS, KindLocal, KindHogwild:
	case KindSingle:
		if s.Workers > 1 {
			return keyErrf("workers", "a single stage has exactly one worker, got %d", s.Workers)
		}
	default:
		return keyErrf("worker_kind", "must be ps, local, hogwild or single, got %q", s.WorkerKind)
	}
	if s.WorkerKind != KindPS && s.MaxSlaves > 1 {
		return keyErrf("max_slaves", "a %s stage runs on one slave, got %d", s.WorkerKind, s.MaxSlaves)
	}
	if s.WorkerKind != KindPS && len(s.Slaves) > 1 {
		return keyErrf("slaves", "a %s stage runs on one slave, got %d", s.WorkerKind, len(s.Slaves))
	}
	switch s.Cache {
	case "", "none":
		if s.CacheSize != 0 {
			return keyErrf("cache_size", "set without a cache kind")
		}
	case "lru", "lfu":
		if s.CacheSize <= 0 {
			return &keyErr{key: "cache_size", also: "cache", err: fmt.Errorf("a %s cache needs a size > 0, got %d", s.Cache, s.CacheSize)}
		}
		if s.WorkerKind != KindPS {
			return keyErrf("cache", "the process cache is for ps workers, not %s", s.WorkerKind)
		}
		if s.Consistency.Kind == kvstore.SparseSSP {
			// Refused here, not when the workers start: a cache hit
			// hides the read's keys from the sparse_ssp controller.
			return keyErrf("cache", "a process cache hides reads from the sparse_ssp controller; use ssp or no cache")
		}
	default:
		return keyErrf("cache", "must be none, lru or lfu, got %q", s.Cache)
	}
	if s.ChunkSize < 0 {
		return keyErrf("chunk_size", "must be >= 0, got %d", s.ChunkSize)
	}
	if s.ChunkSize > 0 && s.WorkerKind == KindPS {
		// It was ignored: a ps stage's model lives in the KV-store.
		return keyErrf("chunk_size", "keys per chunk lock of a stage that holds the model in one slave (local, hogwild, single); a ps stage has none (the chunks of GetChunk/AddChunk are the [[table]] chunk_size)")
	}
	for _, in := range s.Inputs {
		if _, ok := t.Inputs[in]; !ok {
			return keyErrf("inputs", "no input named %q in the task", in)
		}
	}
	if params, ok := inputHooks.get(s.Func); ok {
		for _, ip := range params {
			name := s.Params.String(ip.Param, ip.Param)
			_, set := s.Params[ip.Param]
			_, declared := t.Inputs[name]
			reads := declared && (len(s.Inputs) == 0 || slices.Contains(s.Inputs, name))
			switch {
			case reads || !ip.Required && !set:
			case !declared:
				return keyErrf("params", "%s reads input %q (param %q) but the task declares no such input", s.Func, name, ip.Param)
			default:
				return keyErrf("inputs", "%s reads input %q (param %q) but the stage's inputs are %q: add it", s.Func, name, ip.Param, s.Inputs)
			}
		}
	}
	return nil
}

// unlabeledInput finds an input stage s reads for its labels
// (InputParam.Labeled) that is csv without a label column.
func unlabeledInput(t *MultiStageTask, s Stage) (string, InputParam, bool) {
	params, _ := inputHooks.get(s.Func)
	for _, ip := range params {
		name := s.Params.String(ip.Param, ip.Param)
		in, ok := t.Inputs[name]
		if ip.Labeled && ok && in.Format == "csv" && in.Label < 0 && (len(s.Inputs) == 0 || slices.Contains(s.Inputs, name)) {
			return name, ip, true
		}
	}
	return "", InputParam{}, false
}

// SettlesEpochs reports whether the stage's workers confirm each input
// block they finish to the master, which holds a worker's epoch end until
// the epoch is finished where it must (master/blocks.go: in a stage that
// survives deaths; elsewhere it only holds a worker until the epoch
// before is finished, never two epochs ahead): every kind but
// single (one worker). Without it, a worker with nothing left of an epoch
// ran on into the next ones while others still trained on this one: with
// more workers than blocks, epochs ran at once (test figures of a
// half-trained model, a model unlike the one of a stage that survives a
// slave's death).
func (s Stage) SettlesEpochs() bool { return s.WorkerKind != KindSingle }

// OneSlave reports whether the stage's workers must share one slave.
func (s Stage) OneSlave() bool {
	return s.WorkerKind == KindLocal || s.WorkerKind == KindHogwild || s.WorkerKind == KindSingle
}

// foreignOption finds the first option set for another format than the
// input's (format "" is libsvm), which was ignored: a user who forgot
// format = "csv" trained on the wrong reading of the file. It returns the
// option's key and why, or "" and nil.
func foreignOption(name, format string, indexBase, label, delimiter, header bool) (string, error) {
	if format == "" {
		format = "libsvm"
	}
	if key, formats := foreignKey(format, indexBase, label, delimiter, header); key != "" {
		return key, fmt.Errorf("input %q: %s applies only to format %s, not %s", name, key, formats, format)
	}
	return "", nil
}

// foreignKey is foreignOption's finding: the first option set for
// another format than format, and the formats it applies to ("csv or
// ratings"); "" when there is none.
func foreignKey(format string, indexBase, label, delimiter, header bool) (key, formats string) {
	for _, o := range []struct {
		key     string
		set     bool
		formats []string
	}{
		{"index_base", indexBase, []string{"libsvm"}},
		{"label_column", label, []string{"csv"}},
		{"delimiter", delimiter, []string{"csv"}},
		{"header", header, []string{"csv", "ratings"}},
	} {
		if o.set && !slices.Contains(o.formats, format) {
			return o.key, strings.Join(o.formats, " or ")
		}
	}
	return "", ""
}
