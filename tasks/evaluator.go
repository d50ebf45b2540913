package tasks

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/flexps/flexps/datastore"
)

// Evaluator scores a saved model of one kind on data (`flexps eval`).
type Evaluator struct {
	// Format is the data format the kind reads by default (libsvm, ratings...).
	Format string
	// Formats are those the kind can score; empty: any. Data read in
	// another format (--format text: records without features) is
	// refused instead of scored.
	Formats []string
	// Labeled: the kind scores records against their labels, so csv
	// data read without a label column (label_column -1: every label 0)
	// is refused instead of scored.
	Labeled bool
	// Eval returns named metrics (e.g. accuracy, logloss, rmse).
	Eval func(m *Model, data *datastore.Records) (map[string]float64, error)
}

var evaluators = struct {
	sync.RWMutex
	m map[string]Evaluator
}{m: map[string]Evaluator{}}

// RegisterEvaluator makes models of kind scorable.
func RegisterEvaluator(kind string, e Evaluator) {
	evaluators.Lock()
	defer evaluators.Unlock()
	evaluators.m[kind] = e
}

// LookupEvaluator finds the evaluator of a model kind.
func LookupEvaluator(kind string) (Evaluator, bool) {
	evaluators.RLock()
	defer evaluators.RUnlock()
	e, ok := evaluators.m[kind]
	return e, ok
}

// EvaluatorKinds lists the kinds with an evaluator.
func EvaluatorKinds() []string {
	evaluators.RLock()
	defer evaluators.RUnlock()
	out := make([]string, 0, len(evaluators.m))
	for k := range evaluators.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Evaluation is a saved model scored on a data set.
type Evaluation struct {
	Model   string             // the model file
	Kind    string             // its kind
	Records int                // records scored
	Metrics map[string]float64 // e.g. accuracy, logloss, rmse
}

// String is one line: model, kind, records and the metrics by name.
func (e *Evaluation) String() string {
	keys := make([]string, 0, len(e.Metrics))
	for k := range e.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := []string{fmt.Sprintf("model=%s kind=%s records=%d", e.Model, e.Kind, e.Records)}
	for _, k := range keys {
		parts = append(parts, k+"="+FormatMetric(e.Metrics[k]))
	}
	return strings.Join(parts, " ")
}

// FormatMetric writes a metric with 4 decimals, as flexps eval and the
// per-epoch table print it, unless that would hide it: a magnitude of 1e7
// or more in 6 significant digits (k-means on raw features in the
// billions printed a 300-digit objective that broke the table), one below
// 1e-4 but not 0 in 4 (it printed 0.0000).
func FormatMetric(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e7 && !math.IsInf(a, 0):
		return strconv.FormatFloat(v, 'g', 6, 64)
	case a > 0 && a < 1e-4:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	return fmt.Sprintf("%.4f", v)
}

// Evaluate scores the model file on data with the evaluator of the model's
// kind. format "" means the model's training format (see ModelMeta), else
// its evaluator's default; a non-empty kind must match the model's.
func Evaluate(ctx context.Context, modelPath, data, format, kind string) (*Evaluation, error) {
	return EvaluateWith(ctx, modelPath, data, EvalOptions{Format: format, Kind: kind})
}

// EvaluateWith is Evaluate with every way of reading the data: options
// left zero read it as the task read its training input.
func EvaluateWith(ctx context.Context, modelPath, data string, o EvalOptions) (*Evaluation, error) {
	m, err := LoadModel(modelPath)
	if err != nil {
		return nil, err
	}
	if m.Kind == "" {
		// Its job file set no kind (not required): a model of lr.sgd
		// written that way could not be scored at all.
		if o.Kind == "" {
			return nil, fmt.Errorf("model %s records no kind (its job file set no \"kind\"): name one with --kind (known: %s)", modelPath, strings.Join(EvaluatorKinds(), ", "))
		}
		m.Kind = o.Kind
	}
	if o.Kind != "" && m.Kind != o.Kind {
		return nil, fmt.Errorf("model %s is a %q model, not %q", modelPath, m.Kind, o.Kind)
	}
	ev, ok := LookupEvaluator(m.Kind)
	if !ok {
		return nil, fmt.Errorf("model %s is of kind %q, which no evaluator knows (known: %s)", modelPath, m.Kind, strings.Join(EvaluatorKinds(), ", "))
	}
	format, opt, err := o.dataFormat(m, data, ev.Format)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", modelPath, err)
	}
	if f := strings.ToLower(format); len(ev.Formats) > 0 && !slices.Contains(ev.Formats, f) && !(f == "svmlight" && slices.Contains(ev.Formats, "libsvm")) {
		return nil, fmt.Errorf("model %s: a %s model scores %s data, not %s", modelPath, m.Kind, strings.Join(ev.Formats, " or "), format)
	}
	if ev.Labeled && datastore.CanonicalFormat(format) == "csv" && opt.LabelColumn < 0 {
		return nil, fmt.Errorf("model %s: a %s model is scored against the data's labels, and label column -1 reads none (every label 0): name the label's column (--label-column)", modelPath, m.Kind)
	}
	recs, err := datastore.ReadAllWith(ctx, data, format, opt)
	if err != nil {
		return nil, err
	}
	metrics, err := ev.Eval(m, recs)
	if err != nil {
		return nil, fmt.Errorf("model %s on %s: %w", modelPath, data, err)
	}
	for _, k := range slices.Sorted(maps.Keys(metrics)) {
		// A figure that overflowed is no score: printed as
		// "rmse=+Inf" (a rating of 1e308), and eval exited 0.
		if v := metrics[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("model %s on %s: %s is %v: the data or the model holds values too large to score (%d records)", modelPath, data, k, v, recs.Len())
		}
	}
	return &Evaluation{Model: modelPath, Kind: m.Kind, Records: recs.Len(), Metrics: metrics}, nil
}
