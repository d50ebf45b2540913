package tasks

import (
	"fmt"
	"sort"
	"sync"

	"github.com/flexps/flexps/kvstore"
)

// StageFunc is the code a worker runs. It returns when the worker's share
// of the stage is done; an error fails the task.
type StageFunc func(info *Info) error

var registry = struct {
	sync.RWMutex
	m map[string]StageFunc
}{m: map[string]StageFunc{}}

// Register makes fn available under name in this process. Every process of
// a cluster must register the same names (they run the same binary).
// Registering a name twice, an empty name or a nil fn panics: it is a
// programming error.
func Register(name string, fn StageFunc) {
	if name == "" {
		panic("tasks: Register of a stage function with an empty name (a stage names its function by it)")
	}
	if fn == nil {
		// It was taken, and every worker of a stage running it failed
		// with "stage function panicked: invalid memory address".
		panic(fmt.Sprintf("tasks: Register(%q, nil): the stage function is nil", name))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.m[name]; dup {
		panic(fmt.Sprintf("tasks: stage function %q registered twice", name))
	}
	registry.m[name] = fn
}

// TablesFunc returns the tables a stage needs besides those the task
// declares (an intercept, feature statistics), given the stage and the
// declared tables. Tables already declared under a returned name are kept
// as declared.
type TablesFunc func(stage Stage, declared []kvstore.TableSpec) []kvstore.TableSpec

var tableHooks hooks[TablesFunc]

// RegisterTables makes Normalize add the tables fn returns to every task
// with a stage of function name, so a user declares only the model's own
// tables and the algorithm adds its helpers.
func RegisterTables(name string, fn TablesFunc) { tableHooks.set(name, fn) }

func lookupTables(name string) (TablesFunc, bool) { return tableHooks.get(name) }

// RelocatesFunc names the tables a stage's function moves keys of
// (Localize), given the stage (its params say, for example, whether it
// localizes at all).
type RelocatesFunc func(stage Stage) []string

var relocateHooks hooks[RelocatesFunc]

// RegisterRelocates makes Normalize declare the tables fn names
// relocatable (kvstore.TableSpec.Relocate: one copy unless replicas says
// otherwise, which Validate refuses; under BSP and SSP every worker's
// Clock waits for its Adds in flight) in every task with a stage of
// function name, so a user of a function that localizes need not know
// to declare it.
func RegisterRelocates(name string, fn RelocatesFunc) { relocateHooks.set(name, fn) }

func lookupRelocates(name string) (RelocatesFunc, bool) { return relocateHooks.get(name) }

// ParamsFunc checks a stage's params (types, ranges, unknown names) the
// way the stage function will read them, without running anything.
type ParamsFunc func(Params) error

var paramHooks hooks[ParamsFunc]

// RegisterParams makes Validate check the params of every stage of
// function name with fn, so a mistyped or out-of-range param is refused
// when the task is submitted (naming the stage and the key), not when the
// stage starts after the earlier stages ran.
func RegisterParams(name string, fn ParamsFunc) { paramHooks.set(name, fn) }

func lookupParams(name string) (ParamsFunc, bool) { return paramHooks.get(name) }

// TaskParamsFunc checks what one stage's params cannot show: params the
// stages of a task must agree on. It returns the stage at fault, the
// param to name, and the error, or a nil error.
type TaskParamsFunc func(t *MultiStageTask) (stage int, param string, err error)

var taskParamHooks hooks[TaskParamsFunc]

// RegisterTaskParams makes Validate run fn on every task with a stage of
// function name, so stages set up to disagree (an inner stage minimizing
// another objective than the full stage measures) are refused at
// submission, naming the stage and the param.
func RegisterTaskParams(name string, fn TaskParamsFunc) { taskParamHooks.set(name, fn) }

// AllOf is the TaskParamsFunc that runs checks in order and reports the
// first refusal (one hook per function name: a function with several
// checks registers AllOf them).
func AllOf(checks ...TaskParamsFunc) TaskParamsFunc {
	return func(t *MultiStageTask) (int, string, error) {
		for _, check := range checks {
			if i, key, err := check(t); err != nil {
				return i, key, err
			}
		}
		return 0, "", nil
	}
}

// InputParam is a stage param naming an input the stage function reads
// (Info.Input, or Info.OptionalInput when not Required); the param's
// default is its own name ("train", "test").
type InputParam struct {
	Param    string
	Required bool
	// Labeled: the function learns from (or scores by) the input's
	// labels, so a csv input read without a label column (label_column
	// = -1) is refused: every label read 0 and the stage trained a
	// model of one class, reporting success.
	Labeled bool
}

var inputHooks hooks[[]InputParam]

// RegisterInputs makes Validate check, for every stage of function name,
// that each input its params name is one the stage reads (its inputs
// list, else the task's): a required one always, an optional one when its
// param is set. Before, a stage whose train input it could not read was
// accepted and failed when it started, after the stages before it ran.
func RegisterInputs(name string, params ...InputParam) { inputHooks.set(name, params) }

// EpochsFunc is how many epochs (Info.ReportEpoch calls) a stage of a
// function runs at most, given its params, with the function's defaults
// applied (0: not known ahead).
type EpochsFunc func(Params) int

var epochHooks hooks[EpochsFunc]

// RegisterEpochs tells the master how many epochs a stage of function
// name runs, so that a [checkpoint] every N epochs counts them also when
// the stage leaves its epochs param at the function's default (before, such
// a stage was checkpointed only at its end).
func RegisterEpochs(name string, fn EpochsFunc) { epochHooks.set(name, fn) }

// PlannedEpochs is how many epochs stage st runs, as its function says
// (RegisterEpochs) or, for a function that does not, as its params
// "epochs" or "iterations" say; 0 when unknown.
func PlannedEpochs(st *Stage) int {
	if fn, ok := epochHooks.get(st.Func); ok {
		return fn(st.Params)
	}
	if n := st.Params.Int("epochs", 0); n > 0 {
		return n
	}
	return st.Params.Int("iterations", 0)
}

var bspHooks hooks[bool]

// RegisterNeedsBSP makes Validate refuse a stage of function name that
// can run more than one worker (workers > 1 or "auto") under another
// consistency model than BSP: the function relies on BSP reads between
// its workers (Info.RequireBSP says so again when the workers start, for
// a task that skipped validation). Refused at submission, such a stage
// cannot fail after the stages before it ran.
func RegisterNeedsBSP(name string) { bspHooks.set(name, true) }

func needsBSP(name string) bool { need, _ := bspHooks.get(name); return need }

// hooks are per-function hooks registered by stage function name (the
// last registration of a name wins).
type hooks[F any] struct {
	mu sync.RWMutex
	m  map[string]F
}

func (h *hooks[F]) set(name string, fn F) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]F{}
	}
	h.m[name] = fn
}

func (h *hooks[F]) get(name string) (F, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	fn, ok := h.m[name]
	return fn, ok
}

// Lookup finds a registered stage function.
func Lookup(name string) (StageFunc, bool) {
	registry.RLock()
	defer registry.RUnlock()
	fn, ok := registry.m[name]
	return fn, ok
}

// Registered lists the registered names, sorted.
func Registered() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.m))
	for n := range registry.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
