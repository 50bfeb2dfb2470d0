package server_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// TestHostileRunUploads: a run's uploads are the service's to describe.
// A digest the client names (perhaps another tenant's blob) is dropped;
// an archive with a climbing name, a link or a device is refused; one
// over the bound is too large.
func TestHostileRunUploads(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	ctx := context.Background()
	acme := e.client(e.tenant(t, "acme", nil))
	run, err := acme.StartRun(ctx, &reinsv1.RunSpec{Task: "x", Model: "script:hi", UploadsDigest: "sha256:" + strings.Repeat("ab", 32),
		Uploads: []*reinsv1.RunUpload{{Path: "/etc/shadow", Size: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if run.Spec.UploadsDigest != "" || len(run.Spec.Uploads) != 0 {
		t.Errorf("the client's uploads_digest or uploads were kept: %q %v", run.Spec.UploadsDigest, run.Spec.Uploads)
	}
	for _, tc := range []struct {
		name string
		hdr  tar.Header
		kind error
		want string
	}{
		{"climbing", tar.Header{Name: "workspace/../../x", Typeflag: tar.TypeReg}, errdefs.ErrInvalidArgument, "not a clean relative path"},
		{"absolute", tar.Header{Name: "/etc/x", Typeflag: tar.TypeReg}, errdefs.ErrInvalidArgument, "not a clean relative path"},
		{"symlink", tar.Header{Name: "workspace/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, errdefs.ErrInvalidArgument, "not a regular file or a directory"},
		{"device", tar.Header{Name: "workspace/d", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, errdefs.ErrInvalidArgument, "not a regular file or a directory"},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tc.hdr.Mode = 0o644
		tw.WriteHeader(&tc.hdr)
		tw.Close()
		_, err := acme.StartRunWithUploads(ctx, &reinsv1.RunSpec{Task: "x", Model: "script:hi"}, buf.Bytes())
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.kind, tc.want)
		}
	}
	_, err = acme.StartRunWithUploads(ctx, &reinsv1.RunSpec{Task: "x", Model: "script:hi"}, make([]byte, 12<<20+1))
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("an archive over 12 MiB: %v, want too large", err)
	}
	_, err = acme.StartRun(ctx, &reinsv1.RunSpec{Task: "x", Model: "script:hi", Downloads: []string{"relative/*.md"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "absolute path or glob") {
		t.Errorf("a relative download: %v", err)
	}
}
