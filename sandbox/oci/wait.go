package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

var _ sandbox.Waiter = (*Runtime)(nil)

// Wait blocks until the sandbox's init ends, then returns its final
// status (what Status says once the shim has recorded the end). It holds a
// pidfd of the init: the kernel wakes it when the process exits, with no
// polling of /proc. It works for a sandbox an earlier process of the
// service started.
func (r *Runtime) Wait(ctx context.Context, id string) (sandbox.Status, error) {
	if err := ValidID(id); err != nil {
		return sandbox.Status{}, err
	}
	dir := r.dir(id)
	if !exists(dir) {
		return sandbox.Status{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err := r.waitStarted(ctx, id, dir); err != nil {
		return sandbox.Status{}, err
	}
	var s started
	if err := readJSON(recordPath(dir, fileStarted), &s); err == nil {
		if err := waitExit(ctx, s.Init); err != nil {
			return sandbox.Status{}, fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	return r.Status(ctx, id)
}

// waitExit returns when the process p names has ended (at once if it
// already has, or if its pid now names another process).
func waitExit(ctx context.Context, p procRef) error {
	fd, err := unix.PidfdOpen(p.Pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	// The pid may have been reused before we opened it: the descriptor
	// then names another process, and ours is gone.
	if !p.alive() {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Now()) })
	defer stop()
	// Read's function runs when the runtime's poller says the descriptor
	// is readable, which a pidfd is once its process has exited.
	err = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, 0)
		return n > 0
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
