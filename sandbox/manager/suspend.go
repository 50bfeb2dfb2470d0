package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Suspend releases a running sandbox's compute — its processes end, its
// memory is freed — and keeps its disk, so Wake can start it again on the
// same files. A waiting run costs no CPU or memory this way. (Memory is not
// kept: a gVisor checkpoint can add that later.)
func (m *Manager) Suspend(ctx context.Context, tenant, id string) error {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.rec.State {
	case sandbox.StateSuspended:
		return nil
	case sandbox.StateRunning:
	default:
		return fmt.Errorf("sandbox %s is %s%s, not running: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
	// Release the compute, then record the one step running → suspended:
	// never a stop on the way.
	m.releaseLocked(b)
	if err := m.setState(b, sandbox.StateSuspended, "", ""); err != nil {
		return err
	}
	m.log.Info("sandbox suspended", "sandbox", id)
	return nil
}

// Wake starts a suspended sandbox again, with the same id, on the same disk.
// It reports whether the sandbox was suspended.
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
	img := Image{Digest: b.rec.ImageDigest, Layers: b.rec.Layers, Env: b.rec.ImageEnv, WorkingDir: b.rec.ImageWorkdir}
	b.activity = time.Now()
	if err := m.start(ctx, b, img); err != nil {
		m.stopLocked(b, sandbox.ReasonError, "it could not be started again after a suspend: "+err.Error())
		if cerr := m.cleanup(b, true); cerr != nil {
			m.log.Warn("cleanup failed", "sandbox", id, "err", cerr)
		}
		return false, fmt.Errorf("waking sandbox %s: %w", id, err)
	}
	m.log.Info("sandbox woken", "sandbox", id)
	return true, nil
}
