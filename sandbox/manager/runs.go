package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/sandbox"
)

// Labels that tie a sandbox to the run that uses it.
const (
	LabelRun     = "reins.run"
	LabelSandbox = "reins.sandbox"
)

// Runs gives the agent loop the sandboxes of its runs (it implements
// agent.Sandboxes).
type Runs struct {
	M *Manager
	// Spec is the template of a run's sandboxes (limits, backend); the
	// image and labels are set per sandbox.
	Spec sandbox.Spec
}

func (r Runs) spec(runID, name, image string) sandbox.Spec {
	s := r.Spec
	s.Image = image
	s.Labels = map[string]string{LabelRun: runID, LabelSandbox: name}
	return s
}

// Create makes run's sandbox called name.
func (r Runs) Create(ctx context.Context, runID, name, image string) (string, error) {
	rec, err := r.M.Create(ctx, r.spec(runID, name, image), nil)
	if err != nil {
		return "", err
	}
	return rec.ID, nil
}

// Client returns an executor client of a running sandbox.
func (r Runs) Client(ctx context.Context, id string) (*client.Client, error) {
	return r.M.Client(ctx, id)
}

// Gone reports whether sandbox id ended, and why.
func (r Runs) Gone(ctx context.Context, id string) (bool, string) {
	rec, err := r.M.Get(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return true, "it no longer exists"
	}
	if err != nil || rec.State != sandbox.StateStopped {
		return false, ""
	}
	return true, fmt.Sprintf("%s: %s", rec.Reason, rec.Message)
}

// Replace makes a new sandbox for run's name, reusing oldID's disk when it
// survived.
func (r Runs) Replace(ctx context.Context, runID, name, image, oldID string) (string, bool, error) {
	spec := r.spec(runID, name, image)
	if old, err := r.M.Get(ctx, oldID); err == nil {
		// Same image, limits and backend as the one it replaces (an
		// attached sandbox's spec is only known this way).
		spec.Image, spec.Backend, spec.Limits, spec.Env, spec.Workdir = old.Spec.Image, old.Spec.Backend, old.Spec.Limits, old.Spec.Env, old.Spec.Workdir
	}
	rec, restored, err := r.M.CreateFrom(ctx, spec, oldID)
	if err != nil {
		return "", false, err
	}
	return rec.ID, restored, nil
}

// Release deletes every sandbox of a run.
func (r Runs) Release(ctx context.Context, runID string) {
	for _, rec := range r.M.List(ctx, map[string]string{LabelRun: runID}) {
		if err := r.M.Delete(ctx, rec.ID); err != nil {
			r.M.log.Warn("releasing a run's sandbox", "run", runID, "sandbox", rec.ID, "err", err)
		}
	}
}

// Client returns a client of sandbox id's executor (the executor client
// package's, with its deadlines and bulk transfers).
func (m *Manager) Client(ctx context.Context, id string) (*client.Client, error) {
	b, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.activity = time.Now()
	if b.rec.State != sandbox.StateRunning {
		return nil, fmt.Errorf("sandbox %s is %s%s: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
	if b.client == nil {
		c, err := client.Dial(ctx, socketPath(b.dir), b.rec.Token, client.WithCallTimeout(m.cfg.AnswerTimeout))
		if err != nil {
			return nil, err
		}
		b.client = c
	}
	return b.client, nil
}
