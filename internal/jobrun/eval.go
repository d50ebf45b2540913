package jobrun

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

// ReadAll parses every record of path (a file, directory or glob).
func ReadAll(ctx context.Context, path, format string) (*datastore.Records, error) {
	f, err := datastore.NewFormat(format, datastore.DefaultFormatOptions())
	if err != nil {
		return nil, err
	}
	src := datastore.NewSources(datastore.HDFSConfig{})
	defer src.Close()
	blocks, err := src.Blocks(ctx, path, 0)
	if err != nil {
		return nil, err
	}
	all := &datastore.Records{}
	for _, b := range blocks {
		_, err := datastore.ReadBlock(ctx, src, b, f, datastore.ReadOptions{}, func(r *datastore.Records) error {
			for i := 0; i < r.Len(); i++ {
				l, k, v := r.Row(i)
				all.Append(l, k, v)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return all, nil
}

// Evaluate scores the model file on data and returns a printable line.
// A non-empty kind must match the model's.
func Evaluate(ctx context.Context, modelPath, data, format, kind string) (string, error) {
	m, err := tasks.LoadModel(modelPath)
	if err != nil {
		return "", err
	}
	if kind != "" && m.Kind != kind {
		return "", fmt.Errorf("model %s is a %q model, not %q", modelPath, m.Kind, kind)
	}
	ev, ok := tasks.LookupEvaluator(m.Kind)
	if !ok {
		return "", fmt.Errorf("model %s is of kind %q, which no evaluator knows (known: %s)", modelPath, m.Kind, strings.Join(tasks.EvaluatorKinds(), ", "))
	}
	if format == "" {
		format = ev.Format
	}
	recs, err := ReadAll(ctx, data, format)
	if err != nil {
		return "", err
	}
	metrics, err := ev.Eval(m, recs)
	if err != nil {
		return "", fmt.Errorf("model %s on %s: %w", modelPath, data, err)
	}
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := []string{fmt.Sprintf("model=%s kind=%s records=%d", modelPath, m.Kind, recs.Len())}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.4f", k, metrics[k]))
	}
	return strings.Join(parts, " "), nil
}
