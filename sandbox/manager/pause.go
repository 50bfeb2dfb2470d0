package manager

import (
	"context"
	"fmt"

	"github.com/reinsdev/reins/errdefs"
)

// resumePausedLocked restores a paused sandbox with its memory and
// processes; b.mu is held. (Built with pause; decision 0032.)
func (m *Manager) resumePausedLocked(ctx context.Context, b *box) error {
	return fmt.Errorf("sandbox %s is paused, and this service cannot restore paused sandboxes yet: %w", b.rec.ID, errdefs.ErrUnimplemented)
}
