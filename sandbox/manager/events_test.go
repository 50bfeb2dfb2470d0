package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Events are numbered, read after a seq, bounded per sandbox, woken on by
// a new one, told to OnEvent, and another tenant's are missing; a removed
// sandbox's stay readable a while, then go.
func TestEvents(t *testing.T) {
	m := fakeManager(t)
	var told []LifecycleEvent
	m.cfg.OnEvent = func(e LifecycleEvent) { told = append(told, e) }
	a := &box{tenant: "acme", rec: Record{Info: sandbox.Info{ID: "a1", Tenant: "acme"}}}
	b := &box{tenant: "beta", rec: Record{Info: sandbox.Info{ID: "b1", Tenant: "beta"}}}
	m.boxes["a1"], m.boxes["b1"] = a, b

	m.emit(a, LifecycleEvent{Kind: EventCreated})
	m.emit(b, LifecycleEvent{Kind: EventCreated})
	evs, more, err := m.Events("acme", "a1", 0)
	if err != nil || len(evs) != 1 || evs[0].Seq != 1 || evs[0].Sandbox != "a1" || evs[0].Tenant != "acme" {
		t.Fatalf("acme's events: %+v, %v", evs, err)
	}
	select {
	case <-more:
		t.Fatal("the wait channel is closed before a new event")
	default:
	}
	m.emit(a, LifecycleEvent{Kind: EventSuspended, Reason: sandbox.ReasonTTLExpired})
	select {
	case <-more:
	case <-time.After(time.Second):
		t.Fatal("a new event did not wake the waiter")
	}
	if evs, _, _ := m.Events("acme", "a1", 1); len(evs) != 1 || evs[0].Kind != EventSuspended || evs[0].Seq != 3 {
		t.Errorf("acme's events after seq 1: %+v", evs)
	}
	if evs, _, _ := m.Events("acme", "", 0); len(evs) != 2 {
		t.Errorf("all acme's events: %+v, want its 2", evs)
	}
	if evs, _, _ := m.Events("", "", 0); len(evs) != 3 || evs[1].Sandbox != "b1" {
		t.Errorf("the admin's events: %+v, want all 3 in order", evs)
	}
	if _, _, err := m.Events("beta", "a1", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("beta's read of acme's events: %v, want not found", err)
	}
	if len(told) != 3 {
		t.Errorf("OnEvent told of %d events, want 3", len(told))
	}
	for range maxEventsPerSandbox + 10 {
		m.emit(a, LifecycleEvent{Kind: EventSnapshot})
	}
	if evs, _, _ := m.Events("acme", "a1", 0); len(evs) != maxEventsPerSandbox || evs[len(evs)-1].Seq != int64(3+maxEventsPerSandbox+10) {
		t.Errorf("after %d more events acme keeps %d (last seq %d), want the newest %d", maxEventsPerSandbox+10, len(evs), evs[len(evs)-1].Seq, maxEventsPerSandbox)
	}

	// Removed: readable by its tenant within the grace, then pruned.
	delete(m.boxes, "a1")
	if evs, _, err := m.Events("acme", "a1", 0); err != nil || len(evs) == 0 {
		t.Errorf("a removed sandbox's events within the grace: %d, %v", len(evs), err)
	}
	if _, _, err := m.Events("beta", "a1", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("beta's read of acme's removed sandbox's events: %v", err)
	}
	m.pruneEvents(time.Now().Add(eventGrace + time.Minute))
	if _, _, err := m.Events("acme", "a1", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a removed sandbox's events after the grace: %v, want not found", err)
	}
	if evs, _, _ := m.Events("beta", "b1", 0); len(evs) != 1 {
		t.Errorf("a live sandbox's events were pruned: %+v", evs)
	}
}
