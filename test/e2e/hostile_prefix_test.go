package e2e

import (
	"strings"
	"testing"
)

// TestHostilePrefixOtherTenant: an id prefix is resolved among the
// caller's own sandboxes only. Tenant beta, typing the start of acme's
// sandbox id, reaches nothing: the answer is worded as for a prefix of
// nothing, and acme's sandbox is untouched; acme's own prefix works.
func TestHostilePrefixOtherTenant(t *testing.T) {
	s := startService(t)
	acme, beta := s.newTenant("acme"), s.newTenant("beta")
	r := s.asTenant(acme, "sandbox", "create")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(id) != 12 {
		t.Fatalf("acme's create: %s", r)
	}
	prefix, missing := id[:6], "ffffff"
	if strings.HasPrefix(id, missing) {
		missing = "000000"
	}
	for _, args := range [][]string{{"sandbox", "show"}, {"sandbox", "rm"}, {"sandbox", "exec"}, {"sandbox", "logs"}} {
		tail := map[string][]string{"exec": {"true"}, "logs": {"1"}}[args[1]]
		got := s.asTenant(beta, append(append(args, prefix), tail...)...)
		want := s.asTenant(beta, append(append(args, missing), tail...)...)
		if got.code == 0 || got.code != want.code || strings.ReplaceAll(got.stderr, prefix, "ID") != strings.ReplaceAll(want.stderr, missing, "ID") {
			t.Errorf("beta %v on acme's prefix:\n%s\nwant as for a prefix of nothing:\n%s", args, got, want)
		}
		if strings.Contains(got.stderr+got.stdout, id) {
			t.Errorf("beta %v learned acme's id: %s", args, got)
		}
	}
	if r := s.asTenant(acme, "sandbox", "show", prefix); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Errorf("acme's own prefix: %s", r)
	}
	s.asTenant(acme, "sandbox", "rm", id)
}
