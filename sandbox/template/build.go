package template

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Sandboxes is what a build needs of the sandbox service: a build
// sandbox made from an image or a snapshot ("snapshot:sha256:…"), its
// executor, its workspace saved as an unnamed snapshot of its tenant's,
// and its removal.
type Sandboxes interface {
	Create(ctx context.Context, tenant string, spec sandbox.Spec, progress func(sandbox.Progress)) (sandbox.Info, error)
	Executor(ctx context.Context, tenant, id string) (Executor, error)
	SaveWorkspace(ctx context.Context, tenant, id string, progress func(sandbox.Progress)) (Saved, error)
	Delete(ctx context.Context, tenant, id string) error
}

// Saved is a workspace saved as a snapshot: its digest and sizes.
type Saved struct {
	Digest string
	Files  int64
	Bytes  int64
	// Stored is the content this snapshot added to the store.
	Stored int64
}

// SnapshotPrefix names a snapshot by digest as an image.
const SnapshotPrefix = "snapshot:"

// Progress is what a build reports as it goes: the step it is at (1-based;
// 0 for the image, Steps+1 for start and ready), a chunk of the step's
// output, or how an image pull or a snapshot upload is getting on (Sub,
// in its own units).
type Progress struct {
	Step, Steps int
	What        string
	Cached      bool
	Output      []byte
	Sub         *sandbox.Progress
}

// PhaseSnapshot is the Sub progress phase of saving a step's result;
// ItemSaved marks the one that says what was saved, in files and bytes.
const (
	PhaseSnapshot = "snapshot"
	ItemSaved     = "saved"
)

// Builder runs builds. Its methods are safe for concurrent use.
type Builder struct {
	Store     *Store
	Sandboxes Sandboxes

	mu       sync.Mutex
	building map[string]bool // tenant + "\x00" + name
}

// Build runs spec for tenant and writes its template record, replacing
// the one of the same name only once every step has succeeded. On any
// failure or cancellation the build sandbox is removed and no record is
// written; the steps that finished stay cached.
func (b *Builder) Build(ctx context.Context, tenant string, spec Spec, progress func(Progress)) (Template, error) {
	if progress == nil {
		progress = func(Progress) {}
	}
	if err := spec.Check(); err != nil {
		return Template{}, err
	}
	if !b.claim(tenant, spec.Name) {
		return Template{}, fmt.Errorf("template %s is being built already: wait for that build, or cancel it: %w", spec.Name, errdefs.ErrFailedPrecondition)
	}
	defer b.release(tenant, spec.Name)
	r := &build{b: b, tenant: tenant, spec: spec, progress: progress}
	defer r.removeSandbox()
	t, err := r.run(ctx)
	if err != nil && ctx.Err() != nil {
		return Template{}, r.cancelled(ctx)
	}
	return t, err
}

// List returns tenant's templates (Store.List).
func (b *Builder) List(tenant string) ([]Template, error) { return b.Store.List(tenant) }

// Delete removes tenant's template name (Store.Delete).
func (b *Builder) Delete(tenant, name string) error { return b.Store.Delete(tenant, name) }

func (b *Builder) claim(tenant, name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.building == nil {
		b.building = map[string]bool{}
	}
	k := tenant + "\x00" + name
	if b.building[k] {
		return false
	}
	b.building[k] = true
	return true
}

func (b *Builder) release(tenant, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.building, tenant+"\x00"+name)
}

// build is one build's state.
type build struct {
	b        *Builder
	tenant   string
	spec     Spec
	progress func(Progress)

	base      string   // the image the first step runs on
	env       []string // set by the base template and env steps so far
	keys      []string // keys[i] is step i's key; keys[0] the base's
	id        string   // the build sandbox, once made
	ex        Executor
	done      int // steps whose result is cached
	cached    int // of which the cache gave
	snapshot  string
	bytes     int64
	baseStart string
	baseReady string
}

func (r *build) run(ctx context.Context) (Template, error) {
	if err := r.resolveBase(); err != nil {
		return Template{}, err
	}
	r.computeKeys()
	steps := r.spec.Steps
	r.done = r.lookupCache()
	if r.done < len(steps) {
		// Made before the cached steps are reported: a cached snapshot
		// found gone here rewinds to the step before it.
		if err := r.ensureSandbox(ctx); err != nil {
			return Template{}, err
		}
	}
	r.cached = r.done
	for i := 1; i <= r.done; i++ {
		r.progress(Progress{Step: i, Steps: len(steps), What: steps[i-1].What(), Cached: true})
	}
	for i := r.done + 1; i <= len(steps); i++ {
		if err := r.step(ctx, i); err != nil {
			return Template{}, err
		}
	}
	if r.snapshot == "" {
		// No step changed the workspace (none, or only env): the
		// template is the base's own state.
		if err := r.ensureSandbox(ctx); err != nil {
			return Template{}, err
		}
		if err := r.save(ctx, 0); err != nil {
			return Template{}, err
		}
	}
	start, ready := r.spec.Start, r.spec.Ready
	if start == "" {
		start, ready = r.baseStart, r.baseReady
	}
	if start != "" {
		if err := r.checkStart(ctx, start, ready); err != nil {
			return Template{}, err
		}
	}
	t := Template{
		Tenant: r.tenant, Name: r.spec.Name, From: r.spec.From, Backend: r.spec.Backend,
		Env: r.env, Start: start, Ready: ready, ReadyTimeout: r.spec.ReadyTimeout,
		Snapshot: r.snapshot, CreatedAt: time.Now(), Bytes: r.bytes, CachedSteps: r.cached,
	}
	for _, s := range steps {
		s.Tar = nil
		t.Steps = append(t.Steps, s)
	}
	if err := r.b.Store.Put(t); err != nil {
		return Template{}, err
	}
	return t, nil
}

// resolveBase sets the image the build starts on: the image itself, or
// for template:NAME that template's snapshot, env and start.
func (r *build) resolveBase() error {
	name, ok := strings.CutPrefix(r.spec.From, Prefix)
	if !ok {
		r.base = r.spec.From
		return nil
	}
	parent, err := r.b.Store.Get(r.tenant, name)
	if err != nil {
		return err
	}
	r.base = SnapshotPrefix + parent.Snapshot
	r.env = append([]string(nil), parent.Env...)
	r.baseStart, r.baseReady = parent.Start, parent.Ready
	if r.spec.Backend == "" {
		r.spec.Backend = parent.Backend
	}
	return nil
}

// computeKeys sets every step's cache key: sha256 of the parent's key,
// the step's kind and text (a copy's tar digest and destination) and
// the env so far.
func (r *build) computeKeys() {
	h := sha256.New()
	fmt.Fprintf(h, "reins template v1\x00%s\x00%s\x00%s", r.spec.Backend, r.base, strings.Join(r.env, "\x00"))
	r.keys = []string{hex.EncodeToString(h.Sum(nil))}
	env := append([]string(nil), r.env...)
	for i := range r.spec.Steps {
		s := &r.spec.Steps[i]
		text := s.Text
		if s.Kind == StepCopy {
			sum := sha256.Sum256(s.Tar)
			s.TarDigest = "sha256:" + hex.EncodeToString(sum[:])
			text = s.TarDigest + "\x00" + s.Dst
		}
		if s.Kind == StepEnv {
			env = append(env, s.Text)
		}
		h := sha256.New()
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", r.keys[i], s.Kind, text, strings.Join(env, "\x00"))
		r.keys = append(r.keys, hex.EncodeToString(h.Sum(nil)))
	}
}

// lookupCache returns how many leading steps the cache has a result for
// (the last of them sets the snapshot), 0 with NoCache.
func (r *build) lookupCache() int {
	if r.spec.NoCache {
		return 0
	}
	for n := len(r.spec.Steps); n > 0; n-- {
		if c, ok := r.b.Store.cached(r.tenant, r.keys[n]); ok {
			r.snapshot, r.bytes = c.Snapshot, c.Bytes
			for _, s := range r.spec.Steps[:n] {
				if s.Kind == StepEnv {
					r.env = append(r.env, s.Text)
				}
			}
			return n
		}
	}
	return 0
}

// ensureSandbox makes the build sandbox, on the snapshot of the last
// cached step or on the base. A cached snapshot that is gone (removed
// by an operator) is forgotten and the steps before it are tried.
func (r *build) ensureSandbox(ctx context.Context) error {
	for r.id == "" {
		img := r.base
		if r.snapshot != "" {
			img = SnapshotPrefix + r.snapshot
		}
		spec := sandbox.Spec{
			Image: img, Backend: r.spec.Backend, Env: r.env,
			Labels:   map[string]string{"reins.template": r.spec.Name},
			OnExpire: sandbox.ExpireDelete, TTL: buildTTL,
		}
		from := "FROM " + r.spec.From
		if r.done > 0 {
			from = fmt.Sprintf("FROM step %d's cached result", r.done)
		}
		info, err := r.b.Sandboxes.Create(ctx, r.tenant, spec, func(p sandbox.Progress) {
			r.progress(Progress{Step: 0, Steps: len(r.spec.Steps), What: from, Sub: &p})
		})
		if info.ID != "" {
			r.id = info.ID
		}
		if err != nil && errors.Is(err, errdefs.ErrNotFound) && r.snapshot != "" && r.done > 0 {
			r.b.Store.forgetCached(r.tenant, r.keys[r.done])
			r.removeSandbox()
			r.rewind()
			continue
		}
		if err != nil {
			return fmt.Errorf("making the build sandbox from %s: %w", r.spec.From, err)
		}
	}
	if r.ex != nil {
		return nil
	}
	ex, err := r.b.Sandboxes.Executor(ctx, r.tenant, r.id)
	if err != nil {
		return err
	}
	r.ex = ex
	return nil
}

// rewind drops the last cached step after its snapshot went missing,
// and finds the next cached one before it.
func (r *build) rewind() {
	steps := r.spec.Steps
	r.spec.Steps = steps[:r.done-1]
	r.snapshot, r.bytes, r.env = "", 0, nil
	r.resolveBase()
	n := r.lookupCache()
	r.spec.Steps = steps
	r.done = n
}

// buildTTL is the build sandbox's TTL: a safety net should the service
// die mid-build; a finished or failed build removes it at once.
const buildTTL = 6 * time.Hour

// step runs step i (1-based) and caches its result.
func (r *build) step(ctx context.Context, i int) error {
	s := r.spec.Steps[i-1]
	n := len(r.spec.Steps)
	r.progress(Progress{Step: i, Steps: n, What: s.What()})
	if s.Kind == StepEnv {
		r.env = append(r.env, s.Text)
		if r.snapshot != "" {
			// The workspace is unchanged: the step's result is the last one's.
			r.done = i
			return r.b.Store.putCached(r.tenant, r.keys[i], Cached{Snapshot: r.snapshot, Step: s.What(), Bytes: r.bytes, CreatedAt: time.Now()})
		}
	}
	if err := r.ensureSandbox(ctx); err != nil {
		return err
	}
	switch s.Kind {
	case StepRun:
		if err := r.runStep(ctx, i, s); err != nil {
			return err
		}
	case StepCopy:
		if err := r.copyStep(ctx, i, s); err != nil {
			return err
		}
	}
	if err := r.save(ctx, i); err != nil {
		return err
	}
	r.done = i
	return nil
}

// runStep runs a RUN step, streaming its output (the first
// MaxOutputShown bytes of it) and failing with its tail and exit code.
func (r *build) runStep(ctx context.Context, i int, s Step) error {
	n := len(r.spec.Steps)
	var out tail
	shown := 0
	exit, err := r.ex.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", s.Text}, Env: r.env, Tag: "template build"},
		func(ev *executorv1.ExecEvent) {
			chunk := ev.GetStdout()
			if chunk == nil {
				chunk = ev.GetStderr()
			}
			if len(chunk) == 0 {
				return
			}
			out.write(chunk)
			if shown < MaxOutputShown {
				c := chunk[:min(len(chunk), MaxOutputShown-shown)]
				shown += len(c)
				r.progress(Progress{Step: i, Steps: n, What: s.What(), Output: bytes.Clone(c)})
			}
		})
	if err != nil {
		return fmt.Errorf("step %d/%d %s: %w", i, n, truncate(s.What(), 80), err)
	}
	if out.seen > int64(shown) {
		r.progress(Progress{Step: i, Steps: n, What: s.What(), Output: fmt.Appendf(nil,
			"\n[%s of output not shown, of %s in all]\n", sandbox.FormatBytes(out.seen-int64(shown)), sandbox.FormatBytes(out.seen))})
	}
	if exit.ExitCode != 0 {
		return errdefs.WithExitCode(errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"step %d/%d %s failed with exit code %d%s; template %s was not changed",
			i, n, truncate(s.What(), 200), exit.ExitCode, outputSays(", its output", out.String()), r.spec.Name)), int(exit.ExitCode))
	}
	return nil
}

// copyStep unpacks a COPY step's tar under the destination's parent; the
// executor's extractor (package archive) refuses what would escape or
// what is over its caps.
func (r *build) copyStep(ctx context.Context, i int, s Step) error {
	resp, err := r.ex.Upload(ctx, path.Dir(s.Dst), bytes.NewReader(s.Tar))
	if err != nil {
		return fmt.Errorf("step %d/%d %s: %w", i, len(r.spec.Steps), truncate(s.What(), 200), err)
	}
	r.progress(Progress{Step: i, Steps: len(r.spec.Steps), What: s.What(), Output: fmt.Appendf(nil,
		"copied %d files (%s)\n", resp.Files, sandbox.FormatBytes(int64(resp.Bytes)))})
	return nil
}

// save snapshots the build sandbox's workspace as step i's result.
func (r *build) save(ctx context.Context, i int) error {
	n := len(r.spec.Steps)
	what := "SNAPSHOT"
	if i > 0 {
		what = r.spec.Steps[i-1].What()
	}
	saved, err := r.b.Sandboxes.SaveWorkspace(ctx, r.tenant, r.id, func(p sandbox.Progress) {
		r.progress(Progress{Step: i, Steps: n, What: what, Sub: &p})
	})
	if err != nil {
		return fmt.Errorf("saving step %d/%d: %w", i, n, err)
	}
	r.progress(Progress{Step: i, Steps: n, What: what, Sub: &sandbox.Progress{Phase: PhaseSnapshot, Item: ItemSaved, Done: saved.Files, Total: saved.Files,
		Message: fmt.Sprintf("saved %d files, %s (%s new)", saved.Files, sandbox.FormatBytes(saved.Bytes), sandbox.FormatBytes(saved.Stored))}})
	r.snapshot, r.bytes = saved.Digest, saved.Bytes
	if i == 0 {
		return nil
	}
	return r.b.Store.putCached(r.tenant, r.keys[i], Cached{Snapshot: saved.Digest, Step: what, Bytes: saved.Bytes, CreatedAt: time.Now()})
}

// checkStart runs start and ready once in the build sandbox, so that a
// template whose start never gets ready is refused at build time.
func (r *build) checkStart(ctx context.Context, start, ready string) error {
	if err := r.ensureSandbox(ctx); err != nil {
		return err
	}
	n := len(r.spec.Steps)
	r.progress(Progress{Step: n + 1, Steps: n, What: "START " + start})
	if ready != "" {
		r.progress(Progress{Step: n + 1, Steps: n, What: "READY " + ready})
	}
	if err := Warm(ctx, r.ex, r.env, start, ready, r.spec.ReadyTimeout); err != nil {
		return fmt.Errorf("template %s was not changed: %w", r.spec.Name, err)
	}
	return nil
}

// cancelled is the error of a build whose caller went away.
func (r *build) cancelled(ctx context.Context) error {
	msg := fmt.Sprintf("the build of template %s was cancelled", r.spec.Name)
	if r.done > 0 {
		msg += fmt.Sprintf("; steps 1-%d are cached: build again to resume from step %d", r.done, r.done+1)
	}
	return fmt.Errorf("%s (%w): %w", msg, context.Cause(ctx), errdefs.ErrCanceled)
}

// removeSandbox removes the build sandbox, even when the build's context
// is done.
func (r *build) removeSandbox() {
	if r.id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.b.Sandboxes.Delete(ctx, r.tenant, r.id)
	r.id, r.ex = "", nil
}
