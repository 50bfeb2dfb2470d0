package server_test

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

// TestDeps fences the API: it serves the sandbox service through
// server.Sandboxes and the loop through agent, so a service that runs its
// sandboxes elsewhere plugs in without the host-local machinery.
func TestDeps(t *testing.T) {
	const local = "host-local sandbox machinery; the API reaches sandboxes through server.Sandboxes"
	depstest.Check(t, ".", map[string]string{
		"github.com/reinsdev/reins/sandbox/manager": local,
		"github.com/reinsdev/reins/sandbox/oci":     local,
		"github.com/reinsdev/reins/sandbox/gvisor":  local,
		"github.com/reinsdev/reins/sandbox/runc":    local,
		"github.com/reinsdev/reins/sandbox/rootfs":  local,
		"github.com/reinsdev/reins/sandbox/cgroup":  local,
		"github.com/reinsdev/reins/store/sqlite":    "stores are chosen in cmd",
		"k8s.io":                                    "Kubernetes is a sandbox backend's",
	})
}
