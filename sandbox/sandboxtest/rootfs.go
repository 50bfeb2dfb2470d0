package sandboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/reinsdev/reins/internal/testenv"
)

// BusyboxRootfs makes a root filesystem in dir from the host's static
// busybox (/usr/bin/busybox, Debian package busybox-static or busybox):
// /bin/busybox, a symlink per applet, and the usual empty directories.
func BusyboxRootfs(t testing.TB, dir string) {
	t.Helper()
	bb := testenv.RequiresBinary(t, "busybox", "busybox-static")
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// helperSource is a static program for the rootfs: it listens on the unix
// socket named by its first argument and answers every connection with a
// line, so a test can check the host reaches a socket made inside.
const helperSource = `package main

import (
	"net"
	"os"
)

func main() {
	l, err := net.Listen("unix", os.Args[1])
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Write([]byte("hello from the sandbox\n"))
		c.Close()
	}
}
`

// BuildHelper builds the socket helper, statically (CGO_ENABLED=0), to path.
func BuildHelper(t testing.TB, path string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "sockhelper.go")
	if err := os.WriteFile(src, []byte(helperSource), 0o644); err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", path, src)
	cmd.Dir = filepath.Dir(src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build socket helper: %v\n%s", err, out)
	}
}
