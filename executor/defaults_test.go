package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SetDefaults replaces the environment of later processes (not added to:
// a variable it leaves out is gone) and moves their working directory,
// made when missing, for relative paths too.
func TestSetDefaults(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := e.c.SetDefaults(ctx, []string{"HOME=/", "GREETING=hello from the pool"}, "/work/app"); err != nil {
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
