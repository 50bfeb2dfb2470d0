package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// MaxTTL is the longest expiry Extend sets: far past any sandbox's use,
// short of a deadline that overflows.
const MaxTTL = 365 * 24 * time.Hour

// Extend sets a running or suspended sandbox's expiry to ttl from now,
// sooner or later than it was (E2B's set_timeout); its TTL becomes ttl,
// so that the reason it expires for says so. The record is written before
// the answer.
func (m *Manager) Extend(ctx context.Context, tenant, id string, ttl time.Duration) (sandbox.Info, error) {
	if ttl < time.Second || ttl > MaxTTL {
		return sandbox.Info{}, fmt.Errorf("ttl %s: give one from 1s to %s, counted from now: %w", ttl, MaxTTL, errdefs.ErrInvalidArgument)
	}
	b, err := m.lookup(tenant, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.State != sandbox.StateRunning && b.rec.State != sandbox.StateSuspended {
		return sandbox.Info{}, fmt.Errorf("sandbox %s is %s%s: only a running or suspended sandbox's expiry can change; make a new one: %w",
			id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
	prev, prevTTL := b.rec.ExpiresAt, b.rec.Spec.TTL
	b.rec.ExpiresAt, b.rec.Spec.TTL = time.Now().Add(ttl), ttl
	if err := writeRecord(b.dir, &b.rec); err != nil {
		b.rec.ExpiresAt, b.rec.Spec.TTL = prev, prevTTL
		return sandbox.Info{}, err
	}
	m.log.Info("sandbox expiry changed", "sandbox", id, "ttl", ttl)
	return b.rec.Info, nil
}
