package image

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
)

func hostBusybox(t *testing.T) string {
	t.Helper()
	bb := DefaultBusybox()
	if err := checkStatic(bb); err != nil {
		testenv.Missing(t, "a static busybox at %s (%v): run `make deps` as root, which builds it", bb, err)
	}
	return bb
}

func TestBusybox(t *testing.T) {
	hostBusybox(t)
	s := newStore(t)
	var messages []string
	img, err := s.Resolve(context.Background(), "busybox", func(p Progress) {
		if p.Phase != PhaseBuild {
			t.Errorf("phase %q", p.Phase)
		}
		messages = append(messages, p.Message)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(messages) == 0 {
		t.Errorf("no progress reported")
	}
	if img.Ref != busyboxKey || len(img.Layers) != 1 || !strings.HasPrefix(img.Digest, "sha256:") {
		t.Fatalf("image = %+v", img)
	}
	if img.Config.WorkingDir != "/workspace" || !slices.Equal(img.Config.Cmd, []string{"sh"}) || !slices.Contains(img.Config.Env, DefaultPath) {
		t.Errorf("config = %+v", img.Config)
	}
	root := img.Layers[0]
	fi, err := os.Stat(filepath.Join(root, "bin/busybox"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("bin/busybox: %v %v", fi, err)
	}
	for _, applet := range []string{"bin/sh", "bin/ls", "bin/cat"} {
		if target, err := os.Readlink(filepath.Join(root, applet)); err != nil || target != "/bin/busybox" {
			t.Errorf("%s -> %q, %v", applet, target, err)
		}
	}
	if got := readFile(t, filepath.Join(root, "etc/passwd")); !strings.HasPrefix(got, "root:x:0:0:") || !strings.Contains(got, "\nuser:x:1000:1000:user:/home/user:/bin/sh\n") {
		t.Errorf("etc/passwd = %q, want root and user", got)
	}
	if got := readFile(t, filepath.Join(root, "etc/group")); !strings.HasPrefix(got, "root:x:0:") || !strings.Contains(got, "\nuser:x:1000:\n") {
		t.Errorf("etc/group = %q, want root and user", got)
	}
	checkUserHome(t, root)
	if got := readFile(t, filepath.Join(root, "etc/hosts")); got != string(HostsFile("")) {
		t.Errorf("etc/hosts = %q", got)
	}
	if got := readFile(t, filepath.Join(root, "etc/nsswitch.conf")); !strings.Contains(got, "hosts: files dns\n") {
		t.Errorf("etc/nsswitch.conf = %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(root, "etc/resolv.conf")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("etc/resolv.conf: %v %v, want an empty regular file", fi, err)
	}
	for dir, perm := range map[string]os.FileMode{"tmp": os.ModeSticky | 0o777, "root": 0o700, "workspace": 0o755} {
		fi, err := os.Stat(filepath.Join(root, dir))
		if err != nil || !fi.IsDir() || fi.Mode()&(os.ModePerm|os.ModeSticky) != perm {
			t.Errorf("%s: %v %v, want mode %v", dir, fi.Mode(), err, perm)
		}
	}

	// Built once: again (under its other name, in a second store on the
	// same directory) it is just read back.
	s2, err := NewStore(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	again, err := s2.Resolve(context.Background(), "busybox:latest", func(p Progress) {
		t.Errorf("cached busybox reported %+v", p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != img.Digest || again.Layers[0] != root {
		t.Errorf("rebuilt: %+v vs %+v", again, img)
	}
	t.Logf("busybox %s, %d bytes; cached resolve took %v", img.Digest, img.Size, time.Since(start))
}

func TestBusyboxBuildIsDeterministic(t *testing.T) {
	hostBusybox(t)
	a, err := newStore(t).Resolve(context.Background(), "busybox", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newStore(t).Resolve(context.Background(), "busybox", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest || filepath.Base(a.Layers[0]) != filepath.Base(b.Layers[0]) {
		t.Errorf("two builds differ: %s %s", a.Digest, b.Digest)
	}
}

func TestBusyboxConcurrent(t *testing.T) {
	hostBusybox(t)
	s := newStore(t)
	var wg sync.WaitGroup
	digests := make([]string, 4)
	for i := range digests {
		wg.Go(func() {
			img, err := s.Resolve(context.Background(), "busybox", nil)
			if err != nil {
				t.Error(err)
				return
			}
			digests[i] = img.Digest
		})
	}
	wg.Wait()
	if digests[0] == "" || slices.ContainsFunc(digests, func(d string) bool { return d != digests[0] }) {
		t.Errorf("digests %v", digests)
	}
}

func TestBusyboxMissingOrDynamic(t *testing.T) {
	for name, path := range map[string]string{
		"missing": filepath.Join(t.TempDir(), "busybox"),
		"dynamic": "/bin/ls",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := newStore(t, WithBusybox(path)).Resolve(context.Background(), "busybox", nil)
			if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "make deps") || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v, want ErrFailedPrecondition naming %s and make deps", err, path)
			}
		})
	}
}

func TestDebianPreconditions(t *testing.T) {
	requiresRoot(t)
	_, err := newStore(t, WithDebianMirror("http://127.0.0.1:1/debian"), WithDebootstrap("/bin/true")).Resolve(context.Background(), "debian", nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "http://127.0.0.1:1/debian") {
		t.Errorf("dead mirror: %v", err)
	}
	_, err = newStore(t, WithDebootstrap(filepath.Join(t.TempDir(), "debootstrap"))).Resolve(context.Background(), "debian:bookworm", nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "install the Debian package debootstrap") {
		t.Errorf("missing debootstrap: %v", err)
	}
}

func TestAptMirror(t *testing.T) {
	dir := t.TempDir()
	if got := aptMirror(dir, "bookworm"); got != defaultDebianMirror {
		t.Errorf("no sources: %q", got)
	}
	os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)
	os.WriteFile(filepath.Join(dir, "sources.list.d", "debian.sources"), []byte(`Types: deb
# a comment
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb deb-src
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
`), 0o644)
	if got := aptMirror(dir, "bookworm"); got != "http://mirror.example/debian" {
		t.Errorf("deb822: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "sources.list"), []byte("# deb http://old/ bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://one-line/debian bookworm main\n"), 0o644)
	if got := aptMirror(dir, "bookworm"); got != "http://one-line/debian" {
		t.Errorf("one-line: %q", got)
	}
}

// TestDebian builds the debian image with debootstrap from the host's apt
// mirror (about a minute), keeping the root in a build cache, from which a
// second store copies it with no debootstrap at all.
func TestDebian(t *testing.T) {
	requiresRoot(t)
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	cache := t.TempDir()
	s := newStore(t, WithBuildCache(cache))
	var lines int
	var last Progress
	start := time.Now()
	img, err := s.Resolve(context.Background(), "debian", func(p Progress) {
		lines++
		if p.Total > 0 {
			last = p
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	built := time.Since(start)
	if lines < 50 || last.Total == 0 || last.Done != last.Total {
		t.Errorf("progress: %d reports, last %+v", lines, last)
	}
	root := img.Layers[0]
	if !strings.HasPrefix(readFile(t, filepath.Join(root, "etc/debian_version")), "12.") {
		t.Errorf("etc/debian_version is not bookworm's")
	}
	for _, p := range []string{"usr/bin/bash", "usr/bin/apt-get", "usr/bin/python3", "usr/lib/python3.11/json/__init__.py", "workspace"} {
		if !exists(filepath.Join(root, p)) {
			t.Errorf("%s missing", p)
		}
	}
	if debs, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb")); len(debs) != 0 {
		t.Errorf("%d .deb files left", len(debs))
	}
	if got := readFile(t, filepath.Join(root, "etc/resolv.conf")); got != "" {
		t.Errorf("host resolv.conf leaked: %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(ents) != 0 {
		t.Errorf("tmp not empty: %v", ents)
	}
	merged := mountOverlay(t, img.Layers)
	if !exists(filepath.Join(merged, "bin/bash")) {
		t.Errorf("merged bin/bash missing")
	}
	again, err := s.Resolve(context.Background(), "debian:bookworm", nil)
	if err != nil || again.Digest != img.Digest {
		t.Errorf("second resolve: %v, %v", again, err)
	}
	t.Logf("debian %s: %d MiB, built in %v", img.Digest, img.Size>>20, built.Round(time.Second))
	t0 := time.Now()
	copied, err := newStore(t, WithBuildCache(cache), WithDebootstrap("/bin/false")).Resolve(context.Background(), "debian", nil)
	if err != nil || copied.Digest != img.Digest {
		t.Errorf("from the build cache: %v, %v; want the same image %s", copied, err, img.Digest)
	}
	t.Logf("debian from the build cache in %v", time.Since(t0).Round(time.Millisecond))
	t.Run("network", func(t *testing.T) { testDebianNetwork(t, img) })
}

// TestBusyboxVersion: the build scripts/build-busybox.sh makes is where
// DefaultBusybox looks.
func TestBusyboxVersion(t *testing.T) {
	b, err := os.ReadFile("../scripts/build-busybox.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nBUSYBOX_VERSION="+BusyboxVersion+"\n") {
		t.Errorf("scripts/build-busybox.sh does not build BusyboxVersion %s", BusyboxVersion)
	}
	t.Setenv("REINS_BUSYBOX", "")
	if got, want := DefaultBusybox(), filepath.Join(BusyboxCacheDir, BusyboxVersion, "busybox"); got != want {
		t.Errorf("DefaultBusybox() = %s, want %s", got, want)
	}
	t.Setenv("REINS_BUSYBOX", "/opt/bb")
	if got := DefaultBusybox(); got != "/opt/bb" {
		t.Errorf("with REINS_BUSYBOX: %s", got)
	}
}

// TestBusyboxWgetTimeout: the image's busybox takes wget -T (Debian's
// segfaults parsing it) and gives up on a server that accepts and stays
// silent after about the timeout, with an error.
func TestBusyboxWgetTimeout(t *testing.T) {
	bb := hostBusybox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // silent: never answers
		}
	}()
	start := time.Now()
	out, err := exec.Command(bb, "wget", "-T", "1", "-O", "-", "http://"+ln.Addr().String()+"/f").CombinedOutput()
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "timed out") {
		t.Fatalf("wget -T 1: %v (want exit status 1, not a signal)\n%s", err, out)
	}
	if took < 900*time.Millisecond || took > 5*time.Second {
		t.Errorf("wget -T 1 gave up after %v", took)
	}
}

func TestHostsFile(t *testing.T) {
	if got := string(HostsFile("")); !strings.HasPrefix(got, "127.0.0.1\tlocalhost\n") || strings.Contains(got, "127.0.1.1") {
		t.Errorf("HostsFile(\"\") = %q", got)
	}
	if got := string(HostsFile("sandbox-abc")); !strings.HasSuffix(got, "127.0.1.1\tsandbox-abc\n") {
		t.Errorf("HostsFile(sandbox-abc) = %q", got)
	}
	if got := string(HostsFile("x\n1.2.3.4 evil")); strings.Contains(got, "evil") {
		t.Errorf("a name with a newline got in: %q", got)
	}
}

// A root in the build cache is copied, not built: no debootstrap, no
// mirror (both would fail here), and the image has the cached files.
func TestDebianFromBuildCache(t *testing.T) {
	testenv.RequiresRoot(t)
	cache := t.TempDir()
	s := newStore(t, WithBuildCache(cache), WithDebootstrap("/bin/false"), WithDebianMirror("http://127.0.0.1:1/debian"))
	root := filepath.Join(s.buildCacheDir(debianSource), "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "etc", "debian_version"), []byte("12.99 cached\n"), 0o644)
	os.Symlink("debian_version", filepath.Join(root, "etc", "link"))
	fakeAccounts(t, root)
	img, err := s.Resolve(context.Background(), "debian", nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(img.Layers[0], "etc", "debian_version"))
	if err != nil || string(data) != "12.99 cached\n" {
		t.Fatalf("the image's debian_version: %q, %v", data, err)
	}
	if l, err := os.Readlink(filepath.Join(img.Layers[0], "etc", "link")); err != nil || l != "debian_version" {
		t.Errorf("a symlink in the cached root came out as %q, %v", l, err)
	}
	// The account is added to the image, not to the cached root.
	want := "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:/bin/bash\n"
	if got := readFile(t, filepath.Join(img.Layers[0], "etc/passwd")); got != want {
		t.Errorf("the image's etc/passwd = %q, want %q", got, want)
	}
	if got := readFile(t, filepath.Join(img.Layers[0], "etc/shadow")); got != "root:*:19000:0:99999:7:::\nuser:!::0:99999:7:::\n" {
		t.Errorf("the image's etc/shadow = %q", got)
	}
	if got := readFile(t, filepath.Join(img.Layers[0], "home/user/.profile")); got != "# skel\n" {
		t.Errorf("home/user/.profile = %q, want /etc/skel's", got)
	}
	checkUserHome(t, img.Layers[0])
	if got := readFile(t, filepath.Join(root, "etc/passwd")); strings.Contains(got, "user:") {
		t.Errorf("the build cache's root got the account: %q", got)
	}
	// A second resolve of the same recipe is the cached image.
	if img, err := s.Resolve(context.Background(), "debian", nil); err != nil || !img.Cached {
		t.Errorf("resolving again: cached %v, %v", img != nil && img.Cached, err)
	}
}

// fakeAccounts gives a fake Debian root the account files and skeleton
// that addUser extends.
func fakeAccounts(t *testing.T, root string) {
	t.Helper()
	os.MkdirAll(filepath.Join(root, "etc", "skel"), 0o755)
	for name, text := range map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/bash\n", "group": "root:x:0:\n",
		"shadow": "root:*:19000:0:99999:7:::\n", "skel/.profile": "# skel\n",
	} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkUserHome: /home/user is the account's.
func checkUserHome(t *testing.T, root string) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(root, "home/user"))
	if err != nil || !fi.IsDir() {
		t.Fatalf("home/user: %v, %v", fi, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("home/user is owned by %d:%d, want 1000:1000", st.Uid, st.Gid)
	}
}
