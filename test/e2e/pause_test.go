package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/sandbox/gvisor"
)

// pauseWork is what a paused sandbox must keep: a counter in memory that
// appends each count to a file it holds open, and a listener on 8080
// that answers with the current count.
const (
	pauseCounter  = `i=0; exec 3>>/workspace/count.log; while :; do i=$((i+1)); echo $i > /tmp/n; echo $i >&3; sleep 0.2; done`
	pauseListener = `nc -ll -p 8080 -e /bin/cat /tmp/n`
)

// pauseCounts reads count.log in the sandbox: it must be 1, 2, 3, …
// (the counter neither restarted nor lost its file's place).
func pauseCounts(t *testing.T, s *service, id string) int {
	t.Helper()
	out := s.must("sandbox", "exec", id, "--", "sh", "-c", "cat /workspace/count.log 2>/dev/null; true")
	lines := strings.Fields(out)
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("count.log line %d is %q: the counter restarted or lost its place:\n%s", i+1, l, out)
		}
	}
	return len(lines)
}

func waitPauseCount(t *testing.T, s *service, id string, over int) int {
	t.Helper()
	n := 0
	eventually(t, 20*time.Second, "the counter counts", func() (bool, string) {
		n = pauseCounts(t, s, id)
		return n > over, strconv.Itoa(n)
	})
	return n
}

// pausedClean fails if paused sandbox id still has a container in runsc
// or a loop device on its disk, or if its memory image is not kept where
// only the host reaches it.
func pausedClean(t *testing.T, s *service, id string) {
	t.Helper()
	dir := filepath.Join(s.dataDir, "sandboxes", id)
	img := filepath.Join(dir, "disk.img")
	if _, err := os.Stat(img); err != nil {
		t.Errorf("a paused sandbox's disk.img: %v, want kept", err)
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && strings.HasPrefix(strings.TrimSpace(string(data)), img) {
			t.Errorf("%s is still backed by the paused sandbox's disk", f)
		}
	}
	if m := mountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts of the paused sandbox: %v", m)
	}
	out, err := exec.Command(gvisor.DefaultRunsc(), "--root", filepath.Join(s.dataDir, "runtime", "gvisor", "runtime"), "state", id).CombinedOutput()
	if err == nil {
		t.Errorf("runsc state %s after the pause: the container is still there: %s", id, out)
	}
	fi, err := os.Lstat(filepath.Join(dir, "checkpoint"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the memory image's directory: %v, %v; want a 0700 directory", fi, err)
	}
}

// TestPauseResume: on gvisor a paused sandbox holds no runtime, mount or
// loop device; resume continues its processes (the counter goes on from
// where it was, its open file's offset kept) and its listener answers;
// a restart of the service keeps a paused sandbox; bad inputs are refused
// in words.
func TestPauseResume(t *testing.T) {
	s := startService(t)
	id := s.create("--backend", "gvisor", "--memory", "256M")
	s.must("sandbox", "exec", "--detach", id, "--", "sh", "-c", pauseCounter)
	s.must("sandbox", "exec", "--detach", id, "--", "sh", "-c", pauseListener)
	waitPauseCount(t, s, id, 3)

	out := s.must("sandbox", "pause", id)
	if !strings.Contains(out, id+" paused: memory image ") {
		t.Errorf("pause printed %q", out)
	}
	sb := sandboxJSON(t, s, id)
	if sb["state"] != "SANDBOX_STATE_PAUSED" {
		t.Fatalf("paused sandbox: state %v", sb["state"])
	}
	pausedClean(t, s, id)
	if r := s.run("sandbox", "pause", id); r.code == 0 || !strings.Contains(r.stderr, "already paused") {
		t.Errorf("pause of a paused sandbox: %s", r)
	}

	resumeAndCheck := func(what string) {
		t.Helper()
		if out := s.must("sandbox", "resume", id); out != id+" running\n" {
			t.Errorf("%s: resume printed %q", what, out)
		}
		saved := pauseCounts(t, s, id)
		if saved < 3 {
			t.Fatalf("%s: count.log has %d counts after the resume: the counter's file was not kept", what, saved)
		}
		waitPauseCount(t, s, id, saved+2)
		got, err := strconv.Atoi(strings.TrimSpace(s.must("sandbox", "exec", id, "--", "nc", "127.0.0.1", "8080")))
		if err != nil || got < saved {
			t.Errorf("%s: the listener answered %d (%v), want the count, at least %d", what, got, err, saved)
		}
	}
	resumeAndCheck("resume")
	evs := s.must("sandbox", "events", id)
	for _, k := range []string{"paused", "resumed"} {
		if !strings.Contains(evs, " "+k) {
			t.Errorf("events lack %s:\n%s", k, evs)
		}
	}

	// Paused across a restart of the service, with --json.
	var resp map[string]any
	if err := json.Unmarshal([]byte(s.must("sandbox", "pause", id, "--json")), &resp); err != nil {
		t.Fatal(err)
	}
	if n := anyInt(resp["memory_bytes"]); n <= 0 {
		t.Errorf("pause --json: memory_bytes %v", resp["memory_bytes"])
	}
	s.stop()
	s.start()
	if sb := sandboxJSON(t, s, id); sb["state"] != "SANDBOX_STATE_PAUSED" {
		t.Fatalf("after a restart: state %v, want paused", sb["state"])
	}
	resumeAndCheck("resume after a restart")
	s.must("sandbox", "rm", id)
}

// TestPauseRunc: runc cannot keep memory: pause says what to do, and
// --or-suspend suspends instead.
func TestPauseRunc(t *testing.T) {
	s := startService(t)
	id := s.create("--backend", "runc")
	r := s.run("sandbox", "pause", id)
	want := "the runc backend cannot keep a sandbox's memory: suspend it instead (reins sandbox suspend " + id + ") or pass --or-suspend"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("pause on runc: %s, want %q", r, want)
	}
	out := s.must("sandbox", "pause", id, "--or-suspend")
	if !strings.Contains(out, id+" suspended instead") {
		t.Errorf("pause --or-suspend printed %q", out)
	}
	if sb := sandboxJSON(t, s, id); sb["state"] != "SANDBOX_STATE_SUSPENDED" {
		t.Errorf("after pause --or-suspend: state %v", sb["state"])
	}
	s.must("sandbox", "resume", id)
	s.must("sandbox", "rm", id)
}

// TestForkMemory: `sandbox fork --memory` carries the source's processes
// and memory into each fork (the counter goes on counting there, from
// where the source was, and a file in the in-memory /tmp is there), each
// fork its own sandbox (a write in one is not in the other, nor in the
// source) while the source keeps counting; a fork of files only has the
// counter's file but no counter, and --memory on runc is refused.
func TestForkMemory(t *testing.T) {
	s := startService(t)
	id := s.create("--backend", "gvisor", "--memory", "256M")
	s.must("sandbox", "exec", id, "--", "sh", "-c", "echo in-memory > /tmp/mark")
	s.must("sandbox", "exec", "--detach", id, "--", "sh", "-c", pauseCounter)
	before := waitPauseCount(t, s, id, 3)

	forks := strings.Fields(s.must("sandbox", "fork", id, "--count", "2", "--memory"))
	if len(forks) != 2 || forks[0] == forks[1] || forks[0] == id || forks[1] == id {
		t.Fatalf("fork --memory --count 2 printed %q", forks)
	}
	for _, f := range forks {
		if got := pauseCounts(t, s, f); got < before {
			t.Errorf("fork %s: count.log has %d counts, want the source's %d at least", f, got, before)
		}
		n := pauseCounts(t, s, f)
		waitPauseCount(t, s, f, n+2) // its counter runs, in order, from the source's count
		if out := s.must("sandbox", "exec", f, "--", "cat", "/tmp/mark"); out != "in-memory\n" {
			t.Errorf("fork %s: /tmp/mark (gVisor's in-memory /tmp) is %q, want the source's", f, out)
		}
	}
	s.must("sandbox", "exec", forks[0], "--", "sh", "-c", "echo mine > /workspace/only0")
	for _, other := range []string{forks[1], id} {
		if r := s.run("sandbox", "exec", other, "--", "cat", "/workspace/only0"); r.code == 0 {
			t.Errorf("%s sees fork %s's file", other, forks[0])
		}
	}
	waitPauseCount(t, s, id, pauseCounts(t, s, id)+2) // the source goes on

	files := strings.Fields(s.must("sandbox", "fork", id))
	if len(files) != 1 {
		t.Fatalf("fork printed %q", files)
	}
	n := pauseCounts(t, s, files[0])
	time.Sleep(time.Second)
	if again := pauseCounts(t, s, files[0]); n == 0 || again != n {
		t.Errorf("a fork of files only: count.log had %d then %d counts; want the source's file, and no counter", n, again)
	}

	rc := s.create("--backend", "runc")
	if r := s.run("sandbox", "fork", rc, "--memory"); r.code == 0 || !strings.Contains(r.stderr, "memory") {
		t.Errorf("fork --memory on runc: %s, want a refusal that says it cannot keep memory", r)
	}
	for _, x := range append(append(forks, files...), id, rc) {
		s.must("sandbox", "rm", x)
	}
}
