package manager

import (
	"context"
	"fmt"

	"github.com/reinsdev/reins/errdefs"
)

// resumePausedLocked restores a paused sandbox's memory and processes
// (stubbed until pause is built). b.mu is held.
func (m *Manager) resumePausedLocked(ctx context.Context, b *box) error {
	return fmt.Errorf("sandbox %s is paused and this service cannot resume a paused sandbox yet: %w", b.rec.ID, errdefs.ErrUnimplemented)
}
