package svrg_test

import (
	"strings"
	"testing"

	_ "github.com/flexps/flexps/examples/svrg"
	"github.com/flexps/flexps/internal/jobcheck"
)

const setupJob = `name = "svrg"
[[table]]
name = "w"
size = 10
STORAGE
[[table]]
name = "n"
size = 1
[input.train]
path = "x.libsvm"
[[stage]]
name = "full"
func = "svrg.full"
consistency = "bsp"
FULLKIND
[stage.params]
FULL
[[stage]]
name = "sgd"
func = "svrg.sgd"
consistency = "bsp"
INNERKIND
[stage.params]
INNER
`

// The svrg stages read w (and snap, mu, n) whole; a local stage holds
// them in one slave's memory, which needs dense tables. With a sparse w,
// the shipped layout (svrg.sgd as local) ran the first full stage and then
// failed ("local stages hold the model in memory and need dense tables");
// so did standardize = true on a sparse w, in the full stage. Now refused
// at submission, naming the line.
func TestSVRGTableSetupRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, storage, fullKind, innerKind, full, inner string
		want                                            string // "" : valid
		line                                            int
	}{
		{"dense, inner local", "", "", `worker_kind = "local"`, "", "", "", 0},
		{"sparse, ps", `storage = "sparse"`, "", "", "", "", "", 0},
		{"sparse, inner local", `storage = "sparse"`, "", `worker_kind = "local"`, "", "", `svrg.sgd: table "w" is sparse, but local stages hold the model in memory and need dense tables`, 23},
		{"sparse, full single", `storage = "sparse"`, `worker_kind = "single"`, "", "", "", `svrg.full: table "w" is sparse, but single stages hold the model in memory`, 16},
		{"dense, inner hogwild", "", "", `worker_kind = "hogwild"`, "", "", "", 0},
		{"sparse, standardize", `storage = "sparse"`, "", "", "standardize = true", "standardize = true", `svrg: standardize needs a dense table; table "w" is sparse`, 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("STORAGE", tc.storage, "FULLKIND", tc.fullKind, "INNERKIND", tc.innerKind, "FULL", tc.full, "INNER", tc.inner).Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}

// A csv input read with label_column = -1 has no labels: svrg trained on
// labels all 0 and wrote a model of one class, reporting success. Refused
// at submission, naming the label_column line.
func TestSVRGRefusesUnlabeledCSV(t *testing.T) {
	for _, tc := range []struct {
		name, label, want string
		line              int
	}{
		{"label column 0", "", "", 0},
		{"last column", "label_column = 4", "", 0},
		{"no label", "label_column = -1", `input "train": label_column = -1 reads no label, but stage 0 (full) learns from the labels of its train input (svrg.full)`, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("STORAGE", "", "FULLKIND", "", "INNERKIND", "", "FULL", "", "INNER", "",
				`path = "x.libsvm"`, "path = \"x.csv\"\nformat = \"csv\"\n"+tc.label).Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}
