package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/internal/jsonfile"
	"github.com/reinsdev/reins/sandbox"
)

// Pause keeps a sandbox's memory and processes (decision 0035): on a
// backend that is a sandbox.Checkpointer (gvisor) the executor lets go of
// its host socket, the backend saves the sandbox into DIR/checkpoint
// (host-only, 0700, in no mount of any sandbox) and ends it, and the
// sandbox's compute is released as a suspend releases it (no runtime
// state, no cgroup, the disk unmounted and its loop device gone, the
// network namespace removed) while its disk.img and the image stay.
// DIR/checkpoint.json records a complete image, so that a service that
// dies between the save and the paused record still finds the sandbox
// paused. Resume (resumePausedLocked) mounts the same disk again, attaches
// the network with the same rules (a new namespace: gVisor's listening
// sockets live in its own network stack and survive that), restores, and
// reaches the executor with the same token.
const (
	checkpointName   = "checkpoint"
	checkpointRecord = "checkpoint.json"
)

// checkpointInfo is DIR/checkpoint.json.
type checkpointInfo struct {
	Version int   `json:"version"`
	Bytes   int64 `json:"bytes"`
}

func checkpointDir(dir string) string { return filepath.Join(dir, checkpointName) }

// CheckpointCapable reports whether sandboxes of backend can be paused with
// their memory, and restored into new sandboxes (ForkMemory).
func (m *Manager) CheckpointCapable(backend string) bool {
	if backend == "" {
		backend = m.cfg.DefaultBackend
	}
	b := m.cfg.Backends[backend]
	_, cp := b.(sandbox.Checkpointer)
	_, remote := b.(sandbox.RootMaker)
	return cp && !remote
}

// Pause saves a running sandbox's memory and processes and releases its
// compute (state paused); Resume continues them. On a backend that cannot
// (runc) it refuses, or with orSuspend suspends the sandbox instead and
// says so (suspendedInstead). memoryBytes is the size of the saved image.
// The sandbox is recorded paused before Pause answers; when the save
// fails the sandbox runs on and the error says why.
func (m *Manager) Pause(ctx context.Context, tenant, id string, orSuspend bool) (info sandbox.Info, suspendedInstead bool, memoryBytes int64, err error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return sandbox.Info{}, false, 0, err
	}
	b.mu.Lock()
	backendName := b.rec.Spec.Backend
	if err := pausable(b); err != nil {
		b.mu.Unlock()
		return sandbox.Info{}, false, 0, err
	}
	if !m.CheckpointCapable(backendName) {
		b.mu.Unlock()
		if !orSuspend {
			return sandbox.Info{}, false, 0, fmt.Errorf("the %s backend cannot keep a sandbox's memory: suspend it instead (reins sandbox suspend %s) or pass --or-suspend: %w",
				backendName, id, errdefs.ErrFailedPrecondition)
		}
		if err := m.Suspend(ctx, tenant, id); err != nil {
			return sandbox.Info{}, false, 0, err
		}
		info, err := m.Get(ctx, tenant, id)
		return info, true, 0, err
	}
	defer b.mu.Unlock()
	n, err := m.pauseLocked(ctx, b)
	if err != nil {
		return sandbox.Info{}, false, 0, err
	}
	m.log.Info("sandbox paused", "sandbox", id, "memory_image_bytes", n)
	return b.rec.Info, false, n, nil
}

// pausable refuses what cannot be paused, saying what to do; b.mu is held.
func pausable(b *box) error {
	id := b.rec.ID
	switch b.rec.State {
	case sandbox.StateRunning:
		return nil
	case sandbox.StatePaused:
		return fmt.Errorf("sandbox %s is already paused: resume it (reins sandbox resume %s): %w", id, id, errdefs.ErrFailedPrecondition)
	case sandbox.StateSuspended:
		return fmt.Errorf("sandbox %s is suspended: it has no memory left to keep; resume it first (reins sandbox resume %s): %w", id, id, errdefs.ErrFailedPrecondition)
	case sandbox.StateCreating:
		return fmt.Errorf("sandbox %s is still being created: pause it once it runs: %w", id, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("sandbox %s is %s%s: only a running sandbox can be paused: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
}

// pauseProgress is what Get answers while a sandbox's memory is being
// saved: its record as the pause began, with MemoryBytes the bytes of the
// image written so far (the CLI shows them).
type pauseProgress struct {
	info sandbox.Info
	dir  string
}

func (p *pauseProgress) now() sandbox.Info {
	info := p.info
	info.MemoryBytes = uint64(dirBytes(p.dir))
	return info
}

// pauseLocked checkpoints b and releases its compute; b.mu is held.
func (m *Manager) pauseLocked(ctx context.Context, b *box) (int64, error) {
	b.pausing.Store(&pauseProgress{info: b.rec.Info, dir: checkpointDir(b.dir)})
	defer b.pausing.Store(nil)
	if err := m.checkpointLocked(ctx, b); err != nil {
		return 0, err
	}
	n := dirBytes(checkpointDir(b.dir))
	if err := jsonfile.Write(filepath.Join(b.dir, checkpointRecord), checkpointInfo{Version: 1, Bytes: n}); err != nil {
		m.log.Warn("recording the checkpoint failed", "sandbox", b.rec.ID, "err", err)
	}
	m.releaseLocked(b)
	b.rec.Pid, b.rec.PidStart = 0, 0
	b.rec.PausedMemoryBytes = n
	// Kept as long as a suspended sandbox is (then deleted with the
	// reason, unless extended or resumed); the TTL starts again at the
	// resume.
	b.rec.ExpiresAt = time.Time{}
	if m.cfg.SuspendedRetention > 0 {
		b.rec.ExpiresAt = time.Now().Add(m.cfg.SuspendedRetention)
	}
	b.warned = time.Time{}
	if err := m.setState(b, sandbox.StatePaused, "", ""); err != nil {
		return 0, err
	}
	m.emit(b, LifecycleEvent{Kind: EventPaused, Message: "paused with its memory (" + sandbox.FormatBytes(n) + " image)"})
	return n, nil
}

// checkpointLocked saves b's memory into DIR/checkpoint, which ends its
// guest; on failure b runs on and is reached again. b.mu is held.
func (m *Manager) checkpointLocked(ctx context.Context, b *box) error {
	cp := m.cfg.Backends[b.rec.Spec.Backend].(sandbox.Checkpointer)
	dir := checkpointDir(b.dir)
	os.RemoveAll(dir)
	os.Remove(filepath.Join(b.dir, checkpointRecord))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox %s: making its checkpoint directory: %w", b.rec.ID, err)
	}
	ex := b.client
	if ex == nil {
		return fmt.Errorf("sandbox %s: no connection to its executor: %w", b.rec.ID, errdefs.ErrUnavailable)
	}
	// What the sandbox wrote, on its disk before the image is taken
	// (the disk is what the restore mounts again).
	if err := ex.Sync(ctx); err != nil {
		m.log.Warn("flush before the pause failed", "sandbox", b.rec.ID, "err", err)
	}
	m.stopGateway(b)
	if err := ex.ReleaseHost(ctx); err != nil {
		os.RemoveAll(dir)
		m.serveGateway(b)
		return fmt.Errorf("sandbox %s: its executor did not get ready for the checkpoint: %w", b.rec.ID, err)
	}
	ex.Close()
	b.client = nil
	t0 := time.Now()
	err := cp.Checkpoint(ctx, b.rec.ID, dir)
	if err != nil {
		os.RemoveAll(dir)
		// The backend told the executor to listen again.
		if rerr := m.reconnect(ctx, b); rerr != nil {
			m.log.Warn("executor unreachable after a failed checkpoint", "sandbox", b.rec.ID, "err", rerr)
		}
		return err
	}
	m.log.Debug("sandbox checkpoint", "sandbox", b.rec.ID, "took", time.Since(t0))
	return nil
}

// reconnect reaches b's executor again after it listened anew; b.mu is
// held.
func (m *Manager) reconnect(ctx context.Context, b *box) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ReadyTimeout)
	defer cancel()
	ex, err := client.WaitReady(rctx, b.endpoint(), b.rec.Token, m.clientOptions(b)...)
	if err != nil {
		return err
	}
	b.client = ex
	m.serveGateway(b)
	return nil
}

// resumePausedLocked restores a paused sandbox's memory and processes on
// its own disk; b.mu is held. When the restore fails the sandbox stays
// paused, with its image, and the error says so.
func (m *Manager) resumePausedLocked(ctx context.Context, b *box) error {
	id := b.rec.ID
	if !m.CheckpointCapable(b.rec.Spec.Backend) {
		return fmt.Errorf("sandbox %s is paused on backend %q, which this service no longer runs with memory: %w", id, b.rec.Spec.Backend, errdefs.ErrFailedPrecondition)
	}
	dir := checkpointDir(b.dir)
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return fmt.Errorf("sandbox %s is paused but its memory image is gone: remove it (reins sandbox rm %s): %w", id, id, errdefs.ErrFailedPrecondition)
	}
	b.activity = time.Now()
	prevExpiry := b.rec.ExpiresAt
	b.rec.ExpiresAt = time.Time{}
	if b.rec.Spec.TTL > 0 {
		b.rec.ExpiresAt = b.activity.Add(b.rec.Spec.TTL)
	}
	if err := m.restoreLocked(ctx, b, dir); err != nil {
		m.releaseLocked(b)
		b.rec.ExpiresAt = prevExpiry
		if werr := writeRecord(b.dir, &b.rec); werr != nil {
			m.log.Warn("writing record failed", "sandbox", id, "err", werr)
		}
		return fmt.Errorf("resuming sandbox %s: %w; it stays paused: try again, or remove it (reins sandbox rm %s)", id, err, id)
	}
	os.RemoveAll(dir)
	os.Remove(filepath.Join(b.dir, checkpointRecord))
	m.emit(b, LifecycleEvent{Kind: EventResumed, Message: "resumed from its pause, memory and processes as they were"})
	b.rec.PausedMemoryBytes = 0
	if err := writeRecord(b.dir, &b.rec); err != nil {
		m.log.Warn("writing record failed", "sandbox", id, "err", err)
	}
	m.log.Info("sandbox resumed from its pause", "sandbox", id)
	return nil
}

// restoreLocked starts b's guest from the image in dir on b's own disk,
// with b's network and token: its root filesystem, network, the backend's
// restore, and the executor's answer. b.mu is held.
func (m *Manager) restoreLocked(ctx context.Context, b *box, dir string) error {
	img := b.rec.image()
	bundle := m.bundle(b, img)
	if err := m.localRoot(ctx, b, img, &bundle); err != nil {
		return err
	}
	if err := m.attachNetwork(ctx, b, &bundle); err != nil {
		return err
	}
	t0 := time.Now()
	ep, err := m.cfg.Backends[b.rec.Spec.Backend].(sandbox.Checkpointer).Restore(ctx, bundle, dir)
	if err != nil {
		return err
	}
	m.log.Debug("sandbox restore", "sandbox", b.rec.ID, "took", time.Since(t0))
	return m.connect(ctx, b, ep)
}

// recoverPaused decides, for a sandbox recorded running whose guest is
// gone, whether it was paused by a service that died before recording it:
// a complete image is there. b.mu is held.
func (m *Manager) recoverPaused(b *box) bool {
	var ci checkpointInfo
	if err := readJSONFile(filepath.Join(b.dir, checkpointRecord), &ci); err != nil || ci.Version != 1 {
		return false
	}
	if _, err := os.Stat(filepath.Join(checkpointDir(b.dir), "checkpoint.img")); err != nil {
		return false
	}
	m.releaseLocked(b)
	b.rec.Pid, b.rec.PidStart = 0, 0
	b.rec.PausedMemoryBytes = ci.Bytes
	if err := m.setState(b, sandbox.StatePaused, "", ""); err != nil {
		m.log.Warn("recording the pause failed", "sandbox", b.rec.ID, "err", err)
		return false
	}
	m.log.Info("sandbox found paused after a restart", "sandbox", b.rec.ID)
	return true
}

// dirBytes is the size of the regular files in dir (not following links).
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func readJSONFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(data) > 1<<20 {
		return errors.New("too large")
	}
	return json.Unmarshal(data, v)
}
