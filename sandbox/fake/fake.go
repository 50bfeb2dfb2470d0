// Package fake is a sandbox.Backend for tests only: it runs a bundle's
// Args as a plain host process, with no isolation at all (no namespaces,
// no mounts, no limits; the working directory is Bundle.Rootfs and the
// environment is Bundle.Env), and keeps its state in memory, so it forgets
// everything when the process ends. Never use it for untrusted code.
package fake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Backend runs sandboxes as host processes.
type Backend struct {
	mu        sync.Mutex
	sandboxes map[string]*proc
}

var (
	_ sandbox.Backend = (*Backend)(nil)
	_ sandbox.Waiter  = (*Backend)(nil)
)

type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has ended
	code int           // valid once done is closed
}

// New returns an empty fake backend.
func New() *Backend { return &Backend{sandboxes: make(map[string]*proc)} }

// Name is "fake".
func (f *Backend) Name() string { return "fake" }

// Start runs b.Args in b.Rootfs, its output to b.Dir/init.log.
func (f *Backend) Start(ctx context.Context, b sandbox.Bundle) (sandbox.Endpoint, error) {
	// No mount namespace: a path inside is the host's own.
	return sandbox.Endpoint{Unix: b.Listen}, f.start(b)
}

func (f *Backend) start(b sandbox.Bundle) error {
	if b.ID == "" || len(b.Args) == 0 {
		return fmt.Errorf("sandbox %q: bundle needs an id and args: %w", b.ID, errdefs.ErrInvalidArgument)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[b.ID]; ok {
		return fmt.Errorf("sandbox %s: %w", b.ID, errdefs.ErrAlreadyExists)
	}
	cmd := exec.Command(b.Args[0], b.Args[1:]...)
	cmd.Dir = b.Rootfs
	cmd.Env = b.Env
	// Its own process group, so Kill reaches its children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if b.Dir != "" {
		log, err := os.OpenFile(filepath.Join(b.Dir, "init.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", b.ID, err)
		}
		defer log.Close()
		cmd.Stdout, cmd.Stderr = log, log
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sandbox %s: %w", b.ID, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			ws := ee.Sys().(syscall.WaitStatus)
			p.code = ws.ExitStatus()
			if ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		default:
			p.code = -1
		}
		close(p.done)
	}()
	f.sandboxes[b.ID] = p
	return nil
}

func (f *Backend) get(id string) (*proc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return p, nil
}

// Wait blocks until the process ends, and returns how it ended.
func (f *Backend) Wait(ctx context.Context, id string) (sandbox.Status, error) {
	p, err := f.get(id)
	if err != nil {
		return sandbox.Status{}, err
	}
	select {
	case <-p.done:
		return p.status(), nil
	case <-ctx.Done():
		return sandbox.Status{}, ctx.Err()
	}
}

// status is how p is, or how it ended.
func (p *proc) status() sandbox.Status {
	select {
	case <-p.done:
		return sandbox.Status{ExitCode: p.code}
	default:
		return sandbox.Status{Running: true, Pid: p.cmd.Process.Pid}
	}
}

// Status reports whether the process runs, or how it ended.
func (f *Backend) Status(ctx context.Context, id string) (sandbox.Status, error) {
	p, err := f.get(id)
	if err != nil {
		return sandbox.Status{}, err
	}
	return p.status(), nil
}

// Kill sends SIGKILL to the process group and waits for the end.
func (f *Backend) Kill(ctx context.Context, id string) error {
	p, err := f.get(id)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox %s: kill: %w", id, ctx.Err())
	}
}

// Delete kills the process and forgets it.
func (f *Backend) Delete(ctx context.Context, id string) error {
	if _, err := f.get(id); errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err := f.Kill(ctx, id); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.sandboxes, id)
	f.mu.Unlock()
	return nil
}
