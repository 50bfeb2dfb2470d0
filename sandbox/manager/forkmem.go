package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

// memorySource is what a fork with memory restores from (createOpts):
// the source's image, disk and checkpoint, and the token its executor
// holds in the memory restored.
type memorySource struct {
	// restoring is held across each restore from the image: runsc
	// restores of one image at once fail (the second sandbox dies at
	// its start), so they take turns; the rest of each fork is parallel.
	restoring    sync.Mutex
	img          Image
	dir          string // the source's sandbox directory
	token        string
	placeholders map[string]string
}

// ForkMemory makes n new sandboxes (1..MaxFork; 0 is 1) of running
// sandbox id with its memory and processes: the source is paused once
// (its checkpoint, decision 0035), each new sandbox gets a copy of its
// disk, a network namespace of its own with the same rules, and is
// restored from that checkpoint, then given its own executor token
// (rekey) before anything else reaches it; the source is resumed. The
// quota is checked for all n first; all or none. Only a backend that is
// CheckpointCapable can; a sandbox with a model gateway cannot (its
// processes hold its gateway token): Fork carries files only.
func (m *Manager) ForkMemory(ctx context.Context, tenant, id string, n int) ([]sandbox.Info, error) {
	b, n, release, err := m.forkStart(ctx, tenant, id, n)
	if err != nil {
		return nil, err
	}
	defer release()
	owner := b.tenant

	b.mu.Lock()
	defer b.mu.Unlock()
	if err := m.memoryForkable(b); err != nil {
		return nil, err
	}
	if _, err := m.pauseLocked(ctx, b); err != nil {
		return nil, fmt.Errorf("forking sandbox %s with its memory: %w", id, err)
	}
	src := &memorySource{
		img: b.rec.image(),
		dir: b.dir, token: b.rec.Token, placeholders: maps.Clone(b.rec.Placeholders),
	}
	spec := b.rec.Spec
	spec.Labels = maps.Clone(spec.Labels)
	out, err := m.createN(ctx, owner, spec, n, createOpts{memory: src, origin: "fork:" + id, reserved: true})
	resumeErr := m.resumePausedLocked(context.WithoutCancel(ctx), b)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("forking sandbox %s with its memory: %w", id, err), resumeErr)
	}
	ids := make([]string, n)
	for i, info := range out {
		ids[i] = info.ID
	}
	m.emit(b, LifecycleEvent{Kind: EventForked, Message: fmt.Sprintf("forked with its memory into %d: %s", n, strings.Join(ids, " "))})
	m.log.Info("sandbox forked with its memory", "sandbox", id, "count", n)
	if resumeErr != nil {
		return out, fmt.Errorf("sandbox %s forked, but it did not resume: %w", id, resumeErr)
	}
	return out, nil
}

// memoryForkable refuses what ForkMemory cannot do; b.mu is held.
func (m *Manager) memoryForkable(b *box) error {
	id := b.rec.ID
	if b.rec.State != sandbox.StateRunning {
		return fmt.Errorf("sandbox %s is %s%s: only a running sandbox forks with its memory: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
	if !m.CheckpointCapable(b.rec.Spec.Backend) {
		return fmt.Errorf("the %s backend cannot carry a sandbox's memory: fork its files instead (reins sandbox fork %s): %w", b.rec.Spec.Backend, id, errdefs.ErrFailedPrecondition)
	}
	if b.rec.Spec.Gateway != nil {
		return fmt.Errorf("sandbox %s has a model gateway, whose token its processes hold: fork its files instead (reins sandbox fork %s): %w", id, id, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// restoreFork starts new sandbox b from its source's checkpoint on a copy
// of the source's disk, and gives its executor b's own token; b.mu is
// held. The copy is made while the source is paused, so it is the disk
// the memory saw.
func (m *Manager) restoreFork(ctx context.Context, b *box, src *memorySource) error {
	if err := rootfs.CopyDisk(rootfs.Layout{Dir: src.dir}, rootfs.Layout{Dir: b.dir}); err != nil {
		return fmt.Errorf("copying the source's disk: %w", err)
	}
	// The processes restored hold the source's secret placeholders in
	// their environment: the proxy must know them for this sandbox too.
	b.rec.Placeholders = maps.Clone(src.placeholders)
	bundle := m.bundle(b, src.img)
	if err := m.localRoot(ctx, b, src.img, &bundle); err != nil {
		return err
	}
	if err := m.attachNetwork(ctx, b, &bundle); err != nil {
		return err
	}
	src.restoring.Lock()
	ep, err := m.cfg.Backends[b.rec.Spec.Backend].(sandbox.Checkpointer).Restore(ctx, bundle, checkpointDir(src.dir))
	src.restoring.Unlock()
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	old, err := client.WaitReady(rctx, ep.Unix, src.token, m.clientOptions(b)...)
	if err != nil {
		return fmt.Errorf("the restored executor did not answer: %w", err)
	}
	err = old.Rekey(rctx, b.rec.Token)
	old.Close()
	if err != nil {
		return fmt.Errorf("giving the restored executor its own token: %w", err)
	}
	return m.connect(ctx, b, ep)
}
