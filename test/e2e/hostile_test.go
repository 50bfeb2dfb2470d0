package e2e

// The hostile-input suite: each test plays one thing a sandbox or a tenant
// controls against the host, the way the containment review did, and
// checks the host is untouched. Other hostile_*_test.go files hold the
// rest (names, archives, exec, runc).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hostSocket listens on a unix socket on the host, the kind a planted
// symlink would aim at, and counts the connections it gets.
func hostSocket(t *testing.T) (path string, conns *atomic.Int64) {
	t.Helper()
	dir, err := os.MkdirTemp("", "rhost")
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "host.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done; os.RemoveAll(dir) })
	return path, conns
}

func randName(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// TestHostileRunDirSymlinks covers findings 1 and 3 of the containment
// review (and the wake path of 2): a process in the sandbox replaces
// /.reins/run/token with a symlink to a host file, the executor's socket
// with a symlink to a host socket, and the parent of its workdir with a
// symlink to a host directory; the run then waits for approval long enough that its
// sandbox is suspended, and approving starts the sandbox again on its
// files. The host file keeps its bytes, the host socket gets no
// connection, no host directory is made, and the run carries on.
func TestHostileRunDirSymlinks(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t, "--release-after", "1s")
			victimDir := t.TempDir()
			victim := filepath.Join(victimDir, "victim")
			if err := os.WriteFile(victim, []byte("precious host bytes\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			hostSock, conns := hostSocket(t)
			// An existing host directory: the old code's MkdirAll walked
			// the sandbox's /w -> hostDir symlink and made hostDir/made.
			hostDir := t.TempDir()
			madeDir := filepath.Join(hostDir, "made")
			sb := s.create("--backend", backend, "--workdir", "/w/made")

			plant := strings.Join([]string{
				"echo data > /kept.txt",
				"ln -sf " + victim + " /.reins/run/token",
				"rm -f /.reins/run/executor.sock",
				"ln -s " + hostSock + " /.reins/run/executor.sock",
				"cd / && rm -rf /w",
				"ln -s " + hostDir + " /w",
				"ls -la /.reins/run/ /w",
			}, " && ")
			pol := writePolicy(t, "rules:\n  - name: hold\n    tool: bash\n    match: {command: after-wake}\n    action: ask\n")
			script := writeScript(t,
				bash(plant),
				bash("echo after-wake; cat /kept.txt"),
				map[string]any{"expect": "data", "text": "done"})
			id := strings.TrimSpace(s.must("run", "--detach", "--in", sb, "--policy", pol, "--model", "script:"+script, "plant symlinks"))
			waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
			eventually(t, 30*time.Second, "the run's sandbox is suspended", func() (bool, string) {
				ls := s.must("sandbox", "ls")
				return strings.Contains(ls, sb) && strings.Contains(ls, "suspended"), ls
			})
			s.must("runs", "approve", id)
			var status string
			eventually(t, 60*time.Second, "the run ends", func() (bool, string) {
				status = runStatus(s, id)
				return status == "RUN_STATUS_SUCCEEDED" || status == "RUN_STATUS_FAILED", status
			})

			if got, _ := os.ReadFile(victim); string(got) != "precious host bytes\n" {
				t.Errorf("the host file behind the planted token symlink was written: %q", got)
			}
			if n := conns.Load(); n != 0 {
				t.Errorf("the host socket behind the planted symlink got %d connections", n)
			}
			if _, err := os.Lstat(madeDir); err == nil {
				t.Errorf("the host directory %s behind the planted /w symlink was made", madeDir)
			}
			if status != "RUN_STATUS_SUCCEEDED" {
				t.Errorf("the run %s, want succeeded:\n%s", status, s.must("runs", "events", id))
			}
			if ev := s.must("runs", "events", id); !strings.Contains(ev, "sandbox_resumed") {
				t.Errorf("no sandbox_resumed event:\n%s", ev)
			}
		})
	}
}

// TestHostileSocketSymlink covers finding 2: once the sandbox replaced its
// executor's socket with a symlink to a host socket, neither a new
// connection for a bulk transfer nor the re-attach after a restart of the
// service reaches the host socket. The sandbox, which cut its own
// executor off, is reported lost; the service goes on serving.
func TestHostileSocketSymlink(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			hostSock, conns := hostSocket(t)
			id := s.create("--backend", backend)
			s.must("sandbox", "exec", id, "--", "sh", "-c",
				"rm -f /.reins/run/executor.sock && ln -s "+hostSock+" /.reins/run/executor.sock")

			// A bulk transfer opens a connection of its own.
			src := filepath.Join(t.TempDir(), "f.txt")
			os.WriteFile(src, []byte("hello"), 0o644)
			r := s.run("sandbox", "cp", src, id+":/workspace/")
			if n := conns.Load(); n != 0 {
				t.Fatalf("cp dialled the host socket (%d connections): %s", n, r)
			}
			if r.code == 0 {
				t.Logf("cp went over a connection opened before the plant: %s", r)
			}
			if strings.Contains(r.stderr, s.dataDir) {
				t.Errorf("the error names a host path: %s", r.stderr)
			}

			s.kill9()
			s.start()
			eventually(t, 30*time.Second, "the sandbox is reported lost", func() (bool, string) {
				ls := s.must("sandbox", "ls", "--all")
				return strings.Contains(ls, id) && strings.Contains(ls, "lost"), ls
			})
			if n := conns.Load(); n != 0 {
				t.Fatalf("re-attach after a restart dialled the host socket (%d connections)", n)
			}
			// The service serves on.
			id2 := s.create("--backend", backend)
			if out := s.must("sandbox", "exec", id2, "--", "echo", "ok"); strings.TrimSpace(out) != "ok" {
				t.Errorf("exec after the hostile sandbox: %q", out)
			}
		})
	}
}

// TestHostileWorkdir covers finding 3: a workdir with .. elements is
// refused before anything is made, and no host directory appears.
func TestHostileWorkdir(t *testing.T) {
	s := startService(t)
	name := randName("reins-workdir-")
	t.Cleanup(func() { os.RemoveAll(filepath.Join("/tmp", name)) })
	for _, w := range []string{
		"/../../../../../../tmp/" + name,
		"/workspace/../../../../../../../tmp/" + name,
		"relative/" + name,
		"/" + strings.Repeat("a", 2000),
	} {
		r := s.run("sandbox", "create", "--workdir", w)
		if r.code == 0 {
			t.Errorf("create --workdir %.40q succeeded: %s", w, r)
			s.run("sandbox", "rm", strings.TrimSpace(r.stdout))
			continue
		}
		if !strings.Contains(r.stderr, "workdir") || strings.Contains(r.stderr, s.dataDir) {
			t.Errorf("create --workdir %.40q: want an error about the workdir that names no host path: %s", w, r)
		}
	}
	if _, err := os.Lstat(filepath.Join("/tmp", name)); err == nil {
		t.Errorf("/tmp/%s was made on the host", name)
	}
	// A clean absolute workdir is made inside the sandbox and used.
	id := s.create("--workdir", "/srv/"+name)
	if out := strings.TrimSpace(s.must("sandbox", "exec", id, "--", "pwd")); out != "/srv/"+name {
		t.Errorf("pwd in the workdir: %q", out)
	}
}

// TestHostileDataDir covers finding 9: the service's files are private
// (the data dir 0700, the database and its WAL 0600), and a second serve
// on the same data dir refuses, naming the first one's pid, before it
// touches anything.
func TestHostileDataDir(t *testing.T) {
	s := startService(t)
	script := writeScript(t, bash("echo hi"), map[string]any{"text": "done"})
	s.must("run", "--model", "script:"+script, "write some events")

	// An older version left the data dir world-traversable; a restart
	// makes it private.
	s.stop()
	os.Chmod(s.dataDir, 0o755)
	s.start()
	want := map[string]os.FileMode{"": 0o700, "reins.db": 0o600, "reins.db-wal": 0o600, "reins.db-shm": 0o600, "admin.token": 0o600}
	for name, mode := range want {
		fi, err := os.Stat(filepath.Join(s.dataDir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("data dir entry %q is %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, filepath.Join(binDir, "reins"), "serve", "--data-dir", s.dataDir, "--addr", freeAddr(t))
	out, err := second.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("a second serve on the same data dir started and served:\n%s", out)
	}
	if err == nil {
		t.Fatalf("a second serve on the same data dir exited 0:\n%s", out)
	}
	if !strings.Contains(string(out), "in use") || !strings.Contains(string(out), fmt.Sprint(s.cmd.Process.Pid)) {
		t.Errorf("the second serve's refusal should say the dir is in use and name pid %d:\n%s", s.cmd.Process.Pid, out)
	}
	// The first one serves on, its sandboxes untouched.
	s.must("sandbox", "ls")
}

// TestOOMKilledRecordCountsIt: a sandbox the memory limit killed whole
// (gVisor's sentry is one process to the host's OOM killer) is stopped as
// oom_killed and its record counts the kill, instead of "oom kills: 0".
func TestOOMKilledRecordCountsIt(t *testing.T) {
	s := startService(t)
	id := s.create("--backend", "gvisor", "--memory", "64M")
	s.run("sandbox", "exec", id, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1")
	var sb struct {
		State    string `json:"state"`
		Reason   string `json:"reason"`
		OOMKills int    `json:"oom_kills"`
	}
	eventually(t, 30*time.Second, "the sandbox is stopped", func() (bool, string) {
		out := s.must("sandbox", "show", "--json", id)
		sb.State = ""
		json.Unmarshal([]byte(out), &sb)
		return sb.State == "SANDBOX_STATE_STOPPED", out
	})
	if sb.Reason != "SANDBOX_REASON_OOM_KILLED" || sb.OOMKills < 1 {
		t.Errorf("a sandbox the memory limit killed: reason %q, oom_kills %d; want oom_killed and at least 1", sb.Reason, sb.OOMKills)
	}
}

// TestRemovedSandboxIsReplaced: a run's sandbox removed under it (by a
// user's rm, its own or an attached one) is gone like a lost one: the run
// logs sandbox_lost, gets a replacement and carries on, instead of failing
// with "sandbox X not found".
func TestRemovedSandboxIsReplaced(t *testing.T) {
	s := startService(t, "--release-after", "1h")
	pol := writePolicy(t, "rules:\n  - name: hold\n    tool: bash\n    match: {command: second}\n    action: ask\n")
	for _, attached := range []bool{false, true} {
		t.Run(fmt.Sprintf("attached=%v", attached), func(t *testing.T) {
			s.t = t
			again := bash("echo again")
			again["expect"] = "was lost"
			script := writeScript(t, bash("echo first"), bash("echo second"), again, map[string]any{"expect": "again", "text": "done"})
			args := []string{"run", "--detach", "--policy", pol, "--model", "script:" + script}
			var sb string
			if attached {
				sb = s.create()
				args = append(args, "--in", sb)
			}
			id := strings.TrimSpace(s.must(append(args, "work")...))
			waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
			if !attached {
				ls := s.must("sandbox", "ls", "--label", "reins.run="+id)
				for _, f := range strings.Fields(ls) {
					if len(f) == 12 {
						sb = f
					}
				}
			}
			if sb == "" {
				t.Fatal("no sandbox to remove")
			}
			s.must("sandbox", "rm", sb)
			s.must("runs", "approve", id)
			waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")
			ev := s.must("runs", "events", id)
			if !strings.Contains(ev, "sandbox_lost") || !strings.Contains(ev, "sandbox_replaced") {
				t.Errorf("no sandbox_lost and sandbox_replaced events:\n%s", ev)
			}
		})
	}
}

// TestHostileControlDir (from the red-team review): the control directory
// and the init's output are the only host files a sandbox reaches; it can
// fill neither past a few KiB of the host's disk, whatever its --disk, nor
// leave a setuid file on the host, and nothing of them outlives it.
func TestHostileControlDir(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--disk", "32M")
			dir := filepath.Join(s.dataDir, "sandboxes", id)
			s.run("sandbox", "exec", id, "--", "dd", "if=/dev/zero", "of=/.reins/run/fill", "bs=1M", "count=200")
			s.run("sandbox", "exec", id, "--", "sh", "-c", "dd if=/dev/zero of=/proc/1/fd/2 bs=1M count=200; dd if=/dev/zero of=/proc/1/fd/1 bs=1M count=200")
			s.run("sandbox", "exec", id, "--", "sh", "-c", "echo x > /.reins/run/suid && chmod 4755 /.reins/run/suid")
			var total int64
			filepath.Walk(filepath.Join(dir, "run"), func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					total += fi.Size()
				}
				return nil
			})
			if total > 64<<10 {
				t.Errorf("the sandbox wrote %d bytes to the host through /.reins/run", total)
			}
			if fi, err := os.Stat(filepath.Join(dir, "init.log")); err == nil && fi.Size() > 64<<10 {
				t.Errorf("the sandbox wrote %d bytes to the host's init.log through /proc/1/fd", fi.Size())
			}
			mi, _ := os.ReadFile("/proc/self/mountinfo")
			found := false
			for _, line := range strings.Split(string(mi), "\n") {
				f := strings.Fields(line)
				if len(f) > 5 && f[4] == filepath.Join(dir, "run") {
					found = true
					for _, opt := range []string{"nosuid", "nodev"} {
						if !strings.Contains(f[5], opt) {
							t.Errorf("the control directory is mounted %s, without %s", f[5], opt)
						}
					}
				}
			}
			if !found {
				t.Errorf("the control directory is not a mount of its own")
			}
			// The sandbox still works: its executor's socket is there.
			if out := s.must("sandbox", "exec", id, "--", "echo", "ok"); out != "ok\n" {
				t.Errorf("exec after the fill: %q", out)
			}
			s.must("sandbox", "rm", id)
			if _, err := os.Lstat(dir); err == nil {
				t.Errorf("%s outlives the sandbox", dir)
			}
		})
	}
}

// repeatByte reads as an endless run of one byte, without holding it.
type repeatByte byte

func (r repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// peakRSS is the service's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestHostileHugeRequest (from the red-team review): a tenant's 96 MiB
// request, and a sandbox spec with thousands of labels, are refused
// before they are held in the service's memory, with an error that does
// not echo them back; the service's peak memory stays far below the
// request's size.
func TestHostileHugeRequest(t *testing.T) {
	s := startService(t)
	tok := s.newTenant("mallory")
	const size = 96 << 20
	body := io.MultiReader(strings.NewReader(`{"id":"`), io.LimitReader(repeatByte('A'), size), strings.NewReader(`"}`))
	req, err := http.NewRequest("POST", s.url+"/reins.v1.SandboxService/Get", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		reply, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || len(reply) > 4096 {
			t.Errorf("a %d MiB request: HTTP %d, %d bytes of reply", size>>20, resp.StatusCode, len(reply))
		}
	}
	if peak := peakRSS(t, s.cmd.Process.Pid); peak > 200<<20 {
		t.Errorf("the service's peak memory reached %d MiB after a %d MiB request", peak>>20, size>>20)
	}
	labels := []string{"sandbox", "create"}
	for i := range 5000 {
		labels = append(labels, "--label", fmt.Sprintf("k%d=%s", i, strings.Repeat("v", 100)))
	}
	if r := s.asTenant(tok, labels...); r.code == 0 || !strings.Contains(r.stderr, "labels") {
		t.Errorf("a sandbox with 5000 labels: %s", r)
	}
	env := []string{"sandbox", "create"}
	for i := range 3 {
		env = append(env, "--env", fmt.Sprintf("BIG%d=%s", i, strings.Repeat("e", 100<<10)))
	}
	if r := s.asTenant(tok, env...); r.code == 0 || !strings.Contains(r.stderr, "env of 3 variables") || len(r.stderr) > 4096 {
		t.Errorf("a sandbox with 300 KiB of env: %.300s", r)
	}
	// The service serves on.
	s.must("sandbox", "ls")
}

// TestHostileLimits (from the red-team review): a tenant cannot ask for
// more than the operator allows (--tenant-max-*), nor anyone for a disk
// past what ext4 holds; the refusal comes before anything is made and
// names no host path.
func TestHostileLimits(t *testing.T) {
	s := startService(t, "--tenant-max-memory", "2G", "--tenant-max-disk", "8G")
	tok := s.newTenant("greedy")
	for _, args := range [][]string{{"--disk", "8T"}, {"--memory", "64G"}, {"--cpus", "64"}, {"--pids", "10000000"}} {
		r := s.asTenant(tok, append([]string{"sandbox", "create"}, args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "more than a tenant's sandbox may have") || strings.Contains(r.stderr, s.dataDir) {
			t.Errorf("tenant create %v: %s", args, r)
		}
	}
	if r := s.run("sandbox", "create", "--disk", "100T"); r.code == 0 || !strings.Contains(r.stderr, "more than any sandbox may have") || strings.Contains(r.stderr, s.dataDir) {
		t.Errorf("admin create --disk 100T: %s", r)
	}
	if ls := s.asTenant(tok, "sandbox", "ls", "--all"); strings.Contains(ls.stdout, "stopped") {
		t.Errorf("refused creates left records:\n%s", ls.stdout)
	}
	// Within the limits, it works.
	id := strings.TrimSpace(s.asTenant(tok, "sandbox", "create", "--memory", "1G", "--disk", "4G").stdout)
	if out := s.asTenant(tok, "sandbox", "exec", id, "--", "echo", "ok"); out.stdout != "ok\n" {
		t.Errorf("a sandbox within the limits: %s", out)
	}
}

// TestHostileImagePull (from the red-team review): a tenant's image ref
// that names a registry on loopback makes the service dial nothing there
// (it is no proxy into the host), and the refusal quotes no answer of it.
func TestHostileImagePull(t *testing.T) {
	var hits atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "db_password=hunter2", http.StatusUnauthorized)
	}))
	defer internal.Close()
	host := strings.TrimPrefix(internal.URL, "http://")
	s := startService(t)
	tok := s.newTenant("ssrf")
	r := s.asTenant(tok, "sandbox", "create", "--image", host+"/foo:bar")
	if r.code == 0 || hits.Load() != 0 || strings.Contains(r.stderr, "hunter2") {
		t.Errorf("a tenant's pull from %s: %d requests reached it: %s", host, hits.Load(), r)
	}
	// The operator's pull does reach it (and fails there).
	s.run("sandbox", "create", "--image", host+"/foo:bar")
	if hits.Load() == 0 {
		t.Errorf("the operator's pull did not reach %s: the test proves nothing", host)
	}
}
