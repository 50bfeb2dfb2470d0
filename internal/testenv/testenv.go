// Package testenv says what a test needs from the machine. A test that
// lacks it fails under CI (which has everything: a missing piece there is a
// broken .ci/run) and is skipped elsewhere with a message naming what to
// install. Nothing else is ever skipped.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Missing stops a test whose machine lacks something, named by the message.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("this machine lacks what the test needs, and CI must have it: %s", msg)
	}
	t.Skip("this machine lacks: " + msg)
}

// RequiresRoot stops a test that needs root (mounts, cgroups, sandboxes).
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root (mounts, cgroups, sandboxes): run the tests as root, as CI does")
	}
}

// RequiresBinary stops a test whose program is missing and returns its path.
func RequiresBinary(t testing.TB, name, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s: apt-get install %s", name, debianPackage)
	}
	return p
}

// RequiresRunsc stops a test whose runsc is missing. path is
// gvisor.DefaultRunsc(), the binary every test and the service use (the
// pinned build `make deps` makes, or $REINS_RUNSC); it is passed in
// because this package must not import the backends it tests.
func RequiresRunsc(t testing.TB, path string) string {
	t.Helper()
	if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
		Missing(t, "runsc %s: run `make deps` as root, which builds gVisor's runsc there (or set REINS_RUNSC)", path)
	}
	return path
}

// FreeXDisplay is an X display number that no X server on this machine
// holds (no lock file, no socket), for a test's own X server.
func FreeXDisplay(t testing.TB) int {
	t.Helper()
	for n := 40 + os.Getpid()%100; n < 400; n++ {
		_, err1 := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n))
		_, err2 := os.Stat(fmt.Sprintf("/tmp/.X11-unix/X%d", n))
		if os.IsNotExist(err1) && os.IsNotExist(err2) {
			return n
		}
	}
	t.Fatal("no free X display number")
	return 0
}
