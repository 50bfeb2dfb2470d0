package manager

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/runc"
	"github.com/reinsdev/reins/sandbox/template"
	"github.com/reinsdev/reins/sandbox/workspace"
)

// withDisplay is an image store where ref "desk" is busybox with a
// display of screen (busybox itself has none): what the desktop image's
// label gives, without building it.
type withDisplay struct {
	Images
	screen string
}

func (w withDisplay) Resolve(ctx context.Context, ref string, progress func(sandbox.Progress)) (Image, error) {
	if ref != "desk" {
		return w.Images.Resolve(ctx, ref, progress)
	}
	img, err := w.Images.Resolve(ctx, "busybox", progress)
	img.Screen = w.screen
	return img, err
}

// displayRecorder is the runc backend that records the executor's
// arguments of each start, by sandbox.
type displayRecorder struct {
	*runc.Backend
	mu   sync.Mutex
	args map[string][]string
}

func (d *displayRecorder) Start(ctx context.Context, b sandbox.Bundle) (sandbox.Endpoint, error) {
	d.mu.Lock()
	d.args[b.ID] = slices.Clone(b.Args)
	d.mu.Unlock()
	return d.Backend.Start(ctx, b)
}

func (d *displayRecorder) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.args, id)
}

// display is the --display the last start of sandbox id was given ("":
// none, "?": never started).
func (d *displayRecorder) display(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	args, ok := d.args[id]
	if !ok {
		return "?"
	}
	if i := slices.Index(args, "--display"); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// A sandbox of an image with a display starts its executor with
// --display at its screen (the spec's, else the image's), and its
// executor has a display of that size, on every path:
// create, resume on a fresh guest, a snapshot's and a fork's sandboxes
// (which keep it, or take the spec's), a template's, and a restarted
// manager still knows it. An image without one gets no --display, and no
// screen.
func TestDisplayArgument(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "runc", "runc")
	dir := t.TempDir()
	exe := buildExecutor(t, dir)
	rb, err := runc.New(filepath.Join(dir, "runc"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &displayRecorder{Backend: rb, args: map[string][]string{}}
	ws, err := workspace.Open(filepath.Join(dir, "workspaces"))
	if err != nil {
		t.Fatal(err)
	}
	images, err := image.NewStore(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	opts := func(c *Config) {
		c.Workspaces = WorkspaceStore(ws)
		c.Images = withDisplay{ImageStore(images), sandbox.DefaultScreen}
	}
	m := realManager(t, dir, exe, "runc", rec, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var made []string
	t.Cleanup(func() {
		for _, id := range made {
			m.Delete(context.Background(), "acme", id)
		}
	})
	create := func(spec sandbox.Spec) sandbox.Info {
		t.Helper()
		info, err := m.Create(ctx, "acme", spec, nil)
		if info.ID != "" {
			made = append(made, info.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	check := func(what string, info sandbox.Info, want string) {
		t.Helper()
		got, err := m.Get(ctx, "acme", info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Screen != want || got.Screen != want {
			t.Errorf("%s: screen %q (Get %q), want %q", what, info.Screen, got.Screen, want)
		}
		if d := rec.display(info.ID); d != want {
			t.Errorf("%s: the executor was started with --display %q, want %q", what, d, want)
		}
		// The executor says so (busybox has no X server to start: its
		// size is all it can tell).
		c, err := m.Client(ctx, "acme", info.ID)
		if err != nil {
			t.Fatal(err)
		}
		hello, err := c.Hello(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := hello.Display; want == "" && d != nil || want != "" && fmt.Sprintf("%dx%d", d.GetWidth(), d.GetHeight()) != want {
			t.Errorf("%s: the executor's display is %v, want %q", what, d, want)
		}
	}

	plain := create(sandbox.Spec{Image: "busybox"})
	check("busybox", plain, "")
	def := create(sandbox.Spec{Image: "desk"})
	check("the image's own screen", def, sandbox.DefaultScreen)
	src := create(sandbox.Spec{Image: "desk", Screen: "1024X768 "})
	check("--screen", src, "1024x768")

	if _, _, err := m.SuspendSandbox(ctx, "acme", src.ID, ""); err != nil {
		t.Fatal(err)
	}
	rec.forget(src.ID)
	resumed, err := m.Resume(ctx, "acme", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	check("resumed on a fresh guest", resumed, "1024x768")

	if _, err := m.Snapshot(ctx, "acme", src.ID, "desk-snap"); err != nil {
		t.Fatal(err)
	}
	check("from its snapshot", create(sandbox.Spec{Image: "snapshot:desk-snap"}), "1024x768")
	check("from its snapshot, another screen", create(sandbox.Spec{Image: "snapshot:desk-snap", Screen: "800x600"}), "800x600")
	forks, err := m.Fork(ctx, "acme", src.ID, 1)
	for _, f := range forks {
		made = append(made, f.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	check("its fork", forks[0], "1024x768")

	// A template built from it keeps the image's display.
	store, err := template.NewStore(filepath.Join(dir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	m.UseTemplates(store)
	builder := &template.Builder{Store: store, Sandboxes: TemplateBuilds{M: m}}
	if _, err := builder.Build(ctx, "acme", template.Spec{Name: "desk-tpl", From: "desk", Steps: []template.Step{
		{Kind: template.StepRun, Text: "echo hi > /workspace/hi"},
	}}, nil); err != nil {
		t.Fatal(err)
	}
	check("from a template", create(sandbox.Spec{Image: "template:desk-tpl"}), sandbox.DefaultScreen)

	// A restarted service re-attaches and still knows the screen.
	m.Close()
	m2 := realManager(t, dir, exe, "runc", rec, opts)
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	m = m2
	check("after a restart", src, "1024x768")
	check("busybox after a restart", plain, "")
}

// A screen is WxH within bounds, on an image with a display; the image's
// own size (its label, chosen by whoever published it) is checked too.
// Each is refused before anything is made, saying what to do.
func TestScreenRefused(t *testing.T) {
	for _, tc := range []struct {
		spec      sandbox.Spec
		img       Image
		want      string
		wantScr   string
		normalize bool // refused by normalize (before the image)
	}{
		{spec: sandbox.Spec{Image: "busybox", Screen: "1024x768"}, want: "image busybox has no display: --screen needs a desktop image (--image desktop)"},
		{spec: sandbox.Spec{Image: "desk", Screen: "10x10"}, img: Image{Screen: "1280x800"}, want: "out of bounds: each side must be 320 to 4096 pixels", normalize: true},
		{spec: sandbox.Spec{Image: "desk", Screen: "5000x800"}, img: Image{Screen: "1280x800"}, want: "out of bounds", normalize: true},
		{spec: sandbox.Spec{Image: "desk", Screen: "big"}, img: Image{Screen: "1280x800"}, want: "is not WIDTHxHEIGHT in pixels: write it like 1280x800", normalize: true},
		{spec: sandbox.Spec{Image: "desk", Screen: "-1x800"}, img: Image{Screen: "1280x800"}, want: "out of bounds", normalize: true},
		{spec: sandbox.Spec{Image: "desk"}, img: Image{Screen: "1x1"}, want: "image desk, its display (label dev.reins.display): screen \"1x1\" is out of bounds"},
		{spec: sandbox.Spec{Image: "desk"}, img: Image{Screen: "1280x800"}, wantScr: "1280x800"},
		{spec: sandbox.Spec{Image: "desk", Screen: "640x480"}, img: Image{Screen: "1280x800"}, wantScr: "640x480"},
		{spec: sandbox.Spec{Image: "busybox"}, wantScr: ""},
	} {
		s, err := checkScreen(tc.spec.Screen)
		if err == nil {
			tc.spec.Screen = s
			s, err = screenOf(tc.spec, tc.img)
		} else if !tc.normalize {
			t.Errorf("%+v: refused by checkScreen: %v", tc.spec, err)
		}
		switch {
		case tc.want == "" && (err != nil || s != tc.wantScr):
			t.Errorf("%+v on %+v: %q, %v; want %q", tc.spec, tc.img, s, err, tc.wantScr)
		case tc.want != "" && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v on %+v: %v; want invalid_argument saying %q", tc.spec, tc.img, err, tc.want)
		}
	}
}

// A create with a screen on an image without a display is refused, and
// so is a bad screen, before a box is made or an image pulled.
func TestScreenRefusedAtCreate(t *testing.T) {
	m, images := newTenantManager(t, nil, nil)
	ctx := context.Background()
	before := len(m.List(ctx, "acme", nil))
	_, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox", Screen: "10x10"}, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "320 to 4096") {
		t.Fatalf("--screen 10x10: %v", err)
	}
	if images.calls != 0 || len(m.List(ctx, "acme", nil)) != before {
		t.Fatalf("a refused screen resolved %d images, left %d sandboxes", images.calls, len(m.List(ctx, "acme", nil))-before)
	}
}

// A spec with a screen is not served by the warm pool, whose sandboxes
// have their image's: it goes cold (where it is checked against the
// image). One without is, and keeps the pool sandbox's screen.
func TestPoolSkipsScreen(t *testing.T) {
	m, images := newPoolManager(t, map[string]int{"busybox": 2}, nil)
	for _, b := range m.boxes {
		b.rec.Screen = sandbox.DefaultScreen // as its create recorded it
	}
	ctx := context.Background()
	if _, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox", Screen: "1024x768"}, nil); err == nil {
		t.Fatal("a create with a screen was served (the cold path fails in this test)")
	}
	if images.calls != 1 {
		t.Fatalf("%d cold creates, want 1", images.calls)
	}
	if st := m.Pool(); len(st) != 1 || st[0].Ready != 2 {
		t.Fatalf("the pool after: %+v, want its sandboxes still ready", st)
	}
	info, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox"}, nil)
	if err != nil || info.Screen != sandbox.DefaultScreen || images.calls != 1 {
		t.Fatalf("a hand-out: screen %q, %v (%d cold creates)", info.Screen, err, images.calls)
	}
	if rec, err := readRecord(filepath.Join(m.cfg.Dir, info.ID)); err != nil || rec.Screen != sandbox.DefaultScreen {
		t.Fatalf("the handed-out record: %v", err)
	}
}
