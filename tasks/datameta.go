package tasks

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/flexps/flexps/datastore"
)

// Keys of a model's Meta that record how the task read its training input,
// so that `flexps eval` reads the data it scores the same way unless told
// otherwise: a model trained on a 0-based LIBSVM file scored as 1-based
// would see every feature shifted by one (and, when no row has feature 0,
// say nothing: digits' first pixel is always 0).
const (
	MetaFormat      = "data.format"
	MetaIndexBase   = "data.index_base"
	MetaLabelColumn = "data.label_column"
	MetaDelimiter   = "data.delimiter"
	MetaHeader      = "data.header"
	// MetaHeaderPaths lists (a JSON array) the paths of the task's inputs
	// read with header = true: the recorded header applies to those
	// files only. Another file given to eval is read without skipping a
	// line unless --header says so; before, a headerless test file lost
	// its first record to a header its training file had.
	MetaHeaderPaths = "data.header_paths"
)

// MetaTablePrefix starts the Meta keys that record which table a stage
// param named: "table.table" = "weights" for lr.sgd's table = "weights".
// An evaluator finds its tables by them (Model.TableName): it looked for
// its default names only, so a model trained on renamed tables could
// not be scored ("lr model has no table "w"").
const MetaTablePrefix = "table."

// ModelMeta is the Meta of the model task t writes: t.Meta, the tables
// its stages' params name (MetaTablePrefix; the last stage naming one
// wins), and the format options of its training input (the input the
// first stage's "train" parameter names, default "train"; else the task's
// only input).
func ModelMeta(t *MultiStageTask) map[string]string {
	m := maps.Clone(t.Meta)
	if m == nil {
		m = map[string]string{}
	}
	for _, s := range t.Stages {
		for param, v := range s.Params {
			if name, ok := v.(string); ok && t.hasTable(name) {
				m[MetaTablePrefix+param] = name
			}
		}
	}
	in, ok := trainingInput(t)
	if !ok {
		if len(m) == 0 {
			return t.Meta
		}
		return m
	}
	format := in.Format
	if format == "" {
		format = "libsvm"
	}
	opt := in.FormatOptions()
	m[MetaFormat] = format
	m[MetaIndexBase] = strconv.Itoa(opt.IndexBase)
	m[MetaLabelColumn] = strconv.Itoa(opt.LabelColumn)
	m[MetaDelimiter] = string([]byte{opt.Delimiter})
	m[MetaHeader] = strconv.FormatBool(opt.Header)
	var headed []string
	for _, name := range slices.Sorted(maps.Keys(t.Inputs)) {
		if in := t.Inputs[name]; in.Header && in.Path != "" {
			headed = append(headed, in.Path)
		}
	}
	if headed == nil {
		headed = []string{}
	}
	b, _ := json.Marshal(headed) // strings always marshal
	m[MetaHeaderPaths] = string(b)
	return m
}

// recordedHeader is whether data starts with a header line as the model's
// task read it: data is one of its inputs read with header = true
// (MetaHeaderPaths). ok is false for a model that predates that record.
func recordedHeader(meta map[string]string, data string) (header, ok bool) {
	v, ok := meta[MetaHeaderPaths]
	if !ok {
		return false, false
	}
	var paths []string
	if err := json.Unmarshal([]byte(v), &paths); err != nil {
		return false, false
	}
	for _, p := range paths {
		if samePath(p, data) {
			return true, true
		}
	}
	return false, true
}

// samePath reports whether a and b name the same file: equal, or local
// paths that are equal made absolute (the job's path may be relative to
// another directory than eval's, which this cannot see).
func samePath(a, b string) bool {
	if a == b {
		return true
	}
	if datastore.Scheme(a) != "" || datastore.Scheme(b) != "" {
		return false
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}

// TableName is the table the model's task named with stage param param
// (ModelMeta), else def: the name an evaluator reads a table by.
func (m *Model) TableName(param, def string) string {
	if v := m.Meta[MetaTablePrefix+param]; v != "" {
		return v
	}
	return def
}

func trainingInput(t *MultiStageTask) (InputSpec, bool) {
	name := "train"
	if len(t.Stages) > 0 {
		name = t.Stages[0].Params.String("train", "train")
	}
	if in, ok := t.Inputs[name]; ok {
		return in, true
	}
	if len(t.Inputs) == 1 {
		for _, in := range t.Inputs {
			return in, true
		}
	}
	return InputSpec{}, false
}

// FormatOptions are the datastore options the input's fields ask for.
func (in InputSpec) FormatOptions() datastore.FormatOptions {
	opt := datastore.DefaultFormatOptions()
	if in.IndexBase != nil {
		opt.IndexBase = *in.IndexBase
	}
	opt.LabelColumn = in.Label
	if in.Delimiter != "" {
		opt.Delimiter = in.Delimiter[0]
	}
	opt.Header = in.Header
	return opt
}

// EvalOptions say how Evaluate reads the data. A zero field takes the
// model's recorded training format (ModelMeta) when the data is read in
// that format, else the datastore default.
type EvalOptions struct {
	Format      string // "" : the model's training format, else its evaluator's
	Kind        string // non-empty: refuse a model of another kind
	IndexBase   *int   // LIBSVM
	LabelColumn *int   // CSV
	Delimiter   string // CSV
	Header      *bool  // CSV, ratings
}

// dataFormat resolves the format and its options for reading data with
// model m, whose evaluator reads evFormat by default.
func (o EvalOptions) dataFormat(m *Model, data, evFormat string) (string, datastore.FormatOptions, error) {
	format, opt := o.Format, datastore.DefaultFormatOptions()
	recorded := m.Meta[MetaFormat]
	if format == "" {
		format = evFormat
		if recorded != "" {
			format = recorded
		}
	}
	// An option of another format was ignored: --label-column 3 on data
	// read as libsvm scored it without a word. Refused, as a job file's
	// input refuses it.
	header := o.Header != nil && *o.Header
	if key, formats := foreignKey(datastore.CanonicalFormat(format), o.IndexBase != nil, o.LabelColumn != nil, o.Delimiter != "", header); key != "" {
		return "", opt, fmt.Errorf("--%s applies only to %s data; the data is read as %s (set --format)", strings.ReplaceAll(key, "_", "-"), formats, format)
	}
	if recorded != "" && datastore.CanonicalFormat(recorded) == datastore.CanonicalFormat(format) {
		var err error
		if opt, err = metaOptions(m.Meta); err != nil {
			return "", opt, err
		}
		if h, ok := recordedHeader(m.Meta, data); ok {
			opt.Header = h
		}
	}
	if o.IndexBase != nil {
		opt.IndexBase = *o.IndexBase
	}
	if o.LabelColumn != nil {
		opt.LabelColumn = *o.LabelColumn
	}
	if o.Delimiter != "" {
		opt.Delimiter = o.Delimiter[0]
	}
	if o.Header != nil {
		opt.Header = *o.Header
	}
	return format, opt, nil
}

// metaOptions reads the format options ModelMeta recorded.
func metaOptions(meta map[string]string) (datastore.FormatOptions, error) {
	opt := datastore.DefaultFormatOptions()
	var err error
	if v, ok := meta[MetaIndexBase]; ok {
		if opt.IndexBase, err = strconv.Atoi(v); err != nil {
			return opt, fmt.Errorf("model meta %s = %q: %w", MetaIndexBase, v, err)
		}
	}
	if v, ok := meta[MetaLabelColumn]; ok {
		if opt.LabelColumn, err = strconv.Atoi(v); err != nil {
			return opt, fmt.Errorf("model meta %s = %q: %w", MetaLabelColumn, v, err)
		}
	}
	if v := meta[MetaDelimiter]; v != "" {
		opt.Delimiter = v[0]
	}
	if v, ok := meta[MetaHeader]; ok {
		if opt.Header, err = strconv.ParseBool(v); err != nil {
			return opt, fmt.Errorf("model meta %s = %q: %w", MetaHeader, v, err)
		}
	}
	return opt, nil
}
