package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
)

// unpackInto unpacks a tar into a fresh directory inside a fresh parent,
// so that a test can check nothing landed beside it.
func unpackInto(t *testing.T, b []byte) (dir string, err error) {
	t.Helper()
	parent := t.TempDir()
	dir = filepath.Join(parent, "layer")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, unpackTar(bytes.NewReader(b), dir)
}

func TestUnpackRefusesEscapes(t *testing.T) {
	for name, entries := range map[string][]tf{
		"dotdot":          {{name: "../x", body: "x"}},
		"dotdot inside":   {{name: "a/../../x", body: "x"}},
		"absolute":        {{name: "/x", body: "x"}},
		"through abs sym": {{name: "evil", typ: tar.TypeSymlink, link: "/"}, {name: "evil/x", body: "x"}},
		"through rel sym": {{name: "evil", typ: tar.TypeSymlink, link: "../.."}, {name: "evil/x", body: "x"}},
		"sym dir chain":   {{name: "d/", typ: tar.TypeDir}, {name: "d/up", typ: tar.TypeSymlink, link: "../.."}, {name: "d/up/x", body: "x"}},
		"hardlink out":    {{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}},
		"hardlink via sym": {{name: "evil", typ: tar.TypeSymlink, link: "/etc"},
			{name: "h", typ: tar.TypeLink, link: "evil/passwd"}},
		"whiteout via sym": {{name: "evil", typ: tar.TypeSymlink, link: "/tmp"}, {name: "evil/.wh.x"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir, err := unpackInto(t, tarBytes(t, entries...))
			if err == nil {
				t.Fatal("unpacked without error")
			}
			ents, _ := os.ReadDir(filepath.Dir(dir))
			if len(ents) != 1 {
				t.Errorf("something was written beside the layer: %v", ents)
			}
			if exists("/x") || exists("/tmp/x") {
				t.Errorf("/x or /tmp/x exists")
			}
		})
	}
}

func TestUnpackFifoAsParentDoesNotHang(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		_, err := unpackInto(t, tarBytes(t,
			tf{name: "p", typ: tar.TypeFifo},
			tf{name: "p/x", body: "x"},
		))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("unpacked a file below a fifo")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("unpacking below a fifo hangs")
	}
}

func TestUnpackSymlinkInsideIsFollowed(t *testing.T) {
	dir, err := unpackInto(t, tarBytes(t,
		tf{name: "real/", typ: tar.TypeDir},
		tf{name: "alias", typ: tar.TypeSymlink, link: "real"},
		tf{name: "alias/file", body: "in real"},
		tf{name: "dangling", typ: tar.TypeSymlink, link: "/nowhere/at/all"},
	))
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "real/file")); got != "in real" {
		t.Errorf("real/file = %q", got)
	}
}

func TestUnpackLaterEntryReplaces(t *testing.T) {
	dir, err := unpackInto(t, tarBytes(t,
		tf{name: "f", body: "first"},
		tf{name: "f", body: "second"},
		tf{name: "d/", typ: tar.TypeDir},
		tf{name: "d/x", body: "x"},
		tf{name: "d/", typ: tar.TypeDir, mode: 0o700}, // a directory stays, with its content
		tf{name: "s", typ: tar.TypeSymlink, link: "f"},
		tf{name: "s", body: "now a file"}, // replaces the link, not its target
		tf{name: "gone/", typ: tar.TypeDir},
		tf{name: "gone/y", body: "y"},
		tf{name: "gone", body: "a file now"},
		tf{name: "implicit/parent/file", body: "p"},
	))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"f": "second", "d/x": "x", "s": "now a file", "gone": "a file now", "implicit/parent/file": "p"} {
		if got := readFile(t, filepath.Join(dir, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "d")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("d: %v %v", fi, err)
	}
}

func TestUnpackVerifiesDigests(t *testing.T) {
	b := tarBytes(t, tf{name: "f", body: "content"})
	sum := sha256.Sum256(b)
	good := "sha256:" + hex.EncodeToString(sum[:])
	bad := "sha256:" + strings.Repeat("0", 64)
	open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	noop := func(Progress) {}

	if _, err := unpackVerified(context.Background(), layerSource{diffID: good, open: open}, t.TempDir(), noop); err != nil {
		t.Errorf("good digest: %v", err)
	}
	_, err := unpackVerified(context.Background(), layerSource{diffID: bad, open: open}, t.TempDir(), noop)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), good) {
		t.Errorf("bad diff ID: %v", err)
	}
	_, err = unpackVerified(context.Background(), layerSource{diffID: good, digest: bad, open: open}, t.TempDir(), noop)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "layer blob") {
		t.Errorf("bad blob digest: %v", err)
	}
}

func TestUnpackCanceled(t *testing.T) {
	b := tarBytes(t, tf{name: "f", body: strings.Repeat("x", 3<<20)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src := layerSource{diffID: "sha256:" + strings.Repeat("0", 64), open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
	if _, err := unpackVerified(ctx, src, t.TempDir(), func(Progress) {}); !errors.Is(err, errdefs.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want ErrCanceled and context.Canceled", err)
	}
}
