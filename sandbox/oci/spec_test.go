package oci

import (
	"errors"
	"runtime"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

func TestSpec(t *testing.T) {
	s, err := Spec(sandbox.Bundle{
		ID: "sb1", Rootfs: "/var/lib/reins/sb1/rootfs", Args: []string{"/reins/executor"},
		Env: []string{"A=1"}, Cwd: "/work", Hostname: "box",
		Mounts: []sandbox.Mount{{Source: "/host/ctl", Target: "/run/reins"}, {Source: "/host/bin", Target: "/reins", ReadOnly: true}},
		Limits: sandbox.Limits{CPUs: 1.5, MemoryBytes: 128 << 20, Pids: 100},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Root.Path != "/var/lib/reins/sb1/rootfs" || s.Root.Readonly {
		t.Errorf("root = %+v, want the rootfs, writable", s.Root)
	}
	if s.Process.Cwd != "/work" || s.Process.Terminal || !s.Process.NoNewPrivileges || s.Hostname != "box" {
		t.Errorf("process = %+v, hostname %q", s.Process, s.Hostname)
	}
	if !slices.Contains(s.Process.Env, "A=1") || !slices.ContainsFunc(s.Process.Env, func(e string) bool { return len(e) > 5 && e[:5] == "PATH=" }) {
		t.Errorf("env = %v, want A=1 and a PATH", s.Process.Env)
	}
	if slices.Contains(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN") {
		t.Errorf("capabilities include CAP_SYS_ADMIN")
	}
	if s.Linux.CgroupsPath != "/reins/sb1" {
		t.Errorf("cgroupsPath = %q", s.Linux.CgroupsPath)
	}
	r := s.Linux.Resources
	if *r.CPU.Quota != 150000 || *r.CPU.Period != 100000 {
		t.Errorf("cpu = %d/%d, want 150000/100000", *r.CPU.Quota, *r.CPU.Period)
	}
	if *r.Memory.Limit != 128<<20 || *r.Memory.Swap != 128<<20 {
		t.Errorf("memory = %d, swap %d: want both 128 MiB", *r.Memory.Limit, *r.Memory.Swap)
	}
	if r.Pids.Limit != 100 {
		t.Errorf("pids = %d", r.Pids.Limit)
	}
	var ns []string
	for _, n := range s.Linux.Namespaces {
		ns = append(ns, string(n.Type))
	}
	for _, want := range []string{"pid", "ipc", "uts", "mount", "network"} {
		if !slices.Contains(ns, want) {
			t.Errorf("namespaces %v lack %s", ns, want)
		}
	}
	byDest := map[string][]string{}
	for _, m := range s.Mounts {
		byDest[m.Destination] = m.Options
	}
	if !slices.Contains(byDest["/reins"], "ro") || !slices.Contains(byDest["/run/reins"], "rw") || !slices.Contains(byDest["/sys"], "ro") {
		t.Errorf("mount options = %v", byDest)
	}
	for _, d := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm"} {
		if _, ok := byDest[d]; !ok {
			t.Errorf("no %s mount", d)
		}
	}
}

func TestSpecRejects(t *testing.T) {
	for name, b := range map[string]sandbox.Bundle{
		"bad id":        {ID: "../x", Rootfs: "/r", Args: []string{"a"}},
		"no args":       {ID: "a", Rootfs: "/r"},
		"relative root": {ID: "a", Rootfs: "r", Args: []string{"a"}},
		"relative src":  {ID: "a", Rootfs: "/r", Args: []string{"a"}, Mounts: []sandbox.Mount{{Source: "x", Target: "/x"}}},
	} {
		if _, err := Spec(b); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
}

// Docker's masked and read-only paths, powercap included.
func TestSpecMaskedPaths(t *testing.T) {
	s, err := Spec(sandbox.Bundle{ID: "sb1", Rootfs: "/r", Args: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/sched_debug", "/proc/timer_list", "/proc/interrupts", "/sys/firmware", "/sys/devices/virtual/powercap"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			t.Errorf("%s is not masked", p)
		}
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq"} {
		if !slices.Contains(s.Linux.ReadonlyPaths, p) {
			t.Errorf("%s is not read-only", p)
		}
	}
}

func TestUserNSAdjust(t *testing.T) {
	s, _ := Spec(sandbox.Bundle{ID: "sb1", Rootfs: "/r", Args: []string{"a"}})
	(&UserNS{IDs: SandboxIDs}).Adjust(s)
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0x70000000, Size: 65536}}
	if !slices.Equal(s.Linux.UIDMappings, want) || !slices.Equal(s.Linux.GIDMappings, want) {
		t.Errorf("mappings %v %v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	if !slices.ContainsFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace && n.Path == "" }) {
		t.Errorf("no new user namespace in %v", s.Linux.Namespaces)
	}
}

// rulesFor returns the rules naming syscall.
func rulesFor(p *specs.LinuxSeccomp, syscall string) []specs.LinuxSyscall {
	var out []specs.LinuxSyscall
	for _, r := range p.Syscalls {
		if slices.Contains(r.Names, syscall) {
			out = append(out, r)
		}
	}
	return out
}

func TestSeccomp(t *testing.T) {
	p := Seccomp()
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.EPERM) {
		t.Errorf("default %s %v, want ERRNO(EPERM)", p.DefaultAction, p.DefaultErrnoRet)
	}
	if runtime.GOARCH == "amd64" && !slices.Equal(p.Architectures, []specs.Arch{specs.ArchX86_64}) {
		t.Errorf("architectures %v, want x86_64 alone", p.Architectures)
	}
	// Never allowed, under any argument.
	for _, name := range []string{"io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
		"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "mount", "umount2", "pivot_root",
		"fsopen", "fsmount", "open_tree", "move_mount", "mount_setattr", "setns", "kexec_load",
		"kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
		"open_by_handle_at", "lookup_dcookie", "fanotify_init", "socketcall", "syslog", "acct", "settimeofday"} {
		if rs := rulesFor(p, name); len(rs) > 0 {
			t.Errorf("%s has rules %+v, want none (denied by default)", name, rs)
		}
	}
	ns := uint64(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP)
	for _, name := range []string{"clone", "unshare"} {
		rs := rulesFor(p, name)
		if len(rs) != 1 || len(rs[0].Args) != 1 || rs[0].Args[0].Op != specs.OpMaskedEqual ||
			rs[0].Args[0].Value&ns != ns || rs[0].Args[0].ValueTwo != 0 || rs[0].Args[0].Index != 0 {
			t.Errorf("%s rules %+v, want allowed only without namespace flags", name, rs)
		}
	}
	if rs := rulesFor(p, "clone3"); len(rs) != 1 || rs[0].Action != specs.ActErrno || *rs[0].ErrnoRet != uint(unix.ENOSYS) {
		t.Errorf("clone3 rules %+v, want ERRNO(ENOSYS)", rs)
	}
	var families []uint64
	for _, r := range rulesFor(p, "socket") {
		if len(r.Args) != 1 || r.Args[0].Op != specs.OpEqualTo || r.Args[0].Index != 0 {
			t.Fatalf("socket rule %+v", r)
		}
		families = append(families, r.Args[0].Value)
	}
	slices.Sort(families)
	if !slices.Equal(families, []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}) {
		t.Errorf("socket families %v, want unix, inet, inet6, netlink", families)
	}
	for _, r := range rulesFor(p, "personality") {
		if len(r.Args) != 1 || r.Args[0].Value&0x0040000 != 0 && r.Args[0].Value != 0xffffffff {
			t.Errorf("personality rule %+v allows ADDR_NO_RANDOMIZE", r)
		}
	}
	for _, name := range []string{"read", "execve", "openat", "futex", "wait4", "epoll_pwait", "ptrace", "chroot", "setuid", "rseq"} {
		if rs := rulesFor(p, name); len(rs) != 1 || rs[0].Action != specs.ActAllow || len(rs[0].Args) != 0 {
			t.Errorf("%s rules %+v, want allowed", name, rs)
		}
	}
	// One name, one place: a duplicate would be a rule runc merges.
	seen := map[string]bool{}
	for _, n := range p.Syscalls[0].Names {
		if seen[n] {
			t.Errorf("%s listed twice", n)
		}
		seen[n] = true
	}
}

// TestSpecNetNS: a bundle's network namespace is the one the sandbox joins;
// without one it gets a new namespace.
func TestSpecNetNS(t *testing.T) {
	b := sandbox.Bundle{ID: "n1", Rootfs: "/r", Args: []string{"/init"}}
	netns := func(s *specs.Spec) (string, bool) {
		for _, ns := range s.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace {
				return ns.Path, true
			}
		}
		return "", false
	}
	s, err := Spec(b)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := netns(s); !ok || p != "" {
		t.Errorf("no NetNS: network namespace %q (present %v), want a new one", p, ok)
	}
	b.NetNS = "/run/netns/reins-n1"
	if s, err = Spec(b); err != nil {
		t.Fatal(err)
	}
	if p, _ := netns(s); p != b.NetNS {
		t.Errorf("NetNS: joins %q, want %q", p, b.NetNS)
	}
	b.NetNS = "netns/relative"
	if _, err := Spec(b); err == nil {
		t.Error("a relative NetNS was accepted")
	}
}
