package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reinsdev/reins/sandbox/gvisor"
)

// TestLostGvisorSandboxKeepsFiles: a run's gVisor sandbox whose sentry is
// killed (a crash, the OOM killer) is replaced on the same disk, and the
// files the sandbox wrote — in /workspace and elsewhere in its root — are
// there in the replacement. This is what gVisor's rootfs overlay mode
// decides (docs/decisions/0010-gvisor-rootfs-overlay.md): under runsc's
// default, root:self, the writes live in the dead sentry's memory file and
// the replacement starts from the image.
func TestLostGvisorSandboxKeepsFiles(t *testing.T) {
	s := startService(t, "--release-after", "1h")
	pol := writePolicy(t, "rules:\n  - name: hold\n    tool: bash\n    match: {command: second}\n    action: ask\n")
	check := bash("cat /workspace/kept.txt /etc/kept-root.txt")
	check["expect"] = "was lost"
	script := writeScript(t,
		bash("echo in-workspace > /workspace/kept.txt && echo in-root > /etc/kept-root.txt && sync"),
		bash("echo second"),
		check,
		map[string]any{"expect": "in-workspace\nin-root", "text": "done"})
	id := strings.TrimSpace(s.must("run", "--detach", "--policy", pol, "--model", "script:"+script, "work"))
	waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
	var sb string
	for _, f := range strings.Fields(s.must("sandbox", "ls", "--label", "reins.run="+id)) {
		if len(f) == 12 {
			sb = f
		}
	}
	if sb == "" {
		t.Fatal("the run has no sandbox")
	}
	killSentry(t, s, sb)
	eventually(t, 30*time.Second, "the sandbox is stopped", func() (bool, string) {
		ls := s.must("sandbox", "ls", "--all")
		return strings.Contains(ls, "stopped"), ls
	})
	s.must("runs", "approve", id)
	waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")
	ev := s.must("runs", "events", id)
	if !strings.Contains(ev, "sandbox_lost") || !strings.Contains(ev, "sandbox_replaced") {
		t.Errorf("no sandbox_lost and sandbox_replaced events:\n%s", ev)
	}
}

// killSentry SIGKILLs the gVisor sandbox process (the sentry) of sandbox
// id, found with the pinned runsc's state command.
func killSentry(t *testing.T, s *service, id string) {
	t.Helper()
	root := filepath.Join(s.dataDir, "runtime", "gvisor", "runtime")
	out, err := exec.Command(gvisor.DefaultRunsc(), "--root", root, "state", id).Output()
	if err != nil {
		t.Fatalf("runsc state %s: %v", id, err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 1 {
		t.Fatalf("runsc state %s: %v: %s", id, err, out)
	}
	if err := syscall.Kill(st.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", st.Pid, err)
	}
}
