package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryBinaryIsInstalled: each Debian package a test asks for with
// RequiresBinary is one scripts/install-deps.sh installs, so that a fresh
// machine's `make test` has it (CI failed on a machine that lacked
// matchbox-window-manager, which only the developers' machines had).
func TestEveryBinaryIsInstalled(t *testing.T) {
	root := filepath.Join("..", "..")
	script, err := os.ReadFile(filepath.Join(root, "scripts", "install-deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	installs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*want \S+ (\S+)`).FindAllStringSubmatch(string(script), -1) {
		installs[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`need="\$need ([a-z0-9.+-]+)"`).FindAllStringSubmatch(string(script), -1) {
		installs[m[1]] = true
	}
	if !installs["runc"] || !installs["busybox-static"] {
		t.Fatalf("read no packages from install-deps.sh: %v", installs)
	}
	asked := regexp.MustCompile(`RequiresBinary\(t, "[^"]+", "([^"]+)"\)`)
	n := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range asked.FindAllStringSubmatch(string(src), -1) {
			n++
			if !installs[m[1]] {
				t.Errorf("%s asks for Debian's %s, which scripts/install-deps.sh does not install", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found %d RequiresBinary calls; the walk is broken", n)
	}
}
