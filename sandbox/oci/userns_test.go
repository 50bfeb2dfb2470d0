package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

func TestParseOverlayOptions(t *testing.T) {
	l, err := parseOverlayOptions(`rw,lowerdir+=/img/a,lowerdir+=/img/with\040space,upperdir=/sb/disk/upper,workdir=/sb/disk/work,uuid=on`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.lower, []string{"/img/a", "/img/with space"}) || l.upper != "/sb/disk/upper" || l.work != "/sb/disk/work" || l.hasDataLayer {
		t.Errorf("parsed %+v", l)
	}
	l, _ = parseOverlayOptions(`rw,lowerdir=/a:/b,upperdir=/u/upper,workdir=/u/work`)
	if !slices.Equal(l.lower, []string{"/a", "/b"}) {
		t.Errorf("legacy lowerdir: %+v", l)
	}
	if _, err := parseOverlayOptions(`lowerdir+=rel`); err == nil {
		t.Errorf("a relative layer was accepted")
	}
}

// An overlay mounted as the manager mounts it is replaced by one of
// idmapped layers: files owned by 0 and 1000 on the disk show as the
// mapped host ids, writes by mapped root land as 0 on the upper layer, the
// host paths are gone from the options, and Unstage leaves nothing.
func TestStageOverlay(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "mkfs.ext4", "e2fsprogs")
	dir := t.TempDir()
	layer := filepath.Join(dir, "layer")
	os.MkdirAll(filepath.Join(layer, "etc"), 0o755)
	os.WriteFile(filepath.Join(layer, "etc", "u1000"), []byte("x"), 0o644)
	os.Chown(filepath.Join(layer, "etc", "u1000"), 1000, 1000)
	l := rootfs.Layout{Dir: filepath.Join(dir, "sb")}
	if err := rootfs.CreateDisk(t.Context(), l, 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := rootfs.MountDisk(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rootfs.Remove(l) })
	if err := rootfs.MountOverlay(l, []string{layer}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.Run(), 0o700); err != nil {
		t.Fatal(err)
	}
	u := NewUserNS(dir, SandboxIDs)
	s := &specs.Spec{Root: &specs.Root{}, Mounts: []specs.Mount{{Destination: "/run", Type: "bind", Source: l.Run(), Options: []string{"rbind", "rw"}}}}
	id := "stage1"
	t.Cleanup(func() { u.Unstage(id) })
	if err := u.Stage(s, sandbox.Bundle{ID: id, Rootfs: l.Rootfs()}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := overlayAt(l.Rootfs()); ok {
		t.Errorf("the original overlay is still mounted at %s", l.Rootfs())
	}
	host := SandboxIDs.HostID
	for p, want := range map[string]uint32{s.Root.Path: host, filepath.Join(s.Root.Path, "etc/u1000"): host + 1000, s.Mounts[0].Source: host} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || st.Uid != want || st.Gid != want {
			t.Errorf("%s: uid %d gid %d (%v), want %d", p, st.Uid, st.Gid, err, want)
		}
	}
	// Write as mapped root, through the overlay and the bind.
	sh := exec.Command("sh", "-c", `echo hi > "$1/new" && mkdir "$1/d" && rm "$1/etc/u1000" && echo s > "$2/sock"`, "sh", s.Root.Path, s.Mounts[0].Source)
	sh.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: host, Gid: host}}
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("writing as sandbox root: %v: %s", err, out)
	}
	for _, p := range []string{filepath.Join(l.Upper(), "new"), filepath.Join(l.Upper(), "d"), filepath.Join(l.Run(), "sock")} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s on the disk: uid %d gid %d (%v), want 0:0", p, st.Uid, st.Gid, err)
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, s.Root.Path+" ") && strings.Contains(line, dir) {
			t.Errorf("the staged overlay names host paths: %s", line)
		}
	}
	if err := u.Unstage(id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(u.Dir); !os.IsNotExist(err) {
		t.Errorf("after Unstage: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.Upper(), "new")); err != nil {
		t.Errorf("Unstage touched the sandbox's files: %v", err)
	}
}

// BenchmarkStage measures what the user namespace adds to a runc Start:
// the user namespace for the idmaps, the overlay rebuilt from idmapped
// layers, a writable bind, and Unstage.
func BenchmarkStage(b *testing.B) {
	testenv.RequiresRoot(b)
	testenv.RequiresBinary(b, "mkfs.ext4", "e2fsprogs")
	dir := b.TempDir()
	layer := filepath.Join(dir, "layer")
	os.MkdirAll(filepath.Join(layer, "etc"), 0o755)
	l := rootfs.Layout{Dir: filepath.Join(dir, "sb")}
	if err := rootfs.CreateDisk(b.Context(), l, 32<<20); err != nil {
		b.Fatal(err)
	}
	if err := rootfs.MountDisk(l); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rootfs.Remove(l) })
	os.MkdirAll(l.Run(), 0o700)
	u := NewUserNS(dir, SandboxIDs)
	b.Run("nsfd", func(b *testing.B) {
		for b.Loop() {
			fd, err := u.nsFD()
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
	b.Run("stage+unstage", func(b *testing.B) {
		for b.Loop() {
			if err := rootfs.MountOverlay(l, []string{layer}); err != nil {
				b.Fatal(err)
			}
			s := &specs.Spec{Root: &specs.Root{}, Mounts: []specs.Mount{{Destination: "/run", Type: "bind", Source: l.Run(), Options: []string{"rw"}}}}
			if err := u.Stage(s, sandbox.Bundle{ID: "bench", Rootfs: l.Rootfs()}); err != nil {
				b.Fatal(err)
			}
			if err := u.Unstage("bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
