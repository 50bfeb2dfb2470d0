package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/sandbox"
)

// A look-only call (QuietClient: the executor's Usage, Hello, Health, as
// `reins sandbox show` makes them) leaves a sandbox's activity alone, so an
// owner watching an idle sandbox does not keep it alive; any other call
// (Client) counts. Both look the sandbox up as the caller's tenant first.
func TestQuietClientIsNotActivity(t *testing.T) {
	idle := time.Now().Add(-time.Hour)
	b := &box{tenant: "acme", activity: idle, client: &client.Client{}}
	b.rec.Info = sandbox.Info{ID: "a0a0a0a0a0a0", Tenant: "acme", State: sandbox.StateRunning}
	m := &Manager{boxes: map[string]*box{b.rec.Info.ID: b}}
	ctx := context.Background()

	if _, err := m.QuietClient(ctx, "acme", "a0a0a0a0a0a0"); err != nil {
		t.Fatal(err)
	}
	if !b.activity.Equal(idle) {
		t.Fatalf("a look-only call moved the sandbox's activity to %v", b.activity)
	}
	for _, call := range []func(context.Context, string, string) (*client.Client, error){m.QuietClient, m.Client} {
		if _, err := call(ctx, "beta", "a0a0a0a0a0a0"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("another tenant's lookup: %v, want not found", err)
		}
	}
	if !b.activity.Equal(idle) {
		t.Fatalf("another tenant's lookup moved the sandbox's activity to %v", b.activity)
	}
	if _, err := m.Client(ctx, "acme", "a0a0a0a0a0a0"); err != nil {
		t.Fatal(err)
	}
	if !b.activity.After(idle) {
		t.Fatal("a call that acts did not count as activity")
	}
}
