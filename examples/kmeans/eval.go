package kmeans

import (
	"errors"
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// EvalModel scores a saved k-means model (table "centers", or the one its
// task's centers param named) on records:
// mse is the mean squared distance of a record to its nearest center,
// objective the sum. Features beyond the centers' width count in full,
// except in csv rows, which hold every feature: a row of another width
// than the centers' is an error naming its line (a file with a label
// column scored as one without, or with a column less, was scored
// misaligned: iris at an mse of 43.1 for the model's 0.53, exit 0).
// A model trained with standardize measures distances in its units (the
// scale table it carries).
func EvalModel(model *tasks.Model, data *datastore.Records) (map[string]float64, error) {
	name := model.TableName("centers", "centers")
	t, ok := model.Table(name)
	if !ok {
		return nil, fmt.Errorf("kmeans model has no table %q", name)
	}
	if err := model.FitsDense(); err != nil {
		return nil, fmt.Errorf("kmeans model: %w", err)
	}
	if data.Len() == 0 {
		return nil, errors.New("no records")
	}
	k, dims := int(t.Spec.Size), t.Spec.Width
	if k == 0 {
		return nil, fmt.Errorf("kmeans model's table %q is empty", name)
	}
	cs := NewCenters(k, dims, lloydCenters(model, name, t, k, dims))
	if st, ok := model.Table(ScaleTable(name)); ok { // trained with standardize
		cs.Wt = st.DenseValues()
		cs.Update()
	}
	obj := 0.0
	csv := data.Columns() > 0
	for i := 0; i < data.Len(); i++ {
		_, keys, vals := data.Row(i)
		if csv && len(keys) != dims {
			return nil, fmt.Errorf("%s: the row has %d features (its csv columns less the label column), the model's table %q has width %d (the number of features it was trained on): score csv data of the training's columns (--label-column: the label column, -1 for none)", data.Where(i), len(keys), name, dims)
		}
		_, d, _ := cs.Nearest(keys, vals, false)
		obj += d
	}
	return map[string]float64{"mse": obj / float64(data.Len()), tasks.MetricObjective: obj}, nil
}

// lloydCenters are the centers model holds for table t (named name, k x
// dims): t's own, unless model is a checkpoint taken within a
// kmeans.lloyd stage, whose centers are still in the restarts' table
// (RunsTable) until the stage's end copies the best restart to t: a
// checkpoint of Lloyd iteration 5 was scored with kmeans.init's seeds.
// The best restart is the one the last complete update named in
// CtlTable, whose centers the stage's end would copy.
func lloydCenters(model *tasks.Model, name string, t *tasks.ModelTable, k, dims int) []float64 {
	c, ok := model.Table(CtlTable(name))
	if !ok || c.Spec.Size < ctlKeys || c.Spec.Width != 1 {
		return t.DenseValues()
	}
	ctl := c.DenseValues()
	runs, ok := model.Table(RunsTable(name))
	best := int(ctl[ctlBest])
	if ctl[ctlModel] != 0 || ctl[ctlDone] <= 0 || !ok || runs.Spec.Width != dims || best < 0 || uint64((best+1)*k) > runs.Spec.Size {
		return t.DenseValues()
	}
	return runs.DenseValues()[best*k*dims : (best+1)*k*dims]
}
