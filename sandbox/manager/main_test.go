package manager

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a Manager starts (the disk pool's refill, executor
// connections) must end when its test does.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
