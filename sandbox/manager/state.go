package manager

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

// transitions is every state change a sandbox may make (the diagram in
// package sandbox). setState refuses anything else, so a record on disk is
// always one of these steps from the last: a crash between two writes never
// leaves, say, a suspended sandbox recorded as stopped without a reason.
var transitions = map[sandbox.State][]sandbox.State{
	sandbox.StateCreating:  {sandbox.StateRunning, sandbox.StateStopped},
	sandbox.StateRunning:   {sandbox.StatePaused, sandbox.StateSuspended, sandbox.StateStopped},
	sandbox.StatePaused:    {sandbox.StateRunning, sandbox.StateStopped},
	sandbox.StateSuspended: {sandbox.StateRunning, sandbox.StateStopped},
	sandbox.StateStopped:   nil, // final: a sandbox that ended is replaced, never restarted
}

// setState moves b to state to and writes its record, in one step; b.mu is
// held. A stop needs a reason; the other states carry none.
func (m *Manager) setState(b *box, to sandbox.State, reason sandbox.Reason, msg string) error {
	from := b.rec.State
	if !slices.Contains(transitions[from], to) {
		return fmt.Errorf("sandbox %s: no transition from %s to %s: %w", b.rec.ID, from, to, errdefs.ErrInternal)
	}
	if (to == sandbox.StateStopped) != (reason != "") {
		return fmt.Errorf("sandbox %s: to %s with reason %q: a stop, and only a stop, has a reason: %w", b.rec.ID, to, reason, errdefs.ErrInternal)
	}
	b.rec.State, b.rec.Reason, b.rec.Message = to, reason, msg
	b.rec.StoppedAt = time.Time{}
	if to == sandbox.StateStopped {
		b.rec.StoppedAt = time.Now()
	}
	if to != sandbox.StateRunning && to != sandbox.StatePaused {
		b.rec.Pid, b.rec.PidStart = 0, 0
	}
	b.stopped.Store(to == sandbox.StateStopped)
	return writeRecord(b.dir, &b.rec)
}

// releaseLocked frees a sandbox's compute: its connection, its processes
// (the backend's delete) and its mounts. Its disk and record stay; the
// caller records what the sandbox became (suspended, or stopped and why).
func (m *Manager) releaseLocked(b *box) {
	m.haltLocked(b)
	if err := rootfs.Unmount(rootfs.Layout{Dir: b.dir}); err != nil {
		m.log.Warn("unmount failed", "sandbox", b.rec.ID, "err", err)
	}
	m.detachNetwork(b)
}

// haltLocked ends a sandbox's processes (and its gateway and connection),
// leaving its disk mounted, so its upper layer can be read as the
// processes left it; b.mu is held.
func (m *Manager) haltLocked(b *box) {
	m.stopGateway(b)
	if b.client != nil {
		b.client.Close()
		b.client = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if backend, ok := m.cfg.Backends[b.rec.Spec.Backend]; ok {
		if err := backend.Delete(ctx, b.rec.ID); err != nil {
			m.log.Warn("backend delete failed", "sandbox", b.rec.ID, "err", err)
		}
	}
}

// stopLocked ends a sandbox's processes and records why. The disk is kept
// (a replacement may reuse it) until cleanup. Stopping a stopped sandbox
// changes nothing.
func (m *Manager) stopLocked(b *box, reason sandbox.Reason, msg string) {
	if b.rec.State == sandbox.StateStopped {
		return
	}
	m.releaseLocked(b)
	if err := m.setState(b, sandbox.StateStopped, reason, msg); err != nil {
		m.log.Warn("recording the stop failed", "sandbox", b.rec.ID, "err", err)
	}
	m.emit(b, LifecycleEvent{Kind: EventStopped, Reason: reason, Message: msg})
}
