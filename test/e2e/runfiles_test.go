package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunFiles: reins run --upload puts a local directory into the run's
// sandbox before the first step, the script's bash reads it and writes a
// report, and --download brings the report back into --out when the run
// ends; a failed run's downloads come back too; a detached run's outputs
// are saved as artifacts that runs artifacts --get fetches later.
func TestRunFiles(t *testing.T) {
	s := startService(t)
	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "in", "docs"), 0o755)
	os.WriteFile(filepath.Join(local, "in", "data.txt"), []byte("hello data\n"), 0o644)
	os.WriteFile(filepath.Join(local, "in", "docs", "a.md"), []byte("# a\n"), 0o644)
	script := writeScript(t,
		bash("tr a-z A-Z < /workspace/input/data.txt > /workspace/report.md && ls /workspace/input/docs >> /workspace/report.md && mkdir -p /workspace/out/deep && echo deep > /workspace/out/deep/x.txt"),
		map[string]any{"text": "done"})
	out := filepath.Join(t.TempDir(), "out")
	r := s.run("run", "--model", "script:"+script, "--upload", filepath.Join(local, "in")+":/workspace/input",
		"--download", "/workspace/*.md", "--download", "/workspace/out", "--out", out, "summarize the input")
	if r.code != 0 {
		t.Fatalf("reins run: %s", r)
	}
	if got, err := os.ReadFile(filepath.Join(out, "workspace/report.md")); err != nil || string(got) != "HELLO DATA\na.md\n" {
		t.Errorf("the downloaded report: %q, %v", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(out, "workspace/out/deep/x.txt")); err != nil || string(got) != "deep\n" {
		t.Errorf("a file of a downloaded directory: %q, %v", got, err)
	}
	if !strings.Contains(r.stderr, "downloaded 2 files") {
		t.Errorf("run's stderr does not say what it downloaded:\n%s", r.stderr)
	}
	// The spec lists the uploads (what the model's first message names).
	var runs []struct {
		ID   string `json:"id"`
		Spec struct {
			Uploads []struct {
				Path string `json:"path"`
				Size json.Number
			} `json:"uploads"`
		} `json:"spec"`
	}
	json.Unmarshal([]byte(s.must("runs", "ls", "--json")), &runs)
	if len(runs) != 1 {
		t.Fatalf("runs ls: %+v", runs)
	}
	var paths []string
	for _, u := range runs[0].Spec.Uploads {
		paths = append(paths, u.Path)
	}
	if got := strings.Join(paths, " "); got != "/workspace/input /workspace/input/data.txt /workspace/input/docs /workspace/input/docs/a.md" {
		t.Errorf("the run's uploads: %q", got)
	}

	// A run that fails (its step budget ends it) still brings back its files.
	failing := writeScript(t, bash("echo partial > /workspace/partial.md"), bash("true"), map[string]any{"text": "never"})
	out2 := filepath.Join(t.TempDir(), "out")
	r = s.run("run", "--max-steps", "1", "--model", "script:"+failing, "--download", "/workspace/partial.md", "--out", out2, "fail")
	if r.code != 1 {
		t.Errorf("the failing run: %s", r)
	}
	if got, err := os.ReadFile(filepath.Join(out2, "workspace/partial.md")); err != nil || string(got) != "partial\n" {
		t.Errorf("a failed run's download: %q, %v", got, err)
	}

	// Detached: the outputs outlive the CLI as artifacts.
	id := strings.TrimSpace(s.must("run", "--detach", "--model", "script:"+script, "--upload", filepath.Join(local, "in")+":/workspace/input",
		"--download", "/workspace/report.md", "summarize the input"))
	s.run("runs", "events", "--follow", id)
	dst := filepath.Join(t.TempDir(), "report.md")
	s.must("runs", "artifacts", id, "--get", "/workspace/report.md", "-o", dst)
	if got, err := os.ReadFile(dst); err != nil || string(got) != "HELLO DATA\na.md\n" {
		t.Errorf("runs artifacts --get: %q, %v", got, err)
	}
	if got := s.must("runs", "artifacts", id, "--get", "/workspace/report.md", "-o", "-"); got != "HELLO DATA\na.md\n" {
		t.Errorf("runs artifacts --get -o -: %q", got)
	}

	// Cancelled mid-command: the downloads are still saved.
	slow := writeScript(t, bash("echo c > /workspace/c.md && touch /workspace/started && sleep 120"), map[string]any{"text": "never"})
	id = strings.TrimSpace(s.must("run", "--detach", "--model", "script:"+slow, "--download", "/workspace/c.md", "slow"))
	eventually(t, 60*time.Second, "the slow command starts", func() (bool, string) {
		out := s.run("runs", "events", id)
		return strings.Contains(out.stdout, "bash"), out.stdout
	})
	time.Sleep(2 * time.Second)
	s.must("runs", "cancel", id)
	if got := s.must("runs", "artifacts", id, "--get", "/workspace/c.md"); got != "c\n" {
		t.Errorf("a cancelled run's download: %q", got)
	}
}
