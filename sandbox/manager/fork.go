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

// forkStart checks a fork of n (0 is 1) of sandbox id and holds places
// for n sandboxes in its tenant's quota until release.
func (m *Manager) forkStart(ctx context.Context, tenant, id string, n int) (b *box, count int, release func(), err error) {
	if n == 0 {
		n = 1
	}
	if n < 1 || n > MaxFork {
		return nil, 0, nil, fmt.Errorf("fork count %d: give 1 to %d: %w", n, MaxFork, errdefs.ErrInvalidArgument)
	}
	if b, err = m.lookup(tenant, id); err != nil {
		return nil, 0, nil, err
	}
	limit, err := m.limit(ctx, b.tenant)
	if err != nil {
		return nil, 0, nil, err
	}
	if err := m.reserve(b.tenant, limit, n, nil); err != nil {
		return nil, 0, nil, err
	}
	return b, n, func() { m.unreserve(b.tenant, n) }, nil
}

// createN makes n sandboxes of owner with spec and o at once (at most
// forkParallel at a time); should any fail, the others are removed: all
// or none.
func (m *Manager) createN(ctx context.Context, owner string, spec sandbox.Spec, n int, o createOpts) ([]sandbox.Info, error) {
	out := make([]sandbox.Info, n)
	errs := make([]error, n)
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rec, _, err := m.create(ctx, owner, spec, o)
			out[i], errs[i] = rec.Info, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, info := range out {
			if info.ID != "" {
				if derr := m.Delete(context.WithoutCancel(ctx), "", info.ID); derr != nil {
					m.log.Warn("removing a fork of a failed fork", "sandbox", info.ID, "err", derr)
				}
			}
		}
		return nil, err
	}
	return out, nil
}

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
// The source keeps running. (Memory is not carried: ForkMemory carries
// it, on a backend that is a sandbox.Checkpointer.)
func (m *Manager) Fork(ctx context.Context, tenant, id string, n int) ([]sandbox.Info, error) {
	b, n, release, err := m.forkStart(ctx, tenant, id, n)
	if err != nil {
		return nil, err
	}
	defer release()
	owner := b.tenant

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

	out, err := m.createN(ctx, owner, spec, n, createOpts{from: &snap, origin: "fork:" + id, reserved: true})
	if err != nil {
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
