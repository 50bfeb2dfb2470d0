package template_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox/template"
)

// A template name is one file name of the tenant's: "/" and ".." would
// reach another tenant's records or the host's files.
func TestHostileTemplateNames(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"", "a/b", "..", "../x", "x/../../y", "a..b", ".hidden", "-x", "Upper", "a\x00b", strings.Repeat("a", 64)} {
		if err := template.CheckName(name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckName(%q) = %v, want invalid", name, err)
		}
		_, err := f.b.Build(context.Background(), "t", template.Spec{Name: name, From: "busybox", Steps: []template.Step{run("true")}}, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Build(%q) = %v, want invalid", name, err)
		}
		if _, err := f.store.Get("t", name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want not found", name, err)
		}
		if err := f.store.Delete("t", name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Delete(%q) = %v, want not found", name, err)
		}
	}
	if n := f.h.liveCount(); n != 0 {
		t.Errorf("a refused name made %d sandboxes", n)
	}
	// Nothing was written outside the store's tenant directories.
	ents, _ := os.ReadDir(filepath.Dir(f.dir))
	if len(ents) != 1 {
		t.Errorf("the store's parent holds %d entries, want the store alone", len(ents))
	}
	for _, dst := range []string{"relative", "/", "/a/../../etc"} {
		s := template.Spec{Name: "ok", From: "busybox", Steps: []template.Step{{Kind: template.StepCopy, Dst: dst}}}
		if err := s.Check(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("copy to %q: %v, want invalid", dst, err)
		}
	}
}

// A step that prints far more than a build streams: the caller gets a
// bounded share and a count of the rest, and the build still succeeds
// (or fails with the tail).
func TestHostileStepOutputIsBounded(t *testing.T) {
	f := newFixture(t)
	var rec recorder
	_, err := f.b.Build(context.Background(), "", template.Spec{Name: "loud", From: "busybox",
		Steps: []template.Step{run("head -c 67108864 /dev/zero | tr '\\0' x")}}, rec.add)
	if err != nil {
		t.Fatal(err)
	}
	out := rec.output.String()
	if len(out) > template.MaxOutputShown+200 {
		t.Errorf("%d bytes of output streamed, want at most %d and a note", len(out), template.MaxOutputShown)
	}
	if !strings.Contains(out, "of output not shown, of 64 MiB in all") {
		t.Errorf("no note of the output not shown: %q", out[max(0, len(out)-200):])
	}
	_, err = f.b.Build(context.Background(), "", template.Spec{Name: "loudfail", From: "busybox",
		Steps: []template.Step{run("head -c 67108864 /dev/zero | tr '\\0' y; echo; echo the end; exit 9")}}, nil)
	if code, _ := errdefs.ExitCode(err); code != 9 || !strings.Contains(err.Error(), "the end") || len(err.Error()) > 8<<10 {
		t.Errorf("err (%d bytes) = %.300q…, want exit 9 and the tail", len(err.Error()), err)
	}
}

// A --copy tar whose entry claims more content than the extractor takes
// is refused by the executor's extractor: the build fails, saying so,
// and leaves no template.
func TestHostileCopyTarBomb(t *testing.T) {
	f := newFixture(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "bomb", Mode: 0o644, Size: 1 << 40, Typeflag: tar.TypeReg})
	tw.Write(make([]byte, 4096))
	// The stream ends here: the claimed TiB never comes.
	_, err := f.b.Build(context.Background(), "", template.Spec{Name: "bomb", From: "busybox",
		Steps: []template.Step{{Kind: template.StepCopy, Tar: buf.Bytes(), Dst: "/bomb", Src: "bomb.tar"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "COPY bomb.tar /bomb") || !strings.Contains(err.Error(), "past its cap") {
		t.Fatalf("err = %v, want the copy step refused by the extractor's cap", err)
	}
	if _, err := f.store.Get("", "bomb"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused copy left a template: %v", err)
	}
	if n := f.h.liveCount(); n != 0 {
		t.Errorf("%d build sandboxes left", n)
	}
}
