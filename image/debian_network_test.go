package image

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/internal/mirrortest"
)

// chroot is a writable view of an image's layers (an overlay with a
// scratch upper directory: the store's layer stays as it was) with /proc
// and a few device nodes, for running the image's programs on the host.
type chroot struct {
	t    *testing.T
	root string
}

func newChroot(t *testing.T, layers []string) *chroot {
	t.Helper()
	dir := t.TempDir()
	root, upper, work := filepath.Join(dir, "root"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{root, upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lower := make([]string, len(layers))
	for i, l := range layers {
		lower[len(layers)-1-i] = l
	}
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + upper + ",workdir=" + work
	mount := func(src, target, fstype, data string) {
		if err := unix.Mount(src, target, fstype, 0, data); err != nil {
			t.Fatalf("mount %s on %s: %v", fstype, target, err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", target, err)
			}
		})
	}
	mount("overlay", root, "overlay", opts)
	mount("proc", filepath.Join(root, "proc"), "proc", "")
	mount("tmpfs", filepath.Join(root, "dev"), "tmpfs", "mode=0755")
	for name, dev := range map[string]uint64{"null": unix.Mkdev(1, 3), "zero": unix.Mkdev(1, 5), "random": unix.Mkdev(1, 8), "urandom": unix.Mkdev(1, 9)} {
		if err := unix.Mknod(filepath.Join(root, "dev", name), unix.S_IFCHR|0o666, int(dev)); err != nil {
			t.Fatal(err)
		}
	}
	return &chroot{t: t, root: root}
}

// run runs script with sh in the chroot, on the host's network, with a
// sandbox's plain environment (no proxy variables: mirrortest.Env("")).
func (c *chroot) run(script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "chroot", c.root, "/bin/sh", "-c", script)
	cmd.Env = append([]string{DefaultPath, "HOME=/root", "LANG=C.UTF-8", "TMPDIR=/tmp"}, mirrortest.Env("")...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// testDebianNetwork checks the debian image's network tools and files,
// then installs a package with each of apt, pip, npm and git from the
// stand-in mirrors on loopback, in a chroot of the image.
func testDebianNetwork(t *testing.T, img *Image) {
	root := img.Layers[0]
	for _, f := range []string{"etc/resolv.conf", "etc/hosts"} {
		if fi, err := os.Lstat(filepath.Join(root, f)); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s is not a regular file: %v %v", f, fi, err)
		}
	}
	if got := readFile(t, filepath.Join(root, "etc/hosts")); got != string(HostsFile("")) {
		t.Errorf("etc/hosts = %q", got)
	}
	c := newChroot(t, img.Layers)
	out, err := c.run("set -e; for p in curl git python3 pip3 node npm ssh host update-ca-certificates; do command -v $p; done; " +
		"python3 -m venv /tmp/venv && /tmp/venv/bin/python -c 'import sys; print(sys.prefix)'; " +
		"test -s /etc/ssl/certs/ca-certificates.crt; getent ahosts localhost; npm --version")
	if err != nil || !strings.Contains(out, "/tmp/venv") || !strings.Contains(out, "127.0.0.1") {
		t.Errorf("network tools: %v\n%s", err, out)
	}
	m := mirrortest.Start(t)
	for _, tool := range mirrortest.Tools {
		t.Run(string(tool), func(t *testing.T) {
			src := m.Source(tool)
			start := time.Now()
			out, err := c.run(mirrortest.Command(tool, src.URL))
			if err != nil || !strings.Contains(out, mirrortest.Marker(tool)) {
				t.Fatalf("%v, want %q in:\n%s", err, mirrortest.Marker(tool), out)
			}
			if len(src.Requests()) == 0 {
				t.Errorf("the %s source recorded no request", tool)
			}
			t.Logf("%s install from the mirror took %v", tool, time.Since(start).Round(time.Millisecond))
		})
	}
	for tool, path := range map[mirrortest.Tool]string{
		mirrortest.Apt: "/pool/main/reins-hello_1.0_all.deb",
		mirrortest.Pip: "/packages/reins_hello-1.0-py3-none-any.whl",
		mirrortest.NPM: "/reins-hello-1.0.0.tgz",
		mirrortest.Git: "/git-upload-pack",
	} {
		if !m.Source(tool).Served(path) {
			t.Errorf("the %s source never served %s: %v", tool, path, m.Source(tool).Requests())
		}
	}
	if out, err := c.run("dpkg-query -W -f '${Status}' reins-hello; python3 -m pip show -q reins-hello >/dev/null && echo pip-ok"); err != nil || !strings.Contains(out, "install ok installed") || !strings.Contains(out, "pip-ok") {
		t.Errorf("installed packages: %v\n%s", err, out)
	}
}
