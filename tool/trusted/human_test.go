package trusted

import (
	"errors"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/tool"
)

func TestAskHuman(t *testing.T) {
	var h AskHuman
	spec := h.Spec()
	if spec.Name != "ask_human" || spec.Side != tool.SideTrusted || len(spec.Labels) != 0 {
		t.Errorf("spec = %+v", spec)
	}
	checkSchema(t, spec.InputSchema, "question")

	_, err := call(t, h, `{"question":"  Deploy to prod or staging?  "}`)
	var park *ParkForHuman
	if !errors.Is(err, ErrParkForHuman) || !errors.As(err, &park) {
		t.Fatalf("err = %v, want a *ParkForHuman", err)
	}
	if park.Question != "Deploy to prod or staging?" || park.Key != "run1/2/3" {
		t.Errorf("park = %+v", park)
	}
	if errdefs.Kind(err) != nil {
		t.Errorf("parking is not a failure, but err has kind %v", errdefs.Kind(err))
	}

	for _, tt := range []struct{ input, want string }{
		{`{}`, "question is required"},
		{`{"question":" "}`, "question is required"},
		{`{"question":["a"]}`, `field "question" must be a string`},
		{`{"question":"` + strings.Repeat("q", 4001) + `"}`, "question is 4001 characters; the limit is 4000"},
		{`{"question":"a","urgent":true}`, `unknown field "urgent"`},
	} {
		q, err := AskHumanQuestion([]byte(tt.input))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) || q != "" {
			t.Errorf("%.60s: %q, %v; want %q", tt.input, q, err, tt.want)
		}
	}

	if r := HumanAnswer("staging", "ann"); r.Text != "ann answered:\nstaging" || r.IsError {
		t.Errorf("HumanAnswer = %+v", r)
	}
	if r := HumanAnswer("", ""); r.Text != "A person answered:\n(an empty answer)" {
		t.Errorf("HumanAnswer = %+v", r)
	}
}
