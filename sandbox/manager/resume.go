package manager

import (
	"context"
	"fmt"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Resume brings a suspended sandbox back on a fresh guest, or a paused one
// with its memory and processes (decision 0032). A running sandbox is
// refused: there is nothing to resume.
func (m *Manager) Resume(ctx context.Context, tenant, id string) (sandbox.Info, error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	b.mu.Lock()
	state := b.rec.State
	b.mu.Unlock()
	switch state {
	case sandbox.StateSuspended, sandbox.StatePaused:
		if _, err := m.Wake(ctx, tenant, id); err != nil {
			return sandbox.Info{}, err
		}
		return m.Get(ctx, tenant, id)
	case sandbox.StateRunning:
		return sandbox.Info{}, fmt.Errorf("sandbox %s is running: there is nothing to resume (resume is for a suspended or paused sandbox): %w", id, errdefs.ErrFailedPrecondition)
	default:
		b.mu.Lock()
		defer b.mu.Unlock()
		return sandbox.Info{}, fmt.Errorf("sandbox %s is %s%s: only a suspended or paused sandbox resumes: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
}
