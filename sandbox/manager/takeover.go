package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// A take-over is kept in memory only (Info.HeldBy is never recorded): a
// restart of the service hands every screen back, which is the safe side —
// a run waits on a person only while someone is there to be waited on.
type holds struct {
	by map[string]*hold // by sandbox id; guarded by Manager.holdMu
	// idle is how long a hold lasts without input (sandbox.IdleHold; tests
	// shorten it).
	idle time.Duration
}

func (h *holds) idleBound() time.Duration {
	if h.idle > 0 {
		return h.idle
	}
	return sandbox.IdleHold
}

type hold struct {
	sandbox.Hold
	id, tenant string
	released   chan struct{}
	idle       *time.Timer
}

// Hold gives sandbox id's screen to a person named by (the tenant's name
// when ""), until HandBack, the sandbox stops, suspends or pauses, or
// sandbox.IdleHold passes without input (KeepHeld). Holding a screen one
// already holds refreshes it; a screen held by someone else is refused.
// The sandbox must be running.
func (m *Manager) Hold(ctx context.Context, tenant, id, by string) (sandbox.Hold, error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return sandbox.Hold{}, err
	}
	m.mu.Lock()
	owner := b.tenant
	m.mu.Unlock()
	if by == "" {
		by = owner
	}
	if by == "" {
		by = "admin"
	}
	b.mu.Lock()
	state := b.rec.State
	b.mu.Unlock()
	if state != sandbox.StateRunning {
		return sandbox.Hold{}, fmt.Errorf("sandbox %s is %s: only a running sandbox's screen can be taken over (resume it first): %w", id, state, errdefs.ErrFailedPrecondition)
	}
	now := time.Now()
	m.holdMu.Lock()
	if h := m.holds.by[id]; h != nil {
		defer m.holdMu.Unlock()
		if h.By != by {
			return sandbox.Hold{}, fmt.Errorf("sandbox %s's screen is held by %s since %s: they hand it back (or reins sandbox handback %s) before another takes it: %w",
				id, h.By, h.Since.Format(time.RFC3339), id, errdefs.ErrFailedPrecondition)
		}
		h.Last = now
		h.idle.Reset(m.holds.idleBound())
		return h.Hold, nil
	}
	if m.holds.by == nil {
		m.holds.by = map[string]*hold{}
	}
	h := &hold{Hold: sandbox.Hold{By: by, Since: now, Last: now}, id: id, tenant: owner, released: make(chan struct{})}
	bound := m.holds.idleBound()
	h.idle = time.AfterFunc(bound, func() {
		m.release(id, h, fmt.Sprintf("handed back after %s without input", bound))
	})
	m.holds.by[id] = h
	m.holdMu.Unlock()
	m.publish(LifecycleEvent{Sandbox: id, Tenant: owner, Kind: EventTakeover, Message: "screen taken over by " + by})
	return h.Hold, nil
}

// HandBack lets go of sandbox id's screen; a screen no one holds is left
// as it is.
func (m *Manager) HandBack(ctx context.Context, tenant, id string) error {
	if _, err := m.lookup(tenant, id); err != nil {
		return err
	}
	m.release(id, nil, "handed back")
	return nil
}

// Held says whether a person holds sandbox id's screen (a take-over), who,
// and a channel closed when it is handed back (nil when no one holds it;
// a new one for each hold). A run's computer calls wait on it; a person's
// own calls go through.
func (m *Manager) Held(id string) (by string, released <-chan struct{}) {
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	if h := m.holds.by[id]; h != nil {
		return h.By, h.released
	}
	return "", nil
}

// Holding returns sandbox id's take-over, if one stands.
func (m *Manager) Holding(id string) (sandbox.Hold, bool) {
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	if h := m.holds.by[id]; h != nil {
		return h.Hold, true
	}
	return sandbox.Hold{}, false
}

// KeepHeld records input on a held screen (its idle clock starts again)
// and reports whether it is held.
func (m *Manager) KeepHeld(id string) bool {
	m.holdMu.Lock()
	defer m.holdMu.Unlock()
	h := m.holds.by[id]
	if h == nil {
		return false
	}
	h.Last = time.Now()
	h.idle.Reset(m.holds.idleBound())
	return true
}

// release ends sandbox id's hold (only h, when set: the timer of an
// earlier hold does not end a later one) and tells whoever waits on it.
func (m *Manager) release(id string, h *hold, why string) {
	m.holdMu.Lock()
	cur := m.holds.by[id]
	if cur == nil || h != nil && cur != h {
		m.holdMu.Unlock()
		return
	}
	delete(m.holds.by, id)
	m.holdMu.Unlock()
	cur.idle.Stop()
	// The event first: whoever the close wakes finds it published.
	m.publish(LifecycleEvent{Sandbox: id, Tenant: cur.tenant, Kind: EventHandback, Message: why})
	close(cur.released)
}

// heldBy fills in who holds info's screen.
func (m *Manager) heldBy(info sandbox.Info) sandbox.Info {
	info.HeldBy, _ = m.Held(info.ID)
	return info
}

// endsHold says whether a lifecycle event ends a take-over: a screen
// that is gone cannot stay held.
func endsHold(kind string) bool {
	return kind == EventStopped || kind == EventSuspended || kind == EventPaused
}
