// Package depstest fences a package's dependencies, in the style of
// Tailscale's deps_test.go files: a test lists what the package must never
// pull in, each with the reason, and fails naming the dependency and the
// reason when one creeps in.
package depstest

import (
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// Check fails t for each dependency of pkg that Violations finds.
func Check(t *testing.T, pkg string, banned map[string]string) {
	t.Helper()
	bad, err := Violations(pkg, banned)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range bad {
		t.Error(v)
	}
}

// Violations lists the dependencies of pkg (transitive, as go list -deps
// reports them, test files excluded) that are one of banned's keys or lie
// under one, each with its reason. A key names a package path or a prefix
// of paths ("k8s.io" bans every k8s.io module); its value says why.
func Violations(pkg string, banned map[string]string) ([]string, error) {
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		return nil, fmt.Errorf("go list -deps %s listed nothing", pkg)
	}
	var bad []string
	for _, dep := range deps {
		for b, why := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				bad = append(bad, fmt.Sprintf("%s depends on %s, banned: %s", pkg, dep, why))
			}
		}
	}
	sort.Strings(bad)
	return bad, nil
}

// Imports lists the packages pkg imports directly (test files excluded),
// for fences on what a package names itself rather than what it pulls in.
func Imports(pkg string) ([]string, error) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, pkg).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go list -f {{.Imports}} %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out)), nil
}
