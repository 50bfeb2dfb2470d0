// Package gvisor is the default sandbox backend: each sandbox runs under
// gVisor's runsc, a user-space kernel between the sandbox and the host, with
// no network but loopback and the ptrace platform (its KVM platform hangs on
// the hosts reins runs on).
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
	"fmt"
	"os/exec"

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
	_ sandbox.Pauser        = (*Backend)(nil)
)

// Option changes how New sets up the backend.
type Option func(*oci.Config)

// WithBinary runs this runsc binary instead of the one in PATH.
func WithBinary(path string) Option { return func(c *oci.Config) { c.Runtime = path } }

// WithShim starts this binary as each sandbox's shim instead of the
// running program's own; its main must call oci.MaybeRunShim.
func WithShim(path string) Option { return func(c *oci.Config) { c.Shim = path } }

// WithFlags adds runsc global flags (e.g. "--debug", "--debug-log=/tmp/runsc/").
func WithFlags(flags ...string) Option {
	return func(c *oci.Config) { c.GlobalArgs = append(c.GlobalArgs, flags...) }
}

// GlobalFlags are the runsc flags every sandbox runs with: no network but
// loopback (a later egress proxy gives it one), and host unix sockets in
// bind-mounted directories allowed both ways, which is how the service
// reaches the executor.
var GlobalFlags = []string{"--network=none", "--host-uds=all"}

// Host tasks the sentry and gofer need besides those per guest process,
// and host tasks per guest process (ptrace platform: a stub process and
// sentry threads for each). Measured with runsc 20221219: about 40 at rest,
// then 6-9 per guest process; the margin keeps the guest's RLIMIT_NPROC the
// limit that bites, since the sentry crashes when the host refuses it a
// thread.
const (
	sentryTasks   = 256
	tasksPerGuest = 10
)

// New returns a backend that keeps its records and runsc's state under
// stateDir, which must survive restarts of the service.
func New(stateDir string, opts ...Option) (*Backend, error) {
	cfg := oci.Config{Name: "gvisor", StateDir: stateDir, GlobalArgs: append([]string(nil), GlobalFlags...)}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Runtime == "" {
		p, err := exec.LookPath("runsc")
		if err != nil {
			return nil, fmt.Errorf("runsc not found in PATH: install the Debian package runsc: %w", errdefs.ErrFailedPrecondition)
		}
		cfg.Runtime = p
	}
	// runsc keeps a sandbox's state in <root>/<id>_sandbox:<id>.state.
	cfg.StateFiles = func(id string) []string {
		return []string{id + "_sandbox:" + id + ".state", id + "_sandbox:" + id + ".lock"}
	}
	cfg.Adjust = adjust
	rt, err := oci.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Backend{Runtime: rt}, nil
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
