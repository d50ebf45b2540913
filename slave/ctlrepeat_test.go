package slave

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flexps/flexps/internal/bus"
	"github.com/flexps/flexps/internal/proto"
)

// A control request the master sends again with the same ReqID (it
// reconnected to the bus while it waited) is answered as the first was,
// and not carried out again; another ReqID is carried out.
func TestControlRequestAskedAgainIsAnsweredAsTheFirst(t *testing.T) {
	srv, mnc, _ := fakeMaster(t)
	subj := bus.For("default")
	_, logs := admittedSlave(t, srv, mnc, nil)
	ask := func(req proto.SlaveCtl) proto.CtlReply {
		t.Helper()
		data, _ := json.Marshal(req)
		msg, err := mnc.Request(subj.SlaveCtl("s1"), data, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep proto.CtlReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	for _, tc := range []struct {
		name string
		req  proto.SlaveCtl
		want string // substring of the answer's error; "" = OK
	}{
		{"first", proto.SlaveCtl{Op: "no_such_op", ReqID: "r1"}, `unknown control op "no_such_op"`},
		{"asked again: the first's answer, not done again", proto.SlaveCtl{Op: proto.OpEndStage, Task: "t", ReqID: "r1"}, `unknown control op "no_such_op"`},
		{"another request", proto.SlaveCtl{Op: proto.OpEndStage, Task: "t", ReqID: "r2"}, ""},
		{"unnamed requests are never taken for repeats", proto.SlaveCtl{Op: proto.OpEndStage, Task: "t"}, ""},
	} {
		rep := ask(tc.req)
		if got := rep.Error; tc.want == "" && !rep.OK || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Fatalf("%s: answer %+v, want error %q", tc.name, rep, tc.want)
		}
	}
	if n := strings.Count(logs.String(), "asked again"); n != 1 {
		t.Fatalf("%d repeats logged, want 1:\n%s", n, logs.String())
	}
}

func TestAnsweredKeepsTheLatest(t *testing.T) {
	var a answered
	for i := range answeredKept + 10 {
		a.add(string(rune('a'+i%26))+strings.Repeat("x", i), nil)
	}
	if ok, _ := a.answer("a"); ok {
		t.Fatal("the oldest request is still remembered")
	}
	last := string(rune('a'+(answeredKept+9)%26)) + strings.Repeat("x", answeredKept+9)
	if ok, _ := a.answer(last); !ok {
		t.Fatal("the latest request is forgotten")
	}
	if len(a.errs.m) != answeredKept || len(a.errs.order) != answeredKept {
		t.Fatalf("%d remembered, want %d", len(a.errs.m), answeredKept)
	}
}
