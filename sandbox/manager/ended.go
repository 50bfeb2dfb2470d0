package manager

import (
	"context"
	"time"

	"github.com/reinsdev/reins/sandbox"
)

// EndedWait is how long a caller whose call to an executor broke waits for
// the sandbox's death to be recorded before it gives the transport's error:
// the shim writes the exit (and the OOM count) a moment after the
// executor's socket closes.
const EndedWait = 3 * time.Second

// Ended reports whether sandbox id of tenant ("" for any) has stopped,
// waiting up to EndedWait for a death that is on its way to be recorded.
// It is for a caller whose call broke: the record says why.
func (m *Manager) Ended(ctx context.Context, tenant, id string) (sandbox.Info, bool) {
	deadline := time.Now().Add(EndedWait)
	for {
		rec, err := m.Get(ctx, tenant, id)
		if err != nil {
			return rec, false
		}
		if rec.State == sandbox.StateStopped {
			return rec, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return rec, false
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// OOMKills is how many processes the memory limit of sandbox id has killed
// so far, read from its backend now, and the limit.
func (m *Manager) OOMKills(ctx context.Context, tenant, id string) (int, int64, error) {
	rec, err := m.Get(ctx, tenant, id)
	if err != nil {
		return 0, 0, err
	}
	return rec.OOMKills, rec.Spec.Limits.MemoryBytes, nil
}
