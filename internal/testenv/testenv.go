// Package testenv says what a test needs from the machine.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequiresRoot stops a test that needs root when it runs without it: a
// failure under CI (which is root, so this is a broken CI), a skip that says
// why elsewhere.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this test needs root, and CI runs as root: run it as root")
	}
	t.Skip("needs root (mounts, cgroups, sandboxes): run as root; CI does")
}

// RequiresBinary stops a test whose program is missing, the same way.
func RequiresBinary(t testing.TB, name, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing: .ci/run must install the Debian package %s", name, debianPackage)
	}
	t.Skipf("%s is missing: apt-get install %s", name, debianPackage)
	return ""
}
