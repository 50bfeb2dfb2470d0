package fake_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
	"github.com/reinsdev/reins/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T, stateDir string) sandbox.Backend {
		return fake.New()
	}, sandboxtest.Capabilities{})
}
