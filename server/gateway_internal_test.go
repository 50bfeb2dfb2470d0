package server

import (
	"errors"
	"strings"
	"testing"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// A sandbox's gateway goes over the wire as on and its model, never its
// script (nor its token, which the spec does not hold).
func TestGatewayOnTheWire(t *testing.T) {
	spec, err := SpecFromProto(&reinsv1.SandboxSpec{Gateway: &reinsv1.ModelGateway{On: true, Model: "script:s", Script: `{"turns":[{"text":"hi"}]}`}})
	if err != nil || spec.Gateway == nil || spec.Gateway.Model != "script:s" || spec.Gateway.Script == "" {
		t.Fatalf("SpecFromProto: %+v, %v", spec.Gateway, err)
	}
	if s, _ := SpecFromProto(&reinsv1.SandboxSpec{Gateway: &reinsv1.ModelGateway{Model: "anthropic:x"}}); s.Gateway != nil {
		t.Fatal("a gateway that is not on was turned on")
	}
	p := RecordToProto(sandbox.Info{Spec: spec})
	if g := p.Spec.Gateway; !g.GetOn() || g.Model != "script:s" || g.Script != "" {
		t.Fatalf("RecordToProto's gateway: %v, want on, its model, no script", g)
	}
	if RecordToProto(sandbox.Info{}).Spec.Gateway != nil {
		t.Fatal("a sandbox without a gateway shows one")
	}
}

func TestGatewayModelChecked(t *testing.T) {
	for _, tc := range []struct {
		tenant string
		g      sandbox.GatewaySpec
		want   string // "" accepted
	}{
		{"acme", sandbox.GatewaySpec{}, ""},
		{"acme", sandbox.GatewaySpec{Model: "anthropic:claude-sonnet-4-5"}, ""},
		{"acme", sandbox.GatewaySpec{Model: "script:s", Script: `{"turns":[{"text":"hi"}]}`}, ""},
		{"", sandbox.GatewaySpec{Model: "script:/srv/s.json"}, ""},
		{"acme", sandbox.GatewaySpec{Model: "script:/etc/passwd"}, "must be sent inline"},
		{"acme", sandbox.GatewaySpec{Model: "claude"}, "has no provider"},
		{"acme", sandbox.GatewaySpec{Model: "nope:x"}, "unknown model provider"},
		{"acme", sandbox.GatewaySpec{Model: "openai:gpt-4.1", Script: "{}"}, "script: model only"},
		{"acme", sandbox.GatewaySpec{Model: "script:s", Script: "not json"}, "script"},
	} {
		err := checkGateway(tc.tenant, &tc.g)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q for %q: %v, want accepted", tc.g.Model, tc.tenant, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalidArgument)):
			t.Errorf("%q for %q: %v, want invalid argument with %q", tc.g.Model, tc.tenant, err, tc.want)
		}
	}
}
