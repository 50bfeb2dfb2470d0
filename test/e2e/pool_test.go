package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// shown is what the tests read of a sandbox's JSON (sandbox show/ls --json).
type shown struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Spec  struct {
		Labels map[string]string `json:"labels"`
		Env    []string          `json:"env"`
	} `json:"spec"`
	Created json.RawMessage `json:"created_unix_nano"`
	Expires json.RawMessage `json:"expires_unix_nano"`
}

// poolIDs lists the pool's ready sandboxes, as the admin sees them.
func (s *service) poolIDs() []string {
	s.t.Helper()
	var sbs []shown
	if err := json.Unmarshal([]byte(s.must("sandbox", "ls", "--json", "--label", "reins.pool=busybox", "--label", "reins.pool.ready=true")), &sbs); err != nil {
		s.t.Fatal(err)
	}
	var ids []string
	for _, sb := range sbs {
		if strings.Contains(sb.State, "RUNNING") {
			ids = append(ids, sb.ID)
		}
	}
	return ids
}

func (s *service) waitPool(n int) []string {
	s.t.Helper()
	var ids []string
	eventually(s.t, 2*time.Minute, "the warm pool fills", func() (bool, string) {
		ids = s.poolIDs()
		return len(ids) == n, strings.Join(ids, ",")
	})
	return ids
}

// TestWarmPool: reins serve --pool busybox=2 keeps two sandboxes ready; a
// tenant's create gets one, with its labels, env and TTL, and the pool
// refills; the tenant's list shows only its own; a tenant at its quota is
// refused though the pool has sandboxes; a spec with other limits goes
// cold and works.
func TestWarmPool(t *testing.T) {
	s := startService(t, "--pool", "busybox=2")
	acme := s.newTenant("acme", "--max-sandboxes", "2")
	ready := s.waitPool(2)

	before := time.Now()
	r := s.asTenant(acme, "sandbox", "create", "--label", "team=a", "--env", "POOLVAR=hello pool", "--ttl", "10m")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !slices.Contains(ready, id) {
		t.Fatalf("acme's create got %q, not one of the pool's %v: %s", id, ready, r)
	}
	if out := s.asTenant(acme, "sandbox", "exec", id, "--", "env"); !strings.Contains(out.stdout, "POOLVAR=hello pool\n") {
		t.Errorf("env in the handed-out sandbox: %s", out)
	}
	var sb shown
	if err := json.Unmarshal([]byte(s.asTenant(acme, "sandbox", "show", id, "--json").stdout), &sb); err != nil {
		t.Fatal(err)
	}
	created, expires := nanos(t, sb.Created), nanos(t, sb.Expires)
	if sb.Spec.Labels["team"] != "a" || sb.Spec.Labels["reins.pool"] != "" {
		t.Errorf("labels %v, want team=a and no pool label", sb.Spec.Labels)
	}
	if created.Before(before.Add(-time.Second)) || expires.Sub(created) != 10*time.Minute {
		t.Errorf("created %v (asked at %v), expires %v: want created at the hand-out and expiring 10m later", created, before, expires)
	}
	var mine []shown
	json.Unmarshal([]byte(s.asTenant(acme, "sandbox", "ls", "--json").stdout), &mine)
	if len(mine) != 1 || mine[0].ID != id {
		t.Errorf("acme lists %+v, want only %s (no pool sandbox)", mine, id)
	}

	refilled := s.waitPool(2)
	if slices.Contains(refilled, id) {
		t.Errorf("the refilled pool %v holds the handed-out %s", refilled, id)
	}
	if r := s.asTenant(acme, "sandbox", "create"); r.code != 0 {
		t.Fatalf("acme's second create: %s", r)
	}
	refilled = s.waitPool(2)
	if r := s.asTenant(acme, "sandbox", "create"); r.code == 0 || !strings.Contains(r.stderr, "limit") {
		t.Errorf("acme at its quota of 2: %s", r)
	}
	if got := s.poolIDs(); !slices.Equal(got, refilled) {
		t.Errorf("a refused create changed the pool: %v, was %v", got, refilled)
	}

	cold := s.create("--memory", "256M")
	if slices.Contains(refilled, cold) {
		t.Errorf("a create with other limits got pool sandbox %s", cold)
	}
	if out := s.must("sandbox", "exec", cold, "--", "echo", "cold ok"); out != "cold ok\n" {
		t.Errorf("the cold sandbox: %q", out)
	}
	s.stop() // its log is read once it is written
	// The cleanup's restart has no pool: it removes the pool's sandboxes
	// rather than refilling while they are removed.
	s.extra = nil
	if !strings.Contains(s.log.String(), "warm pool filled") || !strings.Contains(s.log.String(), "warm pool skipped: creating cold") {
		t.Errorf("the service's log does not say how the pool went:\n%s", s.log)
	}
}

func nanos(t *testing.T, raw json.RawMessage) time.Time {
	t.Helper()
	s := strings.Trim(string(raw), `"`) // a number, or a string beyond 2^53−1
	var n int64
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatalf("a time %q: %v", s, err)
	}
	return time.Unix(0, n)
}

// A --pool flag that is not IMAGE=N stops reins serve at once, naming it.
func TestWarmPoolFlagRefused(t *testing.T) {
	for _, bad := range []string{"busybox", "busybox=0", "busybox=many"} {
		out, err := exec.Command(filepath.Join(binDir, "reins"), "serve", "--data-dir", t.TempDir(), "--addr", freeAddr(t), "--pool", bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--pool") {
			t.Errorf("--pool %s: %v\n%s", bad, err, out)
		}
	}
}

// TestWarmPoolNetwork: a pool sandbox waits with nothing allowed; handed
// out with --allow-host and --env, it reaches that host (through the proxy
// variables, which the spec's env did not drop) and nothing else, and its
// egress log is its tenant's.
func TestWarmPoolNetwork(t *testing.T) {
	requireSandboxes(t)
	plain := newRecorder(t, nil)
	s := startService(t, "--pool", "busybox=1", "--egress-resolve", "allowed.test=127.0.0.1", "--egress-resolve", "other.test=127.0.0.1")
	acme := s.newTenant("acme")
	ready := s.waitPool(1)
	p := plain.port()
	r := s.asTenant(acme, "sandbox", "create", "--allow-host", "allowed.test:"+p, "--env", "POOLVAR=1")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id != ready[0] {
		t.Fatalf("create got %q, not the pool's %v: %s", id, ready, r)
	}
	sh := func(script string) result { return s.asTenant(acme, "sandbox", "exec", id, "--", "sh", "-c", script) }
	if r := sh(viaProxy + "wget -q -O - http://allowed.test:" + p + "/pool"); r.code != 0 || !strings.Contains(r.stdout, "reached") {
		t.Errorf("the allowed host through the proxy variables: %s", r)
	}
	if r := sh(noProxy + "wget -q -T 5 -O - http://other.test:" + p + "/denied"); r.code == 0 {
		t.Errorf("a host not allowed: %s", r)
	}
	if len(plain.hits("/pool")) != 1 || len(plain.hits("/denied")) != 0 {
		t.Errorf("what reached the host: %s", plain.all())
	}
	if out := s.asTenant(acme, "sandbox", "egress", id, "--json"); out.code != 0 || !strings.Contains(out.stdout, "allowed.test") {
		t.Errorf("acme's egress log of its pool sandbox: %s", out)
	}
	s.extra = nil
}

// TestWarmPoolSnapshot: --pool snapshot:NAME=1 keeps sandboxes made from
// the admin's snapshot by the ordinary create path; the admin's create of
// snapshot:NAME gets one and sees the snapshot's files.
func TestWarmPoolSnapshot(t *testing.T) {
	s := startService(t)
	src := s.create()
	s.must("sandbox", "exec", src, "--", "sh", "-c", "echo from the snapshot > /workspace/kept.txt")
	s.must("sandbox", "snapshot", src, "--name", "base")
	s.stop()
	s.extra = []string{"--pool", "snapshot:base=1"}
	s.start()
	var ready []string
	eventually(t, 2*time.Minute, "the snapshot's pool fills", func() (bool, string) {
		var sbs []shown
		json.Unmarshal([]byte(s.must("sandbox", "ls", "--json", "--label", "reins.pool=snapshot:base", "--label", "reins.pool.ready=true")), &sbs)
		ready = ready[:0]
		for _, sb := range sbs {
			ready = append(ready, sb.ID)
		}
		return len(ready) == 1, fmt.Sprint(ready)
	})
	id := s.create("--image", "snapshot:base")
	if id != ready[0] {
		t.Errorf("create of snapshot:base got %s, not the pool's %s", id, ready[0])
	}
	if out := s.must("sandbox", "exec", id, "--", "cat", "/workspace/kept.txt"); out != "from the snapshot\n" {
		t.Errorf("the pool's sandbox of snapshot:base holds %q", out)
	}
	s.stop()
	s.extra = nil
}
