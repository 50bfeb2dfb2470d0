package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/store"
)

// newImageEnv is a service whose manager resolves images with a real
// image store (busybox built from the static busybox `make deps` makes),
// serving BuildImage, and that store.
func newImageEnv(t *testing.T) (*env, *image.Store) {
	t.Helper()
	if _, err := os.Stat(image.DefaultBusybox()); err != nil {
		testenv.Missing(t, "the static busybox %s (run `make deps`)", image.DefaultBusybox())
	}
	dir := t.TempDir()
	st, _ := openStores(t, dir)
	tenants := &server.Tenants{Store: st, Defaults: store.Quota{}}
	images, err := image.NewStore(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(images.CloseIdleConnections)
	exe := filepath.Join(dir, "reins-executor")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	m, err := manager.New(manager.Config{
		Dir: filepath.Join(dir, "sandboxes"), ExecutorPath: exe, DiskPool: -1,
		Backends: map[string]sandbox.Backend{"fake": fake.New()}, DefaultBackend: "fake",
		Images: manager.ImageStore(images), MaxSandboxes: tenants.MaxSandboxes,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(server.New(server.Over(m), adminToken, nil).WithTenants(tenants).WithImages(m).Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, st: st, t: t}, images
}

// TestBuildImage: BuildImage builds busybox with progress the first time
// and answers cached with the same digest after, for the admin and for a
// tenant (a built-in image is everyone's).
func TestBuildImage(t *testing.T) {
	e, _ := newImageEnv(t)
	ctx := context.Background()
	admin := e.client(adminToken)
	var reports []*reinsv1.Progress
	first, err := admin.BuildImage(ctx, "busybox", func(p *reinsv1.Progress) { reports = append(reports, p) })
	if err != nil {
		t.Fatal(err)
	}
	if first.Cached || first.Ref != "busybox" || first.Digest == "" || first.SizeBytes <= 0 || first.Screen != "" {
		t.Errorf("first build: %v; want a new image of busybox with a digest and a size, no screen", first)
	}
	if len(reports) == 0 || reports[0].Phase != reinsv1.ProgressPhase_PROGRESS_PHASE_BUILD {
		t.Errorf("progress of the first build: %v; want build reports", reports)
	}
	tenant := e.client(e.tenant(t, "acme", nil))
	for who, c := range map[string]interface {
		BuildImage(context.Context, string, func(*reinsv1.Progress)) (*reinsv1.ImageInfo, error)
	}{"the admin": admin, "a tenant": tenant} {
		again, err := c.BuildImage(ctx, "busybox:latest", func(p *reinsv1.Progress) { t.Errorf("%s: the cached image reported %v", who, p) })
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if !again.Cached || again.Digest != first.Digest || again.SizeBytes != first.SizeBytes {
			t.Errorf("%s built it again: %v; want cached, as %v", who, again, first)
		}
	}
	_, err = tenant.BuildImage(ctx, "snapshot:mine", nil)
	wantKind(t, "building a snapshot", err, errdefs.ErrInvalidArgument)
}
