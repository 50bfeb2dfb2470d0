// Package oci runs sandboxes with an OCI runtime (runc, or gVisor's runsc)
// through its command line. It is the shared body of the runc and gvisor
// backends: they differ only in the binary, its flags and a few spec
// adjustments.
//
// Every sandbox has a record directory under the backend's state dir (see
// state.go) and a shim process (see shim.go) that outlives the service, so
// that a restarted service can report on, kill and delete sandboxes an
// earlier one started. Nothing is kept in memory.
package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	runc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/cgroup"
)

// Config describes one OCI runtime.
type Config struct {
	// Name is the backend's name ("runc", "gvisor").
	Name string
	// Runtime is the path of the runtime binary.
	Runtime string
	// GlobalArgs go before the subcommand, after --root.
	GlobalArgs []string
	// Args, if set, are global args for one sandbox's runtime, after
	// GlobalArgs (a later flag wins): gVisor's --network depends on
	// whether the bundle has a network namespace. They are kept in the
	// sandbox's shim record with GlobalArgs.
	Args func(sandbox.Bundle) []string
	// StateDir holds the records and the runtime's --root. It must be on a
	// disk that outlives the service (not only in its memory).
	StateDir string
	// StateFiles names the entries the runtime keeps in its root for a
	// container, so Delete can tell whether the runtime still knows it.
	StateFiles func(id string) []string
	// Adjust, if set, changes the spec before it is written.
	Adjust func(*specs.Spec, sandbox.Bundle)
	// Stage, if set, prepares what the spec needs on the host (mounts)
	// once the sandbox's record exists, and may change the spec again.
	// Unstage undoes it, in Delete and after a failed Start; it must
	// work from the id alone, in a later process than Stage's.
	Stage   func(*specs.Spec, sandbox.Bundle) error
	Unstage func(id string) error
	// Shim is the binary started as the shim; it must call MaybeRunShim.
	// Empty means this program's own binary.
	Shim string
	// Version names the runtime and how it runs sandboxes, as users are
	// shown it ("runsc 0.0.0-…, platform systrap").
	Version string
}

// startTimeout bounds a Start whose context has no deadline: a runtime
// that hangs must not hang the service.
const startTimeout = 2 * time.Minute

// Runtime is a sandbox.Backend over an OCI runtime.
type Runtime struct {
	cfg     Config
	root    string // the runtime's --root
	records string
	rt      *runc.Runc
}

// New checks cfg and makes the state directories.
func New(cfg Config) (*Runtime, error) {
	if os.Getenv(shimEnv) != "" {
		// This process was started as a shim but its main did not call
		// MaybeRunShim: starting sandboxes from here would recurse.
		return nil, fmt.Errorf("%s backend: this process is a sandbox shim: its main must call oci.MaybeRunShim first: %w", cfg.Name, errdefs.ErrFailedPrecondition)
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("%s backend: state dir %q must be an absolute path: %w", cfg.Name, cfg.StateDir, errdefs.ErrInvalidArgument)
	}
	if cfg.Shim == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%s backend: find own binary for the shim: %w", cfg.Name, err)
		}
		cfg.Shim = exe
	}
	r := &Runtime{
		cfg:     cfg,
		root:    filepath.Join(cfg.StateDir, "runtime"),
		records: filepath.Join(cfg.StateDir, "sandboxes"),
	}
	for _, d := range []string{r.root, r.records} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("%s backend: %w", cfg.Name, err)
		}
	}
	r.rt = &runc.Runc{Command: cfg.Runtime, Root: r.root, ExtraArgs: cfg.GlobalArgs}
	return r, nil
}

// Name is the backend's name.
func (r *Runtime) Name() string { return r.cfg.Name }

// Version names the runtime (Config.Version).
func (r *Runtime) Version() string { return r.cfg.Version }

func (r *Runtime) dir(id string) string { return filepath.Join(r.records, id) }

// Start writes the spec and the shim's config into a new record, starts the
// shim and returns once the shim reports the init's pid. One runtime
// invocation (`run --detach`) is on this path. On failure nothing is left.
func (r *Runtime) Start(ctx context.Context, b sandbox.Bundle) (sandbox.Endpoint, error) {
	// The executor's socket is in a bind-mounted host directory: the
	// host reaches it there.
	ep, err := b.UnixEndpoint()
	if err != nil {
		return sandbox.Endpoint{}, err
	}
	return ep, r.startBundle(ctx, b, "")
}

// startBundle starts b, or restores it from the checkpoint image in
// restore when that is not "".
func (r *Runtime) startBundle(ctx context.Context, b sandbox.Bundle, restore string) error {
	spec, err := Spec(b)
	if err != nil {
		return err
	}
	if r.cfg.Adjust != nil {
		r.cfg.Adjust(spec, b)
	}
	dir := r.dir(b.ID)
	// mkdir is the atomic claim on the id.
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("sandbox %s: %w", b.ID, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("sandbox %s: %w", b.ID, err)
	}
	if err := r.start(ctx, b, dir, spec, restore); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
		defer cancel()
		_ = r.Delete(cctx, b.ID)
		return err
	}
	return nil
}

func (r *Runtime) start(ctx context.Context, b sandbox.Bundle, dir string, spec *specs.Spec, restore string) error {
	if r.cfg.Stage != nil {
		if err := r.cfg.Stage(spec, b); err != nil {
			return err
		}
	}
	if err := writeJSON(recordPath(dir, fileConfig), spec); err != nil {
		return fmt.Errorf("sandbox %s: write spec: %w", b.ID, err)
	}
	logPath := filepath.Join(dir, "init.log")
	if b.Dir != "" {
		logPath = filepath.Join(b.Dir, "init.log")
	}
	args := r.cfg.GlobalArgs
	if r.cfg.Args != nil {
		args = append(slices.Clone(args), r.cfg.Args(b)...)
	}
	sc := shimConfig{
		Version: 1, Runtime: r.cfg.Runtime, Root: r.root, GlobalArgs: args,
		ID: b.ID, Log: logPath, CgroupsPath: spec.Linux.CgroupsPath, Restore: restore,
		Listens: b.Listen != "",
	}
	if err := writeJSON(recordPath(dir, fileShim), sc); err != nil {
		return fmt.Errorf("sandbox %s: write shim config: %w", b.ID, err)
	}
	hs, err := r.launchShim(ctx, b.ID, dir)
	if err != nil {
		return err
	}
	if hs.Error != "" {
		return fmt.Errorf("sandbox %s: %s: %w", b.ID, hs.Error, errdefs.ErrInternal)
	}
	return nil
}

// launchShim starts the shim for the record in dir and reads its handshake.
func (r *Runtime) launchShim(ctx context.Context, id, dir string) (handshake, error) {
	var hs handshake
	hsR, hsW, err := os.Pipe()
	if err != nil {
		return hs, err
	}
	defer hsR.Close()
	shimLog, err := os.OpenFile(recordPath(dir, "shim.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		hsW.Close()
		return hs, err
	}
	defer shimLog.Close()
	cmd := &exec.Cmd{
		Path: r.cfg.Shim,
		Args: []string{"reins-shim", id},
		// Not the service's environment: it may hold secrets.
		Env:        []string{"PATH=" + os.Getenv("PATH"), shimEnv + "=" + dir},
		Dir:        dir,
		Stderr:     shimLog, // a crashing shim's last words
		ExtraFiles: []*os.File{hsW},
		// Its own session and no parent-death signal: the sandbox must
		// outlive this process.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	hsW.Close()
	if err != nil {
		return hs, fmt.Errorf("sandbox %s: start shim %s: %w", id, r.cfg.Shim, err)
	}
	// Reap the shim if it ends while we live; after a restart its new
	// parent does.
	go func() { _ = cmd.Wait() }()
	if ref, err := refOf(cmd.Process.Pid); err == nil {
		_ = writeJSON(recordPath(dir, fileShimRef), ref)
	}

	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(startTimeout)
	}
	_ = hsR.SetReadDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = hsR.SetReadDeadline(time.Now()) })
	defer stop()
	var buf bytes.Buffer
	_, rerr := buf.ReadFrom(hsR)
	if err := json.Unmarshal(buf.Bytes(), &hs); err != nil {
		switch {
		case ctx.Err() != nil:
			return hs, fmt.Errorf("sandbox %s: start: %w", id, ctx.Err())
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			return hs, fmt.Errorf("sandbox %s: %s did not start it within %v: %w", id, r.cfg.Name, startTimeout, errdefs.ErrTimeout)
		}
		return hs, fmt.Errorf("sandbox %s: the shim (%s) did not answer (%v): does its main call oci.MaybeRunShim first?: %w", id, r.cfg.Shim, rerr, errdefs.ErrInternal)
	}
	return hs, nil
}

// Status reports on a sandbox from its record and /proc, without running
// the runtime. ExitCode is -1 when the end is
// unknown: the init never ran, or it and its shim vanished without a record
// (a host reboot, a killed shim), which the caller should call lost.
func (r *Runtime) Status(ctx context.Context, id string) (sandbox.Status, error) {
	if err := ValidID(id); err != nil {
		return sandbox.Status{}, err
	}
	dir := r.dir(id)
	if !exists(dir) {
		return sandbox.Status{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	for {
		st, settled, err := r.status(id, dir)
		if err != nil || settled {
			return st, err
		}
		// The init has ended and the shim is writing its record, or the
		// shim is still starting the init: wait a moment.
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// status reads the record once; settled is false while the shim is between
// two states.
func (r *Runtime) status(id, dir string) (st sandbox.Status, settled bool, err error) {
	// Liveness first, then exit.json: the shim writes exit.json before it
	// ends, so a dead shim and no exit.json means the shim was lost.
	var s started
	startErr := readJSON(recordPath(dir, fileStarted), &s)
	initAlive, shimAlive := startErr == nil && s.Init.alive(), startErr == nil && s.Shim.alive()
	var ex exitRecord
	if err := readJSON(recordPath(dir, fileExit), &ex); err == nil {
		killed := exists(recordPath(dir, fileKilled))
		return sandbox.Status{
			ExitCode: ex.ExitCode,
			OOMKills: ex.OOMKills,
			// The init died of SIGKILL that Kill did not send, while the
			// OOM killer was at work in its group: it is the victim (on
			// gVisor the whole sandbox is one process, the usual victim).
			OOMKilled: ex.Signal == int(syscall.SIGKILL) && ex.OOMKills > 0 && !killed,
		}, true, nil
	} else if !isNotExist(err) {
		return st, true, fmt.Errorf("sandbox %s: %w", id, err)
	}
	switch {
	case startErr != nil && !isNotExist(startErr):
		return st, true, fmt.Errorf("sandbox %s: %w", id, startErr)
	case startErr != nil:
		// Not started yet. Without a live shim it never will be.
		return sandbox.Status{ExitCode: -1}, !r.shimMayRun(dir), nil
	case initAlive:
		n, _ := cgroup.Open(CgroupsPath(id)).OOMKills()
		return sandbox.Status{Running: true, Pid: s.Init.Pid, OOMKills: n}, true, nil
	case shimAlive:
		return st, false, nil // the init ended; the shim is writing exit.json
	default:
		// The init and its shim are gone without a word: the host
		// rebooted or someone killed the shim. The end is unknown.
		return sandbox.Status{ExitCode: -1}, true, nil
	}
}

// shimMayRun reports whether a shim may still be starting a sandbox that
// has neither started.json nor exit.json.
func (r *Runtime) shimMayRun(dir string) bool {
	var shim procRef
	if err := readJSON(recordPath(dir, fileShimRef), &shim); err == nil {
		return shim.alive()
	}
	// Start died before it could note the shim: give the shim a while.
	fi, err := os.Stat(recordPath(dir, fileShim))
	return err == nil && time.Since(fi.ModTime()) < 30*time.Second
}

// Kill sends SIGKILL to the init (on gVisor, the sandbox process), which
// ends every process of the sandbox, and waits until the shim has recorded
// the end.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	dir := r.dir(id)
	if !exists(dir) {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return r.kill(ctx, id, dir)
}

func (r *Runtime) kill(ctx context.Context, id, dir string) error {
	if err := r.waitStarted(ctx, id, dir); err != nil {
		return err
	}
	var s started
	if err := readJSON(recordPath(dir, fileStarted), &s); err != nil {
		return nil // never started: nothing runs
	}
	if exists(recordPath(dir, fileExit)) {
		return nil
	}
	if s.Init.alive() {
		// The mark tells Status this SIGKILL was ours, not the OOM
		// killer's. An init already dead (perhaps of OOM) gets none.
		if err := os.WriteFile(recordPath(dir, fileKilled), nil, 0o600); err != nil {
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
		if err := syscall.Kill(s.Init.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("sandbox %s: kill: %w", id, err)
		}
	}
	for {
		if exists(recordPath(dir, fileExit)) || (!s.Shim.alive() && !s.Init.alive()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s: kill: %w", id, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitStarted waits while a shim is still starting the sandbox (a Start
// given up on, or under way in another process), so that Kill and Delete
// do not miss an init about to appear.
func (r *Runtime) waitStarted(ctx context.Context, id, dir string) error {
	var shim procRef
	if err := readJSON(recordPath(dir, fileShimRef), &shim); err != nil {
		return nil
	}
	for shim.alive() && !exists(recordPath(dir, fileStarted)) && !exists(recordPath(dir, fileExit)) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s: wait for its start: %w", id, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Delete kills the sandbox, has the runtime delete it (which removes its
// cgroup) and removes the record. The init's log in Bundle.Dir stays: it
// belongs to whoever owns that directory.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	dir := r.dir(id)
	if !exists(dir) {
		return nil
	}
	if err := r.kill(ctx, id, dir); err != nil {
		return err
	}
	// The shim ends once it has reaped the runtime's helpers (gVisor's
	// gofer): wait, so that no process of the sandbox outlives Delete.
	var shim procRef
	if err := readJSON(recordPath(dir, fileShimRef), &shim); err == nil {
		for shim.alive() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("sandbox %s: wait for its shim to end: %w", id, ctx.Err())
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	if r.runtimeKnows(id) {
		if err := r.rt.Delete(ctx, id, &runc.DeleteOpts{Force: true}); err != nil && r.runtimeKnows(id) {
			return fmt.Errorf("sandbox %s: %s delete: %w", id, r.cfg.Name, err)
		}
	}
	// The runtime removes the group; after a lost shim or a failed start
	// it may be left, empty.
	if err := cgroup.Open(CgroupsPath(id)).Remove(); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if r.cfg.Unstage != nil {
		if err := r.cfg.Unstage(id); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	return nil
}

func (r *Runtime) runtimeKnows(id string) bool {
	names := []string{id}
	if r.cfg.StateFiles != nil {
		names = r.cfg.StateFiles(id)
	}
	for _, n := range names {
		if exists(filepath.Join(r.root, n)) {
			return true
		}
	}
	return false
}

// Usage reads the sandbox's cgroup.
func (r *Runtime) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	if err := ValidID(id); err != nil {
		return sandbox.Usage{}, err
	}
	if !exists(r.dir(id)) {
		return sandbox.Usage{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	s, err := cgroup.Open(CgroupsPath(id)).Stats()
	if err != nil {
		if isNotExist(err) {
			return sandbox.Usage{}, fmt.Errorf("sandbox %s: no cgroup: %w", id, errdefs.ErrNotFound)
		}
		return sandbox.Usage{}, fmt.Errorf("sandbox %s: usage: %w", id, err)
	}
	return sandbox.Usage{MemoryBytes: s.MemoryBytes, PeakMemoryBytes: s.PeakMemoryBytes, CPUSeconds: s.CPUSeconds, Pids: s.Pids}, nil
}

func (r *Runtime) running(ctx context.Context, id string) error {
	st, err := r.Status(ctx, id)
	if err != nil {
		return err
	}
	if !st.Running {
		return fmt.Errorf("sandbox %s is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	return nil
}
