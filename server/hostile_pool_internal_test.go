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
	_, err := SpecFromProto(&reinsv1.SandboxSpec{Labels: map[string]string{sandbox.LabelPool: "busybox"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a spec with label %s: %v, want invalid argument", sandbox.LabelPool, err)
	}
}
