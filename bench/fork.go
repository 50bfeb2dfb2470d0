package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/workspace"
)

// fork: Fork ×n of a running busybox sandbox holding 16 files of 64 KiB
// (one save of its workspace, then n sandboxes booted on it, each with
// its own disk from the pool, its own restore), beside n creates of
// busybox by the same manager with the same parallelism (the same boots
// without the save and the restores), round by round. The manager keeps
// n+2 disks ready, as a service that forks would.
// forkBound is manager.Fork's parallelism (forkParallel), which the
// creates of the baseline share.
const forkBound = 10

func (b *bench) fork(n, rounds int) error {
	ws, err := workspace.Open(filepath.Join(b.dir, "forkws"))
	if err != nil {
		return err
	}
	m, err := manager.New(manager.Config{
		Dir: filepath.Join(b.dir, "forksb"), ExecutorPath: b.executor,
		Backends: map[string]sandbox.Backend{"gvisor": b.gv}, DefaultBackend: "gvisor",
		Images: manager.ImageStore(b.images), CheckInterval: time.Hour, DiskPool: n + 2,
		Workspaces: manager.WorkspaceStore(ws), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer m.Close()
	src, err := m.Create(b.ctx, "", sandbox.Spec{Image: "busybox"}, nil)
	if err != nil {
		return err
	}
	defer m.Delete(b.ctx, "", src.ID)
	ex, err := m.Client(b.ctx, "", src.ID)
	if err != nil {
		return err
	}
	if _, _, _, err := ex.Run(b.ctx, "sh", "-c", "for i in $(seq 16); do head -c 65536 /dev/urandom > /workspace/f$i; done"); err != nil {
		return err
	}
	removeAll := func(infos []sandbox.Info) {
		for _, info := range infos {
			m.Delete(b.ctx, "", info.ID)
		}
	}
	var forks, creates []time.Duration
	for range rounds {
		time.Sleep(2 * time.Second) // the pool refills
		t0 := time.Now()
		infos, err := m.Fork(b.ctx, "", src.ID, n)
		if err != nil {
			return err
		}
		forks = append(forks, time.Since(t0))
		removeAll(infos)

		time.Sleep(2 * time.Second)
		t0 = time.Now()
		made := make([]sandbox.Info, n)
		errs := make([]error, n)
		sem := make(chan struct{}, forkBound) // Fork's own bound
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				made[i], errs[i] = m.Create(b.ctx, "", sandbox.Spec{Image: "busybox"}, nil)
			})
		}
		wg.Wait()
		creates = append(creates, time.Since(t0))
		removeAll(made)
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
	f, c := pct(forks, 50), pct(creates, 50)
	b.add(fmt.Sprintf("fork ×%d of a running sandbox (1 MiB workspace), total, p50 of %d", n, rounds), ms(f),
		fmt.Sprintf("%s (%d creates of busybox, %d at a time)", ms(c), n, forkBound), float64(f)/float64(c), "≤ 1 s")
	return nil
}
