package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// MaxFork is the most sandboxes one fork makes.
const MaxFork = 64

// forkParallel bounds the creates of a fork that run at once: each is a
// disk, a mount, a boot and a restore. A boot waits on its executor much
// of its time, so even on two cores ten at once beat four (bench fork:
// 1.35 s against 1.67 s for ten).
const forkParallel = 10

// Fork makes n new sandboxes (1..MaxFork; 0 is 1) of running sandbox id's
// current state: its workspace is saved once (an unnamed snapshot) and
// each new sandbox boots on its image with that workspace restored onto a
// disk of its own, with its own network namespace, executor token and
// gateway token, the source's spec (limits, labels, env, network rules,
// gateway) and origin "fork:ID". The tenant's quota is checked for all n
// first; should any of them fail, the others are removed: all or none.
// The source keeps running. (Memory is not carried: a seam for a
// sandbox.Checkpointer to add it.)
func (m *Manager) Fork(ctx context.Context, tenant, id string, n int) ([]sandbox.Info, error) {
	if n == 0 {
		n = 1
	}
	if n < 1 || n > MaxFork {
		return nil, fmt.Errorf("fork count %d: give 1 to %d: %w", n, MaxFork, errdefs.ErrInvalidArgument)
	}
	b, err := m.lookup(tenant, id)
	if err != nil {
		return nil, err
	}
	owner := b.tenant
	limit, err := m.limit(ctx, owner)
	if err != nil {
		return nil, err
	}
	if err := m.reserve(owner, limit, n, nil); err != nil {
		return nil, err
	}
	defer m.unreserve(owner, n)

	t0 := time.Now()
	b.mu.Lock()
	if err := m.canSave(b, "fork"); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	snap, err := m.saveLocked(ctx, b, "")
	spec := b.rec.Spec
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	tSaved := time.Now()
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Gateway != nil {
		g := *spec.Gateway
		spec.Gateway = &g
	}

	out := make([]sandbox.Info, n)
	errs := make([]error, n)
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rec, _, err := m.create(ctx, owner, spec, createOpts{from: &snap, origin: "fork:" + id, reserved: true})
			out[i], errs[i] = rec.Info, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, info := range out {
			if info.ID != "" {
				if derr := m.Delete(context.WithoutCancel(ctx), "", info.ID); derr != nil {
					m.log.Warn("removing a fork of a failed fork", "sandbox", info.ID, "err", derr)
				}
				out[i] = sandbox.Info{}
			}
		}
		return nil, fmt.Errorf("forking sandbox %s: %w", id, err)
	}
	m.log.Debug("sandbox fork", "sandbox", id, "save", tSaved.Sub(t0), "creates", time.Since(tSaved))
	ids := make([]string, n)
	for i, info := range out {
		ids[i] = info.ID
	}
	b.mu.Lock()
	m.emit(b, LifecycleEvent{Kind: EventForked, Snapshot: snap.Digest, Message: fmt.Sprintf("forked into %d: %s", n, strings.Join(ids, " "))})
	b.mu.Unlock()
	m.log.Info("sandbox forked", "sandbox", id, "count", n, "workspace", snap.Digest)
	return out, nil
}
