package sandboxtool_test

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

// TestDeps fences the sandbox tools: they speak the executor's wire
// through Executor and return results; the loop, the log and the sandbox
// service are the caller's.
func TestDeps(t *testing.T) {
	depstest.Check(t, ".", map[string]string{
		"github.com/reinsdev/reins/agent":           "the loop calls the tools, not the reverse",
		"github.com/reinsdev/reins/runlog":          "a tool returns artifacts in its result; the loop records them in the log",
		"github.com/reinsdev/reins/store":           "save_artifact streams into the Blobs it is given",
		"github.com/reinsdev/reins/policy":          "the policy is the loop's",
		"github.com/reinsdev/reins/model":           "tools see arguments, not conversations",
		"github.com/reinsdev/reins/executor":        "tools reach an executor through the Executor interface (its client is one); the server library runs inside sandboxes",
		"github.com/reinsdev/reins/sandbox/manager": "which sandbox a call runs in is the loop's",
		"github.com/reinsdev/reins/server":          "the service wires tools in, not the reverse",
		"github.com/reinsdev/reins/tool/trusted":    "trusted tools run in the service, beside these, not under them",
		"modernc.org/sqlite":                        "storage is the store's",
		"k8s.io":                                    "Kubernetes is a sandbox backend's",
	})
}
