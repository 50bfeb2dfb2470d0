package server_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/reinsdev/reins/errdefs"
)

// A tenant's BuildImage of a path on the service's host (oci:,
// docker-archive:, in any case, with spaces) is refused before anything
// reads the path, and the answer names no part of it. The path holds a
// real OCI layout, which the admin's BuildImage resolves: only the
// refusal kept the tenant from it, and the store never recorded it.
func TestHostileBuildImageHostPath(t *testing.T) {
	e, images := newImageEnv(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "operator-layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	tenant := e.client(e.tenant(t, "acme", nil))
	for _, ref := range []string{"oci:" + dir, " OCI:" + dir, "docker-archive:" + dir + "/index.json", "Docker-Archive:/etc/passwd"} {
		info, err := tenant.BuildImage(ctx, ref, nil)
		wantKind(t, "a tenant's BuildImage of "+ref, err, errdefs.ErrPermissionDenied)
		if info != nil || err != nil && (strings.Contains(err.Error(), "operator-layout") || strings.Contains(err.Error(), "passwd")) {
			t.Errorf("%q: %v, %v; want a refusal naming nothing of the host", ref, info, err)
		}
	}
	if list, err := images.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("the store after the tenant's attempts: %v, %v; want nothing resolved", list, err)
	}
	info, err := e.client(adminToken).BuildImage(ctx, "oci:"+dir, nil)
	if err != nil || info.Digest == "" {
		t.Fatalf("the admin's BuildImage of the layout: %v, %v; want it resolved", info, err)
	}
}
