package executor_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// TestHostileUserNames: a name that could be a second passwd field, a
// second line or a path is refused before any file is read.
func TestHostileUserNames(t *testing.T) {
	e := newEnv(t)
	// A passwd whose lines such names would match if they were split
	// naively on ":" or "\n".
	userRoot(t, e, testPasswd+"x:x:0:0::/:/bin/sh\n", testGroup)
	for _, name := range []string{"user:x", "root\nuser", "x:x:0:0::/:/bin/sh", "../user", "/etc/passwd", "-u", "..", "us er", "user\x00", strings.Repeat("u", 65)} {
		_, _, _, err := e.asUser(t, &executorv1.ExecRequest{User: name, Argv: []string{"id", "-u"}})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a valid user name") {
			t.Errorf("user %q: %v, want it refused as not a valid user name", name, err)
		}
	}
}

// TestHostileUserPasswdSymlink: outside a sandbox the executor's root is
// confined, so a sandbox /etc/passwd that is a symbolic link to the
// host's is not followed: the host's accounts are never read.
func TestHostileUserPasswdSymlink(t *testing.T) {
	e := newEnv(t)
	userRoot(t, e, testPasswd, testGroup)
	os.Remove(e.host("etc/passwd"))
	if err := os.Symlink("/etc/passwd", e.host("etc/passwd")); err != nil {
		t.Fatal(err)
	}
	out, _, _, err := e.asUser(t, &executorv1.ExecRequest{User: "root", Argv: []string{"id", "-u"}})
	if !errors.Is(err, errdefs.ErrPermissionDenied) || out != "" {
		t.Errorf("passwd linked to the host's: %q, %v; want permission denied", out, err)
	}
}

// TestHostileUserHugePasswd: a sandbox's /etc/passwd beyond the bound
// is refused, not read into memory, even when the user is on line one.
func TestHostileUserHugePasswd(t *testing.T) {
	e := newEnv(t)
	userRoot(t, e, testPasswd, testGroup)
	f, err := os.OpenFile(e.host("etc/passwd"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("#", 1023) + "\n"
	for range 5 << 10 {
		f.WriteString(line)
	}
	f.Close()
	_, _, _, err = e.asUser(t, &executorv1.ExecRequest{User: "user", Argv: []string{"id", "-u"}})
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "larger than 4 MiB") {
		t.Errorf("a 5 MiB /etc/passwd: %v, want too large", err)
	}
}

// TestHostileUserIsRoot: an image may give "user" uid 0. The command
// then runs as root, which is allowed: the sandbox is the boundary, not
// the account (docs/decisions/0055-exec-user.md).
func TestHostileUserIsRoot(t *testing.T) {
	e := newEnv(t)
	userRoot(t, e, "user:x:0:0::/home/user:/bin/sh\n", "")
	out, _, _, err := e.asUser(t, &executorv1.ExecRequest{User: "user", Argv: []string{"id", "-u"}})
	if err != nil || out != "0\n" {
		t.Errorf("user with uid 0: %q, %v; want 0", out, err)
	}
}
