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

// k larger than the centers table failed when the stage started, after
// the stages before it had run. Now refused at submission, naming k's line.
func TestKMeansKRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, initK, lloydK string
		want                string // "" : valid
		line                int
	}{
		{"k of the table", "k = 3", "k = 3", "", 0},
		{"k unset", "", "", "", 0},
		{"init k too large", "k = 4", "k = 3", `kmeans: k = 4 but table "centers" has only 3 keys`, 14},
		{"lloyd k too large", "k = 3", "k = 9", `kmeans: k = 9 but table "centers" has only 3 keys`, 21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("STORAGE", "", "INITKIND", "", "LLOYDKIND", "").Replace(setupJob)
			src = strings.Replace(src, "[stage.params]\nk = 3\n[[stage]]", "[stage.params]\n"+tc.initK+"\n[[stage]]", 1)
			src = strings.Replace(src, "LLOYDKIND", "", 1)
			src = src[:strings.LastIndex(src, "k = 3")] + tc.lloydK + "\n"
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}
