package template_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox/template"
)

type fixture struct {
	dir   string
	h     *hostSandboxes
	store *template.Store
	b     *template.Builder
}

func newFixture(t *testing.T) *fixture {
	h := newHostSandboxes(t)
	dir := filepath.Join(t.TempDir(), "templates")
	st, err := template.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: dir, h: h, store: st, b: &template.Builder{Store: st, Sandboxes: h}}
}

// recorder keeps a build's progress.
type recorder struct {
	mu     sync.Mutex
	events []template.Progress
	output bytes.Buffer
}

func (r *recorder) add(p template.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, p)
	r.output.Write(p.Output)
}

// cached lists the steps reported as cached.
func (r *recorder) cached() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, e := range r.events {
		if e.Cached {
			out = append(out, e.Step)
		}
	}
	return out
}

func run(s string) template.Step { return template.Step{Kind: template.StepRun, Text: s} }
func env(s string) template.Step { return template.Step{Kind: template.StepEnv, Text: s} }

// copyDir is a COPY step of a directory named base(dst) holding a file
// and a symbolic link to it.
func copyDir(t *testing.T, dst, content string) template.Step {
	t.Helper()
	src := filepath.Join(t.TempDir(), filepath.Base(dst))
	os.Mkdir(src, 0o755)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte(content), 0o644)
	os.Symlink("a.txt", filepath.Join(src, "link"))
	var tar bytes.Buffer
	if err := archive.Write(&tar, src); err != nil {
		t.Fatal(err)
	}
	return template.Step{Kind: template.StepCopy, Tar: tar.Bytes(), Dst: dst, Src: "./" + filepath.Base(dst)}
}

func TestStepsRunInOrderWithEnvAndCopy(t *testing.T) {
	f := newFixture(t)
	spec := template.Spec{Name: "web", From: "busybox", Steps: []template.Step{
		run("echo one >> log"),
		env("GREETING=hello"),
		run(`echo "$GREETING" >> log`),
		copyDir(t, "/app/code", "copied\n"),
		run("cat app/code/a.txt >> log && readlink app/code/link >> log"),
	}}
	var rec recorder
	tm, err := f.b.Build(context.Background(), "", spec, rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.h.snapshotFile(t, "", tm.Snapshot, "log"), "one\nhello\ncopied\na.txt\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
	if len(tm.Env) != 1 || tm.Env[0] != "GREETING=hello" {
		t.Errorf("env = %q", tm.Env)
	}
	if tm.Steps[3].TarDigest == "" || tm.Steps[3].Tar != nil {
		t.Errorf("the copy step keeps its digest, not its tar: %+v", tm.Steps[3])
	}
	if n := f.h.liveCount(); n != 0 {
		t.Errorf("%d build sandboxes left", n)
	}
	// The record survives a new Store on the same directory.
	st2, _ := template.NewStore(f.dir)
	if got, err := st2.Get("", "web"); err != nil || got.Snapshot != tm.Snapshot {
		t.Errorf("after reopening: %+v, %v", got, err)
	}
}

func TestCacheSkipsUnchangedSteps(t *testing.T) {
	f := newFixture(t)
	steps := []template.Step{run("echo one >> log"), run("echo two >> log"), run("echo three >> log")}
	spec := template.Spec{Name: "c", From: "busybox", Steps: steps}
	first, err := f.b.Build(context.Background(), "", spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	second, err := f.b.Build(context.Background(), "", spec, rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.cached(); len(got) != 3 {
		t.Errorf("cached steps %v, want 1-3", got)
	}
	if second.Snapshot != first.Snapshot || second.CachedSteps != 3 {
		t.Errorf("second build: snapshot %s (first %s), cached %d", second.Snapshot, first.Snapshot, second.CachedSteps)
	}
	if got := f.h.snapshotFile(t, "", second.Snapshot, "log"); got != "one\ntwo\nthree\n" {
		t.Errorf("log = %q: a cached step ran again", got)
	}

	// A changed middle step: step 1 from the cache, 2 and 3 run again.
	spec.Steps = []template.Step{steps[0], run("echo TWO >> log"), steps[2]}
	rec = recorder{}
	third, err := f.b.Build(context.Background(), "", spec, rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.cached(); len(got) != 1 || got[0] != 1 {
		t.Errorf("cached steps %v, want [1]", got)
	}
	if got := f.h.snapshotFile(t, "", third.Snapshot, "log"); got != "one\nTWO\nthree\n" {
		t.Errorf("log = %q", got)
	}

	// --no-cache runs every step again.
	spec.NoCache = true
	rec = recorder{}
	if _, err := f.b.Build(context.Background(), "", spec, rec.add); err != nil {
		t.Fatal(err)
	}
	if got := rec.cached(); len(got) != 0 {
		t.Errorf("--no-cache: cached steps %v", got)
	}

	// Another tenant's identical build shares nothing.
	rec = recorder{}
	if _, err := f.b.Build(context.Background(), "acme", template.Spec{Name: "c", From: "busybox", Steps: steps}, rec.add); err != nil {
		t.Fatal(err)
	}
	if got := rec.cached(); len(got) != 0 {
		t.Errorf("another tenant's build took %v from the cache", got)
	}
}

func TestCachedSnapshotGoneRebuildsFromTheStepBefore(t *testing.T) {
	f := newFixture(t)
	spec := template.Spec{Name: "g", From: "busybox", Steps: []template.Step{run("echo one >> log"), run("echo two >> log")}}
	first, err := f.b.Build(context.Background(), "", spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.h.dropSnapshot("", first.Snapshot)
	spec.Steps = append(spec.Steps, run("echo three >> log"))
	var rec recorder
	tm, err := f.b.Build(context.Background(), "", spec, rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.cached(); len(got) != 1 || got[0] != 1 {
		t.Errorf("cached %v, want [1]", got)
	}
	if got := f.h.snapshotFile(t, "", tm.Snapshot, "log"); got != "one\ntwo\nthree\n" {
		t.Errorf("log = %q", got)
	}
}

func TestFailedStepKeepsThePreviousTemplate(t *testing.T) {
	f := newFixture(t)
	good, err := f.b.Build(context.Background(), "", template.Spec{Name: "f", From: "busybox", Steps: []template.Step{run("echo ok > log")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	_, err = f.b.Build(context.Background(), "", template.Spec{Name: "f", From: "busybox", Steps: []template.Step{
		run("echo first"), run("echo something broke >&2; exit 3"), run("echo never >> log"),
	}}, rec.add)
	if code, ok := errdefs.ExitCode(err); !ok || code != 3 {
		t.Fatalf("err = %v, want exit code 3", err)
	}
	for _, want := range []string{"step 2/3", "exit code 3", "something broke"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got, _ := f.store.Get("", "f"); got.Snapshot != good.Snapshot {
		t.Errorf("the previous template was replaced: %+v", got)
	}
	if !strings.Contains(rec.output.String(), "something broke") {
		t.Errorf("the step's output was not streamed: %q", rec.output.String())
	}
	for _, e := range rec.events {
		if e.Step == 3 {
			t.Errorf("step 3 ran after step 2 failed: %+v", e)
		}
	}
	if n := f.h.liveCount(); n != 0 {
		t.Errorf("%d build sandboxes left", n)
	}
}

func TestCancelledBuildResumesFromFinishedSteps(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := []template.Step{run("echo one >> log"), run("echo two >> log"), run("echo three-start >> log; sleep 30")}
	_, err := f.b.Build(ctx, "", template.Spec{Name: "x", From: "busybox", Steps: steps}, func(p template.Progress) {
		if p.Step == 3 && p.Output == nil && p.Sub == nil {
			go func() { time.Sleep(200 * time.Millisecond); cancel() }()
		}
	})
	if !errors.Is(err, errdefs.ErrCanceled) || !strings.Contains(err.Error(), "steps 1-2 are cached") {
		t.Fatalf("err = %v, want a cancellation that says steps 1-2 are cached", err)
	}
	if _, err := f.store.Get("", "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a cancelled build left a template: %v", err)
	}
	if n := f.h.liveCount(); n != 0 {
		t.Errorf("%d build sandboxes left after the cancel", n)
	}
	steps[2] = run("echo three >> log")
	var rec recorder
	tm, err := f.b.Build(context.Background(), "", template.Spec{Name: "x", From: "busybox", Steps: steps}, rec.add)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.cached(); len(got) != 2 {
		t.Errorf("cached %v, want [1 2]", got)
	}
	if got := f.h.snapshotFile(t, "", tm.Snapshot, "log"); got != "one\ntwo\nthree\n" {
		t.Errorf("log = %q", got)
	}
}

func TestStartAndReady(t *testing.T) {
	f := newFixture(t)
	tm, err := f.b.Build(context.Background(), "", template.Spec{Name: "s", From: "busybox",
		Steps: []template.Step{run("true")},
		Start: "sleep 0.3; touch up; exec sleep 60", Ready: "test -f up"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tm.Start == "" || tm.Ready != "test -f up" {
		t.Errorf("record %+v", tm)
	}
	_, err = f.b.Build(context.Background(), "", template.Spec{Name: "never", From: "busybox",
		Start: "echo serving; exec sleep 60", Ready: "echo not yet; false", ReadyTimeout: time.Second}, nil)
	if !errors.Is(err, errdefs.ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	for _, want := range []string{"did not exit 0 within 1s", "not yet", "serving"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	_, err = f.b.Build(context.Background(), "", template.Spec{Name: "dies", From: "busybox",
		Start: "echo cannot bind; exit 4", Ready: "false"}, nil)
	if err == nil || !strings.Contains(err.Error(), "exited with code 4") || !strings.Contains(err.Error(), "cannot bind") {
		t.Errorf("err = %v, want the start command's exit", err)
	}
	for _, n := range []string{"never", "dies"} {
		if _, err := f.store.Get("", n); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("template %s was made: %v", n, err)
		}
	}
	if n := f.h.liveCount(); n != 0 {
		t.Errorf("%d build sandboxes left", n)
	}
}

func TestFromTemplate(t *testing.T) {
	f := newFixture(t)
	if _, err := f.b.Build(context.Background(), "", template.Spec{Name: "base", From: "busybox",
		Steps: []template.Step{env("A=1"), run("echo base >> log")}}, nil); err != nil {
		t.Fatal(err)
	}
	tm, err := f.b.Build(context.Background(), "", template.Spec{Name: "child", From: "template:base",
		Steps: []template.Step{run(`echo "child $A" >> log`)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.h.snapshotFile(t, "", tm.Snapshot, "log"); got != "base\nchild 1\n" {
		t.Errorf("log = %q", got)
	}
	if _, err := f.b.Build(context.Background(), "other", template.Spec{Name: "c2", From: "template:base"}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant built from this tenant's template: %v", err)
	}
}

func TestDeleteRefusedWhileNeeded(t *testing.T) {
	f := newFixture(t)
	tm, err := f.b.Build(context.Background(), "t1", template.Spec{Name: "d", From: "busybox", Steps: []template.Step{run("true")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.store.UseBy(func(tenant, name string) []string {
		if tenant == "t1" && name == "d" {
			return []string{"sandbox:ab12"}
		}
		return nil
	})
	if err := f.store.Delete("t1", "d"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "sandbox:ab12") {
		t.Errorf("delete of a needed template: %v", err)
	}
	if got := f.store.SnapshotUsers("t1", tm.Snapshot); len(got) == 0 || got[0] != "template:d" {
		t.Errorf("SnapshotUsers = %q", got)
	}
	if got := f.store.SnapshotUsers("t2", tm.Snapshot); len(got) != 0 {
		t.Errorf("another tenant's SnapshotUsers = %q", got)
	}
	if err := f.store.Delete("t2", "d"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's delete: %v", err)
	}
}
