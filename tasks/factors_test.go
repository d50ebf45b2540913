package tasks

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexps/flexps/kvstore"
)

func TestFactorsStartRandom(t *testing.T) {
	table := func(name, init string) kvstore.TableSpec {
		return kvstore.TableSpec{Name: name, Size: 4, Width: 2, Init: init}
	}
	stage := func(fn string, p Params) Stage { return Stage{Name: fn, Func: fn, Params: p} }
	for _, tc := range []struct {
		name   string
		tables []kvstore.TableSpec
		stages []Stage
		want   string // "": accepted
		at     int    // the table the refusal names
	}{
		{"both zero", []kvstore.TableSpec{table("a", ""), table("b", "zero")}, []Stage{stage("f", nil)},
			`f: tables "a" and "b" start at zero`, 0},
		{"one random", []kvstore.TableSpec{table("a", ""), table("b", "uniform:0.1")}, []Stage{stage("f", nil)}, "", 0},
		{"renamed by params", []kvstore.TableSpec{table("x", "uniform:0.1"), table("u", ""), table("v", "")},
			[]Stage{stage("f", Params{"a": "u", "b": "v"})}, `f: tables "u" and "v" start at zero`, 1},
		{"after another stage", []kvstore.TableSpec{table("a", ""), table("b", "")}, []Stage{stage("g", nil), stage("f", nil)}, "", 0},
		{"a table not declared", []kvstore.TableSpec{table("a", "")}, []Stage{stage("f", nil)}, "", 0},
		{"another function", []kvstore.TableSpec{table("a", ""), table("b", "")}, []Stage{stage("g", nil)}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := &MultiStageTask{Name: "t", Tables: tc.tables, Stages: tc.stages}
			i, _, err := FactorsStartRandom("f", "a", "b")(task)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe := (*FieldError)(nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || i != 0 {
				t.Fatalf("stage %d, error %v: want stage 0 and %q", i, err, tc.want)
			}
			if !errors.As(err, &fe) || fe.Section != "table" || fe.Index != tc.at || fe.Keys[0] != "init" {
				t.Fatalf("error %#v: want the init of table %d", err, tc.at)
			}
		})
	}
}
