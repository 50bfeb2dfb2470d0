package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

// Suspend is SuspendSandbox asked for by a user or a run (no reason).
func (m *Manager) Suspend(ctx context.Context, tenant, id string) error {
	_, _, err := m.SuspendSandbox(ctx, tenant, id, "")
	return err
}

// SuspendSandbox saves a running sandbox's workspace, then deletes its
// guest and its disk: a suspended sandbox holds no CPU, memory, mount,
// loop device or cgroup, only its record and its saved workspace, which
// Wake restores onto a fresh disk (docs/decisions/0034-life-suspend.md).
// why is ReasonTTLExpired or ReasonIdleTimeout for an expiry, "" when
// asked for. The record says suspended, with the workspace's digest,
// before the answer. A save that fails (the store full) leaves the
// sandbox running and says so. Suspending a suspended sandbox changes
// nothing. Without Config.Workspaces the disk is kept instead.
func (m *Manager) SuspendSandbox(ctx context.Context, tenant, id string, why sandbox.Reason) (sandbox.Info, SnapshotInfo, error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return sandbox.Info{}, SnapshotInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.rec.State {
	case sandbox.StateSuspended:
		return b.rec.Info, m.ownSave(b), nil
	case sandbox.StateRunning:
	default:
		return sandbox.Info{}, SnapshotInfo{}, fmt.Errorf("sandbox %s is %s%s, not running: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
	saved, err := m.suspendLocked(ctx, b, why)
	if err != nil {
		return sandbox.Info{}, SnapshotInfo{}, err
	}
	s := m.ownSave(b)
	s.Files, s.Bytes, s.StoredBytes = saved.Files, saved.Bytes, saved.StoredBytes
	return b.rec.Info, s, nil
}

// ownSave describes b's newest saved workspace as an unnamed snapshot.
func (m *Manager) ownSave(b *box) SnapshotInfo {
	return b.rec.saved(b.rec.Workspace)
}

// suspendLocked suspends running b; b.mu is held.
//
// The workspace is saved twice: once while the sandbox runs (after a
// flush), which is where a store that cannot take it is found with the
// sandbox still running, and again once its processes have ended, which
// adds only what changed in between (the first save is the second's
// parent), so nothing written before the suspend is lost. Should that
// second save fail, the disk is kept and Wake boots on it.
func (m *Manager) suspendLocked(ctx context.Context, b *box, why sandbox.Reason) (Saved, error) {
	if m.cfg.Workspaces == nil {
		m.releaseLocked(b)
		b.rec.DiskKept = true
		return Saved{}, m.markSuspended(b, why, "its disk is kept")
	}
	first, err := m.captureLocked(ctx, b)
	if err != nil {
		return Saved{}, err
	}
	b.rec.Workspace = first.Digest
	if b.client != nil {
		// What was written since the first save, flushed before the end.
		if err := b.client.Sync(ctx); err != nil {
			m.log.Warn("flush before the suspend failed", "sandbox", b.rec.ID, "err", err)
		}
	}
	m.haltLocked(b)
	// Once halted the save is finished even if the caller goes: a kept
	// disk is the worse outcome.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), expireTimeout)
	final, err := m.captureUpper(fctx, b)
	cancel()
	l := rootfs.Layout{Dir: b.dir}
	if uerr := rootfs.Unmount(l); uerr != nil {
		m.log.Warn("unmount failed", "sandbox", b.rec.ID, "err", uerr)
	}
	m.detachNetwork(b)
	if err != nil {
		m.log.Warn("the last save of a suspend failed: its disk is kept", "sandbox", b.rec.ID, "err", err)
		b.rec.DiskKept = true
		return first, m.markSuspended(b, why, "its last save failed, so its disk is kept")
	}
	b.rec.Workspace, b.rec.DiskKept = final.Digest, false
	// The record says which workspace before the disk goes.
	if err := m.markSuspended(b, why, ""); err != nil {
		return Saved{}, err
	}
	if err := removeDisk(l); err != nil {
		m.log.Warn("removing a suspended sandbox's disk failed", "sandbox", b.rec.ID, "err", err)
	}
	final.StoredBytes += first.StoredBytes
	return final, nil
}

// markSuspended records b suspended for why, to be deleted with its
// workspace after SuspendedRetention unless extended or resumed, and tells
// the event log; b.mu is held and its compute released.
func (m *Manager) markSuspended(b *box, why sandbox.Reason, note string) error {
	b.rec.SuspendedReason = why
	b.rec.ExpiresAt = time.Now().Add(m.cfg.SuspendedRetention)
	b.warned = time.Time{}
	if err := m.setState(b, sandbox.StateSuspended, "", ""); err != nil {
		return err
	}
	msg := "suspended"
	if why != "" {
		msg += " (" + string(why) + ")"
	}
	if note != "" {
		msg += ": " + note
	}
	m.emit(b, LifecycleEvent{Kind: EventSuspended, Reason: why, Snapshot: b.rec.Workspace, Message: msg})
	m.log.Info("sandbox suspended", "sandbox", b.rec.ID, "reason", why, "workspace", b.rec.Workspace)
	return nil
}

// Wake starts a suspended sandbox again, with the same id, token, image,
// limits, labels, env and network rules, on a fresh disk with its saved
// workspace restored (or on its kept disk). It reports whether the
// sandbox was suspended. A start that fails leaves it suspended.
func (m *Manager) Wake(ctx context.Context, tenant, id string) (bool, error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.State == sandbox.StatePaused {
		if err := m.resumePausedLocked(ctx, b); err != nil {
			return false, err
		}
		return true, nil
	}
	if b.rec.State != sandbox.StateSuspended {
		return false, nil
	}
	img := b.rec.image()
	if restore := b.rec.Workspace != "" && !b.rec.DiskKept && m.cfg.Workspaces != nil; restore {
		// A disk here is what a crash left of an earlier wake's restore:
		// start over on a fresh one.
		l := rootfs.Layout{Dir: b.dir}
		if err := rootfs.Unmount(l); err != nil {
			return false, fmt.Errorf("resuming sandbox %s: %w", id, err)
		}
		if err := removeDisk(l); err != nil {
			return false, fmt.Errorf("resuming sandbox %s: %w", id, err)
		}
	}
	b.activity = time.Now()
	prevExpiry, prevWhy := b.rec.ExpiresAt, b.rec.SuspendedReason
	// A fresh TTL from now; the reason it was suspended goes with the
	// suspension. Both are recorded with the state running.
	b.rec.ExpiresAt, b.rec.SuspendedReason = time.Time{}, ""
	if b.rec.Spec.TTL > 0 {
		b.rec.ExpiresAt = b.activity.Add(b.rec.Spec.TTL)
	}
	if err := m.start(ctx, b, img); err != nil {
		// Still suspended (start records running last): give back what
		// the start took, keep the saved workspace for another try.
		m.releaseLocked(b)
		if b.rec.Workspace != "" && !b.rec.DiskKept && m.cfg.Workspaces != nil {
			removeDisk(rootfs.Layout{Dir: b.dir})
		}
		b.rec.ExpiresAt, b.rec.SuspendedReason = prevExpiry, prevWhy
		if werr := writeRecord(b.dir, &b.rec); werr != nil {
			m.log.Warn("writing record failed", "sandbox", id, "err", werr)
		}
		return false, fmt.Errorf("resuming sandbox %s failed, and it stays suspended (try again): %w", id, err)
	}
	if b.rec.DiskKept {
		b.rec.DiskKept = false
		if err := writeRecord(b.dir, &b.rec); err != nil {
			m.log.Warn("writing record failed", "sandbox", id, "err", err)
		}
	}
	m.rewarmLocked(ctx, b)
	m.emit(b, LifecycleEvent{Kind: EventResumed, Snapshot: b.rec.Workspace, Message: "resumed on a fresh guest"})
	m.log.Info("sandbox resumed", "sandbox", id, "workspace", b.rec.Workspace)
	return true, nil
}

// removeDisk deletes an unmounted sandbox's disk image and the directories
// its mounts used; the record and the rest of its directory stay.
func removeDisk(l rootfs.Layout) error {
	var errs []error
	for _, p := range []string{l.DiskImage(), l.Disk(), l.Rootfs(), l.Run()} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
