package tasks

import (
	"fmt"
	"strings"
)

// FactorsStartRandom is a TaskParamsFunc for stage function fn, a factor
// model whose prediction multiplies rows of the tables the given params
// name (each defaulting to the param's own name): mf's user and item
// factors, ComplEx's entity embeddings. When every one of them starts at
// zero (init unset or "zero"), every gradient is a product with a zero
// factor: the tables never move, and the stage trains at a constant loss
// and writes an untrained model, exit 0. Such a stage is refused at
// submission, naming the first table's init line (or its [[table]]),
// unless a stage before it in the task may have written the tables.
func FactorsStartRandom(fn string, params ...string) TaskParamsFunc {
	return func(t *MultiStageTask) (int, string, error) {
		for i, s := range t.Stages {
			if s.Func != fn {
				continue
			}
			if i > 0 {
				return -1, "", nil // an earlier stage may have set the factors
			}
			var names []string
			first := -1
			for _, key := range params {
				name := s.Params.String(key, key)
				spec, ok := t.TableSpec(name)
				if !ok || (spec.Init != "" && spec.Init != "zero") {
					return -1, "", nil // missing (named when the stage opens it), or random
				}
				if first < 0 {
					first = t.tableIndex(name)
				}
				names = append(names, fmt.Sprintf("%q", name))
			}
			what, fix := "table "+names[0]+" starts", "on it"
			if len(names) > 1 {
				what, fix = "tables "+strings.Join(names, " and ")+" start", "on one of them"
			}
			return i, "", &FieldError{Section: "table", Index: first, Name: t.Tables[first].Name, Keys: []string{"init"},
				Err: fmt.Errorf("%s: %s at zero (init unset or \"zero\"), where every gradient of %s is zero: the model would never move from 0; set init = \"uniform:0.1\" (a small random start) %s", fn, what, fn, fix)}
		}
		return -1, "", nil
	}
}

// tableIndex is the position of table name in t.Tables, -1 if none.
func (t *MultiStageTask) tableIndex(name string) int {
	for i, s := range t.Tables {
		if s.Name == name {
			return i
		}
	}
	return -1
}
