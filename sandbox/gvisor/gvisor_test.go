package gvisor_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/oci"
	"github.com/reinsdev/reins/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	oci.MaybeRunShim()
	goleak.VerifyTestMain(m)
}

func newBackend(t testing.TB, stateDir string) *gvisor.Backend {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "runsc", "runsc")
	b, err := gvisor.New(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T, stateDir string) sandbox.Backend {
		return newBackend(t, stateDir)
	}, sandboxtest.Capabilities{Isolation: true, Limits: true, Durable: true, Cgroups: true, OOMKillsWholeSandbox: true})
}
