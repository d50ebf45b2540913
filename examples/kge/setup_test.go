package kge_test

import (
	"strings"
	"testing"

	_ "github.com/flexps/flexps/examples/kge"
	"github.com/flexps/flexps/internal/jobcheck"
)

const setupJob = `name = "kge"
[[table]]
name = "entities"
size = 10
width = 8
ENTS
init = "uniform:0.1"
[[table]]
name = "rels"
size = 3
width = 8
RELS
[input.train]
path = "x.tsv"
format = "ratings"
[[stage]]
name = "train"
func = "kge.complex"
KIND
[stage.params]
dim = 4
relations = "rels"
`

// kge.complex reads its tables into one slave's memory in a local,
// hogwild or single stage; over a sparse table it failed when it started
// ("kge: table \"entities\": local stages hold the model in memory and
// need dense tables"), after the stages before it had run. Now refused at
// submission, naming the line.
func TestKGETableSetupRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, ents, rels, kind string
		want                   string // "" : valid
		line                   int
	}{
		{"dense, local", "", "", `worker_kind = "local"`, "", 0},
		{"sparse, ps", `storage = "sparse"`, `storage = "sparse"`, "", "", 0},
		{"sparse entities, local", `storage = "sparse"`, "", `worker_kind = "local"`, `kge.complex: table "entities" is sparse, but local stages hold the model in memory and need dense tables`, 20},
		{"sparse relations named by a param, single", "", `storage = "sparse"`, `worker_kind = "single"`, `kge.complex: table "rels" is sparse, but single stages hold the model in memory`, 22},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("ENTS", tc.ents, "RELS", tc.rels, "KIND", tc.kind).Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}

// Tables whose width is not 2*dim failed the stage when it started ("kge:
// table "entities" has width 8 but dim = 3"), after the stages before it
// had run. Now refused at submission, naming the dim line (the params'
// header when dim is unset: half the entities table's width is the dim).
func TestKGEDimRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, ents, rels, dim string
		want                  string // "" : valid
		line                  int
	}{
		{"dim of the tables", "", "", "dim = 4", "", 0},
		{"dim unset", "", "", "", "", 0},
		{"dim below", "", "", "dim = 3", `kge: table "entities" has width 8 but dim = 3 (the tables' width is 2*dim: real and imaginary parts)`, 21},
		{"relations narrower", "", "width = 6", "dim = 4", `kge: table "rels" has width 6 but dim = 4`, 20},
		{"odd width, dim unset", "width = 7", "width = 7", "", `kge: table "entities" has width 7 but dim = 3`, 18},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("ENTS", tc.ents, "RELS", tc.rels, "KIND", "", "dim = 4", tc.dim).Replace(setupJob)
			src = strings.ReplaceAll(src, "width = 8\nwidth", "width")
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}
