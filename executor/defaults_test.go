package executor_test

import (
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// SetDefaults replaces the environment of later processes (not added to:
// a variable it leaves out is gone) and moves their working directory,
// made when missing, for relative paths too.
func TestSetDefaults(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := e.c.SetDefaults(ctx, []string{"HOME=/", "GREETING=hello from the pool"}, "/work/app", false); err != nil {
		t.Fatal(err)
	}
	out, _, _, err := e.c.Run(ctx, "sh", "-c", `echo "$GREETING|${LC_ALL-unset}|$PATH"; pwd`)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("output %q", out)
	}
	// PATH was left out: the default one is added, or nothing would run.
	if env := lines[0]; !strings.HasPrefix(env, "hello from the pool|unset|") || !strings.Contains(env, "/bin") {
		t.Errorf("environment after SetDefaults: %q, want GREETING set, LC_ALL gone and a PATH", env)
	}
	if want := filepath.Join(e.root, "work/app"); lines[1] != want {
		t.Errorf("processes start in %q, want %q", lines[1], want)
	}
	if err := e.c.WriteFile(ctx, "rel.txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.root, "work/app/rel.txt")); err != nil {
		t.Errorf("a relative path does not start in the new workdir: %v", err)
	}
	// An Exec's own env still adds to the new base.
	out, _, _, err = e.c.Run(ctx, "sh", "-c", `echo $GREETING`)
	if err != nil || strings.TrimSpace(string(out)) != "hello from the pool" {
		t.Errorf("second process: %q %v", out, err)
	}
}

// With forget_exited the processes that ran before are gone from
// ListProcesses (a pool sandbox's warm-up exec is not its new user's);
// one still running is kept, and the environment is left as it was.
func TestSetDefaultsForgetsExited(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, _, _, err := e.c.Run(ctx, "true"); err != nil {
		t.Fatal(err)
	}
	st, err := e.c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := st.Pid
	defer e.c.Signal(ctx, pid, syscall.SIGKILL)
	if err := e.c.SetDefaults(ctx, nil, "", true); err != nil {
		t.Fatal(err)
	}
	procs, err := e.c.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].Pid != pid {
		t.Errorf("after forget_exited: %v, want only the running sleep (pid %d)", procs, pid)
	}
	out, _, _, err := e.c.Run(ctx, "sh", "-c", "echo $LC_ALL")
	if err != nil || string(out) != "C\n" {
		t.Errorf("no env given changed the environment: %q %v", out, err)
	}
}
