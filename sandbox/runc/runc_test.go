package runc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/oci"
	"github.com/reinsdev/reins/sandbox/runc"
	"github.com/reinsdev/reins/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	oci.MaybeRunShim()
	goleak.VerifyTestMain(m)
}

func newBackend(t testing.TB, stateDir string) *runc.Backend {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "runc", "runc")
	b, err := runc.New(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T, stateDir string) sandbox.Backend {
		return newBackend(t, stateDir)
	}, sandboxtest.Capabilities{Isolation: true, Limits: true, Durable: true, Cgroups: true})
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := runc.New(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "install the Debian package runc") {
		t.Fatalf("New without runc in PATH: %v", err)
	}
}

// A shim binary that does not call oci.MaybeRunShim fails Start clearly
// and leaves nothing behind.
func TestShimWithoutHook(t *testing.T) {
	dir := t.TempDir()
	newBackend(t, dir) // the root and runc checks
	b, err := runc.New(dir, runc.WithShim("/bin/true"))
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	sandboxtest.BusyboxRootfs(t, rootfs)
	id := sandboxtest.NewID("nohook")
	_, err = b.Start(context.Background(), sandbox.Bundle{ID: id, Rootfs: rootfs, Args: []string{"sleep", "10"}})
	if err == nil || !strings.Contains(err.Error(), "MaybeRunShim") {
		t.Fatalf("Start with a shim lacking the hook: %v", err)
	}
	if _, err := b.Status(context.Background(), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status after the failed Start = %v, want ErrNotFound", err)
	}
	// Nor its idmapped mounts.
	if _, err := os.Stat(filepath.Join(oci.NewUserNS(dir, oci.SandboxIDs).Dir, id)); !os.IsNotExist(err) {
		t.Errorf("the failed Start left its mounts: %v", err)
	}
}

// A runc sandbox's root is uid 0 inside and host uid 0x70000000 outside;
// what it writes through its rootfs and a writable bind is 0:0 on the disk;
// chown within the 65536 mapped ids works.
func TestUserNamespace(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	rootfs, ctl := t.TempDir(), t.TempDir()
	sandboxtest.BusyboxRootfs(t, rootfs)
	id := sandboxtest.NewID("userns")
	ctx := context.Background()
	script := `id -u > /ctl/uid; cat /proc/self/uid_map > /ctl/map; echo x > /written; touch /ctl/f /ctl/g; chown 65535:65535 /ctl/g; ` +
		`chown 65536 /ctl/f 2>/dev/null && echo yes > /ctl/unmapped; ls /sys/kernel > /dev/null && touch /ctl/done; sleep 60`
	_, err := b.Start(ctx, sandbox.Bundle{ID: id, Rootfs: rootfs, Args: []string{"sh", "-c", script},
		Mounts: []sandbox.Mount{{Source: ctl, Target: "/ctl"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Delete(ctx, id)
	deadline := time.Now().Add(30 * time.Second)
	for _, err := os.Stat(filepath.Join(ctl, "done")); err != nil; _, err = os.Stat(filepath.Join(ctl, "done")) {
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox did not finish its script: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, _ := os.ReadFile(filepath.Join(ctl, "uid")); string(got) != "0\n" {
		t.Errorf("uid inside %q, want 0", got)
	}
	if got, _ := os.ReadFile(filepath.Join(ctl, "map")); strings.Join(strings.Fields(string(got)), " ") != "0 1879048192 65536" {
		t.Errorf("uid_map %q", got)
	}
	if _, err := os.Stat(filepath.Join(ctl, "unmapped")); err == nil {
		t.Errorf("chown to uid 65536 worked inside")
	}
	for p, want := range map[string]uint32{filepath.Join(rootfs, "written"): 0, filepath.Join(ctl, "f"): 0, filepath.Join(ctl, "g"): 65535} {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil || st.Uid != want || st.Gid != want {
			t.Errorf("%s on the disk: %d:%d (%v), want %d:%d", p, st.Uid, st.Gid, err, want, want)
		}
	}
	st, err := b.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.Pid))
	if !strings.Contains(string(status), "Uid:\t1879048192\t") {
		t.Errorf("the init's host credentials:\n%s", status)
	}
	if err := b.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(oci.NewUserNS(dir, oci.SandboxIDs).Dir, id)); !os.IsNotExist(err) {
		t.Errorf("Delete left the idmapped mounts: %v", err)
	}
}
