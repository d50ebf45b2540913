package lr_test

import (
	"strings"
	"testing"

	"github.com/flexps/flexps/internal/jobcheck"
)

const setupJob = `name = "lr"
[[table]]
name = "w"
size = 10
TABLE
[input.train]
path = "x.libsvm"
[[stage]]
name = "warm"
func = "lr.sgd"
[[stage]]
name = "sgd"
func = "lr.sgd"
STAGE
[stage.params]
PARAMS
`

// A weight table lr.sgd cannot train was found only when the stage
// started, after the stages before it had run: a sparse table with
// worker_kind = "local" (or "hogwild", "single"), or with standardize =
// true, failed the task once its first stage was done; on a cluster the
// task was accepted. Now refused at submission, naming the line (the
// param's when it is written, else the [[stage]] header of the first
// stage at fault).
func TestSGDTableSetupRefusedAtSubmission(t *testing.T) {
	for _, tc := range []struct {
		name, table, stage, params string
		want                       string // "" : valid
		line                       int
	}{
		{"dense local", "", `worker_kind = "local"`, "", "", 0},
		{"sparse ps", `storage = "sparse"`, "", "", "", 0},
		{"sparse ps standardize off", `storage = "sparse"`, "", "standardize = false", "", 0},
		{"sparse standardize", `storage = "sparse"`, "", "standardize = true", `lr: standardize needs a dense table; table "w" is sparse (set standardize = false)`, 16},
		{"sparse local", `storage = "sparse"`, `worker_kind = "local"`, "", `table "w" is sparse, but local stages hold the model in memory and need dense tables`, 11},
		{"sparse hogwild", `storage = "sparse"`, `worker_kind = "hogwild"`, "", `table "w" is sparse, but hogwild stages hold the model in memory`, 11},
		{"sparse single, table named", `storage = "sparse"`, `worker_kind = "single"`, `table = "w"`, `table "w" is sparse, but single stages hold the model in memory`, 16},
		{"sparse uniform with l2", "storage = \"sparse\"\ninit = \"uniform:0.1\"", "", "l2 = 0.01", `lr: l2 over a sparse table needs init = "zero"; table "w" starts at "uniform:0.1"`, 17},
		{"sparse uniform without l2", "storage = \"sparse\"\ninit = \"uniform:0.1\"", "", "", "", 0},
		{"sparse zero init with l2", `storage = "sparse"`, "", "l2 = 0.01", "", 0},
		{"width 2", "width = 2", "", "", `table "w": width must be 1 (one weight per feature), got 2`, 8},
		{"undeclared table", "", "", `table = "v"`, `lr.sgd: the task declares no table "v"`, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.NewReplacer("TABLE", tc.table, "STAGE", tc.stage, "PARAMS", tc.params).Replace(setupJob)
			jobcheck.Expect(t, src, tc.want, tc.line)
		})
	}
}

// The inputs lr.sgd reads (train, and test when its param is set) must be
// inputs the stage reads: a stage limited to others (inputs = ["test"]),
// or a param naming an input the task lacks, was accepted and failed when
// the stage started, after the stages before it had run.
func TestSGDInputsRefusedAtSubmission(t *testing.T) {
	const job = `name = "lr"
[[table]]
name = "w"
size = 10
[input.train]
path = "x.libsvm"
[input.test]
path = "y.libsvm"
[[stage]]
name = "sgd"
func = "lr.sgd"
STAGE
[stage.params]
PARAMS
`
	for _, tc := range []struct {
		name, stage, params, want string
		line                      int
	}{
		{"every input", "", "", "", 0},
		{"both listed", `inputs = ["train", "test"]`, "", "", 0},
		{"train only: no test figures", `inputs = ["train"]`, "", "", 0},
		{"test only", `inputs = ["test"]`, "", `lr.sgd reads input "train" (param "train") but the stage's inputs are ["test"]: add it`, 12},
		{"train names no input", "", `train = "trian"`, `lr.sgd reads input "trian" (param "train") but the task declares no such input`, 14},
		{"test set to an input the stage does not read", `inputs = ["train"]`, `test = "test"`, `lr.sgd reads input "test" (param "test") but the stage's inputs are ["train"]`, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobcheck.Expect(t, strings.NewReplacer("STAGE", tc.stage, "PARAMS", tc.params).Replace(job), tc.want, tc.line)
		})
	}
}

// A csv input read with label_column = -1 has no labels: every record's
// label was 0, and lr.sgd trained a model of one class, with a training
// accuracy of 1.0 and exit status 0. Refused at submission, naming the
// label_column line.
func TestUnlabeledCSVRefusedAtSubmission(t *testing.T) {
	const job = `name = "lr"
[[table]]
name = "w"
size = 10
[input.train]
path = "x.csv"
format = "csv"
TRAIN
[input.test]
path = "y.csv"
format = "csv"
TEST
[[stage]]
name = "sgd"
func = "lr.sgd"
STAGE
`
	for _, tc := range []struct {
		name, train, test, stage, want string
		line                           int
	}{
		{"labelled", "label_column = 3", "", "", "", 0},
		{"train without labels", "label_column = -1", "", "", `input "train": label_column = -1 reads no label, but stage 0 (sgd) learns from the labels of its train input (lr.sgd)`, 8},
		{"test without labels", "", "label_column = -1", "", `input "test": label_column = -1 reads no label, but stage 0 (sgd) learns from the labels of its test input (lr.sgd)`, 12},
		{"test without labels, not read", "", "label_column = -1", `inputs = ["train"]`, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobcheck.Expect(t, strings.NewReplacer("TRAIN", tc.train, "TEST", tc.test, "STAGE", tc.stage).Replace(job), tc.want, tc.line)
		})
	}
}
