package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileRunDownloads: what a run's sandbox makes of its downloads.
// A glob matching a symbolic link to /etc/passwd brings back no file (the
// executor lists it as a link, inside the sandbox; the host's file is
// never read); an artifact named to climb out of --out lands inside it;
// a file over the 256 MiB bound is reported, not saved, and the run
// still succeeds with its other files.
func TestHostileRunDownloads(t *testing.T) {
	s := startService(t)
	script := writeScript(t,
		bash("ln -s /etc/passwd /workspace/link.md && echo ok > /workspace/ok.md && head -c 268435457 /dev/zero > /workspace/big.md"),
		map[string]any{"tool_calls": []any{map[string]any{"name": "save_artifact", "input": map[string]any{"path": "/workspace/ok.md", "name": "/../../../escape.md"}}}},
		map[string]any{"text": "done"})
	parent := t.TempDir()
	out := filepath.Join(parent, "a", "out")
	r := s.run("run", "--model", "script:"+script, "--download", "/workspace/*.md", "--out", out, "be hostile")
	if r.code != 0 {
		t.Fatalf("the run did not succeed: %s", r)
	}
	if got, err := os.ReadFile(filepath.Join(out, "workspace/ok.md")); err != nil || string(got) != "ok\n" {
		t.Errorf("ok.md: %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(out, "workspace/link.md")); err == nil {
		t.Error("the symbolic link was downloaded")
	}
	if !strings.Contains(r.stderr, "/workspace/link.md: /workspace/link.md is not a regular file") {
		t.Errorf("the link is not reported:\n%s", r.stderr)
	}
	if _, err := os.Lstat(filepath.Join(out, "workspace/big.md")); err == nil || !strings.Contains(r.stderr, "/workspace/big.md: the file is over the 256 MiB") {
		t.Errorf("the huge file: %v\n%s", err, r.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(out, "escape.md")); err != nil || string(got) != "ok\n" {
		t.Errorf("the climbing name should land inside --out: %q, %v", got, err)
	}
	filepath.Walk(parent, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !strings.HasPrefix(p, out) && p != parent && p != filepath.Join(parent, "a") {
			t.Errorf("written outside --out: %s", p)
		}
		return nil
	})
}
