package gvisor_test

import (
	"os"
	"strings"
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
	testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
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

// The script that builds runsc and the package that runs it name one
// version.
func TestInstallDepsPinsVersion(t *testing.T) {
	data, err := os.ReadFile("../../scripts/install-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nRUNSC_VERSION=" + gvisor.Version + "\n"; !strings.Contains(string(data), want) {
		t.Errorf("scripts/install-deps.sh does not pin %q (gvisor.Version)", strings.TrimSpace(want))
	}
}

func TestVersion(t *testing.T) {
	b := newBackend(t, t.TempDir())
	want := "runsc " + gvisor.Version + ", platform systrap"
	if os.Getenv("REINS_RUNSC") != "" {
		want = ", platform systrap"
	}
	if v := b.Version(); !strings.HasSuffix(v, want) || !strings.HasPrefix(v, "runsc ") {
		t.Errorf("Version() = %q, want %q", v, want)
	}
}
