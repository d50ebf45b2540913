package mf

import (
	"errors"
	"fmt"
	"math"

	"github.com/flexps/flexps/datastore"
	"github.com/flexps/flexps/tasks"
)

func init() {
	tasks.RegisterEvaluator("mf", tasks.Evaluator{Format: "ratings", Formats: []string{"ratings"}, Eval: EvalModel})
}

// EvalModel scores a saved MF model (tables "users" and "items", and
// "bias", "user_bias", "item_bias" when present) on ratings: rmse and mae.
// A user or item beyond the model's tables is an error naming the file,
// line and table (a 1-based file scored by a model of 0-based ids).
func EvalModel(model *tasks.Model, data *datastore.Records) (map[string]float64, error) {
	// The tables its task's params named (users = "u"...): by the
	// default names a renamed bias table was silently left out.
	un, in := model.TableName("users", "users"), model.TableName("items", "items")
	ut, ok := model.Table(un)
	if !ok {
		return nil, fmt.Errorf("mf model has no table %q", un)
	}
	it, ok := model.Table(in)
	if !ok {
		return nil, fmt.Errorf("mf model has no table %q", in)
	}
	rank := ut.Spec.Width
	if it.Spec.Width != rank {
		return nil, fmt.Errorf("mf model: users width %d, items width %d: want equal ranks", rank, it.Spec.Width)
	}
	if data.Len() == 0 {
		return nil, errors.New("no records")
	}
	// Rows are looked up (a sparse table of hashed ids is searched, not
	// spread over an array of its size).
	opt := func(name string, width int) *tasks.ModelTable {
		if t, ok := model.Table(name); ok && t.Spec.Width == width {
			return t
		}
		return nil
	}
	mu, bu, bi := opt(model.TableName("bias", "bias"), 1), opt(model.TableName("user_bias", "user_bias"), 1), opt(model.TableName("item_bias", "item_bias"), 1)
	var z *tasks.ModelTable // implicit feedback: z_u, the first rank of 2 rank values per user
	if t, ok := model.Table(UserImplicitTable(un)); ok {
		if t.Spec.Width != 2*rank || t.Spec.Size < ut.Spec.Size {
			return nil, fmt.Errorf("mf model: table %q has size %d width %d, want width %d and size >= %d",
				t.Spec.Name, t.Spec.Size, t.Spec.Width, 2*rank, ut.Spec.Size)
		}
		z = t
	}
	one := make([]float64, 1)
	at := func(x *tasks.ModelTable, k uint64) float64 {
		if x == nil || k >= x.Spec.Size {
			return 0
		}
		return x.Lookup(k, one)[0]
	}
	fbuf, gbuf, zbuf := make([]float64, rank), make([]float64, rank), make([]float64, 2*rank)
	var sq, abs float64
	for i := 0; i < data.Len(); i++ {
		label, keys, _ := data.Row(i)
		if len(keys) != 2 {
			return nil, fmt.Errorf("%s: record has %d ids, want user and item (format ratings)", data.Where(i), len(keys))
		}
		a, b := keys[0], keys[1]
		for _, x := range []struct {
			what string
			id   uint64
			size uint64
			name string
		}{{"user", a, ut.Spec.Size, un}, {"item", b, it.Spec.Size, in}} {
			if x.id >= x.size {
				return nil, fmt.Errorf("%s: %s id %d is outside the model's table %q (size %d: ids 0..%d)", data.Where(i), x.what, x.id, x.name, x.size, x.size-1)
			}
		}
		p := at(mu, 0) + at(bu, a) + at(bi, b)
		fu, fv := ut.Lookup(a, fbuf), it.Lookup(b, gbuf)
		var zu []float64
		if z != nil {
			zu = z.Lookup(a, zbuf)
		}
		for k := range fu {
			x := fu[k]
			if zu != nil {
				x += zu[k]
			}
			p += x * fv[k]
		}
		e := label - p
		sq += e * e
		abs += math.Abs(e)
	}
	n := float64(data.Len())
	return map[string]float64{"rmse": math.Sqrt(sq / n), "mae": abs / n}, nil
}
