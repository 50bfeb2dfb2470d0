// Package runc is the sandbox backend that runs sandboxes as runc
// containers: Linux namespaces and cgroups on the host kernel. It is faster
// to start than gvisor and isolates less (the host kernel is the boundary);
// choose it for trusted images or when gVisor cannot run a workload.
//
// Because the host kernel is the boundary, a runc sandbox is hardened at
// least as Docker hardens a container by default (docs/backends.md):
//   - a user namespace: sandbox root is host uid 1879048192 (oci.SandboxIDs),
//     with the rootfs and writable bind mounts idmapped so that the disk
//     keeps the image's ownership (oci.UserNS);
//   - Docker's seccomp profile, stricter (oci.Seccomp): no namespaces,
//     mounts, keyrings, bpf, perf, io_uring, userfaultfd, vsock;
//   - Docker's masked and read-only /proc and /sys paths, Docker's
//     capabilities less CAP_NET_RAW, no_new_privileges (oci.Spec);
//   - a network namespace the service made (Bundle.NetNS, from
//     egress/netns), owned by the host's user namespace, so root inside
//     has no CAP_NET_ADMIN over it; its /sys is a sysfs the service
//     mounts from inside that namespace (oci.UserNS.Stage), since the
//     sandbox may not mount one there.
//
// Programs that use it must call oci.MaybeRunShim first thing in main.
package runc

import (
	"fmt"
	"os/exec"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/oci"
)

// Backend runs sandboxes with runc.
type Backend struct {
	*oci.Runtime
}

var (
	_ sandbox.Backend       = (*Backend)(nil)
	_ sandbox.UsageReporter = (*Backend)(nil)
	_ sandbox.Versioner     = (*Backend)(nil)
)

// Option changes how New sets up the backend.
type Option func(*oci.Config)

// WithBinary runs this runc binary instead of the one in PATH.
func WithBinary(path string) Option { return func(c *oci.Config) { c.Runtime = path } }

// WithShim starts this binary as each sandbox's shim instead of the
// running program's own; its main must call oci.MaybeRunShim.
func WithShim(path string) Option { return func(c *oci.Config) { c.Shim = path } }

// New returns a backend that keeps its records and runc's state under
// stateDir, which must survive restarts of the service.
func New(stateDir string, opts ...Option) (*Backend, error) {
	cfg := oci.Config{Name: "runc", StateDir: stateDir}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Runtime == "" {
		p, err := exec.LookPath("runc")
		if err != nil {
			return nil, fmt.Errorf("runc not found in PATH: install the Debian package runc: %w", errdefs.ErrFailedPrecondition)
		}
		cfg.Runtime = p
	}
	// "runc version 1.1.5+ds1\ncommit: …": the first line names it.
	if out, err := exec.Command(cfg.Runtime, "--version").Output(); err == nil {
		first, _, _ := strings.Cut(string(out), "\n")
		cfg.Version = strings.Replace(strings.TrimSpace(first), " version ", " ", 1)
	}
	// runc keeps a container's state in <root>/<id>/.
	cfg.StateFiles = func(id string) []string { return []string{id} }
	userns := oci.NewUserNS(stateDir, oci.SandboxIDs)
	cfg.Adjust = func(s *specs.Spec, _ sandbox.Bundle) {
		s.Linux.Seccomp = oci.Seccomp()
		userns.Adjust(s)
	}
	cfg.Stage, cfg.Unstage = userns.Stage, userns.Unstage
	rt, err := oci.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Backend{Runtime: rt}, nil
}
