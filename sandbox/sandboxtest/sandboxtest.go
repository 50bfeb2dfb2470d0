// Package sandboxtest is the conformance suite every sandbox.Backend, the
// fake included, passes:
//
//	func TestConformance(t *testing.T) {
//		sandboxtest.Run(t, func(t *testing.T, stateDir string) sandbox.Backend {
//			b, err := runc.New(stateDir)
//			...
//		}, sandboxtest.Capabilities{Isolation: true, Limits: true, Durable: true})
//	}
//
// What a backend cannot do is said in Capabilities, and the tests that need
// it are skipped with that reason, never silently.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
)

// NewBackend returns a backend keeping its state in stateDir. The suite
// calls it twice with one dir to play a restarted service.
type NewBackend func(t *testing.T, stateDir string) sandbox.Backend

// Capabilities says what a backend can do beyond the basics.
type Capabilities struct {
	// Isolation: the sandbox has its own root (Bundle.Rootfs), bind mounts,
	// cwd, hostname and a network namespace with loopback only.
	Isolation bool
	// Limits: CPU, memory and pids limits hold, and OOM kills are counted.
	Limits bool
	// OOMKillsWholeSandbox: a process that outgrows the memory limit takes
	// the whole sandbox with it (gVisor), rather than only itself (runc).
	OOMKillsWholeSandbox bool
	// Durable: a second backend on the same state dir sees the first's
	// sandboxes, and sandboxes outlive the process that started them.
	Durable bool
	// Cgroups: sandboxes get the cgroup /reins/<id>, gone after Delete.
	Cgroups bool
}

// childEnv, when set, makes the SurvivesStarterDeath subtest play the
// service that starts a sandbox and is then killed.
const childEnv = "REINS_SANDBOXTEST_CHILD"

type childOrder struct {
	StateDir string         `json:"state_dir"`
	Bundle   sandbox.Bundle `json:"bundle"`
	Ready    string         `json:"ready"`
}

// suite is what every subtest shares.
type suite struct {
	newBackend NewBackend
	caps       Capabilities
	rootfs     string
}

// Run runs the suite as subtests of t.
func Run(t *testing.T, newBackend NewBackend, caps Capabilities) {
	if caps.Isolation || caps.Limits || caps.Cgroups {
		testenv.RequiresRoot(t)
	}
	s := &suite{newBackend: newBackend, caps: caps}
	if os.Getenv(childEnv) == "" {
		s.rootfs = t.TempDir()
		BusyboxRootfs(t, s.rootfs)
		BuildHelper(t, filepath.Join(s.rootfs, "bin", "sockhelper"))
	}
	if os.Getenv(childEnv) != "" {
		// A child process plays the service that starts a sandbox and dies.
		t.Run("SurvivesStarterDeath", s.testSurvivesStarterDeath)
		return
	}
	// Each subtest runs for the backends whose capabilities it tests; the
	// others are not applicable, which is said once here.
	probe := newBackend(t, t.TempDir())
	_, usage := probe.(sandbox.UsageReporter)
	_, waiter := probe.(sandbox.Waiter)
	tests := []struct {
		name string
		when bool
		why  string
		fn   func(*testing.T)
	}{
		{"StartStatus", true, "", s.testStartStatus},
		{"AlreadyExists", true, "", s.testAlreadyExists},
		{"StartFails", true, "", s.testStartFails},
		{"Env", true, "", s.testEnv},
		{"BundleHonoured", caps.Isolation, "no isolation", s.testBundleHonoured},
		{"ExitCode", true, "", s.testExitCode},
		{"Kill", true, "", s.testKill},
		{"Wait", waiter, "not a sandbox.Waiter", s.testWait},
		{"Delete", true, "", s.testDelete},
		{"UnixSocket", true, "", s.testUnixSocket},
		{"MemoryLimit", caps.Limits, "no limits", s.testMemoryLimit},
		{"InitOOMKilled", caps.Limits, "no limits", s.testInitOOMKilled},
		{"PidsLimit", caps.Limits, "no limits", s.testPidsLimit},
		{"CPULimit", caps.Limits && usage, "no limits or no usage reports", s.testCPULimit},
		{"MemoryPeak", caps.Limits && usage, "no limits or no usage reports", s.testMemoryPeak},
		{"Concurrent", true, "", s.testConcurrent},
		{"RestartedService", caps.Durable, "not durable", s.testRestartedService},
		{"SurvivesStarterDeath", caps.Durable, "not durable", s.testSurvivesStarterDeath},
	}
	for _, tc := range tests {
		if !tc.when {
			t.Logf("not applicable to this backend (%s): %s", tc.why, tc.name)
			continue
		}
		t.Run(tc.name, tc.fn)
	}
}

// env is one subtest's backend and scratch space.
type env struct {
	t        *testing.T
	s        *suite
	b        sandbox.Backend
	stateDir string
}

func (s *suite) env(t *testing.T) *env {
	dir := t.TempDir()
	return &env{t: t, s: s, b: s.newBackend(t, dir), stateDir: dir}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// NewID returns a sandbox id unique on this host (cgroups are host-wide,
// and other test packages run at the same time).
func NewID(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// bundle returns a bundle running sh -c script, with a rw control dir at
// $CTL (/ctl inside an isolated sandbox, the host dir otherwise).
func (e *env) bundle(prefix, script string) (sandbox.Bundle, string) {
	ctl := e.t.TempDir()
	ctlIn := ctl
	if e.s.caps.Isolation {
		ctlIn = "/ctl"
	}
	b := sandbox.Bundle{
		ID:       NewID(prefix),
		Dir:      e.t.TempDir(),
		Rootfs:   e.s.rootfs,
		Mounts:   []sandbox.Mount{{Source: ctl, Target: "/ctl"}},
		Args:     []string{"sh", "-c", script},
		Env:      []string{"CTL=" + ctlIn, "PATH=/bin:/usr/bin"},
		Cwd:      "/",
		Hostname: "sbx",
	}
	return b, ctl
}

func (e *env) start(b sandbox.Bundle) sandbox.Endpoint {
	e.t.Helper()
	ep, err := e.b.Start(ctxT(e.t), b)
	if err != nil {
		e.t.Fatalf("Start %s: %v", b.ID, err)
	}
	e.t.Cleanup(func() {
		if err := e.b.Delete(context.Background(), b.ID); err != nil {
			e.t.Errorf("cleanup: Delete %s: %v", b.ID, err)
		}
	})
	return ep
}

func (e *env) status(id string) sandbox.Status {
	e.t.Helper()
	st, err := e.b.Status(ctxT(e.t), id)
	if err != nil {
		e.t.Fatalf("Status %s: %v", id, err)
	}
	return st
}

// waitStopped polls Status until the sandbox is not running.
func (e *env) waitStopped(id string, within time.Duration) sandbox.Status {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := e.status(id)
		if !st.Running {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("sandbox %s still running after %v", id, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFile waits until path exists with content and returns it.
func waitFile(t *testing.T, path string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nothing written within %v", path, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func (s *suite) testStartStatus(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("status", "sleep 1000")
	e.start(b)
	st := e.status(b.ID)
	if !st.Running || st.Pid <= 0 {
		t.Fatalf("Status after Start = %+v, want running with a pid", st)
	}
	if err := syscall.Kill(st.Pid, 0); err != nil {
		t.Errorf("pid %d from Status is not a live host process: %v", st.Pid, err)
	}
}

func (s *suite) testAlreadyExists(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("exists", "sleep 1000")
	e.start(b)
	_, err := e.b.Start(ctxT(t), b)
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second Start of %s = %v, want ErrAlreadyExists", b.ID, err)
	}
	if st := e.status(b.ID); !st.Running {
		t.Errorf("the failed second Start harmed the first: %+v", st)
	}
}

func (s *suite) testStartFails(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("fails", "")
	b.Args = []string{"/no/such/program"}
	_, err := e.b.Start(ctxT(t), b)
	if err == nil {
		_ = e.b.Delete(ctxT(t), b.ID)
		t.Fatal("Start of a missing program succeeded")
	}
	t.Logf("Start of a missing program: %v", err)
	if _, err := e.b.Status(ctxT(t), b.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status after a failed Start = %v, want ErrNotFound (nothing left)", err)
	}
}

func (s *suite) testEnv(t *testing.T) {
	e := s.env(t)
	b, ctl := e.bundle("env", `echo "$GREETING" > "$CTL/env"`)
	b.Env = append(b.Env, "GREETING=hello there")
	e.start(b)
	e.waitStopped(b.ID, 20*time.Second)
	if got := readFile(t, filepath.Join(ctl, "env")); got != "hello there" {
		t.Errorf("GREETING inside = %q, want %q", got, "hello there")
	}
}

func (s *suite) testBundleHonoured(t *testing.T) {
	e := s.env(t)
	ro := t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "file"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, ctl := e.bundle("bundle", `
		pwd > $CTL/cwd
		hostname > $CTL/hostname
		cat /ro/file > $CTL/rofile
		if touch /ro/new 2>/dev/null; then echo writable; else echo read-only; fi > $CTL/ro
		ls /sys/class/net > $CTL/netdevs
		if ip link show lo | grep -q UP; then echo up; else echo down; fi > $CTL/lo
		# Until a ping has gone through: on a busy host the listener may
		# not be up yet, or a connection may close before its data is
		# read; no sleep is long enough, so both sides try again.
		( for i in $(seq 100); do
			nc -l -p 7777 > $CTL/lonc.part
			if [ -s $CTL/lonc.part ]; then mv $CTL/lonc.part $CTL/lonc; break; fi
		done ) &
		for i in $(seq 200); do
			[ -s $CTL/lonc ] && break
			echo ping | nc -w 1 127.0.0.1 7777
			sleep 0.1
		done
		wait
		ls / > $CTL/root
	`)
	b.Mounts = append(b.Mounts, sandbox.Mount{Source: ro, Target: "/ro", ReadOnly: true})
	b.Cwd = "/tmp"
	e.start(b)
	st := e.waitStopped(b.ID, 20*time.Second)
	if st.ExitCode != 0 {
		t.Errorf("init exit code %d, want 0", st.ExitCode)
	}
	want := map[string]string{
		"cwd": "/tmp", "hostname": "sbx", "rofile": "from the host", "ro": "read-only", "lo": "up", "lonc": "ping",
	}
	for f, w := range want {
		if got := readFile(t, filepath.Join(ctl, f)); got != w {
			t.Errorf("%s inside = %q, want %q", f, got, w)
		}
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		t.Errorf("the sandbox wrote into a read-only mount")
	}
	for _, dev := range strings.Fields(readFile(t, filepath.Join(ctl, "netdevs"))) {
		if dev != "lo" {
			t.Errorf("network device %q inside, want loopback only", dev)
		}
	}
	if !strings.Contains(readFile(t, filepath.Join(ctl, "root")), "busybox") && !strings.Contains(readFile(t, filepath.Join(ctl, "root")), "bin") {
		t.Errorf("root inside is not the bundle's rootfs")
	}
}

func (s *suite) testExitCode(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("exit", "exit 3")
	e.start(b)
	st := e.waitStopped(b.ID, 20*time.Second)
	if st.Running || st.ExitCode != 3 || st.OOMKilled || st.Pid != 0 {
		t.Errorf("Status after exit 3 = %+v, want stopped, code 3, pid 0, not OOM", st)
	}
}

func (s *suite) testKill(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("kill", "sleep 1000")
	e.start(b)
	if err := e.b.Kill(ctxT(t), b.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	st := e.status(b.ID)
	if st.Running || st.OOMKilled {
		t.Errorf("Status right after Kill = %+v, want stopped, not OOM", st)
	}
	if err := e.b.Kill(ctxT(t), b.ID); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := e.b.Kill(ctxT(t), NewID("unknown")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Kill of an unknown sandbox = %v, want ErrNotFound", err)
	}
}

func (s *suite) testDelete(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("delete", "sleep 1000")
	if _, err := e.b.Start(ctxT(t), b); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Delete(ctxT(t), b.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := e.b.Status(ctxT(t), b.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status after Delete = %v, want ErrNotFound", err)
	}
	if err := e.b.Delete(ctxT(t), b.ID); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if err := e.b.Delete(ctxT(t), NewID("unknown")); err != nil {
		t.Errorf("Delete of an unknown sandbox: %v", err)
	}
	_ = filepath.WalkDir(e.stateDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), b.ID) {
			t.Errorf("Delete left %s", p)
		}
		return nil
	})
	if s.caps.Cgroups {
		if left := CgroupDirs(b.ID); len(left) > 0 {
			t.Errorf("Delete left cgroups %v", left)
		}
	}
	// The id is free again.
	e.start(b)
}

// CgroupDirs lists the cgroup directories /reins/<id> in any hierarchy.
func CgroupDirs(id string) []string {
	a, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/reins", id))
	b, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/reins", id))
	return append(a, b...)
}

// testWait: Wait returns when the init ends, with its exit code, also
// for a backend value other than the one that started it (a restarted
// service), and gives up when its context does.
func (s *suite) testWait(t *testing.T) {
	e := s.env(t)
	b, ctl := e.bundle("wait", `while [ ! -e "$CTL/go" ]; do sleep 0.05; done; exit 7`)
	e.start(b)
	w := e.b.(sandbox.Waiter)
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if st, err := w.Wait(short, b.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a running sandbox with a short context = %+v, %v; want the deadline", st, err)
	}
	type result struct {
		st  sandbox.Status
		err error
	}
	waiter := e.b
	if s.caps.Durable {
		waiter = s.newBackend(t, e.stateDir) // as after a restart
	}
	done := make(chan result, 1)
	go func() {
		st, err := waiter.(sandbox.Waiter).Wait(ctxT(t), b.ID)
		done <- result{st, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Wait returned while the init still ran: %+v, %v", r.st, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(ctl, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.st.Running || r.st.ExitCode != 7 {
		t.Errorf("Wait after the init exited 7 = %+v, %v", r.st, r.err)
	}
	// Waiting on an ended sandbox returns at once.
	if st, err := w.Wait(ctxT(t), b.ID); err != nil || st.ExitCode != 7 {
		t.Errorf("second Wait = %+v, %v", st, err)
	}
}

func (s *suite) testUnixSocket(t *testing.T) {
	e := s.env(t)
	b, ctl := e.bundle("uds", "")
	sock := "/ctl/executor.sock"
	helper := "sockhelper"
	if !s.caps.Isolation {
		sock = filepath.Join(ctl, "executor.sock")
		helper = filepath.Join(s.rootfs, "bin", "sockhelper")
	}
	b.Args = []string{helper, sock}
	b.Listen = sock
	ep := e.start(b)
	// The backend says where the host reaches the socket; that is the
	// control directory's file.
	hostSock := filepath.Join(ctl, "executor.sock")
	if ep.Unix != hostSock {
		t.Fatalf("Start's endpoint is %+v, want the socket at %s", ep, hostSock)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", hostSock)
		if err == nil {
			got, err := io.ReadAll(c)
			c.Close()
			if err != nil || string(got) != "hello from the sandbox\n" {
				t.Fatalf("read from the sandbox's socket: %q, %v", got, err)
			}
			return
		}
		if time.Now().After(deadline) {
			st, _ := e.b.Status(ctxT(t), b.ID)
			log, _ := os.ReadFile(filepath.Join(b.Dir, "init.log"))
			t.Fatalf("cannot reach the sandbox's socket: %v (status %+v, init.log %q)", err, st, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *suite) testMemoryLimit(t *testing.T) {
	e := s.env(t)
	// dd holds a 160 MiB block in memory; the limit is 64 MiB.
	b, ctl := e.bundle("mem", `
		dd if=/dev/zero of=/dev/null bs=160M count=1 2>/dev/null
		echo $? > $CTL/dd
		sleep 1000
	`)
	b.Limits.MemoryBytes = 64 << 20
	e.start(b)
	if s.caps.OOMKillsWholeSandbox {
		st := e.waitStopped(b.ID, 30*time.Second)
		if !st.OOMKilled || st.OOMKills < 1 || st.ExitCode != 137 {
			t.Errorf("Status after a memory hog = %+v, want OOMKilled, OOMKills >= 1, code 137", st)
		}
		return
	}
	if got := waitFile(t, filepath.Join(ctl, "dd"), 30*time.Second); got != "137" {
		t.Errorf("dd over the memory limit exited %s, want 137 (SIGKILL)", got)
	}
	st := e.status(b.ID)
	if !st.Running || st.OOMKills < 1 || st.OOMKilled {
		t.Errorf("Status after a child's OOM kill = %+v, want running, OOMKills >= 1, not OOMKilled", st)
	}
	if s.caps.Cgroups {
		checkCgroupValue(t, b.ID, "memory", "memory.limit_in_bytes", "memory.max", strconv.Itoa(64<<20))
	}
}

func (s *suite) testInitOOMKilled(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("oominit", "exec dd if=/dev/zero of=/dev/null bs=160M count=1")
	b.Limits.MemoryBytes = 64 << 20
	e.start(b)
	st := e.waitStopped(b.ID, 30*time.Second)
	if !st.OOMKilled || st.OOMKills < 1 || st.ExitCode != 137 {
		t.Errorf("Status after the init outgrew its memory = %+v, want OOMKilled, OOMKills >= 1, code 137", st)
	}
}

func (s *suite) testPidsLimit(t *testing.T) {
	e := s.env(t)
	// A fork bomb in a subshell: it dies when a fork fails; the init
	// carries on and says how far it got.
	b, ctl := e.bundle("pids", `
		( i=0; while [ $i -lt 200 ]; do sleep 1000 & i=$((i+1)); echo $i > $CTL/forks; done ) 2>/dev/null
		echo survived > $CTL/after
		sleep 1000
	`)
	b.Limits.Pids = 32
	e.start(b)
	select {
	case <-waitPath(filepath.Join(ctl, "after"), 30*time.Second):
	}
	if _, err := os.Stat(filepath.Join(ctl, "after")); err != nil {
		st, _ := e.b.Status(ctxT(t), b.ID)
		t.Fatalf("the init did not survive its fork bomb: forks %s, status %+v, init.log %q",
			readMaybe(filepath.Join(ctl, "forks")), st, readMaybe(filepath.Join(b.Dir, "init.log")))
	}
	n, _ := strconv.Atoi(readFile(t, filepath.Join(ctl, "forks")))
	if n >= 32 || n < 5 {
		t.Errorf("the fork bomb made %d processes under a limit of 32", n)
	}
	if st := e.status(b.ID); !st.Running {
		t.Errorf("the sandbox died of its fork bomb: %+v", st)
	}
}

func (s *suite) testCPULimit(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("cpu", "while :; do :; done")
	b.Limits.CPUs = 0.25
	e.start(b)
	if s.caps.Cgroups {
		checkCgroupValue(t, b.ID, "cpu", "cpu.cfs_quota_us", "cpu.max", "25000")
	}
	u := e.b.(sandbox.UsageReporter)
	first, err := u.Usage(ctxT(t), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	second, err := u.Usage(ctxT(t), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	used := second.CPUSeconds - first.CPUSeconds
	if used > 0.25*2*1.5 || used < 0.1 {
		t.Errorf("a busy loop limited to 0.25 CPU used %.2f s of CPU in 2 s", used)
	}
	if second.MemoryBytes == 0 || second.Pids == 0 {
		t.Errorf("Usage = %+v, want memory and pids counted", second)
	}
}

// testMemoryPeak: a process that held 100 MiB and exited leaves the
// sandbox's peak memory past 100 MiB, above what it was before, while the
// memory in use falls back.
func (s *suite) testMemoryPeak(t *testing.T) {
	e := s.env(t)
	b, ctl := e.bundle("peak", `
		while [ ! -e $CTL/go ]; do sleep 0.05; done
		dd if=/dev/zero of=/dev/null bs=100M count=1 2>/dev/null
		echo $? > $CTL/dd
		sleep 1000
	`)
	b.Limits.MemoryBytes = 512 << 20
	e.start(b)
	u := e.b.(sandbox.UsageReporter)
	before, err := u.Usage(ctxT(t), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ctl, "go"), nil, 0o644)
	if got := waitFile(t, filepath.Join(ctl, "dd"), 30*time.Second); got != "0" {
		t.Fatalf("dd exited %s", got)
	}
	after, err := u.Usage(ctxT(t), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before: %d MiB in use, peak %d MiB; after dd held 100 MiB: %d MiB in use, peak %d MiB",
		before.MemoryBytes>>20, before.PeakMemoryBytes>>20, after.MemoryBytes>>20, after.PeakMemoryBytes>>20)
	if before.PeakMemoryBytes == 0 || before.PeakMemoryBytes >= 100<<20 {
		t.Errorf("peak before = %d bytes, want some, under 100 MiB", before.PeakMemoryBytes)
	}
	if after.PeakMemoryBytes < 100<<20 || after.PeakMemoryBytes <= before.PeakMemoryBytes {
		t.Errorf("peak after = %d bytes, want past 100 MiB and above %d", after.PeakMemoryBytes, before.PeakMemoryBytes)
	}
}

// checkCgroupValue reads a limit from the host's cgroup files (v1 name in
// the controller's hierarchy, or v2 name in the unified one).
func checkCgroupValue(t *testing.T, id, ctrl, v1, v2, want string) {
	t.Helper()
	p := filepath.Join("/sys/fs/cgroup", ctrl, "reins", id, v1)
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", "cgroup.controllers")); err == nil {
		p = filepath.Join("/sys/fs/cgroup", "reins", id, v2)
	}
	got := readFile(t, p)
	if f := strings.Fields(got); len(f) > 0 && f[0] != want {
		t.Errorf("%s = %q, want %s", p, got, want)
	}
}

func (s *suite) testConcurrent(t *testing.T) {
	e := s.env(t)
	const n = 20
	bs := make([]sandbox.Bundle, n)
	for i := range bs {
		bs[i], _ = e.bundle("many", "sleep 1000")
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range bs {
		wg.Go(func() { _, errs[i] = e.b.Start(ctxT(t), bs[i]) })
	}
	wg.Wait()
	pids := make(map[int]string)
	for i, b := range bs {
		if errs[i] != nil {
			t.Errorf("Start %s: %v", b.ID, errs[i])
			continue
		}
		st := e.status(b.ID)
		if !st.Running || st.Pid == 0 {
			t.Errorf("%s: %+v, want running", b.ID, st)
		}
		if other, dup := pids[st.Pid]; dup {
			t.Errorf("%s and %s share pid %d", b.ID, other, st.Pid)
		}
		pids[st.Pid] = b.ID
	}
	for i := range bs {
		wg.Go(func() { errs[i] = e.b.Delete(ctxT(t), bs[i].ID) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Delete %s: %v", bs[i].ID, err)
		}
	}
}

func (s *suite) testRestartedService(t *testing.T) {
	e := s.env(t)
	b, _ := e.bundle("restart", "sleep 1000")
	e.start(b)
	was := e.status(b.ID)
	second := s.newBackend(t, e.stateDir)
	st, err := second.Status(ctxT(t), b.ID)
	if err != nil || !st.Running || st.Pid != was.Pid {
		t.Fatalf("a second backend on the same state dir: Status = %+v, %v; want running pid %d", st, err, was.Pid)
	}
	if err := second.Kill(ctxT(t), b.ID); err != nil {
		t.Fatalf("Kill from the second backend: %v", err)
	}
	if st := e.status(b.ID); st.Running {
		t.Errorf("the first backend still sees it running after the second killed it")
	}
	if err := second.Delete(ctxT(t), b.ID); err != nil {
		t.Fatalf("Delete from the second backend: %v", err)
	}
	if _, err := e.b.Status(ctxT(t), b.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status from the first backend after the second deleted = %v, want ErrNotFound", err)
	}
}

// testSurvivesStarterDeath starts a sandbox from a child process (this
// test binary, re-executed to run only this subtest), kills the child with
// SIGKILL, and checks the sandbox still runs and can be managed.
func (s *suite) testSurvivesStarterDeath(t *testing.T) {
	if order := os.Getenv(childEnv); order != "" {
		playChild(t, s, order)
		return
	}
	e := s.env(t)
	b, _ := e.bundle("orphan", "sleep 1000")
	ready := filepath.Join(t.TempDir(), "ready")
	order, _ := json.Marshal(childOrder{StateDir: e.stateDir, Bundle: b, Ready: ready})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run="+runPattern(t.Name()), "-test.count=1", "-test.timeout=2m")
	child.Env = append(os.Environ(), childEnv+"="+string(order))
	out := &strings.Builder{}
	child.Stdout, child.Stderr = out, out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	t.Cleanup(func() { _ = e.b.Delete(context.Background(), b.ID) })
	select {
	case <-waitPath(ready, time.Minute):
	case <-exited:
	}
	if _, err := os.Stat(ready); err != nil {
		_ = child.Process.Kill()
		<-exited
		t.Fatalf("the child did not start its sandbox:\n%s", out)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	st := e.status(b.ID)
	if !st.Running {
		t.Fatalf("after its starter was killed: %+v, want running (init.log: %s)", st, readMaybe(filepath.Join(b.Dir, "init.log")))
	}
	if err := e.b.Kill(ctxT(t), b.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Delete(ctxT(t), b.ID); err != nil {
		t.Fatal(err)
	}
}

func playChild(t *testing.T, s *suite, order string) {
	var o childOrder
	if err := json.Unmarshal([]byte(order), &o); err != nil {
		t.Fatal(err)
	}
	b := s.newBackend(t, o.StateDir)
	if _, err := b.Start(ctxT(t), o.Bundle); err != nil {
		t.Fatalf("child: Start: %v", err)
	}
	if err := os.WriteFile(o.Ready, []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute) // until the parent kills us
}

// waitPath is closed when path exists, or after d.
func waitPath(path string, d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		defer close(c)
		for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(path); err == nil {
				return
			}
		}
	}()
	return c
}

// runPattern turns a test name into a -test.run pattern matching only it.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func readMaybe(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
