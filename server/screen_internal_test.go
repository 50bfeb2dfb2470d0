package server

import (
	"testing"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/sandbox"
)

// A spec's screen goes over the wire both ways, and a sandbox's resolved
// screen (its image's when the spec named none) and who holds it are
// shown.
func TestScreenOnTheWire(t *testing.T) {
	spec, err := SpecFromProto(&reinsv1.SandboxSpec{Image: "desktop", Screen: "1024x768"})
	if err != nil || spec.Screen != "1024x768" {
		t.Fatalf("SpecFromProto: screen %q, %v", spec.Screen, err)
	}
	p := RecordToProto(sandbox.Info{Spec: spec, Screen: "1024x768", HeldBy: "ada"})
	if p.Spec.Screen != "1024x768" || p.Screen != "1024x768" || p.HeldBy != "ada" {
		t.Fatalf("RecordToProto: spec screen %q, screen %q, held by %q", p.Spec.Screen, p.Screen, p.HeldBy)
	}
	back, err := SpecFromProto(p.Spec)
	if err != nil || back.Screen != spec.Screen {
		t.Fatalf("round trip: %q, %v", back.Screen, err)
	}
	if p := RecordToProto(sandbox.Info{Spec: sandbox.Spec{Image: "desktop"}, Screen: sandbox.DefaultScreen}); p.Spec.Screen != "" || p.Screen != sandbox.DefaultScreen {
		t.Fatalf("the image's own screen: spec %q, sandbox %q", p.Spec.Screen, p.Screen)
	}
}
