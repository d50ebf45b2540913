package mf

import (
	"errors"
	"math"
	"testing"

	"github.com/flexps/flexps/kvstore"
	"github.com/flexps/flexps/tasks"
)

// addLog records the Adds addRows makes (the only table calls it uses).
type addLog struct {
	tasks.Table
	spec kvstore.TableSpec
	keys int
}

func (a *addLog) Spec() kvstore.TableSpec { return a.spec }
func (a *addLog) Add(keys []uint64, _ []float64) error {
	a.keys += len(keys)
	return nil
}

// TestAddRowsRefusesNonFinite: an implicit-feedback step that diverged
// adds nothing at all (not the finite rows before the bad one, even over
// several chunks) and says which table.
func TestAddRowsRefusesNonFinite(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  float64
	}{{"finite", 0}, {"nan", math.NaN()}, {"inf", math.Inf(-1)}} {
		t.Run(tc.name, func(t *testing.T) {
			acc := map[uint64][]float64{}
			for k := range uint64(2*chunkKeys + 5) {
				acc[k] = []float64{1, 2}
			}
			if tc.bad != 0 {
				acc[chunkKeys+3][1] = tc.bad
			}
			tab := &addLog{spec: kvstore.TableSpec{Name: "items.implicit", Width: 2}}
			err := addRows(tab, acc, 2, 0, 2)
			switch {
			case tc.bad == 0 && (err != nil || tab.keys != len(acc)):
				t.Fatalf("finite rows: err %v, %d of %d keys added", err, tab.keys, len(acc))
			case tc.bad != 0 && (!errors.Is(err, ErrDiverged) || tab.keys != 0):
				t.Fatalf("non-finite row: err %v (want ErrDiverged), %d keys added (want 0)", err, tab.keys)
			}
		})
	}
}
