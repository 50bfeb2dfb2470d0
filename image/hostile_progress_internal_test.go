package image

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Progress reaches tenants (a Create's, BuildImage's): a build from the
// build cache does not name the cache's place on the host.
func TestHostileProgressNamesNoHostPath(t *testing.T) {
	cache := t.TempDir()
	s := &Store{opts: options{buildCache: cache}}
	src := filepath.Join(s.buildCacheDir("recipe"), "root")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	if err := s.fromBuildCache(context.Background(), "recipe", t.TempDir(), func(p Progress) { msgs = append(msgs, p.Message) }); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if strings.Contains(m, cache) {
			t.Errorf("progress %q names the build cache's host path", m)
		}
	}
}
