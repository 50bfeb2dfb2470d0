package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	runc "github.com/containerd/go-runc"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Memory checkpoints, for runtimes that can (gVisor's runsc; the gvisor
// backend exposes them as sandbox.Checkpointer). They are not methods
// named after the interface so that backends embedding a Runtime that
// cannot (runc) do not become Checkpointers by accident.
//
// A checkpoint freezes the sandbox first (`pause`), then saves it with
// --leave-running: runsc leaves a frozen sandbox frozen after a save, so
// nothing in it runs past the image (a write to its disk after the save
// would not match the memory restored later), and a save that fails
// (a full host disk, a socket gVisor cannot save) leaves it frozen and
// whole rather than killed, as runsc does without the flag. On success the
// sandbox is deleted; on failure it is resumed and its init told to listen
// again (sandbox.RelistenSignal).

// CheckpointTo saves sandbox id's memory and processes into dir (made
// 0700 if missing) and deletes the sandbox; on failure the sandbox runs on
// and the error says why in words fit for its owner (the runtime's own
// words, which may name host paths, go to the log in dir's parent).
func (r *Runtime) CheckpointTo(ctx context.Context, id, dir string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, checkpointTimeout)
		defer cancel()
	}
	if err := r.running(ctx, id); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox %s: checkpoint directory: %w", id, err)
	}
	rt, listens := r.runtimeOf(id)
	if err := rt.Pause(ctx, id); err != nil {
		return fmt.Errorf("sandbox %s: %s pause: %s: %w", id, r.cfg.Name, checkpointWords(err.Error()), errdefs.ErrInternal)
	}
	err := rt.Checkpoint(ctx, id, &runc.CheckpointOpts{ImagePath: dir}, runc.LeaveRunning)
	if err != nil {
		// Not ctx: it may be what ended the checkpoint.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
		defer cancel()
		if rerr := rt.Resume(rctx, id); rerr != nil {
			return fmt.Errorf("sandbox %s: the checkpoint failed (%v) and the sandbox could not be resumed: %s: %w", id, checkpointWords(err.Error()), checkpointWords(rerr.Error()), errdefs.ErrInternal)
		}
		if listens {
			r.relisten(rctx, rt, id)
		}
		return checkpointError(id, err)
	}
	// The image is whole: the frozen sandbox goes whatever became of
	// ctx (a caller gone now would leave it frozen and its image thrown
	// away as a failed pause).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	return r.Delete(dctx, id)
}

// RestoreFrom starts the sandbox b from the checkpoint image in dir, its
// processes going on where they were saved, and tells its init to listen
// again; it returns where its executor is reached, as Start does.
func (r *Runtime) RestoreFrom(ctx context.Context, b sandbox.Bundle, dir string) (sandbox.Endpoint, error) {
	ep, err := b.UnixEndpoint()
	if err != nil {
		return sandbox.Endpoint{}, err
	}
	if _, err := os.Stat(dir); err != nil {
		return sandbox.Endpoint{}, fmt.Errorf("sandbox %s: no checkpoint image: %w: %w", b.ID, err, errdefs.ErrNotFound)
	}
	if err := r.startBundle(ctx, b, dir); err != nil {
		return sandbox.Endpoint{}, err
	}
	if rt, listens := r.runtimeOf(b.ID); listens {
		r.relisten(ctx, rt, b.ID)
	}
	return ep, nil
}

// relisten sends the init sandbox.RelistenSignal; an init that misses it
// listens again by itself a little later (executor.RelistenAfter).
func (r *Runtime) relisten(ctx context.Context, rt *runc.Runc, id string) {
	_ = rt.Kill(ctx, id, int(sandbox.RelistenSignal), nil)
}

// runtimeOf is the runtime invoked with the global arguments sandbox id was
// started with (its network mode among them), from its shim record, and
// whether its init listens (shimConfig.Listens).
func (r *Runtime) runtimeOf(id string) (*runc.Runc, bool) {
	var sc shimConfig
	if err := readJSON(recordPath(r.dir(id), fileShim), &sc); err != nil || sc.Runtime == "" {
		return r.rt, false
	}
	return &runc.Runc{Command: r.rt.Command, Root: r.root, ExtraArgs: sc.GlobalArgs}, sc.Listens
}

// checkpointError turns the runtime's refusal into words for the
// sandbox's owner. The sandbox runs on in every case.
func checkpointError(id string, err error) error {
	// runsc says why in its output alone (go-runc puts its stderr in the
	// error's text); there is no kind to match.
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.ENOSPC) || strings.Contains(msg, "no space left on device"):
		return errdefs.WithMessage(errdefs.ErrNoSpace, fmt.Sprintf(
			"sandbox %s: the host has no room left for its memory image; it keeps running: free space on the service's disk, or suspend it instead (workspace only)", id))
	case strings.Contains(msg, "bound host socket") || strings.Contains(msg, "host socket") || strings.Contains(msg, "host FD"):
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"sandbox %s: a process in it holds a socket connected outside the sandbox (on its control socket), which gVisor cannot save; it keeps running: end that process and pause again, or suspend it instead", id))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Errorf("sandbox %s: the checkpoint was given up (%v); it keeps running: %w", id, err, errdefs.ErrTimeout)
	}
	return errdefs.WithMessage(errdefs.ErrInternal, fmt.Sprintf(
		"sandbox %s: gVisor could not save its memory (%s); it keeps running: suspend it instead (workspace only)", id, checkpointWords(msg)))
}

// checkpointWords is the first line of the runtime's complaint, without
// the stack trace runsc adds, and without what looks like a host path.
func checkpointWords(said string) string {
	first, _, _ := strings.Cut(said, "\n")
	var out []string
	for _, w := range strings.Fields(first) {
		if strings.Contains(w, "/") {
			w = "…"
		}
		out = append(out, w)
	}
	s := strings.Join(out, " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// checkpointTimeout bounds a checkpoint whose context has no deadline:
// writing a sandbox's whole memory to the host's disk.
const checkpointTimeout = 5 * time.Minute
