package manager

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/sandbox/oci"
)

// Every goroutine a Manager starts (the disk pool's refill, executor
// connections) must end when its test does. The runc sandboxes of
// TestRootMakerSkipsLocalRoot re-execute this binary as their shim.
func TestMain(m *testing.M) {
	oci.MaybeRunShim()
	goleak.VerifyTestMain(m)
}
