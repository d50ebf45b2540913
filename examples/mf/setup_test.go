package mf_test

import (
	"strings"
	"testing"

	_ "github.com/flexps/flexps/examples/mf"
	"github.com/flexps/flexps/internal/jobcheck"
)

const setupJob = `name = "mf"
[[table]]
name = "users"
size = 10
width = 4
USERS
[[table]]
name = "factors"
size = 10
width = 4
ITEMS
[input.train]
path = "x.tsv"
format = "ratings"
[[stage]]
name = "sgd"
func = "mf.sgd"
KIND
[stage.params]
rank = 4
items = "factors"
`

// mf.sgd reads its tables into dense arrays in a local, hogwild or single
// stage; over a sparse factor table it failed when it started ("mf: table
// \"users\": local stages hold the model in memory and need dense
// tables"), after the stages before it had run. Now refused at
// submission, naming the line.
func TestMFTableSetupRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, users, items, kind string
		want                     string // "" : valid
		line                     int
	}{
		{"dense, local", "", "", `worker_kind = "local"`, "", 0},
		{"sparse, ps", `storage = "sparse"`, `storage = "sparse"`, "", "", 0},
		{"sparse users, local", `storage = "sparse"`, "", `worker_kind = "local"`, `mf.sgd: table "users" is sparse, but local stages hold the model in memory and need dense tables`, 19},
		{"sparse items named by a param, hogwild", "", `storage = "sparse"`, `worker_kind = "hogwild"`, `mf.sgd: table "factors" is sparse, but hogwild stages hold the model in memory`, 21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("USERS", tc.users, "ITEMS", tc.items, "KIND", tc.kind).Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}
