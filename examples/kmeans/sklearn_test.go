package kmeans_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/engine"
	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
	"github.com/rs/zerolog"
)

// sklearnScript writes a scikit-learn data set as LIBSVM (1-based ids,
// zeros left out) and prints KMeans(n_clusters=k, n_init=10)'s inertia
// (its objective: the sum of squared distances to the nearest center), on
// the raw features and on StandardScaler's z-scores.
const sklearnScript = `
import sys
from sklearn import datasets
from sklearn.cluster import KMeans
from sklearn.preprocessing import StandardScaler
name, k, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
X = getattr(datasets, "load_" + name)().data
with open(path, "w") as f:
    for row in X:
        f.write("0 " + " ".join("%d:%r" % (j + 1, float(v)) for j, v in enumerate(row) if v != 0) + "\n")
raw = KMeans(n_clusters=k, n_init=10, random_state=0).fit(X).inertia_
z = KMeans(n_clusters=k, n_init=10, random_state=0).fit(StandardScaler().fit_transform(X)).inertia_
print(X.shape[1], repr(raw), repr(z))
`

// sklearnKMeans returns the data set's path, its number of features and
// scikit-learn's objective on raw and standardized features.
func sklearnKMeans(t *testing.T, name string, k int) (string, int, float64, float64) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed: cannot compute scikit-learn's reference")
	}
	if err := exec.Command("python3", "-c", "import sklearn").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("scikit-learn missing in CI: scripts/setup.sh installs it")
		}
		t.Skip("scikit-learn not installed (scripts/setup.sh installs it): cannot compute the reference")
	}
	path := filepath.Join(t.TempDir(), name+".libsvm")
	out, err := exec.Command("python3", "-c", sklearnScript, name, strconv.Itoa(k), path).CombinedOutput()
	if err != nil {
		t.Fatalf("scikit-learn: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 3 {
		t.Fatalf("scikit-learn printed %q", out)
	}
	dims, err1 := strconv.Atoi(f[0])
	raw, err2 := strconv.ParseFloat(f[1], 64)
	z, err3 := strconv.ParseFloat(f[2], 64)
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("scikit-learn printed %q", out)
	}
	return path, dims, raw, z
}

// cluster runs the two stages with the package defaults (restarts 10,
// iterations up to 100, tol 1e-6) and returns the written model's
// objective on the data, as `flexps eval` computes it.
func cluster(t *testing.T, data string, k, dims, workers int, standardize bool) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	local, err := engine.StartLocal(ctx, engine.LocalOptions{Slaves: 2, Slots: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	out := filepath.Join(t.TempDir(), "kmeans.model")
	bsp := kvstore.Consistency{Kind: kvstore.BSP}
	params := tasks.Params{"k": k, "standardize": standardize}
	task := tasks.NewTask("kmeans-sklearn").
		AddTable(kvstore.TableSpec{Name: "centers", Size: uint64(k), Width: dims}).
		SetInput("train", tasks.InputSpec{Path: data, BlockSize: 4 << 10}).
		SetStages(
			tasks.Stage{Name: "init", Func: "kmeans.init", Workers: 1, Consistency: bsp, Params: params},
			tasks.Stage{Name: "lloyd", Func: "kmeans.lloyd", Workers: workers, Consistency: bsp, Params: params})
	task.Kind, task.Output = "kmeans", out
	st, err := local.SubmitAndWait(ctx, task, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := tasks.Evaluate(ctx, out, data, "", "")
	if err != nil {
		t.Fatal(err)
	}
	eps := st.Results[1].Epochs
	t.Logf("%d workers: %d Lloyd iterations, printed objective %.4f (before the last update), model's %.4f",
		workers, len(eps), eps[len(eps)-1].Metrics[tasks.MetricObjective], ev.Metrics[tasks.MetricObjective])
	return ev.Metrics[tasks.MetricObjective]
}

// TestQualityMatchesScikitLearn: on real data sets scikit-learn ships,
// the defaults reach scikit-learn's KMeans(n_init=10) objective within 1%,
// on 1, 2 and 4 workers (digits on 4); with standardize = true, its
// objective on StandardScaler's z-scores.
func TestQualityMatchesScikitLearn(t *testing.T) {
	for _, c := range []struct {
		name        string
		k           int
		standardize bool
	}{{"iris", 3, false}, {"wine", 3, false}, {"wine", 3, true}, {"digits", 10, false}} {
		t.Run(c.name+map[bool]string{true: "-standardized"}[c.standardize], func(t *testing.T) {
			data, dims, raw, z := sklearnKMeans(t, c.name, c.k)
			ref := raw
			if c.standardize {
				ref = z
			}
			workers := []int{1, 2, 4}
			if c.name == "digits" { // the costliest: 1797 x 64, k = 10
				workers = []int{4}
			}
			for _, w := range workers {
				got := cluster(t, data, c.k, dims, w, c.standardize)
				t.Logf("%s k=%d %d workers: flexps %.4f, scikit-learn %.4f (%+.3f%%)", c.name, c.k, w, got, ref, 100*(got-ref)/ref)
				if got > ref*1.01 {
					t.Errorf("%d workers: objective %.4f is more than 1%% above scikit-learn's %.4f", w, got, ref)
				}
			}
		})
	}
}
