package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/reinsdev/reins/sandbox"
)

// EndedWait is how long a caller whose call to an executor broke waits for
// the sandbox's death to be recorded before it gives the transport's error:
// the shim writes the exit (and the OOM count) a moment after the
// executor's socket closes.
const EndedWait = 3 * time.Second

// Ended reports whether sandbox id of tenant ("" for any) has stopped,
// waiting up to wait for a death that is on its way to be recorded. It is
// for a caller whose call broke: the record says why.
func (m *Manager) Ended(ctx context.Context, tenant, id string, wait time.Duration) (Record, bool) {
	deadline := time.Now().Add(wait)
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

// EndedWhy says in words why a stopped sandbox ended, the way a user is told:
// "killed: out of memory (limit 1 GiB)", "sandbox stopped: ttl_expired (its
// TTL of 5s ran out)".
func EndedWhy(r Record) string {
	if r.Reason == sandbox.ReasonOOMKilled {
		return "killed: out of memory (limit " + sandbox.FormatBytes(r.Spec.Limits.MemoryBytes) + ")"
	}
	s := fmt.Sprintf("sandbox stopped: %s", r.Reason)
	if r.Message != "" {
		s += " (" + r.Message + ")"
	}
	return s
}
