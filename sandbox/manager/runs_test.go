package manager

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/reinsdev/reins/egress"
)

// TestRunsNetwork: a run's sandboxes get the run's network rules; a
// replacement keeps those of the sandbox it replaces (changed while it
// ran, maybe).
func TestRunsNetwork(t *testing.T) {
	m, _ := newTenantManager(t, nil, nil)
	ctx := context.Background()
	runRules := egress.Rules{Mode: egress.ModeEgress, AllowHosts: []egress.HostRule{{Host: "pypi.org"}}}
	r := Runs{M: m, NetworkOf: func(_ context.Context, runID string) (egress.Rules, error) {
		if runID != "run_1" {
			return egress.Rules{}, errors.New("no such run")
		}
		return runRules, nil
	}}
	spec, err := r.spec(ctx, "run_1", "default", "busybox")
	if err != nil || !reflect.DeepEqual(spec.Network, runRules) || spec.Labels[LabelRun] != "run_1" {
		t.Errorf("a run's sandbox: %+v, %v; want the run's rules", spec, err)
	}
	if _, err := r.spec(ctx, "run_2", "default", "busybox"); err == nil {
		t.Error("rules that cannot be read: no error; a sandbox must not be made without its rules")
	}
	if spec, err := (Runs{M: m}).spec(ctx, "run_1", "default", "busybox"); err != nil || spec.Network.Mode != "" || spec.Network.AllowHosts != nil {
		t.Errorf("no NetworkOf: %+v, %v; want the zero rules", spec.Network, err)
	}

	// a1's record carries rules changed while it ran.
	changed := egress.Rules{Mode: egress.ModeOpen, DenyHosts: []egress.HostRule{{Host: "evil.example.com"}}}
	m.mu.Lock()
	b := m.boxes["a1"]
	m.mu.Unlock()
	b.mu.Lock()
	b.rec.Spec.Network = changed
	b.mu.Unlock()
	spec, err = r.replaceSpec(ctx, "run_1", "default", "busybox", "a1")
	if err != nil || !reflect.DeepEqual(spec.Network, changed) {
		t.Errorf("a replacement: %+v, %v; want the replaced sandbox's rules", spec.Network, err)
	}
	if spec, err = r.replaceSpec(ctx, "run_1", "default", "busybox", "gone"); err != nil || !reflect.DeepEqual(spec.Network, runRules) {
		t.Errorf("a replacement of a sandbox with no record: %+v, %v; want the run's rules", spec.Network, err)
	}
}
