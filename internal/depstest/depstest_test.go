package depstest

import (
	"strings"
	"testing"
)

// TestViolations makes sure the fence bites: this package depends on
// os/exec, so banning "os" (a prefix) must report it with its reason, and
// banning what it does not use reports nothing.
func TestViolations(t *testing.T) {
	const self = "github.com/reinsdev/reins/internal/depstest"
	bad, err := Violations(self, map[string]string{"os": "no processes here"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range bad {
		found = found || strings.Contains(v, "depends on os/exec, banned: no processes here")
	}
	if !found {
		t.Fatalf("banning os did not catch os/exec: %q", bad)
	}
	if bad, err := Violations(self, map[string]string{"modernc.org/sqlite": "x", "osx": "a prefix is a path, not a string"}); err != nil || len(bad) != 0 {
		t.Fatalf("unused bans reported %q, %v", bad, err)
	}
}

// TestImports: direct imports only (os/exec, not what os/exec imports).
func TestImports(t *testing.T) {
	got, err := Imports("github.com/reinsdev/reins/internal/depstest")
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, p := range got {
		has[p] = true
	}
	if !has["os/exec"] || has["internal/syscall/execenv"] {
		t.Errorf("Imports = %q, want os/exec and nothing it pulls in", got)
	}
}
