package kge

import (
	"errors"
	"fmt"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.RegisterEvaluator("kge", tasks.Evaluator{Format: "ratings", Formats: []string{"ratings"}, Eval: EvalModel})
}

// EvalModel ranks every triple of data (heads and tails) with a saved
// ComplEx model (tables "entities" and "relations"), filtering the
// triples of data itself: mrr, hits1, hits3, hits10.
func EvalModel(model *tasks.Model, data *datastore.Records) (map[string]float64, error) {
	// The tables its task's entities and relations params named.
	en, rn := model.TableName("entities", "entities"), model.TableName("relations", "relations")
	et, ok := model.Table(en)
	if !ok {
		return nil, fmt.Errorf("kge model has no table %q", en)
	}
	rt, ok := model.Table(rn)
	if !ok {
		return nil, fmt.Errorf("kge model has no table %q", rn)
	}
	w := et.Spec.Width
	if w == 0 || w%2 != 0 || rt.Spec.Width != w {
		return nil, fmt.Errorf("kge model: entities width %d, relations width %d: want equal even widths (2*dim)", w, rt.Spec.Width)
	}
	if err := model.FitsDense(); err != nil {
		return nil, fmt.Errorf("kge model: %w", err)
	}
	if data.Len() == 0 {
		return nil, errors.New("no records")
	}
	known := Known{}
	if err := known.AddRecords(data); err != nil {
		return nil, err
	}
	emb := Embeddings{Dim: w / 2, Ent: et.DenseValues(), Rel: rt.DenseValues()}
	st, err := emb.RankAll(data, 0, data.Len(), known)
	if err != nil {
		return nil, err
	}
	return st.Metrics(), nil
}
