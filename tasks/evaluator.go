package tasks

import (
	"sort"
	"sync"

	"github.com/flexps/flexps/datastore"
)

// Evaluator scores a saved model of one kind on data (`flexps eval`).
type Evaluator struct {
	// Format is the data format the kind reads by default (libsvm, ratings...).
	Format string
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
