package lr

import (
	"encoding/json"
	"fmt"

	"github.com/flexps/flexps/tasks"
)

// A checkpoint taken within an lr.sgd stage that standardizes holds the
// weights of the scaled features: the stage turns them back into raw
// weights only after its last epoch. flexps eval scored such a
// checkpoint as if they were raw (accuracy 0.35 and log-loss 1514 where
// the epoch's test figures were 0.94 and 0.38); rawWeights turns them
// back the way the stage does, from the statistics in the checkpoint's
// scale table, so a checkpoint scores as the epoch it ends.

// checkpointProgress is the part of a checkpoint's record (package
// checkpoint's Record) that says which weights its table holds.
type checkpointProgress struct {
	Progress struct {
		Stage int `json:"stage"`
		Epoch int `json:"epoch"`
	} `json:"progress"`
	Task tasks.MultiStageTask `json:"task"`
}

// scaledStage returns the config of the lr.sgd stage training weight
// table name that model, a checkpoint, was taken within, when the table
// holds scaled weights then; ok is false for a model file or any other
// checkpoint.
func scaledStage(model *tasks.Model, name string) (cfg Config, ok bool, err error) {
	if len(model.Checkpoint) == 0 {
		return cfg, false, nil
	}
	var rec checkpointProgress
	if err := json.Unmarshal(model.Checkpoint, &rec); err != nil {
		return cfg, false, fmt.Errorf("lr model: checkpoint record: %w", err)
	}
	p := rec.Progress
	if p.Epoch == 0 || p.Stage < 0 || p.Stage >= len(rec.Task.Stages) {
		return cfg, false, nil // between stages: the weights are raw
	}
	s := rec.Task.Stages[p.Stage]
	if s.Func != "lr.sgd" || s.Params.String("table", "w") != name {
		return cfg, false, nil
	}
	if cfg, err = ConfigFrom(s.Params); err != nil {
		return cfg, false, fmt.Errorf("lr model: checkpoint of stage %d (%s): %w", p.Stage, s.Name, err)
	}
	if p.Epoch >= cfg.Epochs {
		return cfg, false, nil // after the last epoch: rescaled to raw
	}
	standardize := false
	for _, spec := range rec.Task.Tables {
		if spec.Name == name {
			standardize = s.Params.Bool("standardize", StandardizeDefault(spec))
		}
	}
	return cfg, standardize, nil
}

// rawWeights returns the raw weights of w, a dense table of scaled ones,
// from the statistics of scale (ScaleTable(w)): each times 1/scale, with
// the dense features centered when the stage fits an intercept, as
// PrepareScale and Scaler.Center have them (the intercept table holds the
// raw intercept throughout).
func rawWeights(w []float64, scale *tasks.ModelTable, intercept bool) ([]float64, error) {
	size := uint64(len(w))
	if scale.Spec.Width != ScaleWidth || scale.Spec.Size != size+1 {
		return nil, fmt.Errorf("lr model: table %q has size %d width %d, want %d x %d", scale.Spec.Name, scale.Spec.Size, scale.Spec.Width, size+1, ScaleWidth)
	}
	st := scale.DenseValues()
	inv := make([]float64, size)
	pick := centerPicker{n: st[ScaleWidth*size+1]}
	for k := range size {
		sumSq, cnt, sum := st[ScaleWidth*k], st[ScaleWidth*k+1], st[ScaleWidth*k+2]
		inv[k] = invScale(sumSq, cnt)
		pick.offer(k, sumSq, cnt, sum)
	}
	if intercept && size <= maxLoadedScales {
		c := pick.result()
		for i, k := range c.Keys {
			inv[k] = c.Inv[i]
		}
	}
	raw := make([]float64, size)
	for k := range raw {
		raw[k] = w[k] * inv[k]
	}
	return raw, nil
}
