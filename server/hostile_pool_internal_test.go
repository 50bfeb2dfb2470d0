package server

import (
	"errors"
	"testing"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// The warm pool's label marks the service's own sandboxes (a restart
// takes back those that carry it): no caller's spec may set it.
func TestSpecRefusesPoolLabel(t *testing.T) {
	for _, k := range []string{sandbox.LabelPool, sandbox.LabelPoolReady, sandbox.LabelPool + "x"} {
		_, err := SpecFromProto(&reinsv1.SandboxSpec{Labels: map[string]string{k: "busybox"}})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("a spec with label %s: %v, want invalid argument", k, err)
		}
	}
	if _, err := SpecFromProto(&reinsv1.SandboxSpec{Labels: map[string]string{"reins.run": "r1", "pool": "x"}}); err != nil {
		t.Errorf("other labels: %v", err)
	}
}
