package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Run by hand it says what it is for and fails; the shim's behaviour is
// tested in sandbox/oci and through every backend's conformance suite.
func TestByHand(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "reins-shim")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "REINS_OCI_SHIM=")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "not a command to run by hand") {
		t.Errorf("by hand: %v %q, want exit 2 and why", err, out)
	}
}

// The shim stays with every sandbox: it must not pull in the service.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, banned := range []string{"github.com/reinsdev/reins/server", "github.com/reinsdev/reins/agent", "github.com/reinsdev/reins/store", "github.com/spf13/cobra", "modernc.org/sqlite"} {
		for _, dep := range strings.Fields(string(out)) {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("reins-shim depends on %s: it would start slower on every create", dep)
				break
			}
		}
	}
}
