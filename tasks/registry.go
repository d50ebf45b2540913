package tasks

import (
	"fmt"
	"sort"
	"sync"
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
// Registering a name twice panics: it is a programming error.
func Register(name string, fn StageFunc) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.m[name]; dup {
		panic(fmt.Sprintf("tasks: stage function %q registered twice", name))
	}
	registry.m[name] = fn
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
