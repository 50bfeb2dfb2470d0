package oci

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// CgroupParent is the cgroup under which every sandbox gets its own,
// /reins/<id>, in each hierarchy.
const CgroupParent = "/reins"

// cpuPeriod is the CFS period CPU quotas are expressed in (100 ms, as Docker).
const cpuPeriod = 100000

// defaultCaps is Docker's default capability set less CAP_NET_RAW (a sandbox
// has no network to craft packets for). Notably absent: CAP_SYS_ADMIN,
// CAP_SYS_PTRACE, CAP_SYS_MODULE, CAP_NET_ADMIN.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidID reports whether id can name a sandbox: it becomes a directory,
// a cgroup and a runtime container id.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("sandbox id %q: want 1-64 of [A-Za-z0-9_.-], not starting with . _ or -: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CgroupsPath is the cgroup path (relative to each hierarchy's root) of a
// sandbox.
func CgroupsPath(id string) string { return path.Join(CgroupParent, id) }

// Spec builds the OCI runtime spec of a sandbox from its bundle. The spec
// gives the init new pid, ipc, uts, mount and network namespaces (the
// network one has only loopback), Docker's default capabilities without
// CAP_SYS_ADMIN, no_new_privileges, and the bundle's CPU, memory and pids
// limits on the cgroup /reins/<id>.
func Spec(b sandbox.Bundle) (*specs.Spec, error) {
	if err := ValidID(b.ID); err != nil {
		return nil, err
	}
	if len(b.Args) == 0 {
		return nil, fmt.Errorf("sandbox %s: bundle has no args: %w", b.ID, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(b.Rootfs) {
		return nil, fmt.Errorf("sandbox %s: rootfs %q is not an absolute path: %w", b.ID, b.Rootfs, errdefs.ErrInvalidArgument)
	}
	if b.NetNS != "" && !filepath.IsAbs(b.NetNS) {
		return nil, fmt.Errorf("sandbox %s: network namespace %q is not an absolute path: %w", b.ID, b.NetNS, errdefs.ErrInvalidArgument)
	}
	cwd := b.Cwd
	if cwd == "" {
		cwd = "/"
	}
	hostname := b.Hostname
	if hostname == "" {
		hostname = b.ID
	}
	mounts, err := mounts(b)
	if err != nil {
		return nil, err
	}
	caps := append([]string(nil), defaultCaps...)
	return &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: b.Rootfs},
		Process: &specs.Process{
			Args:            append([]string(nil), b.Args...),
			Env:             withPath(b.Env),
			Cwd:             cwd,
			NoNewPrivileges: true,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
		},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			CgroupsPath: CgroupsPath(b.ID),
			Resources:   resources(b.Limits),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: b.NetNS},
			},
			MaskedPaths:   append([]string(nil), MaskedPaths...),
			ReadonlyPaths: append([]string(nil), ReadonlyPaths...),
		},
	}, nil
}

// MaskedPaths are hidden from a sandbox (an empty file or directory is
// mounted over each, where it exists): Docker's list. They tell of the
// host's hardware and kernel (firmware tables, energy counters that leak
// what other tenants compute, the kernel's memory and timers) or touch it.
var MaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
	"/proc/timer_stats", "/sys/devices/virtual/powercap", "/sys/firmware",
}

// ReadonlyPaths are mounted read-only in a sandbox: Docker's list.
var ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// withPath adds a PATH to env when it has none, so a bare command name in
// Args resolves the way it would in a shell.
func withPath(env []string) []string {
	out := append([]string(nil), env...)
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return out
		}
	}
	return append(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
}

func mounts(b sandbox.Bundle) ([]specs.Mount, error) {
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	for _, m := range b.Mounts {
		if !filepath.IsAbs(m.Source) || !path.IsAbs(m.Target) {
			return nil, fmt.Errorf("sandbox %s: mount %s -> %s: both paths must be absolute: %w", b.ID, m.Source, m.Target, errdefs.ErrInvalidArgument)
		}
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		ms = append(ms, specs.Mount{Destination: path.Clean(m.Target), Type: "bind", Source: m.Source, Options: opts})
	}
	return ms, nil
}

func resources(l sandbox.Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{
		// Deny every device but the standard ones the runtimes add themselves
		// (null, zero, full, random, urandom, tty, pts).
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if l.CPUs > 0 {
		quota := int64(l.CPUs * cpuPeriod)
		period := uint64(cpuPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if l.MemoryBytes > 0 {
		limit := l.MemoryBytes
		swap := l.MemoryBytes // memory+swap = memory: swap is no way around the limit
		r.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &swap}
	}
	if l.Pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: l.Pids}
	}
	return r
}
