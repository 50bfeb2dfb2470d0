// Package gvisor is the default sandbox backend: each sandbox runs under
// gVisor's runsc, a user-space kernel between the sandbox and the host, on
// the systrap platform (its KVM platform hangs on the hosts reins runs
// on), with gVisor's own network stack in the network namespace the bundle
// names, or loopback only (GlobalFlags). The runsc is a pinned build of gVisor
// (Version) that `make deps` puts in a cache outside the clone; DefaultRunsc
// says where.
//
// Two things differ from runc, both because the whole sandbox is a few
// host processes (the sentry and its gofer):
//   - Memory: the host OOM killer sees only the sentry, so a sandbox that
//     outgrows its limit dies whole (docs/decisions/0002-oom-detection.md).
//   - Pids: the sentry's own threads count against the host pids cgroup and
//     it crashes when it cannot make one, so the sandbox's pids limit is
//     enforced inside, as RLIMIT_NPROC (which gVisor applies to fork and
//     clone), and the host cgroup gets a looser limit that only guards the
//     host.
//
// Programs that use it must call oci.MaybeRunShim first thing in main.
package gvisor

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/oci"
)

// Backend runs sandboxes with gVisor's runsc.
type Backend struct {
	*oci.Runtime
}

var (
	_ sandbox.Backend       = (*Backend)(nil)
	_ sandbox.UsageReporter = (*Backend)(nil)
	_ sandbox.Versioner     = (*Backend)(nil)
	_ sandbox.Checkpointer  = (*Backend)(nil)
)

// Checkpoint saves the sandbox's memory and processes with runsc
// checkpoint into dir and ends it (oci.Runtime.CheckpointTo).
func (b *Backend) Checkpoint(ctx context.Context, id, dir string) error {
	return b.CheckpointTo(ctx, id, dir)
}

// Restore starts bundle from the image in dir with runsc restore
// (oci.Runtime.RestoreFrom).
func (b *Backend) Restore(ctx context.Context, bundle sandbox.Bundle, dir string) (sandbox.Endpoint, error) {
	return b.RestoreFrom(ctx, bundle, dir)
}

// Option changes how New sets up the backend.
type Option func(*oci.Config)

// Version is the gVisor module version (without the "v") that
// scripts/install-deps.sh builds runsc from, which a test checks.
const Version = "0.0.0-20260905035102-160fafc42237"

// Platform is the runsc platform every sandbox runs on: systrap, runsc's
// default. ptrace is several times slower per syscall and KVM hangs here.
const Platform = "systrap"

// CacheDir is where `make deps` builds runsc, one directory per Version.
const CacheDir = "/var/cache/reins/runsc"

// DefaultRunsc is the runsc binary reins serve, the tests and the benchmarks
// use: $REINS_RUNSC if set, else the pinned build in CacheDir.
func DefaultRunsc() string {
	if p := os.Getenv("REINS_RUNSC"); p != "" {
		return p
	}
	return filepath.Join(CacheDir, Version, "runsc")
}

// WithBinary runs this runsc binary instead of DefaultRunsc.
func WithBinary(path string) Option { return func(c *oci.Config) { c.Runtime = path } }

// WithShim starts this binary as each sandbox's shim instead of the
// running program's own; its main must call oci.MaybeRunShim.
func WithShim(path string) Option { return func(c *oci.Config) { c.Shim = path } }

// WithFlags adds runsc global flags (e.g. "--debug", "--debug-log=/tmp/runsc/").
func WithFlags(flags ...string) Option {
	return func(c *oci.Config) { c.GlobalArgs = append(c.GlobalArgs, flags...) }
}

// GlobalFlags are the runsc flags every sandbox runs with:
//   - no network but loopback, unless the bundle names a network
//     namespace (Bundle.NetNS, made by egress/netns): then
//     --network=sandbox (networkArgs), and gVisor's netstack takes over
//     that namespace's interfaces. A new namespace runsc makes itself
//     has its lo down, so --network=sandbox there would leave the
//     sandbox without even loopback; --network=none gives netstack's own.
//   - host unix sockets in bind-mounted directories allowed both ways,
//     which is how the service reaches the executor;
//   - OVERLAY
//   - each gofer in a new empty network namespace rather than one shared
//     "null" namespace that runsc keeps bind-mounted in its --root: that
//     mount outlives the service and makes the state dir unremovable.
var GlobalFlags = []string{"--platform=" + Platform, "--network=none", "--host-uds=all", "--overlay2=none", "--gofer-network-namespace=new"}

// Host tasks the sentry and gofer need besides those per guest process,
// and host tasks per guest process (systrap platform: a stub thread for
// each guest task, and sentry threads that grow with the runnable ones).
// Measured with runsc 0.0.0-20260905035102 (systrap): 24-31 at rest; 100
// sleeping guest processes took it to 239 (2.1 each), 100 busy ones to 329
// (3.1 each), and the count does not fall back when they end. The margin
// keeps the guest's RLIMIT_NPROC the limit that bites, since the sentry
// crashes when the host refuses it a thread.
const (
	sentryTasks   = 64
	tasksPerGuest = 4
)

// New returns a backend that keeps its records and runsc's state under
// stateDir, which must survive restarts of the service.
func New(stateDir string, opts ...Option) (*Backend, error) {
	cfg := oci.Config{Name: "gvisor", StateDir: stateDir, GlobalArgs: append([]string(nil), GlobalFlags...)}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Runtime == "" {
		cfg.Runtime = DefaultRunsc()
	}
	v, err := runscVersion(cfg.Runtime)
	if err != nil {
		return nil, err
	}
	cfg.Version = "runsc " + v + ", platform " + Platform
	// runsc keeps a sandbox's state in <root>/<id>_sandbox:<id>.state.
	cfg.StateFiles = func(id string) []string {
		return []string{id + "_sandbox:" + id + ".state", id + "_sandbox:" + id + ".lock"}
	}
	cfg.Adjust = adjust
	cfg.Args = networkArgs
	rt, err := oci.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Backend{Runtime: rt}, nil
}

// runscVersion asks the binary its version once. A runsc built without
// the version stamped in (plain `go install`) says VERSION_MISSING; its Go
// build info still names the gVisor module's version.
func runscVersion(path string) (string, error) {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		if _, serr := os.Stat(path); serr != nil {
			return "", fmt.Errorf("runsc %s not found: run `make deps` (as root), which builds gVisor %s there, or give its path (--runsc, REINS_RUNSC): %w", path, Version, errdefs.ErrFailedPrecondition)
		}
		return "", fmt.Errorf("runsc %s --version: %v: %w", path, err, errdefs.ErrFailedPrecondition)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	v, ok := strings.CutPrefix(strings.TrimSpace(first), "runsc version ")
	if !ok {
		return "", fmt.Errorf("runsc %s --version said %q, not \"runsc version ...\": %w", path, first, errdefs.ErrFailedPrecondition)
	}
	if v == "VERSION_MISSING" {
		if bi, err := buildinfo.ReadFile(path); err == nil && bi.Main.Version != "" {
			v = strings.TrimPrefix(bi.Main.Version, "v")
		}
	}
	return v, nil
}

// networkArgs gives a sandbox with a network namespace of its own the
// network in it (see GlobalFlags). runsc moves the namespace's addresses
// into its netstack and reads packets off eth0 with a packet socket.
func networkArgs(b sandbox.Bundle) []string {
	if b.NetNS == "" {
		return nil
	}
	return []string{"--network=sandbox"}
}

// adjust moves the pids limit inside the sandbox (see the package comment).
func adjust(s *specs.Spec, b sandbox.Bundle) {
	n := b.Limits.Pids
	if n <= 0 {
		return
	}
	s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: uint64(n), Soft: uint64(n)})
	s.Linux.Resources.Pids = &specs.LinuxPids{Limit: sentryTasks + tasksPerGuest*n}
}
