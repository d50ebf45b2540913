package tasks

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/kvstore"
)

// JobFile is a task as written in TOML (configs/*.toml). It maps 1:1 to
// the file's tables; unknown keys are errors.
type JobFile struct {
	Name          string               `toml:"name"`
	Kind          string               `toml:"kind"`
	Priority      int                  `toml:"priority"`
	Output        string               `toml:"output"`
	ModelTransfer string               `toml:"model_transfer"`
	Repeat        int                  `toml:"repeat"` // run the list of stages this many times (default 1), e.g. SVRG rounds
	Local         LocalSection         `toml:"local"`
	Checkpoint    Checkpoint           `toml:"checkpoint"`
	Tables        []kvstore.TableSpec  `toml:"table"`
	Inputs        map[string]InputFile `toml:"input"`
	Stages        []StageFile          `toml:"stage"`
}

// Bounds of the in-process cluster `flexps run` starts (engine.StartLocal
// refuses more): each slave is a full slave, each slot a worker goroutine.
const (
	MaxLocalSlaves = 256
	MaxLocalSlots  = 1024
)

// LocalSection sizes the in-process cluster that `flexps run` starts.
// Pointers tell a key left out (the default) from one written as 0, which
// is refused: it was taken for the default without a word.
type LocalSection struct {
	Slaves *int `toml:"slaves"` // default 2
	Slots  *int `toml:"slots"`  // worker slots per slave, default 2 (or the cluster file's)
}

// Size is the cluster the section asks for, 0 for a key left out (the
// caller's default; engine.LocalOptions reads 0 so).
func (l LocalSection) Size() (slaves, slots int) {
	if l.Slaves != nil {
		slaves = *l.Slaves
	}
	if l.Slots != nil {
		slots = *l.Slots
	}
	return slaves, slots
}

// InputFile is an [input.<name>] table.
type InputFile struct {
	Path      string      `toml:"path"`
	Format    string      `toml:"format"`
	IndexBase *int        `toml:"index_base"`
	Label     *int        `toml:"label_column"`
	Delimiter string      `toml:"delimiter"`
	Header    bool        `toml:"header"`
	OnError   string      `toml:"on_error"`
	MaxBad    *float64    `toml:"max_bad_fraction"` // default 0.01
	BlockSize *Size       `toml:"block_size"`       // default: the cluster's
	Generate  *synth.Spec `toml:"generate"`         // written by `flexps run` when the file is missing
}

// StageFile is a [[stage]] table.
type StageFile struct {
	Name        string         `toml:"name"`
	Func        string         `toml:"func"`
	Workers     any            `toml:"workers"`            // an integer or "auto"
	MaxWorkers  *int           `toml:"max_workers"`        // with workers = "auto": the largest parallelism tried (default: all slots)
	AutoTrial   *float64       `toml:"auto_trial_seconds"` // with workers = "auto": seconds per trial (default 2)
	MaxSlaves   *int           `toml:"max_slaves"`         // default: any number
	Slaves      []string       `toml:"slaves"`
	Consistency string         `toml:"consistency"`
	Staleness   int            `toml:"staleness"`
	Speculation int            `toml:"speculation"`
	WorkerKind  string         `toml:"worker_kind"`
	Cache       string         `toml:"cache"`
	CacheSize   int            `toml:"cache_size"`
	ChunkSize   *int           `toml:"chunk_size"` // local, hogwild, single: default 4096
	Inputs      []string       `toml:"inputs"`
	Params      map[string]any `toml:"params"`
}

// ConfigError is a problem in a TOML file, located by line when known.
// Err, when set, is the error Msg came from (Unwrap returns it).
type ConfigError struct {
	File string
	Line int
	Msg  string
	Err  error
}

func (e *ConfigError) Unwrap() error { return e.Err }

// KeyLine is the line of data (a TOML file) that sets key (its path of
// table names, then the key: "kv", "listen"), else the header of the
// table it names; 0 when neither is there.
func KeyLine(data []byte, key ...string) int {
	if len(key) == 0 {
		return 0
	}
	return keyLine(data, toml.Key(key))
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s line %d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// DecodeStrict decodes TOML data into v, rejecting unknown keys with the
// line they are on. path names the file in errors.
func DecodeStrict(path string, data []byte, v any) error {
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(v)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return &ConfigError{File: path, Line: pe.Position.Line, Msg: pe.Message}
		}
		// Type mismatches come as "toml: line N (last key "k"): msg".
		if m := typeErr.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return &ConfigError{File: path, Line: line, Msg: fmt.Sprintf("key %q: %s", m[2], m[3])}
		}
		return &ConfigError{File: path, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		return &ConfigError{File: path, Line: keyLine(data, k), Msg: fmt.Sprintf("unknown key %q", k.String())}
	}
	// The decoder leaves a map field unset without a word when the file
	// gives it a value that is no table: params = 5 in a [[stage]] ran
	// with the default params.
	for _, k := range md.Keys() {
		if t := md.Type(k...); t != "Hash" && destKind(reflect.TypeOf(v), k) == reflect.Map {
			return &ConfigError{File: path, Line: keyLine(data, k),
				Msg: fmt.Sprintf("key %q: want a table, got %s", k.String(), strings.ToLower(t))}
		}
	}
	return nil
}

// destKind is the kind of the Go value key decodes into in a value of
// type t (Invalid when no field takes it, Interface below a free-form
// value).
func destKind(t reflect.Type, key toml.Key) reflect.Kind {
	for _, name := range key {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			f, ok := tomlField(t, name)
			if !ok {
				return reflect.Invalid
			}
			t = f.Type
		default:
			return t.Kind()
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind()
}

// tomlField is the field of struct type t that the decoder fills from
// key name: by its toml tag, else by its name, ignoring case.
func tomlField(t reflect.Type, name string) (reflect.StructField, bool) {
	var byName reflect.StructField
	found := false
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		switch {
		case tag == "-":
		case tag == name:
			return f, true
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			if ef, ok := tomlField(f.Type, name); ok && !found {
				byName, found = ef, true
			}
		case tag == "" && strings.EqualFold(f.Name, name) && !found:
			byName, found = f, true
		}
	}
	return byName, found
}

var typeErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// keyLine finds the line of an undecoded key: the first assignment of its
// last component under the header of its parent table, or the header
// itself for an unknown table.
func keyLine(data []byte, k toml.Key) int {
	whole, parent, last := strings.Join(k, "."), strings.Join(k[:len(k)-1], "."), k[len(k)-1]
	for _, l := range tomlSections(data) {
		if (l.key == "" && l.path == whole) || (l.key == last && l.path == parent) {
			return l.line
		}
	}
	return 0
}

// LoadJob reads and validates a job TOML file.
func LoadJob(path string) (*JobFile, *MultiStageTask, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("job file: %w", err)
	}
	return ParseJob(path, data)
}

// ParseJob decodes a job file and builds its task.
func ParseJob(path string, data []byte) (*JobFile, *MultiStageTask, error) {
	var jf JobFile
	if err := DecodeStrict(path, data, &jf); err != nil {
		return nil, nil, err
	}
	t, err := jf.Task()
	if err == nil {
		err = writtenTableZeros(data, jf.Tables)
	}
	if err != nil {
		line := 0
		if fe := (*FieldError)(nil); errors.As(err, &fe) {
			line = jf.fieldLine(data, fe)
		}
		return nil, nil, &ConfigError{File: path, Line: line, Msg: err.Error(), Err: err}
	}
	return &jf, t, nil
}

// writtenTableZeros refuses a [[table]] width, chunk_size or replicas
// written as 0, which kvstore.TableSpec reads as its default (1, 1024, the
// cluster's): a user who wrote one got the default without a word. The
// spec is kvstore's, a plain struct shared with the Go API and the wire,
// so the file is read again for the keys it writes.
func writtenTableZeros(data []byte, specs []kvstore.TableSpec) error {
	var written struct {
		Tables []struct {
			Width     *int64 `toml:"width"`
			ChunkSize *int64 `toml:"chunk_size"`
			Replicas  *int64 `toml:"replicas"`
		} `toml:"table"`
	}
	if _, err := toml.Decode(string(data), &written); err != nil {
		return nil // decoded strictly before: cannot happen
	}
	for i, w := range written.Tables {
		if i >= len(specs) {
			break
		}
		for _, k := range []struct {
			key, want string
			n         *int64
		}{
			{"width", "in [1, 65535] (unset: 1)", w.Width},
			{"chunk_size", ">= 1 (unset: 1024)", w.ChunkSize},
			{"replicas", fmt.Sprintf("in [1, %d] (unset: the cluster's default)", kvstore.MaxReplicas), w.Replicas},
		} {
			if k.n != nil && *k.n == 0 {
				return &FieldError{Section: "table", Index: i, Name: specs[i].Name, Keys: []string{k.key},
					Err: fmt.Errorf("%w: table %q: %s: must be %s, got 0", ErrInvalid, specs[i].Name, k.key, k.want)}
			}
		}
	}
	return nil
}

// fieldLine is the line of data (the file jf was decoded from) holding
// the setting fe is about: the first of its keys assigned in its section,
// else the section's header; 0 when the section is not in the file (a
// table a stage function adds).
func (jf *JobFile) fieldLine(data []byte, fe *FieldError) int {
	want := tomlSection{kind: fe.Section, index: -1, name: fe.Name}
	switch fe.Section {
	case "stage":
		if len(jf.Stages) == 0 {
			return 0
		}
		want.index = fe.Index % len(jf.Stages) // repeat copies the stages
	case "table":
		// The file's tables come first in the task, in order.
		want.index = fe.Index
		if want.index >= len(jf.Tables) || jf.Tables[want.index].Name != fe.Name {
			want.index = slices.IndexFunc(jf.Tables, func(t kvstore.TableSpec) bool { return t.Name == fe.Name })
		}
		if want.index < 0 {
			return 0
		}
		want.name = ""
	}
	lines := tomlSections(data)
	header := 0
	for _, key := range fe.Keys {
		sub, k := "", key
		if before, after, ok := strings.Cut(key, "."); ok {
			sub, k = before, after
		}
		for _, l := range lines {
			at := want
			at.sub = sub
			if l.tomlSection != at {
				continue
			}
			if l.key == k {
				return l.line
			}
		}
	}
	for _, l := range lines {
		if l.tomlSection == want && l.key == "" {
			header = l.line
			break
		}
	}
	return header
}

// tomlSection is where a line of a job file is: kind "stage" or "table"
// (index: which [[stage]] or [[table]], from 0), "input" (name: the input's)
// or another top-level table's name ("" before the first header); sub a
// sub-table of it ("params" of [stage.params]).
type tomlSection struct {
	kind  string
	index int
	name  string
	sub   string
}

// tomlLine is a header (key "") or a key's assignment on line; path is
// the dotted name of the header it is under ("" before the first).
type tomlLine struct {
	tomlSection
	path string
	key  string
	line int
}

var (
	tomlHeader = regexp.MustCompile(`^\s*(\[\[?)\s*([^\]]*?)\s*\]\]?`)
	tomlAssign = regexp.MustCompile(`^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*=`)
)

// tomlSections lists the headers and the key assignments of a job file
// with where they are. A line-oriented scan, not a TOML parser: enough to
// point at a setting in a file that decoded already.
func tomlSections(data []byte) []tomlLine {
	var out []tomlLine
	cur, path := tomlSection{index: -1}, ""
	count := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if m := tomlHeader.FindStringSubmatch(text); m != nil {
			parts := strings.Split(m[2], ".")
			for i, p := range parts {
				parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
			}
			path = strings.Join(parts, ".")
			switch {
			case m[1] == "[[" && len(parts) == 1:
				cur = tomlSection{kind: parts[0], index: count[parts[0]]}
				count[parts[0]]++
			case parts[0] == "input" && len(parts) >= 2:
				cur = tomlSection{kind: "input", index: -1, name: parts[1], sub: strings.Join(parts[2:], ".")}
			case len(parts) >= 2 && count[parts[0]] > 0:
				// [stage.params]: a sub-table of the last [[stage]].
				cur = tomlSection{kind: parts[0], index: count[parts[0]] - 1, sub: strings.Join(parts[1:], ".")}
			default:
				cur = tomlSection{kind: strings.Join(parts, "."), index: -1}
			}
			out = append(out, tomlLine{tomlSection: cur, path: path, line: line})
			continue
		}
		if m := tomlAssign.FindStringSubmatch(text); m != nil {
			out = append(out, tomlLine{tomlSection: cur, path: path, key: strings.Trim(m[1], `"'`), line: line})
		}
	}
	return out
}

// Task builds the MultiStageTask the file describes, normalized and
// validated.
func (jf *JobFile) Task() (*MultiStageTask, error) {
	t := NewTask(jf.Name)
	t.Kind, t.Priority, t.Output, t.ModelTransfer = jf.Kind, jf.Priority, jf.Output, jf.ModelTransfer
	t.Checkpoint = jf.Checkpoint
	t.Tables = append(t.Tables, jf.Tables...)
	names := make([]string, 0, len(jf.Inputs))
	for n := range jf.Inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		in := jf.Inputs[n]
		// Written as 0 they were taken for unset without a word: a
		// max_bad_fraction = 0 meant to allow no malformed line
		// allowed 1%, a block_size = 0 took the cluster's.
		if f := in.MaxBad; f != nil && !(*f > 0) {
			return nil, &FieldError{Section: "input", Name: n, Keys: []string{"max_bad_fraction"},
				Err: fmt.Errorf("input %q: max_bad_fraction must be in (0, 1] (unset: 0.01; to allow no malformed line, on_error = \"fail\"), got %v", n, *f)}
		}
		if b := in.BlockSize; b != nil && *b < 1 {
			return nil, &FieldError{Section: "input", Name: n, Keys: []string{"block_size"},
				Err: fmt.Errorf("input %q: block_size must be > 0 bytes (unset: the cluster's), got %d", n, *b)}
		}
		spec := InputSpec{Path: in.Path, Format: in.Format, IndexBase: in.IndexBase, Delimiter: in.Delimiter,
			Header: in.Header, OnError: in.OnError, MaxBadFraction: deref(in.MaxBad), BlockSize: int64(deref(in.BlockSize))}
		if in.Label != nil {
			spec.Label = *in.Label
		}
		if key, err := foreignOption(n, in.Format, in.IndexBase != nil, in.Label != nil, in.Delimiter != "", in.Header); err != nil {
			return nil, &FieldError{Section: "input", Name: n, Keys: []string{key}, Err: err}
		}
		if in.Generate != nil {
			// The file is written in the generator's format: under
			// another, the task failed on its first line, once the
			// file was written (format = "csv" with kind = "libsvm").
			// Checked before the kind's own keys, which a spec of the
			// wrong kind lacks (kind = "ratings" under a libsvm input
			// was refused for its users).
			kind, format := cmp.Or(in.Generate.Kind, "libsvm"), cmp.Or(in.Format, "libsvm")
			if (kind == "libsvm" || kind == "ratings") && kind != format {
				return nil, &FieldError{Section: "input", Name: n, Keys: []string{"generate.kind", "format"},
					Err: fmt.Errorf("input %q: generate: kind = %q writes a %s file, but the input is read as %s: set format = %q, or another kind", n, kind, kind, format, kind)}
			}
			// Checked here, not only when `flexps run` writes the
			// file: that error named no line, and a file already
			// there hid the mistake.
			if key, err := in.Generate.Check(); err != nil {
				return nil, &FieldError{Section: "input", Name: n, Keys: []string{"generate." + key},
					Err: fmt.Errorf("input %q: generate: %w", n, err)}
			}
			// The held-out rows would be written over the training
			// rows, as `flexps gen --test-out` refuses: that was found
			// only once the file was missing, naming no line.
			if tp := in.Generate.TestPath; tp != "" && filepath.Clean(tp) == filepath.Clean(in.Path) {
				return nil, &FieldError{Section: "input", Name: n, Keys: []string{"generate.test_path"},
					Err: fmt.Errorf("input %q: generate: test_path %q is the input's own file (path = %q): the held-out rows would be written over the training rows; give it another name", n, tp, in.Path)}
			}
		}
		t.SetInput(n, spec)
	}
	for i, sf := range jf.Stages {
		// A count written as 0 where the Go API reads 0 as "the
		// default" was taken for the default without a word
		// (max_slaves = 0 spread the stage over any number of slaves,
		// chunk_size = 0 took 4096, auto_trial_seconds = 0 two
		// seconds).
		for _, k := range []struct {
			key, unset string
			n          *int
		}{
			{"max_workers", "all slots", sf.MaxWorkers},
			{"max_slaves", "any number", sf.MaxSlaves},
			{"chunk_size", "4096", sf.ChunkSize},
		} {
			if k.n != nil && *k.n < 1 {
				return nil, &FieldError{Section: "stage", Index: i, Keys: []string{k.key}, Err: fmt.Errorf("stage %d (%s): %s: must be >= 1 (unset: %s), got %d", i, sf.Name, k.key, k.unset, *k.n)}
			}
		}
		if sf.AutoTrial != nil && !(*sf.AutoTrial > 0) {
			return nil, &FieldError{Section: "stage", Index: i, Keys: []string{"auto_trial_seconds"}, Err: fmt.Errorf("stage %d (%s): auto_trial_seconds: must be > 0 (unset: 2), got %v", i, sf.Name, *sf.AutoTrial)}
		}
		// An empty list is nil to the Go API, its default: inputs = []
		// read every input, slaves = [] ran on any slave.
		for _, k := range []struct {
			key, unset string
			list       []string
		}{
			{"inputs", "every input of the task", sf.Inputs},
			{"slaves", "any slave", sf.Slaves},
		} {
			if k.list != nil && len(k.list) == 0 {
				return nil, &FieldError{Section: "stage", Index: i, Keys: []string{k.key}, Err: fmt.Errorf("stage %d (%s): %s: empty (unset: %s)", i, sf.Name, k.key, k.unset)}
			}
		}
		s := Stage{Name: sf.Name, Func: sf.Func, MaxSlaves: deref(sf.MaxSlaves), Slaves: sf.Slaves,
			Consistency: kvstore.Consistency{Kind: kvstore.ConsistencyKind(strings.ToLower(sf.Consistency)), Staleness: sf.Staleness, Speculation: sf.Speculation},
			WorkerKind:  sf.WorkerKind, Cache: sf.Cache, CacheSize: sf.CacheSize, ChunkSize: deref(sf.ChunkSize), Inputs: sf.Inputs, Params: Params(sf.Params)}
		switch w := sf.Workers.(type) {
		case nil:
			s.Workers = 1
		case int64:
			if w < 1 {
				return nil, &FieldError{Section: "stage", Index: i, Keys: []string{"workers"}, Err: fmt.Errorf("stage %d (%s): workers: must be >= 1 or \"auto\", got %d", i, sf.Name, w)}
			}
			s.Workers = int(w)
		case string:
			if w != "auto" {
				return nil, &FieldError{Section: "stage", Index: i, Keys: []string{"workers"}, Err: fmt.Errorf("stage %d (%s): workers: want an integer or \"auto\", got %q", i, sf.Name, w)}
			}
			s.Auto = true
			s.Workers = deref(sf.MaxWorkers)
			s.AutoTrialSeconds = deref(sf.AutoTrial)
		default:
			return nil, &FieldError{Section: "stage", Index: i, Keys: []string{"workers"}, Err: fmt.Errorf("stage %d (%s): workers: want an integer or \"auto\", got %v", i, sf.Name, w)}
		}
		if !s.Auto {
			// Read only by auto parallelism: set beside a fixed
			// workers they were ignored (max_workers = 4 with
			// workers = 8 ran 8).
			for _, k := range []struct {
				key string
				set bool
			}{{"max_workers", sf.MaxWorkers != nil}, {"auto_trial_seconds", sf.AutoTrial != nil}} {
				if k.set {
					return nil, &FieldError{Section: "stage", Index: i, Keys: []string{k.key}, Err: fmt.Errorf("stage %d (%s): %s: applies only with workers = \"auto\" (workers is %d)", i, sf.Name, k.key, s.Workers)}
				}
			}
		}
		t.Stages = append(t.Stages, s)
	}
	// Written as 0 they were taken for unset (2 slaves; 2 slots, or the
	// cluster file's) without a word.
	if n := jf.Local.Slaves; n != nil && (*n < 1 || *n > MaxLocalSlaves) {
		return nil, &FieldError{Section: "local", Keys: []string{"slaves"}, Err: fmt.Errorf("[local] slaves: must be in [1, %d] (unset: 2; a larger cluster runs `flexps master` and `flexps slave` processes), got %d", MaxLocalSlaves, *n)}
	}
	if n := jf.Local.Slots; n != nil && (*n < 1 || *n > MaxLocalSlots) {
		return nil, &FieldError{Section: "local", Keys: []string{"slots"}, Err: fmt.Errorf("[local] slots: must be in [1, %d] (unset: 2, or the --config file's [slave] slots), got %d", MaxLocalSlots, *n)}
	}
	if jf.Repeat < 0 || jf.Repeat > 10000 {
		return nil, &FieldError{Keys: []string{"repeat"}, Err: fmt.Errorf("repeat: must be in [1, 10000] (0 or unset: 1), got %d", jf.Repeat)}
	}
	t.RepeatStages(jf.Repeat)
	t.Normalize()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// deref is *p, or the zero value (the Go API's "default") for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
