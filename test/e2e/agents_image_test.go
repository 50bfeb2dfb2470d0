package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/internal/testenv"
)

// TestAgentsImage: the agents image (debian plus Claude Code and Codex
// from npm, their tarballs kept in the operator's build cache, so only
// the first run on a machine downloads them) runs both programs in a
// gVisor sandbox with no network and without node: each prints its
// pinned version. It logs the peak RSS of `claude --version`.
func TestAgentsImage(t *testing.T) {
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	s := startService(t)
	id := s.create("--backend", "gvisor", "--image", "agents", "--memory", "2G", "--network", "none")
	for prog, version := range map[string]string{"claude": image.ClaudeCodeVersion, "codex": image.CodexVersion} {
		// PATH without node's directory: the native binary is all it takes.
		r := s.run("sandbox", "exec", "--env", "PATH=/nonexistent", id, "--", "/usr/local/bin/"+prog, "--version")
		if r.code != 0 || !strings.Contains(r.stdout, version) {
			t.Errorf("%s --version: %s; want %s", prog, r, version)
		}
	}
	// The peak RSS of claude --version, as its parent sees it.
	r := s.run("sandbox", "exec", id, "--", "python3", "-c",
		"import resource, subprocess; subprocess.run(['claude', '--version'], check=True, capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
	kib, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if r.code != 0 || err != nil || kib <= 0 {
		t.Fatalf("measuring claude --version: %s", r)
	}
	// The sandbox's own peak is far lower (about 35 MiB): most of that
	// RSS is the 402 MB binary mapped from its file, pages of the host's
	// page cache its cgroup was not charged for here.
	t.Logf("claude --version: peak RSS %d MiB; the sandbox's %s", kib>>10, memoryLine(t, s.must("sandbox", "show", id)))
}
