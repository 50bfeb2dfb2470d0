package executor_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
)

const (
	testPasswd = "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:,,,:/home/user:/bin/bash\n"
	testGroup  = "root:x:0:\nuser:x:1000:\nextra:x:1500:other,user\nnot:x:1600:other\n"
)

// userRoot readies e's root for commands run as uid 1000 on the host:
// the test directories walkable, an /etc/passwd and /etc/group, the
// user's home owned by it and a /rootonly directory it may not write.
func userRoot(t *testing.T, e *testEnv, passwd, group string) {
	t.Helper()
	testenv.RequiresRoot(t)
	for _, d := range []string{filepath.Dir(e.root), e.root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"etc", "home/user", "rootonly"} {
		if err := os.MkdirAll(e.host(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(e.host("rootonly"), 0o700)
	if err := os.Chown(e.host("home/user"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"etc/passwd": passwd, "etc/group": group} {
		if err := os.WriteFile(e.host(name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// asUser runs a shell script as user and returns its stdout and stderr.
func (e *testEnv) asUser(t *testing.T, req *executorv1.ExecRequest) (string, string, *executorv1.Exited, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	exit, err := e.c.Exec(ctxT(t), req, func(ev *executorv1.ExecEvent) {
		out.Write(ev.GetStdout())
		errOut.Write(ev.GetStderr())
	})
	return out.String(), errOut.String(), exit, err
}

func TestExecAsUser(t *testing.T) {
	e := newEnv(t)
	userRoot(t, e, testPasswd, testGroup)
	out, errOut, exit, err := e.asUser(t, &executorv1.ExecRequest{
		User: "user",
		Argv: []string{"sh", "-c", `id -u; id -g; id -G; echo "$HOME $USER $LOGNAME $SHELL"; pwd; touch rootonly/x 2>&1 || touch ` + e.host("rootonly/x") + ` 2>&1 || echo refused`},
	})
	if err != nil || exit.ExitCode != 0 {
		t.Fatalf("exit %v, err %v, stderr %s", exit, err, errOut)
	}
	want := "1000\n1000\n1000 1500\n/home/user user user /bin/bash\n" + e.host("home/user") + "\n"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "Permission denied") || !strings.HasSuffix(out, "refused\n") {
		t.Errorf("output:\n%s\nwant it to start\n%s\nand end with two Permission denied and refused", out, want)
	}
	if _, err := os.Stat(e.host("rootonly/x")); err == nil {
		t.Error("the user wrote into a directory only root may write")
	}

	// The request's env and cwd win over the account's.
	out, _, exit, err = e.asUser(t, &executorv1.ExecRequest{
		User: "user", Env: []string{"HOME=/elsewhere", "SHELL=/bin/zsh"}, Cwd: "/etc",
		Argv: []string{"sh", "-c", `echo "$HOME $USER $SHELL"; pwd; env | grep -c '^HOME='`},
	})
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if want := "/elsewhere user /bin/zsh\n" + e.host("etc") + "\n1\n"; out != want {
		t.Errorf("with env and cwd: %q, want %q", out, want)
	}

	// root by name: uid 0, its home (missing here: the workdir instead).
	out, _, _, err = e.asUser(t, &executorv1.ExecRequest{User: "root", Argv: []string{"sh", "-c", "id -u; echo $HOME; pwd"}})
	if want := "0\n/root\n" + e.root + "\n"; err != nil || out != want {
		t.Errorf("as root: %q, %v; want %q", out, err, want)
	}
}

func TestExecAsUnknownUser(t *testing.T) {
	e := newEnv(t)
	userRoot(t, e, testPasswd, testGroup)
	_, _, _, err := e.asUser(t, &executorv1.ExecRequest{User: "nobody", Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `user "nobody" is not in the sandbox's /etc/passwd`) {
		t.Errorf("unknown user: %v", err)
	}
	os.Remove(e.host("etc/group"))
	out, _, _, err := e.asUser(t, &executorv1.ExecRequest{User: "user", Argv: []string{"id", "-G"}})
	if err != nil || out != "1000\n" {
		t.Errorf("without /etc/group: %q, %v; want the primary group alone", out, err)
	}
	os.Remove(e.host("etc/passwd"))
	_, _, _, err = e.asUser(t, &executorv1.ExecRequest{User: "user", Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "/etc/passwd") || strings.Contains(err.Error(), e.root) {
		t.Errorf("without /etc/passwd: %v", err)
	}
}
