package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSandboxExtend: `sandbox extend` moves a running sandbox's expiry
// (E2B's set_timeout): a sandbox made with a 3s TTL and extended to 30s
// is still running past its first deadline; shortened to 2s, it then
// expires saying its TTL of 2s ran out. Bad input is refused with what to
// do, and a stopped sandbox's expiry cannot change.
func TestSandboxExtend(t *testing.T) {
	s := startService(t)
	id := s.create("--ttl", "3s", "--on-expire", "delete")
	var sb struct {
		ID        string  `json:"id"`
		ExpiresAt wireInt `json:"expires_unix_nano"`
	}
	out := s.must("sandbox", "extend", id, "--ttl", "30s", "--json")
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.ID != id || sb.ExpiresAt <= 0 {
		t.Fatalf("extend --json: %v\n%s", err, out)
	}
	time.Sleep(5 * time.Second) // past the first deadline
	if show := s.must("sandbox", "show", id); !strings.Contains(show, "running") {
		t.Fatalf("an extended sandbox stopped at its old deadline:\n%s", show)
	}
	if r := s.run("sandbox", "extend", id, "--ttl", "2s"); r.code != 0 || !strings.Contains(r.stdout, id+" expires at ") {
		t.Fatalf("extend --ttl 2s: %s", r)
	}
	eventually(t, 20*time.Second, "the sandbox stopped by its new TTL", func() (bool, string) {
		show := s.must("sandbox", "show", id)
		return strings.Contains(show, "ttl_expired") && strings.Contains(show, "its TTL of 2s ran out"), show
	})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "extend", id, "--ttl", "1m"}, "only a running or suspended sandbox's expiry can change"},
		{[]string{"sandbox", "extend", id}, "extend needs --ttl DUR"},
		{[]string{"sandbox", "extend", "nosuchsandbox", "--ttl", "1m"}, "not found"},
		{[]string{"sandbox", "extend", id, "--ttl", "10ms"}, "give one from 1s to"},
		{[]string{"sandbox", "extend", id, "--ttl", "9000h"}, "give one from 1s to 8760h0m0s"},
	} {
		if r := s.run(c.args...); r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %s; want an error saying %q", c.args, r, c.want)
		}
	}
}
