package lr_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/datastore/synth"
	"github.com/flexps/flexps/engine"
	_ "github.com/flexps/flexps/examples/lr"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

const heartScale = "/usr/share/doc/liblinear-tools/examples/heart_scale"

// liblinear returns the accuracy of Debian's liblinear-train -s 0 (L2
// logistic regression) trained on train and scored on test.
func liblinear(t *testing.T, train, test string) float64 {
	t.Helper()
	if _, err := exec.LookPath("liblinear-train"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("liblinear-train missing in CI: scripts/setup.sh should have installed liblinear-tools")
		}
		t.Skip("liblinear-train not installed (scripts/setup.sh installs Debian's liblinear-tools)")
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "ref.model")
	if out, err := exec.Command("liblinear-train", "-s", "0", "-q", train, model).CombinedOutput(); err != nil {
		t.Fatalf("liblinear-train: %v\n%s", err, out)
	}
	out, err := exec.Command("liblinear-predict", test, model, filepath.Join(dir, "pred")).CombinedOutput()
	if err != nil {
		t.Fatalf("liblinear-predict: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Accuracy = ([0-9.]+)%`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no accuracy in %q", out)
	}
	acc, _ := strconv.ParseFloat(string(m[1]), 64)
	return acc / 100
}

// train runs lr.sgd on an in-process cluster of 2 slaves and returns the
// model's accuracy on test.
func train(t *testing.T, trainPath, testPath string, dim uint64, params tasks.Params, workers int) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	out := filepath.Join(t.TempDir(), "lr.model")
	task := tasks.NewTask("quality").
		AddTable(kvstore.TableSpec{Name: "w", Size: dim}).
		SetInput("train", tasks.InputSpec{Path: trainPath, BlockSize: 1 << 16}).
		SetInput("test", tasks.InputSpec{Path: testPath}).
		SetStages(tasks.Stage{Name: "sgd", Func: "lr.sgd", Workers: workers, Consistency: kvstore.Consistency{Kind: kvstore.BSP}, Params: params})
	task.Kind, task.Output = "lr", out
	st, err := local.SubmitAndWait(ctx, task, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := tasks.Evaluate(ctx, out, testPath, "", "")
	if err != nil {
		t.Fatal(err)
	}
	// The accuracy printed for the last epoch is the saved model's.
	eps := st.Results[0].Epochs
	last := eps[len(eps)-1].Metrics
	if printed := last[tasks.MetricTestCorrect] / last[tasks.MetricTestSamples]; printed != ev.Metrics["accuracy"] {
		t.Errorf("%d workers: last epoch's test accuracy %.4f, the written model's %.4f", workers, printed, ev.Metrics["accuracy"])
	}
	return ev.Metrics["accuracy"]
}

func TestQualityGeneratedDataMatchesLiblinear(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a while")
	}
	dir := t.TempDir()
	trainPath, testPath := filepath.Join(dir, "train"), filepath.Join(dir, "test")
	if err := synth.Generate(trainPath, synth.Spec{Kind: "libsvm", Rows: 20000, Dim: 2000, NNZ: 10, Zipf: 1.1, Noise: 0.01, Seed: 7,
		TestPath: testPath, TestRows: 5000}); err != nil {
		t.Fatal(err)
	}
	ref := liblinear(t, trainPath, testPath)
	got := train(t, trainPath, testPath, 2000, tasks.Params{"epochs": 20, "batch": 100, "lr": 2.0}, 4)
	t.Logf("test accuracy: flexps %.4f, liblinear -s 0 %.4f", got, ref)
	if got < ref-0.01 {
		t.Fatalf("flexps test accuracy %.4f is more than 1 point below liblinear's %.4f", got, ref)
	}
}

func TestQualityHeartScaleMatchesLiblinear(t *testing.T) {
	if _, err := os.Stat(heartScale); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing in CI: scripts/setup.sh should have installed liblinear-tools", heartScale)
		}
		t.Skip("heart_scale not installed (Debian's liblinear-tools)")
	}
	ref := liblinear(t, heartScale, heartScale)
	// l2 = 1/(C n) with liblinear's C = 1 and n = 270: the same objective.
	got := train(t, heartScale, heartScale, 14, tasks.Params{"epochs": 100, "batch": 10, "lr": 0.1, "l2": 1.0 / 270}, 2)
	t.Logf("training accuracy on heart_scale: flexps %.4f, liblinear -s 0 %.4f", got, ref)
	if d := got - ref; d < -0.01 || d > 0.02 {
		t.Fatalf("flexps %.4f vs liblinear %.4f: more than 1 point apart", got, ref)
	}
}

// sklearnData returns the path of a data set scikit-learn ships (installed
// by scripts/setup.sh).
func sklearnData(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sklearn, os; print(os.path.dirname(sklearn.__file__))").Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("scikit-learn missing in CI: scripts/setup.sh installs it")
		}
		t.Skip("scikit-learn not installed (scripts/setup.sh installs it)")
	}
	return filepath.Join(strings.TrimSpace(string(out)), "datasets", "data", name)
}

// TestQualityUnscaledRealData: the Wisconsin breast cancer data (569
// records, 30 features whose magnitudes range from 0.001 to 4000) with
// lr.sgd (default lr, scaling and intercept) must reach liblinear's accuracy on the same
// split. Without feature scaling SGD reached 0.49 here. l2 = 1/n is
// liblinear's default objective (C = 1): without it the data is nearly
// separable, the weights grow without bound and SGD's last iterate moved
// by up to 5 points from run to run at 4 workers (0.909-0.958); with it
// one worker reaches liblinear's 0.965 every run.
func TestQualityUnscaledRealData(t *testing.T) {
	trainPath, testPath := breastCancerSplit(t)
	ref := liblinear(t, trainPath, testPath)
	for _, workers := range []int{1, 4} {
		got := train(t, trainPath, testPath, 30, tasks.Params{"epochs": 20, "batch": 10, "decay": 1.0, "l2": 1.0 / 427}, workers)
		t.Logf("%d workers: test accuracy flexps %.4f (epochs 20, batch 10, decay 1, l2 1/427, other params default), liblinear -s 0 %.4f", workers, got, ref)
		// 143 test records: one is 0.7 points, and SGD's last iterate
		// varies by a few records from run to run (block order); 4 points
		// is 6 records. Without scaling it was 0.49.
		if got < ref-0.04 {
			t.Errorf("%d workers: flexps %.4f is more than 4 points below liblinear's %.4f", workers, got, ref)
		}
	}
}

// breastCancerSplit writes scikit-learn's breast cancer data (569
// records, 30 raw features) as LIBSVM files: every 4th record is held out.
func breastCancerSplit(t *testing.T) (trainPath, testPath string) {
	t.Helper()
	src, err := os.ReadFile(sklearnData(t, "breast_cancer.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(src)), "\n")[1:] // first line: counts and class names
	dir := t.TempDir()
	var trainB, testB strings.Builder
	for i, line := range lines {
		f := strings.Split(line, ",")
		w := &trainB
		if i%4 == 0 {
			w = &testB
		}
		w.WriteString(f[len(f)-1])
		for j, v := range f[:len(f)-1] {
			fmt.Fprintf(w, " %d:%s", j+1, v)
		}
		w.WriteString("\n")
	}
	trainPath, testPath = filepath.Join(dir, "train"), filepath.Join(dir, "test")
	for p, b := range map[string]string{trainPath: trainB.String(), testPath: testB.String()} {
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return trainPath, testPath
}

func heartScaleFile(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(heartScale); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s missing in CI: scripts/setup.sh should have installed liblinear-tools", heartScale)
		}
		t.Skip("heart_scale not installed (Debian's liblinear-tools)")
	}
	return heartScale
}

// liblinearWeights trains liblinear-train -s 0 -c c (no bias) on path and
// returns its weights, feature id j+1 at j, signed for label 1.
func liblinearWeights(t *testing.T, path string, c float64, dim int) []float64 {
	t.Helper()
	if _, err := exec.LookPath("liblinear-train"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("liblinear-train missing in CI: scripts/setup.sh should have installed liblinear-tools")
		}
		t.Skip("liblinear-train not installed (scripts/setup.sh installs Debian's liblinear-tools)")
	}
	model := filepath.Join(t.TempDir(), "ref.model")
	if out, err := exec.Command("liblinear-train", "-s", "0", "-c", strconv.FormatFloat(c, 'g', -1, 64), "-e", "0.0001", "-q", path, model).CombinedOutput(); err != nil {
		t.Fatalf("liblinear-train: %v\n%s", err, out)
	}
	src, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	sign, at := 1.0, -1
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "label" && f[1] != "1" {
			sign = -1
		}
		if len(f) == 1 && f[0] == "w" {
			at = i + 1
			break
		}
	}
	if at < 0 || at+dim > len(lines) {
		t.Fatalf("cannot read liblinear's model:\n%s", src)
	}
	w := make([]float64, dim)
	for j := range w {
		v, err := strconv.ParseFloat(strings.TrimSpace(lines[at+j]), 64)
		if err != nil {
			t.Fatalf("liblinear model line %d: %v", at+j+1, err)
		}
		w[j] = sign * v
	}
	return w
}
