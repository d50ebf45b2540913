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
init = "uniform:0.1"
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
		{"sparse users, local", `storage = "sparse"`, "", `worker_kind = "local"`, `mf.sgd: table "users" is sparse, but local stages hold the model in memory and need dense tables`, 20},
		{"sparse items named by a param, hogwild", "", `storage = "sparse"`, `worker_kind = "hogwild"`, `mf.sgd: table "factors" is sparse, but hogwild stages hold the model in memory`, 22},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("USERS", tc.users, "ITEMS", tc.items, "KIND", tc.kind).Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}

// A factor table whose width is not the stage's rank failed the stage
// when it started ("mf: table "users" has width 4 but rank = 3"), after
// the stages before it had run. Now refused at submission, naming the
// rank's line (the params' header when rank is unset: the users table's
// width is the rank).
func TestMFRankRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, users, items, rank string
		want                     string // "" : valid
		line                     int
	}{
		{"rank of the tables", "", "", "rank = 4", "", 0},
		{"rank unset", "", "", "", "", 0},
		{"rank below the width", "", "", "rank = 3", `mf: table "users" has width 4 but rank = 3 (the factor tables' width is the rank)`, 21},
		{"items narrower", "", "width = 3", "rank = 4", `mf: table "factors" has width 3 but rank = 4`, 20},
		{"rank unset, items narrower", "", "width = 3", "", `mf: table "factors" has width 3 but rank = 4`, 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("USERS", tc.users, "ITEMS", tc.items, "KIND", "", "rank = 4", tc.rank).Replace(setupJob)
			src = strings.Replace(src, "width = 4\nwidth = 3", "width = 3", 1)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}

// Factor tables that both start at zero (init unset or "zero") never
// move under mf.sgd: every gradient multiplies by a zero factor, so the
// stage trained at a constant loss and wrote a model of zeros, exit 0.
// Now refused at submission, naming the first table's init line (its
// [[table]] header when init is unset). One random table is enough.
func TestMFZeroFactorsRefusedAtSubmission(t *testing.T) {
	const want = `mf.sgd: tables "users" and "factors" start at zero (init unset or "zero")`
	for _, tc := range []struct {
		name, users, items string
		want               string // "" : valid
		line               int
	}{
		{"users random", `init = "uniform:0.1"`, "", "", 0},
		{"items random", "", `init = "uniform:0.1"`, "", 0},
		{"both unset", "", "", want, 2},
		{"both written as zero", `init = "zero"`, `init = "zero"`, want, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer(`init = "uniform:0.1"`, tc.users, "ITEMS", tc.items, "USERS", "", "KIND", "").Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}
