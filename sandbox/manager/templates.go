package manager

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/template"
)

// Templates is what the manager needs of the templates to make a
// sandbox from "template:NAME": *template.Store is one.
type Templates interface {
	Get(tenant, name string) (template.Template, error)
}

// UseTemplates lets sandboxes be made from template:NAME: the template's
// snapshot restored, its env added to the image's, and its start command
// launched (create returns once its ready command exits 0).
func (m *Manager) UseTemplates(t Templates) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.templates = t
}

func (m *Manager) templateStore() Templates {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.templates
}

// templateOf resolves spec's image when it is template:NAME of tenant's
// (nil otherwise): the spec takes the template's backend unless it names
// one. Another tenant's template is not found, as a missing one.
func (m *Manager) templateOf(tenant string, spec *sandbox.Spec) (*template.Template, error) {
	name, ok := strings.CutPrefix(spec.Image, template.Prefix)
	if !ok {
		return nil, nil
	}
	ts := m.templateStore()
	if ts == nil {
		return nil, fmt.Errorf("template %s not found: this service keeps no templates: %w", truncate(name, 80), errdefs.ErrNotFound)
	}
	t, err := ts.Get(tenant, name)
	if err != nil {
		return nil, err
	}
	if spec.Backend == "" {
		spec.Backend = t.Backend
	}
	return &t, nil
}

// fromTemplate makes a create of template t start from its snapshot, with
// the template's env over the image's, unless it starts from something
// else already (a fork). It runs after the warm pool had its chance: a
// pool of template:NAME hands out sandboxes already made from it.
func (m *Manager) fromTemplate(tenant string, t *template.Template, o *createOpts) error {
	if t == nil || o.from != nil || o.memory != nil {
		return nil
	}
	s, err := m.resolveSnapshot(tenant, t.Snapshot)
	if err != nil {
		return fmt.Errorf("template %s: its snapshot is gone (%w): build it again", t.Name, err)
	}
	s.ImageEnv = append(slices.Clip(s.ImageEnv), t.Env...)
	o.from, o.origin = &s, t.Ref()
	return nil
}

// warmLocked runs a template's start command in new sandbox b and waits
// for its ready command; b.mu is held. Nothing for a nil template or one
// without a start.
func (m *Manager) warmLocked(ctx context.Context, b *box, t *template.Template) error {
	if t == nil || t.Start == "" {
		return nil
	}
	if err := template.Warm(ctx, b.client, nil, t.Start, t.Ready, t.ReadyTimeout); err != nil {
		return fmt.Errorf("template %s: %w", t.Name, err)
	}
	return nil
}

// rewarmLocked starts again the start command of a sandbox made from a
// template, after a resume on a fresh guest (its processes did not
// survive); b.mu is held. A template gone or a start that does not get
// ready is logged: the sandbox runs, with its files.
func (m *Manager) rewarmLocked(ctx context.Context, b *box) {
	name, ok := strings.CutPrefix(b.rec.Origin, template.Prefix)
	ts := m.templateStore()
	if !ok || ts == nil {
		return
	}
	t, err := ts.Get(b.rec.Tenant, name)
	if err == nil {
		err = m.warmLocked(ctx, b, &t)
	}
	if err != nil {
		m.log.Warn("the template's start command did not come back after a resume", "sandbox", b.rec.ID, "template", name, "err", err)
	}
}

// TemplateUsers names the sandboxes that are not stopped and were made
// from tenant's template name ("sandbox:ID"), for template.Store.UseBy: a
// suspended one runs the template's start again when it resumes.
func (m *Manager) TemplateUsers(tenant, name string) []string {
	var out []string
	for _, b := range m.tenantBoxes(tenant) {
		b.mu.Lock()
		r := b.rec
		b.mu.Unlock()
		if r.Origin == template.Prefix+name && r.State != sandbox.StateStopped {
			out = append(out, "sandbox:"+r.ID)
		}
	}
	return out
}

// TemplateBuilds runs template builds on M's sandboxes (template.Sandboxes):
// each step's result is an unnamed snapshot of the build sandbox's tenant.
type TemplateBuilds struct{ M *Manager }

var _ template.Sandboxes = TemplateBuilds{}

func (t TemplateBuilds) Create(ctx context.Context, tenant string, spec sandbox.Spec, progress func(sandbox.Progress)) (sandbox.Info, error) {
	return t.M.Create(ctx, tenant, spec, progress)
}

func (t TemplateBuilds) Executor(ctx context.Context, tenant, id string) (template.Executor, error) {
	c, err := t.M.Client(ctx, tenant, id)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return c, nil
}

func (t TemplateBuilds) SaveWorkspace(ctx context.Context, tenant, id string, progress func(sandbox.Progress)) (template.Saved, error) {
	s, err := t.M.Snapshot(withCaptureProgress(ctx, progress), tenant, id, "")
	if err != nil {
		return template.Saved{}, err
	}
	return template.Saved{Digest: s.Digest, Files: s.Files, Bytes: s.Bytes, Stored: s.StoredBytes}, nil
}

func (t TemplateBuilds) Delete(ctx context.Context, tenant, id string) error {
	return t.M.Delete(ctx, tenant, id)
}

// captureProgressKey carries, in a call's context, who is told how a
// capture of a workspace is getting on (files and bytes saved so far):
// a template build's step shows its save live.
type captureProgressKey struct{}

func withCaptureProgress(ctx context.Context, progress func(sandbox.Progress)) context.Context {
	if progress == nil {
		return ctx
	}
	return context.WithValue(ctx, captureProgressKey{}, progress)
}

// captureProgress is the progress the context carries, nil if none.
func captureProgress(ctx context.Context) func(sandbox.Progress) {
	f, _ := ctx.Value(captureProgressKey{}).(func(sandbox.Progress))
	return f
}
