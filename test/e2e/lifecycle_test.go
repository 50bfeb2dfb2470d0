package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reinsdev/reins/sandbox/gvisor"
)

// TestDeathIsNoticedAtOnce: a sandbox killed behind the service's back is
// listed as stopped (with its reason) as soon as it dies, through its
// backend's wait, not at the next periodic check (here an hour away).
func TestDeathIsNoticedAtOnce(t *testing.T) {
	s := startService(t, "--check-interval", "1h")
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend)
			runtime := map[string]string{"gvisor": gvisor.DefaultRunsc(), "runc": "runc"}[backend]
			out, err := exec.Command(runtime, "--root", filepath.Join(s.dataDir, "runtime", backend, "runtime"), "kill", id, "KILL").CombinedOutput()
			if err != nil {
				t.Fatalf("%s kill: %v: %s", runtime, err, out)
			}
			eventually(t, 15*time.Second, "the killed sandbox is listed as stopped", func() (bool, string) {
				for _, line := range strings.Split(s.must("sandbox", "ls"), "\n") {
					if strings.HasPrefix(line, id) {
						return strings.Contains(line, "stopped"), line
					}
				}
				return false, "not listed"
			})
		})
	}
}

// writeTree writes what a workspace must keep exactly: modes, a symlink, a
// hard link, an empty directory, and a file of the image deleted.
const writeTree = `mkdir -p /workspace/d/empty && printf 'hello\n' > /workspace/d/f && chmod 640 /workspace/d/f &&
ln -s d/f /workspace/link && ln /workspace/d/f /workspace/hard && rm /bin/ls && echo "$SECRET_ENV" > /workspace/late`

// checkTree prints what writeTree made, as a sandbox sees it.
const checkTree = `stat -c '%a %h' /workspace/d/f; readlink /workspace/link; cat /workspace/hard /workspace/late; test -d /workspace/d/empty && echo empty-dir; test -e /bin/ls && echo ls-back; echo $SECRET_ENV`

const wantTree = "640 2\nd/f\nhello\nkept\nempty-dir\nkept\n"

// suspendedClean fails if sandbox id of s still has a disk image, a loop
// device on it, or a container in its backend's runtime.
func suspendedClean(t *testing.T, s *service, backend, id string) {
	t.Helper()
	img := filepath.Join(s.dataDir, "sandboxes", id, "disk.img")
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("a suspended sandbox's disk.img: %v, want gone", err)
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && strings.HasPrefix(strings.TrimSpace(string(data)), img) {
			t.Errorf("%s is still backed by the suspended sandbox's disk", f)
		}
	}
	runtime := map[string]string{"gvisor": gvisor.DefaultRunsc(), "runc": "runc"}[backend]
	out, err := exec.Command(runtime, "--root", filepath.Join(s.dataDir, "runtime", backend, "runtime"), "state", id).CombinedOutput()
	if err == nil {
		t.Errorf("%s state %s after the suspend: the container is still there: %s", runtime, id, out)
	}
}

func sandboxJSON(t *testing.T, s *service, id string) map[string]any {
	t.Helper()
	var sb map[string]any
	if err := json.Unmarshal([]byte(s.must("sandbox", "show", id, "--json")), &sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestSuspendResume: suspend saves the files and deletes the guest, its
// disk and its loop device; resume brings back the same sandbox (id,
// labels, limits, env, network rules) with the files exact; a restart of
// the service keeps a suspended sandbox and a snapshot; bad inputs are
// refused in words.
func TestSuspendResume(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--label", "team=a", "--memory", "300M", "--env", "SECRET_ENV=kept",
				"--allow-host", "example.com")
			s.must("sandbox", "exec", id, "--", "sh", "-c", writeTree)
			before := sandboxJSON(t, s, id)
			out := s.must("sandbox", "suspend", id)
			if !strings.Contains(out, id+" suspended: workspace ") || !strings.Contains(out, " files, ") {
				t.Errorf("suspend printed %q", out)
			}
			sb := sandboxJSON(t, s, id)
			if sb["state"] != "SANDBOX_STATE_SUSPENDED" || sb["workspace"] == nil {
				t.Errorf("suspended sandbox: state %v workspace %v", sb["state"], sb["workspace"])
			}
			suspendedClean(t, s, backend, id)
			// Suspending again changes nothing; forking or snapshotting
			// a suspended sandbox says to resume it first.
			s.must("sandbox", "suspend", id)
			if r := s.run("sandbox", "fork", id); r.code == 0 || !strings.Contains(r.stderr, "resume it first") {
				t.Errorf("fork of a suspended sandbox: %s", r)
			}
			if r := s.run("sandbox", "snapshot", id, "--name", "x"); r.code == 0 || !strings.Contains(r.stderr, "resume it first") {
				t.Errorf("snapshot of a suspended sandbox: %s", r)
			}

			if out := s.must("sandbox", "resume", id); out != id+" running\n" {
				t.Errorf("resume printed %q", out)
			}
			if got := s.must("sandbox", "exec", id, "--", "sh", "-c", checkTree); got != wantTree {
				t.Errorf("after suspend and resume the files read %q, want %q", got, wantTree)
			}
			after := sandboxJSON(t, s, id)
			for _, k := range []string{"id", "spec"} {
				b, _ := json.Marshal(before[k])
				a, _ := json.Marshal(after[k])
				if string(a) != string(b) {
					t.Errorf("%s after the resume: %s, before: %s", k, a, b)
				}
			}
			if r := s.run("sandbox", "resume", id); r.code == 0 || !strings.Contains(r.stderr, "nothing to resume") {
				t.Errorf("resume of a running sandbox: %s", r)
			}
			evs := s.must("sandbox", "events", id)
			for _, k := range []string{"created", "suspended", "resumed"} {
				if !strings.Contains(evs, " "+k) {
					t.Errorf("events lack %s:\n%s", k, evs)
				}
			}

			// A restart keeps the suspended sandbox and the snapshot.
			s.must("sandbox", "snapshot", id, "--name", "keep-"+backend)
			s.must("sandbox", "suspend", id)
			s.stop()
			s.start()
			if !strings.Contains(s.must("snapshot", "ls"), "keep-"+backend) {
				t.Errorf("snapshot keep-%s gone after a restart", backend)
			}
			s.must("sandbox", "resume", id)
			if got := s.must("sandbox", "exec", id, "--", "sh", "-c", checkTree); got != wantTree {
				t.Errorf("resumed after a restart: %q, want %q", got, wantTree)
			}
			s.must("sandbox", "rm", id)
			s.must("snapshot", "rm", "keep-"+backend)
			// A stopped sandbox cannot be snapshot.
			if r := s.run("sandbox", "resume", id); r.code == 0 || !strings.Contains(r.stderr, "not found") {
				t.Errorf("resume of a removed sandbox: %s", r)
			}
		})
	}
}

// TestExpirySuspends: a TTL that runs out suspends the sandbox with the
// reason ttl_expired, after an expiring event; resume brings it back; with
// --on-expire delete it is stopped instead, and a stopped sandbox cannot
// be snapshot.
func TestExpirySuspends(t *testing.T) {
	s := startService(t, "--expiry-warning", "500ms")
	id := s.create("--ttl", "4s", "--expiry-warning", "3s")
	s.must("sandbox", "exec", id, "--", "sh", "-c", "echo before > /workspace/f")
	gone := s.create("--ttl", "2s", "--on-expire", "delete")
	idle := s.create("--idle-timeout", "1500ms")
	eventually(t, 20*time.Second, "the TTL suspends it", func() (bool, string) {
		sb := sandboxJSON(t, s, id)
		return sb["state"] == "SANDBOX_STATE_SUSPENDED" && sb["suspended_reason"] == "SANDBOX_REASON_TTL_EXPIRED", fmt.Sprint(sb)
	})
	evs := s.must("sandbox", "events", id, "--json")
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(evs), "\n") {
		var e struct {
			Kind   string  `json:"kind"`
			Reason string  `json:"reason"`
			Time   wireInt `json:"time_unix_nano"`
			At     wireInt `json:"at_unix_nano"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("event line %q: %v", line, err)
		}
		kinds = append(kinds, e.Kind)
		if e.Kind == "suspended" && e.Reason != "SANDBOX_REASON_TTL_EXPIRED" {
			t.Errorf("suspended event's reason %q", e.Reason)
		}
		// The spec's warning (3s), not the service's (500ms).
		if lead := time.Duration(e.At - e.Time); e.Kind == "expiring" && (lead < 2*time.Second || lead > 3*time.Second) {
			t.Errorf("the expiring event came %s before the expiry, want about 3s (the sandbox's --expiry-warning)", lead)
		}
	}
	if strings.Join(kinds, " ") != "created expiring suspended" {
		t.Errorf("events: %v, want created expiring suspended", kinds)
	}
	eventually(t, 20*time.Second, "the idle timeout suspends it", func() (bool, string) {
		sb := sandboxJSON(t, s, idle)
		return sb["state"] == "SANDBOX_STATE_SUSPENDED" && sb["suspended_reason"] == "SANDBOX_REASON_IDLE_TIMEOUT", fmt.Sprint(sb)
	})
	if !strings.Contains(s.must("sandbox", "ls"), "suspended") {
		t.Error("ls does not show the sandbox suspended")
	}
	// Extend works on a suspended sandbox; resume restarts its TTL.
	s.must("sandbox", "extend", id, "--ttl", "1h")
	s.must("sandbox", "resume", id)
	if got := s.must("sandbox", "exec", id, "--", "cat", "/workspace/f"); got != "before\n" {
		t.Errorf("after the TTL's suspend and a resume: %q", got)
	}
	eventually(t, 20*time.Second, "--on-expire delete stops it", func() (bool, string) {
		sb := sandboxJSON(t, s, gone)
		return sb["state"] == "SANDBOX_STATE_STOPPED" && sb["reason"] == "SANDBOX_REASON_TTL_EXPIRED", fmt.Sprint(sb)
	})
	if r := s.run("sandbox", "snapshot", gone, "--name", "x"); r.code == 0 || !strings.Contains(r.stderr, "only a running sandbox") {
		t.Errorf("snapshot of a stopped sandbox: %s", r)
	}
	if r := s.run("sandbox", "create", "--on-expire", "later"); r.code != 2 || !strings.Contains(r.stderr, "choose suspend") {
		t.Errorf("--on-expire later: %s", r)
	}
}

// TestSnapshotAndFork: a named snapshot makes new sandboxes (--image
// snapshot:NAME) with the files exact; fork ×3 makes independent
// sandboxes with their own gateway tokens; a snapshot a sandbox needs is
// not removed, and says who needs it.
func TestSnapshotAndFork(t *testing.T) {
	s := startService(t)
	src := s.create("--env", "SECRET_ENV=kept", "--model-gateway", "--label", "role=src")
	s.must("sandbox", "exec", src, "--", "sh", "-c", writeTree)
	out := s.must("sandbox", "snapshot", src, "--name", "base")
	if !strings.HasPrefix(out, "snapshot base (") {
		t.Errorf("snapshot printed %q", out)
	}
	if r := s.run("sandbox", "snapshot", src, "--name", "base"); r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("a second snapshot named base: %s", r)
	}
	if r := s.run("sandbox", "snapshot", src, "--name", "../up"); r.code == 0 || !strings.Contains(r.stderr, "use 1 to 63 of a-z") {
		t.Errorf("snapshot named ../up: %s", r)
	}
	from := s.create("--image", "snapshot:base", "--env", "SECRET_ENV=kept")
	if got := s.must("sandbox", "exec", from, "--", "sh", "-c", checkTree); got != wantTree {
		t.Errorf("a sandbox from snapshot:base reads %q, want %q", got, wantTree)
	}
	if sb := sandboxJSON(t, s, from); sb["origin"] != "snapshot:base" {
		t.Errorf("origin %v", sb["origin"])
	}
	if r := s.run("snapshot", "rm", "base"); r.code == 0 || !strings.Contains(r.stderr, "sandbox:"+from) {
		t.Errorf("rm of a snapshot a sandbox needs: %s", r)
	}
	var list []map[string]any
	if out := s.must("snapshot", "ls", "--json"); json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("snapshot ls --json: %q", out)
	}
	if len(list) != 1 || list[0]["name"] != "base" || fmt.Sprint(list[0]["needed_by"]) != "[sandbox:"+from+"]" {
		t.Errorf("snapshot ls --json: %v", list)
	}

	forks := strings.Fields(s.must("sandbox", "fork", src, "--count", "3"))
	if len(forks) != 3 {
		t.Fatalf("fork --count 3 printed %v", forks)
	}
	keys := map[string]bool{}
	for _, id := range append([]string{src}, forks...) {
		keys[s.must("sandbox", "exec", id, "--", "sh", "-c", "echo $ANTHROPIC_API_KEY")] = true
	}
	if len(keys) != 4 {
		t.Errorf("the source and its 3 forks have %d distinct gateway tokens", len(keys))
	}
	for _, id := range forks {
		if got := s.must("sandbox", "exec", id, "--", "sh", "-c", checkTree); got != wantTree {
			t.Errorf("fork %s reads %q, want %q", id, got, wantTree)
		}
		if sb := sandboxJSON(t, s, id); sb["origin"] != "fork:"+src {
			t.Errorf("fork %s: origin %v", id, sb["origin"])
		}
	}
	s.must("sandbox", "exec", forks[0], "--", "sh", "-c", "echo mine > /workspace/only0")
	for _, id := range []string{forks[1], forks[2], src} {
		if got := s.must("sandbox", "exec", id, "--", "sh", "-c", "test -e /workspace/only0 && echo seen || echo absent"); got != "absent\n" {
			t.Errorf("%s sees fork 0's write: %q", id, got)
		}
	}
	if r := s.run("sandbox", "fork", src, "--count", "65"); r.code != 2 {
		t.Errorf("fork --count 65: %s", r)
	}
	// The forks are of the very files of base (the source did not change
	// since): they need it too, until they go.
	s.must(append([]string{"sandbox", "rm", from}, forks...)...)
	s.must("snapshot", "rm", "base")
	if r := s.run("snapshot", "rm", "base"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("rm of a removed snapshot: %s", r)
	}
}

// TestSnapshotStoreFull: a save the workspace store cannot take (its disk
// full) fails saying so, and the sandbox keeps running with its files.
func TestSnapshotStoreFull(t *testing.T) {
	s := startService(t)
	id := s.create()
	s.stop()
	store := filepath.Join(s.dataDir, "workspaces")
	if err := os.MkdirAll(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("reins-full", store, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(store, syscall.MNT_DETACH) })
	s.start()
	s.must("sandbox", "exec", id, "--", "sh", "-c", "head -c 2000000 /dev/urandom > /workspace/big")
	for _, args := range [][]string{{"snapshot", id, "--name", "full"}, {"suspend", id}} {
		r := s.run(append([]string{"sandbox"}, args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "the sandbox is as it was") || !strings.Contains(r.stderr, "no space") {
			t.Errorf("sandbox %s into a full store: %s", args[0], r)
		}
		if strings.Contains(r.stderr, s.dataDir) {
			t.Errorf("the error names a host path: %s", r.stderr)
		}
	}
	if sb := sandboxJSON(t, s, id); sb["state"] != "SANDBOX_STATE_RUNNING" {
		t.Errorf("after the failed saves the sandbox is %v", sb["state"])
	}
	if got := s.must("sandbox", "exec", id, "--", "sh", "-c", "wc -c < /workspace/big"); strings.TrimSpace(got) != "2000000" {
		t.Errorf("after the failed saves: %q", got)
	}
}
