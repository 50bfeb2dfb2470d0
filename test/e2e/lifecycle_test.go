package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/sandbox/gvisor"
)

// TestDeathIsNoticedAtOnce: a sandbox killed behind the service's back is
// listed as stopped (with its reason) as soon as it dies, through its
// backend's wait, not at the next periodic check (here an hour away).
func TestDeathIsNoticedAtOnce(t *testing.T) {
	s := startService(t, "--check-interval", "1h")
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend)
			runtime := map[string]string{"gvisor": gvisor.DefaultRunsc(), "runc": "runc"}[backend]
			out, err := exec.Command(runtime, "--root", filepath.Join(s.dataDir, "runtime", backend, "runtime"), "kill", id, "KILL").CombinedOutput()
			if err != nil {
				t.Fatalf("%s kill: %v: %s", runtime, err, out)
			}
			eventually(t, 15*time.Second, "the killed sandbox is listed as stopped", func() (bool, string) {
				for _, line := range strings.Split(s.must("sandbox", "ls"), "\n") {
					if strings.HasPrefix(line, id) {
						return strings.Contains(line, "stopped"), line
					}
				}
				return false, "not listed"
			})
		})
	}
}
