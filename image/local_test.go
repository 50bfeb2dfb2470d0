package image

import (
	"archive/tar"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/reinsdev/reins/errdefs"
)

func TestOCILayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img1 := testImage(t)
	img2 := testImage(t, lowerLayer(t), tarBytes(t, tf{name: "only-in-v2", body: "2"}))
	for tag, img := range map[string]v1.Image{"v1": img1, "v2": img2} {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
			t.Fatal(err)
		}
	}
	s := newStore(t)
	ctx := context.Background()

	got1, err := s.Resolve(ctx, "oci:"+dir+":v1", func(p Progress) {
		if p.Phase != PhaseUnpack {
			t.Errorf("phase %q, want %q", p.Phase, PhaseUnpack)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img1.Digest()
	if got1.Digest != d1.String() || len(got1.Layers) != 2 || got1.Ref != "oci:"+dir+":v1" {
		t.Errorf("v1 = %+v, digest want %s", got1, d1)
	}
	if got := readFile(t, filepath.Join(got1.Layers[1], "etc/added")); got != "added" {
		t.Errorf("etc/added = %q", got)
	}

	d2, _ := img2.Digest()
	got2, err := s.Resolve(ctx, "oci:"+dir+"@"+d2.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got2.Layers[0] != got1.Layers[0] {
		t.Errorf("shared layer unpacked twice: %s and %s", got2.Layers[0], got1.Layers[0])
	}
	if !exists(filepath.Join(got2.Layers[1], "only-in-v2")) {
		t.Errorf("v2's own layer is missing its file")
	}

	_, err = s.Resolve(ctx, "oci:"+dir, nil)
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "several images match") || !strings.Contains(err.Error(), "v1") {
		t.Errorf("ambiguous layout: %v", err)
	}
	_, err = s.Resolve(ctx, "oci:"+dir+":v3", nil)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing tag: %v", err)
	}
	_, err = s.Resolve(ctx, "oci:"+filepath.Join(t.TempDir(), "nothing"), nil)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing layout: %v", err)
	}
}

func TestOCILayoutSingleImage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(testImage(t)); err != nil {
		t.Fatal(err)
	}
	img, err := newStore(t).Resolve(context.Background(), "oci:"+dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 2 {
		t.Errorf("layers = %v", img.Layers)
	}
}

func TestDockerArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img.tar")
	src := testImage(t, lowerLayer(t), upperLayer(t), tarBytes(t, tf{name: "etc/", typ: tar.TypeDir}, tf{name: "etc/third", body: "3"}))
	tag, err := name.NewTag("example.com/test/img:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, src); err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	img, err := s.Resolve(context.Background(), "docker-archive:"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	configDigest, _ := src.ConfigName()
	if img.Digest != configDigest.String() || len(img.Layers) != 3 {
		t.Errorf("image = %+v, want digest %s", img, configDigest)
	}
	if got := readFile(t, filepath.Join(img.Layers[2], "etc/third")); got != "3" {
		t.Errorf("etc/third = %q", got)
	}
	if !slices.Contains(img.Config.Env, "GREETING=hi") {
		t.Errorf("config = %+v", img.Config)
	}
	merged := mountOverlay(t, img.Layers)
	if exists(filepath.Join(merged, "gone")) || !exists(filepath.Join(merged, "etc/third")) || !exists(filepath.Join(merged, "etc/hello")) {
		t.Errorf("merged view is wrong")
	}

	_, err = s.Resolve(context.Background(), "docker-archive:"+filepath.Join(t.TempDir(), "none.tar"), nil)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing archive: %v", err)
	}
}
