package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// A hold shows in Held, Holding and List, is refused to another person and
// to another tenant (as missing), and ends by hand-back, by the sandbox
// suspending and by idling: each closes that hold's channel and logs a
// handback event after the takeover one.
func TestTakeOver(t *testing.T) {
	m, _ := newTenantManager(t, nil, map[string]string{"r1": "acme", "r2": "beta"})
	ctx := context.Background()
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}
	if by, c := m.Held("r1"); by != "" || c != nil {
		t.Fatalf("held before a hold: %q %v", by, c)
	}
	h, err := m.Hold(ctx, "acme", "r1", "ana")
	if err != nil || h.By != "ana" || h.Since.IsZero() {
		t.Fatalf("hold: %+v, %v", h, err)
	}
	by, released := m.Held("r1")
	if by != "ana" || released == nil {
		t.Fatalf("Held after a hold: %q %v", by, released)
	}
	if got := heldIn(m.List(ctx, "acme", nil)); got != "r1:ana a1:" {
		t.Errorf("List after a hold: %s, want r1 held by ana", got)
	}
	if _, err := m.Hold(ctx, "acme", "r1", "bob"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("bob's hold of ana's screen: %v, want failed precondition", err)
	}
	if _, err := m.Hold(ctx, "beta", "r1", ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("beta's hold of acme's sandbox: %v, want not found", err)
	}
	if err := m.HandBack(ctx, "beta", "r1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("beta's hand-back of acme's sandbox: %v, want not found", err)
	}
	if _, err := m.Hold(ctx, "acme", "a1", ""); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a hold of a stopped sandbox: %v, want failed precondition", err)
	}
	if !m.KeepHeld("r1") || m.KeepHeld("r2") {
		t.Error("KeepHeld: want true for the held r1 only")
	}
	if err := m.HandBack(ctx, "acme", "r1"); err != nil {
		t.Fatal(err)
	}
	if !closed(released) {
		t.Fatal("the channel did not close on hand-back")
	}
	if by, c := m.Held("r1"); by != "" || c != nil {
		t.Errorf("held after hand-back: %q", by)
	}
	if got := heldIn(m.List(ctx, "acme", nil)); got != "r1: a1:" {
		t.Errorf("List after hand-back: %s", got)
	}

	// A new hold has a new channel; a suspend ends it.
	if _, err := m.Hold(ctx, "acme", "r1", ""); err != nil {
		t.Fatal(err)
	}
	by, again := m.Held("r1")
	if by != "acme" || again == released {
		t.Fatalf("second hold: by %q (want the tenant's name), same channel %v", by, again == released)
	}
	m.emit(m.boxes["r1"], LifecycleEvent{Kind: EventSuspended})
	if !closed(again) {
		t.Fatal("a suspend did not hand the screen back")
	}

	// Idle: handed back on its own.
	m.holds.idle = 50 * time.Millisecond
	if _, err := m.Hold(ctx, "beta", "r2", "cy"); err != nil {
		t.Fatal(err)
	}
	_, idle := m.Held("r2")
	if !closed(idle) {
		t.Fatal("an idle hold was not handed back")
	}

	evs, _, _ := m.Events("acme", "r1", 0)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	want := []string{EventTakeover, EventHandback, EventTakeover, EventSuspended, EventHandback}
	if len(kinds) != len(want) {
		t.Fatalf("r1's events %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("r1's events %v, want %v", kinds, want)
		}
	}
	if evs, _, _ := m.Events("beta", "r2", 0); len(evs) != 2 || evs[1].Kind != EventHandback || evs[1].Tenant != "beta" {
		t.Errorf("r2's events after idling: %+v", evs)
	}
}

func heldIn(l []sandbox.Info) string {
	var out []string
	for _, i := range l {
		out = append(out, i.ID+":"+i.HeldBy)
	}
	return strings.Join(out, " ")
}
