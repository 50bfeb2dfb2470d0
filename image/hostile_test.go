package image

import (
	"archive/tar"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/reinsdev/reins/errdefs"
)

// TestLayerWithSpecialFilesIsRefused is finding 5 of issue 7: a layer that
// carries a device node (the host's root disk, 254:0, mode 0666) or a fifo
// must fail the image, naming the layer and the entry, and leave nothing
// behind: no node, no layer directory, no temporary one.
func TestLayerWithSpecialFilesIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		node tf
		says string
	}{
		{"block device", tf{name: "dev/sda", typ: tar.TypeBlock, mode: 0o666, major: 254, minor: 0},
			`entry "dev/sda" is a block device (254:0): images and archives may not carry device nodes, fifos or sockets`},
		{"character device", tf{name: "dev/mem", typ: tar.TypeChar, mode: 0o666, major: 1, minor: 1},
			`entry "dev/mem" is a character device (1:1): images and archives may not carry device nodes, fifos or sockets`},
		{"fifo", tf{name: "run/pipe", typ: tar.TypeFifo, mode: 0o666},
			`entry "run/pipe" is a fifo: images and archives may not carry device nodes, fifos or sockets`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layer := tarBytes(t,
				tf{name: "dev/", typ: tar.TypeDir},
				tf{name: "run/", typ: tar.TypeDir},
				tf{name: "etc/hello", body: "hello\n"},
				tc.node,
				tf{name: "etc/after", body: "after\n"},
			)
			s := newStore(t)
			_, err := s.Resolve(context.Background(), "oci:"+writeLayout(t, testImage(t, layer)), nil)
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "layer "+digestOf(layer)+": "+tc.says) {
				t.Fatalf("Resolve: %v, want an invalid-argument error saying %q", err, "layer "+digestOf(layer)+": "+tc.says)
			}
			filepath.WalkDir(s.Dir(), func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if d.Type()&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
					t.Errorf("%s is a %v", p, d.Type())
				}
				if strings.HasSuffix(p, "/etc/hello") {
					t.Errorf("%s is left of the refused layer", p)
				}
				return nil
			})
			if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(ents) != 0 {
				t.Errorf("tmp not empty: %v", ents)
			}
		})
	}
}

// TestStoreIsPrivate: no other user of the host may reach into the store
// (its layers hold whatever the images hold, set-user-ID files included).
func TestStoreIsPrivate(t *testing.T) {
	dir := t.TempDir()
	// A store made by an older version, with traversable directories.
	for _, d := range []string{"", "layers", "layers/sha256"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o711); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, d), 0o711)
	}
	s, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.CloseIdleConnections()
	if _, err := s.Resolve(context.Background(), "oci:"+writeLayout(t, testImage(t)), nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"", "layers", "layers/sha256", "images", "images/sha256", "refs", "tmp"} {
		fi, err := os.Stat(filepath.Join(dir, d))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want drwx------", filepath.Join(dir, d), fi.Mode())
		}
	}
}

// writeLayout writes img as an OCI layout and returns its directory.
func writeLayout(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}
