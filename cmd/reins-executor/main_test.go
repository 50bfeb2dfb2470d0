package main_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/internal/depstest"
)

// TestDeps fences the executor's dependencies (like Tailscale's
// cmd/tailscaled/deps_test.go): it runs inside every sandbox, so it must
// stay small and must never reach the brain's store, models, agent loop or
// sandbox management, nor Kubernetes.
func TestDeps(t *testing.T) {
	const brain = "the brain's; the executor holds no credentials and no record"
	depstest.Check(t, ".", map[string]string{
		"modernc.org/sqlite":                brain,
		"github.com/jackc/pgx":              brain,
		"github.com/anthropics":             brain,
		"github.com/openai":                 brain,
		"k8s.io":                            "a backend's, outside the sandbox",
		"github.com/reinsdev/reins/store":   brain,
		"github.com/reinsdev/reins/model":   brain,
		"github.com/reinsdev/reins/agent":   brain,
		"github.com/reinsdev/reins/policy":  brain,
		"github.com/reinsdev/reins/sandbox": "sandbox management is the host's",
		"github.com/reinsdev/reins/server":  "the service is the host's",
		"github.com/reinsdev/reins/image":   "images are unpacked on the host",
	})
}

// TestBinary builds the static binary and runs it the way a sandbox does:
// the token comes in a file that must be gone once read, calls work over the
// socket, and SIGTERM kills every process group and exits.
func TestBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "reins-executor")
	build := exec.Command("go", "build", "-ldflags", "-s -w -X github.com/reinsdev/reins/executor.Version=test-1", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "executor.sock")
	// A socket left by an earlier run is replaced.
	stale, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	cmd := exec.Command(bin, "--listen", socket, "--root", root, "--token-file", tokenFile)
	cmd.Env = append(os.Environ(), "REINS_EXECUTOR_TOKEN=ignored-when-a-file-is-given")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.WaitReady(ctx, socket, "s3cret")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr.String())
	}
	defer c.Close()
	t.Logf("ready %v after start", time.Since(start))
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the token file is still there: %v", err)
	}
	hello, err := c.Hello(ctx)
	if err != nil || hello.Version != "test-1" {
		t.Fatalf("Hello = %v %v", hello, err)
	}
	out, _, exit, err := c.Run(ctx, "sh", "-c", "echo ${REINS_EXECUTOR_TOKEN:-unset}")
	if err != nil || exit.ExitCode != 0 || string(out) != "unset\n" {
		t.Errorf("the token leaked into the environment: %q %v %v", out, exit, err)
	}
	started, err := c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "sleep 60 & echo $! > child.pid; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(root, "child.pid")); len(b) > 0 {
			child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			break
		}
	}
	u, err := c.Usage(ctx)
	if err != nil || u.RunningExecs != 1 {
		t.Errorf("Usage = %v %v", u, err)
	}
	t.Logf("executor RSS %d KiB", u.ExecutorRssBytes>>10)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v\nstderr: %s", err, stderr.String())
	}
	for _, pid := range []int{int(started.Pid), child} {
		// A zombie still answers kill(pid, 0) until its new parent reaps it.
		deadline := time.Now().Add(3 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d survived the executor's SIGTERM", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Logf("socket left behind after exit: %v (replaced on the next start)", err)
	}
}

func TestBinaryRefusesMissingFlags(t *testing.T) {
	out, err := exec.Command("go", "run", ".", "--listen", filepath.Join(t.TempDir(), "s")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--listen and --root are required") {
		t.Errorf("without --root: %v\n%s", err, out)
	}
}
