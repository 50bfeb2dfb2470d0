package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// buildProbe builds sandbox/runc/testdata/probe statically for goarch.
func buildProbe(t *testing.T, goarch string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "probe-"+goarch)
	cmd := exec.Command("go", "build", "-o", out, "./sandbox/runc/testdata/probe")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, b)
	}
	return out
}

// probe copies the probe into sandbox id and returns what it found.
func (s *service) probe(id, bin string) map[string]string {
	s.t.Helper()
	s.must("sandbox", "cp", bin, id+":/probe")
	out := s.must("sandbox", "exec", id, "--", "/probe")
	var got map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		s.t.Fatalf("probe output %q: %v", out, err)
	}
	return got
}

// denied are the probe's checks a runc sandbox must refuse (issue 7,
// finding 7), with the errno the seccomp filter answers.
var denied = map[string]string{
	"clone_newuser_mount": "EPERM", // clone(NEWUSER|NEWNS|NEWNET), then mount inside
	"unshare_newns":       "EPERM",
	"clone3":              "ENOSYS", // so that libc falls back to clone
	"setns":               "EPERM",
	"mount_tmpfs":         "EPERM",
	"io_uring_setup":      "EPERM",
	"userfaultfd":         "EPERM",
	"add_key":             "EPERM",
	"keyctl":              "EPERM",
	"request_key":         "EPERM",
	"socket_vsock":        "EPERM",
	"socket_alg":          "EPERM",
	"bpf":                 "EPERM",
	"perf_event_open":     "EPERM",
	"kexec_load":          "EPERM",
	"init_module":         "EPERM",
	"personality_no_aslr": "EPERM",
}

// TestHostileRuncKernelSurface runs the probe in a runc sandbox: the
// calls a hostile program would make on the host kernel fail, sandbox
// root is an unprivileged host uid, and /proc, /sys show no host paths or
// masked files. Under gVisor it only records what gVisor answers
// (docs/backends.md).
func TestHostileRuncKernelSurface(t *testing.T) {
	requireSandboxes(t)
	s := startService(t)
	bin := buildProbe(t, "amd64")

	t.Run("runc", func(t *testing.T) {
		s.t = t
		id := s.create("--backend", "runc")
		got := s.probe(id, bin)
		for check, want := range denied {
			if got[check] != want {
				t.Errorf("%s: %q, want %s", check, got[check], want)
			}
		}
		for _, check := range []string{"socket_inet", "socket_unix", "fork_plain"} {
			if got[check] != "ok" {
				t.Errorf("%s: %q, want ok", check, got[check])
			}
		}
		if got["uid_map"] != "0 1879048192 65536" {
			t.Errorf("uid_map %q: want root mapped to host uid 1879048192, 65536 ids", got["uid_map"])
		}
		if strings.Contains(got["proc_mounts"], s.dataDir) {
			t.Errorf("/proc/mounts names the data dir %s:\n%s", s.dataDir, got["proc_mounts"])
		}
		for _, check := range []string{"powercap", "firmware"} {
			if v := got[check]; v != "ENOENT" && v != "0 entries" {
				t.Errorf("%s: %q, want masked (empty or absent)", check, v)
			}
		}
		if got["kcore_bytes"] != "0" {
			t.Errorf("/proc/kcore gave %s bytes, want masked", got["kcore_bytes"])
		}
		t.Logf("mountinfo inside:\n%s", got["mountinfo"])
	})

	// 32-bit x86 programs reach socket(2) through socketcall(2), whose
	// arguments no filter can read (libseccomp allows socketcall's socket
	// whatever the family): they must not run at all, or AF_VSOCK is open
	// to them. The seccomp filter kills them with SIGSYS.
	t.Run("runc-386", func(t *testing.T) {
		s.t = t
		id := s.create("--backend", "runc")
		s.must("sandbox", "cp", buildProbe(t, "386"), id+":/probe")
		if r := s.run("sandbox", "exec", id, "--", "/probe"); r.code != 128+int(syscall.SIGSYS) {
			t.Errorf("a 32-bit x86 program ran: %s", r)
		}
	})

	t.Run("gvisor", func(t *testing.T) {
		s.t = t
		id := s.create("--backend", "gvisor")
		got := s.probe(id, bin)
		for _, k := range []string{"clone_newuser_mount", "unshare_newns", "clone3", "setns", "mount_tmpfs",
			"io_uring_setup", "userfaultfd", "add_key", "keyctl", "request_key", "socket_vsock", "socket_alg",
			"socket_inet", "bpf", "perf_event_open", "kexec_load", "init_module", "personality_no_aslr",
			"uid_map", "powercap", "firmware", "kcore_bytes"} {
			t.Logf("gvisor %s: %s", k, got[k])
		}
		if strings.Contains(got["proc_mounts"], s.dataDir) {
			t.Logf("gvisor /proc/mounts names the data dir")
		}
	})
}

// TestHostileRuncUserNamespace checks what the user namespace must keep
// working: root inside is uid 0 and owns what it writes, which lands as
// 0:0 on the sandbox's disk; the init is an unprivileged uid on the host;
// chown within the 65536 mapped ids works, beyond it fails.
func TestHostileRuncUserNamespace(t *testing.T) {
	requireSandboxes(t)
	s := startService(t)
	id := s.create("--backend", "runc")

	if out := s.must("sandbox", "exec", id, "--", "id"); !strings.HasPrefix(out, "uid=0(root) gid=0(root)") {
		t.Errorf("id inside: %q", out)
	}
	out := s.must("sandbox", "exec", id, "--", "sh", "-c",
		"mkdir -p /var/mine && echo x > /var/mine/f && touch /var/mine/g && chown 65535:65534 /var/mine/g && stat -c '%u:%g' /var/mine/f /var/mine/g /etc/passwd")
	if out != "0:0\n65535:65534\n0:0\n" {
		t.Errorf("ownership inside: %q, want 0:0 for root's files and the image's, 65535:65534 after chown", out)
	}
	if r := s.run("sandbox", "exec", id, "--", "chown", "65536", "/var/mine/f"); r.code == 0 {
		t.Errorf("chown to an unmapped uid succeeded: %s", r)
	}
	upper := filepath.Join(s.dataDir, "sandboxes", id, "disk", "upper", "var", "mine")
	for name, want := range map[string][2]uint32{"f": {0, 0}, "g": {65535, 65534}} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(upper, name), &st); err != nil {
			t.Errorf("on the disk: %v", err)
			continue
		}
		if st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("%s on the disk is %d:%d, want %d:%d (the image's ids, not the host's)", name, st.Uid, st.Gid, want[0], want[1])
		}
	}
	if uid := executorUID(t, id); uid != "1879048192" {
		t.Errorf("the sandbox's init runs as host uid %q, want 1879048192", uid)
	}
	// sysfs and proc are mounted in the user namespace.
	if out := s.must("sandbox", "exec", id, "--", "sh", "-c", "ls /sys/kernel >/dev/null && cat /proc/self/uid_map"); strings.Fields(out)[1] != "1879048192" {
		t.Errorf("uid_map: %q", out)
	}
}

// executorUID finds the host process of sandbox id's executor (by its
// cgroup) and returns its real uid as the host sees it.
func executorUID(t *testing.T, id string) string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || !strings.Contains(string(cg), "/reins/"+id) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		if !strings.Contains(string(cmd), "reins-executor") {
			continue
		}
		status, _ := os.ReadFile(filepath.Join(p, "status"))
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				return f[1]
			}
		}
	}
	t.Fatalf("no executor process of sandbox %s on the host", id)
	return ""
}
