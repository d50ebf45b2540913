package mf_test

import (
	"context"
	"math"
	"testing"

	"github.com/flexps/flexps/datastore"
)

// baselineLambda is the bias baseline's L2 (per bias, as in ALS): the
// best of 1, 3, 5, 10, 20 on InstEval's split, so the baseline is not a
// straw man.
const baselineLambda = 10

// biasBaselineRMSE fits the regularized bias-only model mu + b_u + b_i
// (mu the mean training rating; b_u and b_i by alternating exact
// least-squares steps with L2 lambda) on trainPath and returns its test
// RMSE on testPath, and the RMSE of predicting each item's mean.
func biasBaselineRMSE(t *testing.T, trainPath, testPath string, lambda float64) (bias, itemMean float64) {
	t.Helper()
	ctx := context.Background()
	tr, err := datastore.ReadAll(ctx, trainPath, "ratings")
	if err != nil {
		t.Fatal(err)
	}
	te, err := datastore.ReadAll(ctx, testPath, "ratings")
	if err != nil {
		t.Fatal(err)
	}
	var mu float64
	bu, bi := map[uint64]float64{}, map[uint64]float64{}
	nu, ni, sumI := map[uint64]float64{}, map[uint64]float64{}, map[uint64]float64{}
	for i := 0; i < tr.Len(); i++ {
		r, k, _ := tr.Row(i)
		mu += r
		nu[k[0]]++
		ni[k[1]]++
		sumI[k[1]] += r
	}
	mu /= float64(tr.Len())
	for range 25 {
		acc := map[uint64]float64{}
		for i := 0; i < tr.Len(); i++ {
			r, k, _ := tr.Row(i)
			acc[k[1]] += r - mu - bu[k[0]]
		}
		for k, s := range acc {
			bi[k] = s / (ni[k] + lambda)
		}
		clear(acc)
		for i := 0; i < tr.Len(); i++ {
			r, k, _ := tr.Row(i)
			acc[k[0]] += r - mu - bi[k[1]]
		}
		for k, s := range acc {
			bu[k] = s / (nu[k] + lambda)
		}
	}
	var sq, sqItem float64
	for i := 0; i < te.Len(); i++ {
		r, k, _ := te.Row(i)
		e := r - (mu + bu[k[0]] + bi[k[1]])
		sq += e * e
		p := mu
		if n := ni[k[1]]; n > 0 {
			p = sumI[k[1]] / n
		}
		sqItem += (r - p) * (r - p)
	}
	n := float64(te.Len())
	return math.Sqrt(sq / n), math.Sqrt(sqItem / n)
}
