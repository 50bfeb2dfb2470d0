// Package e2e drives the real reins binaries: a reins serve process on a
// scratch data dir and the CLI against it, with real gVisor and runc
// sandboxes. It needs root and runsc (CI has both).
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox/gvisor"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "reins-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root := repoRoot()
	builds := [][]string{
		{"go", "build", "-o", filepath.Join(dir, "reins"), "./cmd/reins"},
		{"go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, "reins-executor"), "./cmd/reins-executor"},
		// reins serve starts it for each sandbox when it is beside it.
		{"go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, "reins-shim"), "./cmd/reins-shim"},
	}
	for _, b := range builds {
		cmd := exec.Command(b[0], b[1:]...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %v: %v\n%s", b, err, out)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// service is one running reins serve.
type service struct {
	t       *testing.T
	dataDir string
	addr    string
	url     string
	token   string
	cmd     *exec.Cmd
	log     *bytes.Buffer
	extra   []string
	env     []string // added to reins serve's environment
}

func requireSandboxes(t *testing.T) {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
	testenv.RequiresBinary(t, "runc", "runc")
}

// startService starts reins serve on a new data dir and a free port.
func startService(t *testing.T, extra ...string) *service {
	t.Helper()
	return startServiceEnv(t, nil, extra...)
}

// startServiceEnv is startService with env added to the service's
// environment.
func startServiceEnv(t *testing.T, env []string, extra ...string) *service {
	t.Helper()
	requireSandboxes(t)
	// Short data dir paths keep unix socket paths short.
	dataDir, err := os.MkdirTemp("", "re2e")
	if err != nil {
		t.Fatal(err)
	}
	s := &service{t: t, dataDir: dataDir, addr: freeAddr(t), extra: extra, env: env}
	s.url = "http://" + s.addr
	s.start()
	t.Cleanup(func() {
		s.stop()
		s.removeAll()
		if m := mountsUnder(dataDir); len(m) > 0 {
			t.Errorf("mounts left under the data dir after every sandbox was removed:\n%s", strings.Join(m, "\n"))
		}
		os.RemoveAll(dataDir)
	})
	return s
}

// mountsUnder lists the mount points at or below dir (runsc's null-netns
// bind, a sandbox's disk or rootfs).
func mountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

func (s *service) start() {
	s.t.Helper()
	args := append([]string{"serve", "--data-dir", s.dataDir, "--addr", s.addr, "--check-interval", "200ms"}, s.extra...)
	s.cmd = exec.Command(filepath.Join(binDir, "reins"), args...)
	if s.env != nil {
		s.cmd.Env = append(os.Environ(), s.env...)
	}
	s.log = &bytes.Buffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// Its own process group, like a service under a supervisor.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			tok, err := os.ReadFile(filepath.Join(s.dataDir, "admin.token"))
			if err != nil {
				s.t.Fatal(err)
			}
			s.token = strings.TrimSpace(string(tok))
			return
		}
		if s.cmd.ProcessState != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("reins serve did not come up:\n%s", s.log)
}

// kill9 kills the service the hard way; sandboxes must survive it.
func (s *service) kill9() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
}

func (s *service) stop() {
	if s.cmd == nil || s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	if s.t.Failed() {
		s.t.Logf("reins serve log:\n%s", s.log)
	}
}

// removeAll deletes every sandbox the test left, through a fresh service if
// the old one is gone.
func (s *service) removeAll() {
	if s.cmd == nil || s.cmd.ProcessState != nil {
		s.start()
		defer s.stop()
	}
	out := s.run("sandbox", "ls", "--all", "--json")
	for _, line := range strings.Split(out.stdout, "\n") {
		if i := strings.Index(line, `"id": "`); i >= 0 {
			id := strings.TrimSuffix(strings.TrimSpace(line[i+7:]), `",`)
			s.run("sandbox", "rm", strings.Trim(id, `"`))
		}
	}
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// run runs the CLI against the service.
func (s *service) run(args ...string) result {
	return s.runEnv(nil, args...)
}

func (s *service) runEnv(env []string, args ...string) result {
	s.t.Helper()
	return s.runInput(env, nil, args...)
}

// runStdin runs the CLI with stdin as its input.
func (s *service) runStdin(stdin string, args ...string) result {
	s.t.Helper()
	return s.runIn(nil, stdin, args...)
}

// runIn runs the CLI with env added and stdin as its input ("": none).
func (s *service) runIn(env []string, stdin string, args ...string) result {
	s.t.Helper()
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	return s.runInput(env, in, args...)
}

// runInput runs the CLI with stdin read from in (nil: none).
func (s *service) runInput(env []string, in io.Reader, args ...string) result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "reins"), args...)
	cmd.Env = append(os.Environ(), "REINS_URL="+s.url, "REINS_TOKEN="+s.token)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatalf("reins %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

// must runs the CLI and fails the test unless it exits 0.
func (s *service) must(args ...string) string {
	s.t.Helper()
	r := s.run(args...)
	if r.code != 0 {
		s.t.Fatalf("reins %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

func (s *service) create(args ...string) string {
	s.t.Helper()
	id := strings.TrimSpace(s.must(append([]string{"sandbox", "create"}, args...)...))
	if id == "" || strings.ContainsAny(id, " \n") {
		s.t.Fatalf("create printed %q, want only an id", id)
	}
	return id
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// eventually retries cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not after %s; last seen: %s", what, timeout, last)
}
