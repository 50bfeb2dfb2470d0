package script_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model/script"
)

// hostPaths are the things a script: path may name on a host: a FIFO
// (whose read would wait forever), a device (whose read never ends), a
// directory, a secret that is no script, a symlink, nothing.
func hostPaths(t *testing.T) map[string]string {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("root:$6$hash-of-the-secret:19000::::::\n"), 0o600)
	link := filepath.Join(dir, "link.json")
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"turns":[{"text":"hi"}]}`), 0o644)
	os.Symlink(good, link)
	return map[string]string{"fifo": fifo, "device": "/dev/zero", "directory": dir, "secret": secret,
		"symlink": link, "missing": filepath.Join(dir, "nosuch.json")}
}

// TestOpenRefusesTenantPaths: a tenant's script: path gets one answer,
// whatever is there, and nothing is opened.
func TestOpenRefusesTenantPaths(t *testing.T) {
	for what, p := range hostPaths(t) {
		_, err := script.Open(p, "", false)
		if !errors.Is(err, errdefs.ErrPermissionDenied) || err.Error() != script.ErrHostPath.Error() {
			t.Errorf("%s: %v, want the one refusal", what, err)
		}
	}
	m, err := script.Open("/etc/shadow", `{"turns":[{"text":"inline"}]}`, false)
	if err != nil || m.Turns() != 1 {
		t.Errorf("an inline script (its name a label only): %v", err)
	}
}

// TestLoadHost: the admin's script: path is read only when it is a
// regular file, capped, and a malformed one is not quoted.
func TestLoadHost(t *testing.T) {
	paths := hostPaths(t)
	for _, what := range []string{"fifo", "device", "directory", "symlink"} {
		_, err := script.LoadHost(paths[what])
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want not a regular file", what, err)
		}
	}
	if _, err := script.LoadHost(paths["missing"]); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing: %v, want not found", err)
	}
	_, err := script.LoadHost(paths["secret"])
	if !errors.Is(err, errdefs.ErrInvalidArgument) || strings.Contains(err.Error(), "root") || strings.Contains(err.Error(), "'r'") {
		t.Errorf("a file that is no script: %v, want refused without quoting it", err)
	}
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, make([]byte, script.MaxBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := script.LoadHost(big); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("a file over MaxBytes: %v, want too large", err)
	}
	dir := filepath.Dir(paths["symlink"])
	if m, err := script.LoadHost(filepath.Join(dir, "good.json")); err != nil || m.Turns() != 1 {
		t.Errorf("a regular script: %v", err)
	}
}

// TestReadLocalIsCapped: the CLI reads its user's file as cat would, but
// a device that never ends stops at MaxBytes.
func TestReadLocalIsCapped(t *testing.T) {
	if _, err := script.ReadLocal("/dev/zero"); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("/dev/zero: %v, want too large", err)
	}
	if _, err := script.ReadLocal(t.TempDir()); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a directory: %v, want invalid", err)
	}
	if _, err := script.FromJSON("x", make([]byte, script.MaxBytes+1)); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("an inline script over MaxBytes: %v, want too large", err)
	}
}
