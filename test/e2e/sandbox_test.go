package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox/gvisor"
)

var backends = []string{"gvisor", "runc"}

// TestSandboxCLI walks through what a user does with a sandbox, on each
// backend: create, exec, cp both ways, background processes, ls, rm.
func TestSandboxCLI(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--label", "team=e2e", "--label", "backend="+backend, "--env", "GREETING=hi there")

			if out := s.must("sandbox", "exec", id, "--", "sh", "-c", "echo $GREETING; pwd"); out != "hi there\n/workspace\n" {
				t.Errorf("exec output %q", out)
			}
			r := s.run("sandbox", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
			if r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
				t.Errorf("exec exit 3: %s", r)
			}
			if r := s.run("sandbox", "exec", "--workdir", "/tmp", "--env", "A=b", id, "--", "sh", "-c", "echo $A $(pwd)"); r.stdout != "b /tmp\n" {
				t.Errorf("exec --workdir --env: %s", r)
			}
			r = s.run("sandbox", "exec", "--timeout", "500ms", id, "--", "sh", "-c", "echo before; sleep 30; echo after")
			if r.code != 124 || r.stdout != "before\n" || !strings.Contains(r.stderr, "timed out after 500ms") {
				t.Errorf("exec --timeout: %s", r)
			}
			if r := s.run("sandbox", "exec", id, "--", "no-such-program"); r.code == 0 || !strings.Contains(r.stderr, "no-such-program") {
				t.Errorf("exec of a missing program: %s", r)
			}

			// A file and a directory, in and out.
			local := t.TempDir()
			os.WriteFile(filepath.Join(local, "a.txt"), []byte("alpha\n"), 0o644)
			os.MkdirAll(filepath.Join(local, "tree/sub"), 0o755)
			os.WriteFile(filepath.Join(local, "tree/sub/b.txt"), []byte("beta\n"), 0o600)
			os.Symlink("sub/b.txt", filepath.Join(local, "tree/link"))
			s.must("sandbox", "cp", filepath.Join(local, "a.txt"), id+":/workspace/")
			s.must("sandbox", "cp", filepath.Join(local, "a.txt"), id+":/workspace/renamed.txt")
			s.must("sandbox", "cp", filepath.Join(local, "tree"), id+":/workspace/tree")
			out := s.must("sandbox", "exec", id, "--", "sh", "-c", "cat /workspace/a.txt /workspace/renamed.txt /workspace/tree/link; stat -c %a /workspace/tree/sub/b.txt")
			if out != "alpha\nalpha\nbeta\n600\n" {
				t.Errorf("after cp in: %q", out)
			}
			s.must("sandbox", "exec", id, "--", "sh", "-c", "mkdir -p /workspace/out/d && echo gamma > /workspace/out/d/c.txt")
			back := t.TempDir()
			s.must("sandbox", "cp", id+":/workspace/out", back)
			s.must("sandbox", "cp", id+":/workspace/a.txt", filepath.Join(back, "copy.txt"))
			if got, _ := os.ReadFile(filepath.Join(back, "out/d/c.txt")); string(got) != "gamma\n" {
				t.Errorf("cp out dir: %q", got)
			}
			if got, _ := os.ReadFile(filepath.Join(back, "copy.txt")); string(got) != "alpha\n" {
				t.Errorf("cp out file: %q", got)
			}

			// A background process outlives the client; its output is
			// kept and followable; ps lists it; kill ends it.
			pid := strings.TrimSpace(s.must("sandbox", "exec", "--detach", id, "--", "sh", "-c", "echo started; sleep 60"))
			eventually(t, 10*time.Second, "background output", func() (bool, string) {
				out := s.must("sandbox", "logs", id, pid)
				return out == "started\n", out
			})
			if ps := s.must("sandbox", "ps", id); !strings.Contains(ps, pid) || !strings.Contains(ps, "sleep 60") {
				t.Errorf("ps does not list %s:\n%s", pid, ps)
			}
			s.must("sandbox", "kill", id, pid)
			eventually(t, 10*time.Second, "killed process exits", func() (bool, string) {
				ps := s.must("sandbox", "ps", "--json", id)
				return strings.Contains(ps, `"running": false`), ps
			})

			// ls, with labels and JSON.
			var list []map[string]any
			if err := json.Unmarshal([]byte(s.must("sandbox", "ls", "--json", "--label", "backend="+backend)), &list); err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0]["id"] != id || list[0]["state"] != "SANDBOX_STATE_RUNNING" {
				t.Errorf("ls --json --label: %v", list)
			}
			if ls := s.must("sandbox", "ls", "--label", "team=nobody"); strings.Contains(ls, id) {
				t.Errorf("label filter let %s through", id)
			}

			s.must("sandbox", "rm", id)
			if ls := s.must("sandbox", "ls"); strings.Contains(ls, id) {
				t.Errorf("removed sandbox still listed:\n%s", ls)
			}
			r = s.run("sandbox", "exec", id, "--", "true")
			if r.code != 1 || !strings.Contains(r.stderr, "sandbox "+id+" not found") {
				t.Errorf("exec in removed sandbox: %s", r)
			}
		})
	}
}

// TestOOM: a command killed by the memory limit is reported in words and
// exits 137, and the sandbox stays usable.
func TestOOM(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--memory", "64M")
			r := s.run("sandbox", "exec", id, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1")
			if r.code != 137 || !strings.Contains(r.stderr, "killed: out of memory (limit 64 MiB)") {
				t.Fatalf("memory hog: %s", r)
			}
			sb := s.run("sandbox", "show", id)
			if backend == "runc" && !strings.Contains(sb.stdout, "running") {
				t.Errorf("sandbox after a process's OOM:\n%s", sb.stdout)
			}
			if strings.Contains(sb.stdout, "running") {
				if out := s.must("sandbox", "exec", id, "--", "echo", "still here"); out != "still here\n" {
					t.Errorf("after OOM: %q", out)
				}
			} else if !strings.Contains(sb.stdout, "oom_killed") {
				t.Errorf("sandbox stopped but not for oom_killed:\n%s", sb.stdout)
			}
		})
	}
}

// TestDiskLimit: a file larger than the disk fails clearly and the sandbox
// stays usable.
func TestDiskLimit(t *testing.T) {
	s := startService(t)
	id := s.create("--disk", "64M")
	big := filepath.Join(t.TempDir(), "big")
	f, _ := os.Create(big)
	f.Truncate(0)
	chunk := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 1<<17)
	for i := 0; i < 100; i++ {
		f.Write(chunk)
	}
	f.Close()
	r := s.run("sandbox", "cp", big, id+":/workspace/big")
	if r.code == 0 || !strings.Contains(r.stderr, "no space") {
		t.Fatalf("cp of 100 MiB into a 64 MiB disk: %s", r)
	}
	r = s.run("sandbox", "exec", id, "--", "sh", "-c", "head -c 100000000 /dev/zero > /workspace/fill")
	if r.code == 0 {
		t.Errorf("filling the disk from inside succeeded: %s", r)
	}
	s.must("sandbox", "exec", id, "--", "rm", "-f", "/workspace/fill", "/workspace/big")
	if out := s.must("sandbox", "exec", id, "--", "sh", "-c", "echo ok > /workspace/small && cat /workspace/small"); out != "ok\n" {
		t.Errorf("after disk full: %q", out)
	}
}

// TestRestart: sandboxes outlive kill -9 of the service; a restarted service
// re-attaches to them, and one that died meanwhile is stopped as lost.
func TestRestart(t *testing.T) {
	s := startService(t)
	keep := s.create()
	keepRunc := s.create("--backend", "runc")
	doomed := s.create("--backend", "runc")
	pid := strings.TrimSpace(s.must("sandbox", "exec", "--detach", keep, "--", "sh", "-c", "echo one; sleep 2; echo two; sleep 60"))

	s.kill9()
	// While the service is down, one sandbox dies.
	out, err := exec.Command("runc", "--root", filepath.Join(s.dataDir, "runtime", "runc", "runtime"), "kill", doomed, "KILL").CombinedOutput()
	if err != nil {
		t.Fatalf("runc kill: %v: %s", err, out)
	}
	time.Sleep(500 * time.Millisecond)
	s.start()

	for _, id := range []string{keep, keepRunc} {
		if out := s.must("sandbox", "exec", id, "--", "echo", "alive"); out != "alive\n" {
			t.Errorf("%s after restart: %q", id, out)
		}
	}
	eventually(t, 10*time.Second, "background process output across the restart", func() (bool, string) {
		out := s.must("sandbox", "logs", keep, pid)
		return out == "one\ntwo\n", out
	})
	ls := s.must("sandbox", "ls", "--all")
	for _, line := range strings.Split(ls, "\n") {
		if strings.HasPrefix(line, doomed) && !(strings.Contains(line, "stopped") && strings.Contains(line, "lost")) {
			t.Errorf("dead sandbox not stopped/lost: %s", line)
		}
		if strings.HasPrefix(line, keep) && !strings.Contains(line, "running") {
			t.Errorf("surviving sandbox: %s", line)
		}
	}
	if !strings.Contains(ls, doomed) {
		t.Errorf("dead sandbox missing from ls:\n%s", ls)
	}
}

// TestExpiry: TTL and idle timeout end sandboxes with their reasons; a
// running process counts as activity.
func TestExpiry(t *testing.T) {
	s := startService(t)
	ttl := s.create("--ttl", "1s", "--on-expire", "delete")
	idle := s.create("--idle-timeout", "1500ms", "--on-expire", "delete")
	busy := s.create("--idle-timeout", "1500ms", "--on-expire", "delete")
	s.must("sandbox", "exec", "--detach", busy, "--", "sleep", "4")
	state := func(id string) string {
		out := s.must("sandbox", "show", id)
		return out
	}
	eventually(t, 15*time.Second, "TTL expiry", func() (bool, string) {
		st := state(ttl)
		return strings.Contains(st, "stopped") && strings.Contains(st, "ttl_expired"), st
	})
	eventually(t, 15*time.Second, "idle expiry", func() (bool, string) {
		st := state(idle)
		return strings.Contains(st, "idle_timeout"), st
	})
	// busy runs sleep 4: alive for 4s although no API call touches it.
	time.Sleep(2 * time.Second)
	if st := state(busy); !strings.Contains(st, "running") {
		t.Fatalf("a sandbox with a running process was idled:\n%s", st)
	}
	eventually(t, 15*time.Second, "idle expiry after the process ends", func() (bool, string) {
		st := state(busy)
		return strings.Contains(st, "idle_timeout"), st
	})
	r := s.run("sandbox", "exec", ttl, "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "ttl_expired") {
		t.Errorf("exec in expired sandbox: %s", r)
	}
}

// TestParallel: 20 sandboxes created at once all work, each with its own
// files.
func TestParallel(t *testing.T) {
	s := startService(t)
	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.run("sandbox", "create", "--memory", "128M")
			if r.code != 0 {
				errs <- r.String()
				return
			}
			id := strings.TrimSpace(r.stdout)
			ids[i] = id
			r = s.run("sandbox", "exec", id, "--", "sh", "-c", fmt.Sprintf("echo %d > /tmp/mine; sleep 0.2; cat /tmp/mine", i))
			if r.code != 0 || r.stdout != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Sprintf("sandbox %d: %s", i, r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestBadInput: every mistake gets a clear error and changes nothing.
func TestBadInput(t *testing.T) {
	s := startService(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sandbox", "exec", "nosuchbox", "--", "true"}, 1, "sandbox nosuchbox not found"},
		{[]string{"sandbox", "rm", "nosuchbox"}, 1, "sandbox nosuchbox not found"},
		{[]string{"sandbox", "create", "--memory", "12parsecs"}, 2, "--memory 12parsecs: not a size"},
		{[]string{"sandbox", "create", "--ttl", "soon"}, 2, "--ttl soon: not a duration"},
		{[]string{"sandbox", "create", "--disk", "1M"}, 1, "disk 1 MiB is too small"},
		{[]string{"sandbox", "create", "--backend", "docker"}, 1, `unknown backend "docker"`},
		{[]string{"sandbox", "create", "--image", "oci:/no/such/layout"}, 1, "/no/such/layout"},
		{[]string{"sandbox", "create", "--image", "127.0.0.1:1/nosuch:1"}, 1, "127.0.0.1:1"},
		{[]string{"sandbox", "kill", "x", "notapid"}, 1, "sandbox x not found"}, // a tag is looked up in the sandbox
		{[]string{"sandbox", "cp", "a", "b"}, 2, "ID:/path"},
	}
	for _, c := range cases {
		r := s.run(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("reins %s:\n%s\nwant exit %d and %q", strings.Join(c.args, " "), r, c.code, c.want)
		}
	}
	r := s.runEnv([]string{"REINS_TOKEN=wrong"}, "sandbox", "ls")
	if r.code != 1 || !strings.Contains(r.stderr, "token") {
		t.Errorf("wrong token: %s", r)
	}
	if ls := s.must("sandbox", "ls", "--all", "--json"); strings.TrimSpace(ls) != "[]" {
		t.Errorf("bad input left sandboxes behind: %s", ls)
	}
	// A cp source that does not exist in the sandbox.
	id := s.create()
	r = s.run("sandbox", "cp", id+":/no/such/file", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "/no/such/file") {
		t.Errorf("cp of a missing file: %s", r)
	}
}

// TestFrozenExecutor: an executor that does not answer fails the call within
// the service's deadline, with a message; it never hangs.
func TestFrozenExecutor(t *testing.T) {
	s := startService(t, "--executor-timeout", "2s")
	id := s.create("--backend", "runc")
	runc := func(verb string) {
		out, err := exec.Command("runc", "--root", filepath.Join(s.dataDir, "runtime", "runc", "runtime"), verb, id).CombinedOutput()
		if err != nil {
			t.Fatalf("runc %s: %v: %s", verb, err, out)
		}
	}
	runc("pause")
	t0 := time.Now()
	r := s.run("sandbox", "exec", id, "--", "true")
	took := time.Since(t0)
	if r.code != 1 || !strings.Contains(r.stderr, "did not answer") || took > 15*time.Second {
		t.Errorf("exec in a frozen sandbox took %s: %s", took, r)
	}
	r = s.run("sandbox", "cp", id+":/etc/passwd", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "did not answer") {
		t.Errorf("cp from a frozen sandbox: %s", r)
	}
	runc("resume")
	if out := s.must("sandbox", "exec", id, "--", "echo", "thawed"); out != "thawed\n" {
		t.Errorf("after resume: %q", out)
	}
}

// TestExecInterrupt: Ctrl-C on exec reaches the command's process group,
// as it would in a local shell.
func TestExecInterrupt(t *testing.T) {
	s := startService(t)
	id := s.create()
	cmd := exec.Command(filepath.Join(binDir, "reins"), "sandbox", "exec", id, "--",
		"sh", "-c", `trap "echo got INT; exit 7" INT; echo ready; while true; do sleep 0.1; done`)
	cmd.Env = append(os.Environ(), "REINS_URL="+s.url, "REINS_TOKEN="+s.token)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "ready") {
		t.Fatalf("no ready line: %q", buf[:n])
	}
	cmd.Process.Signal(os.Interrupt)
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || !strings.Contains(string(rest), "got INT") {
		t.Errorf("after Ctrl-C: %v, output %q", err, rest)
	}
}

// TestExecTTY: with -t, Ctrl-C and Ctrl-D typed at the client's terminal
// reach the command's terminal in the sandbox, whose line discipline makes
// them SIGINT and end-of-file (Debian's 2022 runsc lost both).
func TestExecTTY(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend)
			for _, tc := range []struct {
				name, script, key string
				code              int
			}{
				{"ctrl-c", `echo ready; sleep 1000; echo after`, "\x03", 130},
				{"ctrl-d", `echo ready; cat; echo eof`, "\x04", 0},
			} {
				t.Run(tc.name, func(t *testing.T) {
					out, code := s.execTTY(t, id, tc.script, tc.key)
					if code != tc.code || strings.Contains(out, "after") || (tc.name == "ctrl-d" && !strings.Contains(out, "eof")) {
						t.Errorf("after %q: exit %d, output %q; want exit %d", tc.key, code, out, tc.code)
					}
				})
			}
		})
	}
}

// execTTY runs `reins sandbox exec -t ID -- sh -c script` on a pseudo
// terminal, types key once the script says "ready", and returns what the
// terminal showed and the exit code.
func (s *service) execTTY(t *testing.T, id, script, key string) (string, int) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	cmd := exec.Command(filepath.Join(binDir, "reins"), "sandbox", "exec", "-t", id, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "REINS_URL="+s.url, "REINS_TOKEN="+s.token)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var mu sync.Mutex
	var shown bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			shown.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	eventually(t, 2*time.Minute, "the command says ready", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(shown.String(), "ready"), shown.String()
	})
	if _, err := ptmx.Write([]byte(key)); err != nil {
		t.Fatal(err)
	}
	var werr error
	select {
	case werr = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("exec -t still runs after %q; the terminal shows %q", key, shown.String())
	}
	ptmx.Close()
	<-read
	code := 0
	if ee, ok := werr.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if werr != nil {
		t.Fatal(werr)
	}
	mu.Lock()
	defer mu.Unlock()
	return shown.String(), code
}

// TestDebianCoreutils: GNU coreutils work in the debian image under gVisor
// (Debian's 2022 runsc failed statx, so `ls -la /` and `stat /` said
// "Invalid argument"). Building the image takes about a minute.
func TestDebianCoreutils(t *testing.T) {
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	s := startService(t)
	id := s.create("--image", "debian")
	for _, argv := range [][]string{{"ls", "-la", "/"}, {"stat", "/"}, {"stat", "-c", "%s %U", "/etc/debian_version"}} {
		r := s.run(append([]string{"sandbox", "exec", id, "--"}, argv...)...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%s: %s", strings.Join(argv, " "), r)
		}
	}
	if out := s.must("sandbox", "show", id); !strings.Contains(out, "runsc "+gvisor.Version+", platform systrap") && os.Getenv("REINS_RUNSC") == "" {
		t.Errorf("sandbox show does not name the pinned runsc:\n%s", out)
	}
}
