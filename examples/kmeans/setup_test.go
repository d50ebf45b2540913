package kmeans_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/jobcheck"
)

const setupJob = `name = "kmeans"
[[table]]
name = "centers"
size = 3
width = 2
STORAGE
[input.train]
path = "x.libsvm"
[[stage]]
name = "init"
func = "kmeans.init"
INITKIND
[stage.params]
k = 3
[[stage]]
name = "lloyd"
func = "kmeans.lloyd"
consistency = "bsp"
LLOYDKIND
[stage.params]
k = 3
`

// A one-slave k-means stage holds the centers in one slave's memory;
// over a sparse centers table it failed when it started ("kmeans: table
// \"centers\": single stages hold the model in memory and need dense
// tables"). Now refused at submission, naming the line.
func TestKMeansTableSetupRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, storage, initKind, lloydKind string
		want                               string // "" : valid
		line                               int
	}{
		{"dense, single init, local lloyd", "", `worker_kind = "single"`, `worker_kind = "local"`, "", 0},
		{"sparse, ps", `storage = "sparse"`, "", "", "", 0},
		{"sparse, single init", `storage = "sparse"`, `worker_kind = "single"`, "", `kmeans.init: table "centers" is sparse, but single stages hold the model in memory`, 13},
		{"sparse, local lloyd", `storage = "sparse"`, "", `worker_kind = "local"`, `kmeans.lloyd: table "centers" is sparse, but local stages hold the model in memory`, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("STORAGE", tc.storage, "INITKIND", tc.initKind, "LLOYDKIND", tc.lloydKind).Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}

// k-means reads no label, so a csv input without a label column
// (label_column = -1) is what it takes, while lr.sgd and svrg refuse one.
func TestKMeansTakesUnlabeledCSV(t *testing.T) {
	for _, label := range []string{"", "label_column = -1"} {
		t.Run(label, func(t *testing.T) {
			src := strings.NewReplacer("STORAGE", "", "INITKIND", "", "LLOYDKIND", "",
				`path = "x.libsvm"`, "path = \"x.csv\"\nformat = \"csv\"\n"+label).Replace(setupJob)
			jobcheck.Expect(t, src, "", 0)
		})
	}
}
