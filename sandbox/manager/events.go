package manager

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// LifecycleEvent is one step in a sandbox's life (sandbox.LifecycleEvent).
type LifecycleEvent = sandbox.LifecycleEvent

// Kinds of lifecycle event.
const (
	EventCreated   = sandbox.EventCreated
	EventExpiring  = sandbox.EventExpiring
	EventSuspended = sandbox.EventSuspended
	EventResumed   = sandbox.EventResumed
	EventPaused    = sandbox.EventPaused
	EventSnapshot  = sandbox.EventSnapshot
	EventForked    = sandbox.EventForked
	EventStopped   = sandbox.EventStopped
	EventTakeover  = sandbox.EventTakeover
	EventHandback  = sandbox.EventHandback
)

// maxEventsPerSandbox bounds what is kept of one sandbox's events: the
// oldest go first. Events of a sandbox whose record is gone are dropped
// eventGrace after their last one, so that a follower still sees its stop.
const (
	maxEventsPerSandbox = 256
	eventGrace          = 10 * time.Minute
)

// events is the manager's in-memory event log.
type events struct {
	mu     sync.Mutex
	seq    int64
	by     map[string][]LifecycleEvent // by sandbox id
	notify chan struct{}               // closed and replaced at each event
}

// emit records an event of b (its record's id and tenant) and tells the
// Config.OnEvent hook, which is called with b.mu held: it must not call
// back into the manager about b.
func (m *Manager) emit(b *box, e LifecycleEvent) {
	e.Sandbox, e.Tenant = b.rec.ID, b.rec.Tenant
	m.publish(e)
	if endsHold(e.Kind) {
		m.release(e.Sandbox, nil, "handed back: the sandbox "+e.Kind)
	}
}

// publish records e and tells the hook.
func (m *Manager) publish(e LifecycleEvent) {
	m.events.mu.Lock()
	m.events.seq++
	e.Seq, e.Time = m.events.seq, time.Now()
	if m.events.by == nil {
		m.events.by = map[string][]LifecycleEvent{}
	}
	l := append(m.events.by[e.Sandbox], e)
	if len(l) > maxEventsPerSandbox {
		l = slices.Delete(l, 0, len(l)-maxEventsPerSandbox)
	}
	m.events.by[e.Sandbox] = l
	if m.events.notify != nil {
		close(m.events.notify)
		m.events.notify = nil
	}
	m.events.mu.Unlock()
	if m.cfg.OnEvent != nil {
		m.cfg.OnEvent(e)
	}
}

// Events returns the lifecycle events after afterSeq of sandbox id of
// tenant ("" for the admin), or of every sandbox of tenant when id is "",
// oldest first, and a channel closed when a newer event arrives (wait on
// it, then ask again). Another tenant's sandbox is not found.
func (m *Manager) Events(tenant, id string, afterSeq int64) ([]LifecycleEvent, <-chan struct{}, error) {
	if id != "" {
		if _, err := m.lookup(tenant, id); err != nil {
			m.events.mu.Lock()
			l, kept := m.events.by[id]
			m.events.mu.Unlock()
			// A removed sandbox's last events stay readable a while,
			// by its own tenant.
			if !kept || len(l) == 0 || tenant != "" && l[0].Tenant != tenant {
				return nil, nil, fmt.Errorf("sandbox %s not found: %w", truncate(id, 64), errdefs.ErrNotFound)
			}
		}
	}
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	var out []LifecycleEvent
	add := func(l []LifecycleEvent) {
		for _, e := range l {
			if e.Seq > afterSeq && (tenant == "" || e.Tenant == tenant) {
				out = append(out, e)
			}
		}
	}
	if id != "" {
		add(m.events.by[id])
	} else {
		for _, l := range m.events.by {
			add(l)
		}
		slices.SortFunc(out, func(a, b LifecycleEvent) int { return int(a.Seq - b.Seq) })
	}
	if m.events.notify == nil {
		m.events.notify = make(chan struct{})
	}
	return out, m.events.notify, nil
}

// pruneEvents drops the events of sandboxes whose records are gone, once
// eventGrace has passed since their last event.
func (m *Manager) pruneEvents(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events.mu.Lock()
	defer m.events.mu.Unlock()
	for id, l := range m.events.by {
		if _, ok := m.boxes[id]; !ok && (len(l) == 0 || now.Sub(l[len(l)-1].Time) > eventGrace) {
			delete(m.events.by, id)
		}
	}
}

func createdWords(r Record) string {
	if r.Origin != "" {
		return "created from " + r.Origin
	}
	return "created from " + r.Spec.Image
}
