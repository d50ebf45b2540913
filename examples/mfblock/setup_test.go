package mfblock_test

import (
	"strings"
	"testing"

	_ "github.com/flexps/flexps/examples/mfblock"
	"github.com/flexps/flexps/internal/jobcheck"
)

const setupJob = `name = "mfb"
[[table]]
name = "users"
size = 10
width = 4
init = "uniform:0.1"
USERS
[[table]]
name = "items"
size = 10
width = 4
[input.train]
path = "x.tsv"
format = "ratings"
[[stage]]
name = "b"
func = "mf.blocked"
KIND
[stage.params]
rank = 4
`

// A one-slave mf.blocked stage holds its factor tables in one slave's
// memory; over a sparse one it failed when it started ("mf.blocked: table
// \"users\": local stages hold the model in memory and need dense
// tables"). Now refused at submission, naming the line.
func TestBlockedTableSetupRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, users, kind string
		want              string // "" : valid
		line              int
	}{
		{"dense, local", "", `worker_kind = "local"`, "", 0},
		{"sparse, ps", `storage = "sparse"`, "", "", 0},
		{"sparse, local", `storage = "sparse"`, `worker_kind = "local"`, `mf.blocked: table "users" is sparse, but local stages hold the model in memory`, 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("USERS", tc.users, "KIND", tc.kind).Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}

// Tables narrower or wider than rank failed when the stage started, after
// the stages before it had run. Now refused at submission, naming rank's
// line (the params' header when rank is unset).
func TestBlockedRankRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, rank, itemsWidth string
		want                   string // "" : valid
		line                   int
	}{
		{"rank of the tables", "rank = 4", "width = 4", "", 0},
		{"rank unset", "", "width = 4", "", 0},
		{"rank below the width", "rank = 3", "width = 4", `mf.blocked: tables "users" and "items" must have width = rank = 3 (got 4 and 4)`, 20},
		{"items narrower", "rank = 4", "width = 3", `must have width = rank = 4 (got 4 and 3)`, 20},
		{"rank unset, items narrower", "", "width = 3", `must have width = rank = 4 (got 4 and 3)`, 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("USERS", "", "KIND", "", "rank = 4", tc.rank).Replace(setupJob)
			src = strings.Replace(src, "size = 10\nwidth = 4\n[input.train]", "size = 10\n"+tc.itemsWidth+"\n[input.train]", 1)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}
