// Command filtered scores a saved kge model with the full filtered
// link-prediction protocol: every triple of -data is ranked (heads and
// tails) against all entities, skipping candidates that are true triples
// of -data or of any -filter file. `flexps eval` cannot do this, since an
// evaluator sees only the evaluated file.
//
//	go run ./bench/kge/filtered -model out/kge.model -data test.tsv -filter train.tsv,valid.tsv
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/examples/kge"
	"github.com/flexps/flexps/tasks"
)

func main() {
	model := flag.String("model", "", "model file written by a kge task (required)")
	data := flag.String("data", "", "triple file to rank (required)")
	filter := flag.String("filter", "", "comma-separated triple files whose triples are filtered out")
	flag.Parse()
	if err := run(*model, *data, *filter); err != nil {
		fmt.Fprintln(os.Stderr, "filtered:", err)
		os.Exit(1)
	}
}

func run(modelPath, data, filter string) error {
	if modelPath == "" || data == "" {
		return fmt.Errorf("-model and -data are required")
	}
	ctx := context.Background()
	m, err := tasks.LoadModel(modelPath)
	if err != nil {
		return err
	}
	et, ok := m.Table("entities")
	if !ok {
		return fmt.Errorf("%s has no table \"entities\"", modelPath)
	}
	rt, ok := m.Table("relations")
	if !ok {
		return fmt.Errorf("%s has no table \"relations\"", modelPath)
	}
	if et.Spec.Width%2 != 0 || et.Spec.Width != rt.Spec.Width {
		return fmt.Errorf("%s: entities width %d, relations width %d: want equal even widths", modelPath, et.Spec.Width, rt.Spec.Width)
	}
	test, err := datastore.ReadAll(ctx, data, "ratings")
	if err != nil {
		return err
	}
	known := kge.Known{}
	files := []string{data}
	if filter != "" {
		files = append(files, strings.Split(filter, ",")...)
	}
	for _, f := range files {
		r, err := datastore.ReadAll(ctx, f, "ratings")
		if err != nil {
			return err
		}
		if err := known.AddRecords(r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	emb := kge.Embeddings{Dim: et.Spec.Width / 2, Ent: et.DenseValues(), Rel: rt.DenseValues()}
	st, err := emb.RankAll(test, 0, test.Len(), known)
	if err != nil {
		return fmt.Errorf("%s: %w", data, err)
	}
	x := st.Metrics()
	fmt.Printf("mrr=%.4f hits1=%.4f hits3=%.4f hits10=%.4f ranked=%d\n", x["mrr"], x["hits1"], x["hits3"], x["hits10"], st.N)
	return nil
}
