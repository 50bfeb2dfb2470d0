package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
)

// screenImages resolves desktop to an image with a display.
type screenImages struct{}

func (screenImages) Resolve(_ context.Context, ref string, _ func(sandbox.Progress)) (Image, error) {
	switch ref {
	case "desktop":
		return Image{Digest: "sha256:d", Screen: "1280x800"}, nil
	case "debian":
		return Image{Digest: "sha256:e"}, nil
	}
	return Image{}, errdefs.WithMessage(errdefs.ErrNotFound, "image "+ref+" not found")
}

// TestImageScreen: what a run's loop is told of the display its sandbox
// would have: an image's label, an attached sandbox's own screen (the
// tenant's only), nothing for an image without one.
func TestImageScreen(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "reins-executor")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	m, err := New(Config{Dir: filepath.Join(dir, "sandboxes"), ExecutorPath: exe,
		Backends: map[string]sandbox.Backend{"fake": fake.New()}, DefaultBackend: "fake", Images: screenImages{}, DiskPool: -1})
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(m.cfg.Dir, "web1")
	os.MkdirAll(d, 0o700)
	rec := Record{Info: sandbox.Info{ID: "web1", Tenant: "acme", State: sandbox.StateStopped, Reason: sandbox.ReasonExited,
		Spec: sandbox.Spec{Backend: "fake", Image: "desktop"}, Screen: "1024x768", CreatedAt: time.Now()}}
	if err := writeRecord(d, &rec); err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	runs := Runs{M: m}
	ctx := context.Background()
	for _, c := range []struct{ tenant, image, want string }{
		{"acme", "desktop", "1280x800"}, {"acme", "debian", ""}, {"", "desktop", "1280x800"}, {"acme", "sandbox:web1", "1024x768"},
	} {
		if got, err := runs.ImageScreen(ctx, c.tenant, c.image); err != nil || got != c.want {
			t.Errorf("%s's %s: %q %v, want %q", c.tenant, c.image, got, err, c.want)
		}
	}
	for _, c := range []struct{ tenant, image string }{{"beta", "sandbox:web1"}, {"acme", "nosuch"}} {
		if _, err := runs.ImageScreen(ctx, c.tenant, c.image); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s's %s: %v, want not found", c.tenant, c.image, err)
		}
	}
}
