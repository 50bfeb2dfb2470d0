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
	if n, _ := strconv.Atoi(resp["memory_bytes"].(string)); n <= 0 {
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
