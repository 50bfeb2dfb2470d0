package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// Labels that tie a sandbox to the run that uses it.
const (
	LabelRun     = "reins.run"
	LabelSandbox = "reins.sandbox"
)

// Runs gives the agent loop the sandboxes of its runs (it implements
// agent.Sandboxes). The loop is trusted: it reaches any sandbox by id (the
// API checked, when the run started, that the sandboxes it names are its
// tenant's), and the sandboxes it makes belong to the run's tenant.
type Runs struct {
	M *Manager
	// Spec is the template of a run's sandboxes (limits, backend); the
	// image and labels are set per sandbox.
	Spec sandbox.Spec
	// TenantOf names the tenant of a run, who owns the run's sandboxes
	// and whose quota they count against. Nil: the admin owns them.
	TenantOf func(ctx context.Context, runID string) (string, error)
	// NetworkOf gives the network rules of a run's sandboxes (its spec's,
	// which the API normalized). Nil: the zero rules (egress mode,
	// nothing allowed), or Spec's.
	NetworkOf func(ctx context.Context, runID string) (egress.Rules, error)
	// Egress reads a sandbox's egress log after a seq (nil: the run's
	// events record no connections).
	Egress func(ctx context.Context, id string, afterSeq int64) ([]egress.Entry, int64, error)
}

// EgressSince is the entries of sandbox id's egress log after afterSeq,
// for the run's events.
func (r Runs) EgressSince(ctx context.Context, id string, afterSeq int64) ([]egress.Entry, int64, error) {
	if r.Egress == nil {
		return nil, afterSeq, nil
	}
	return r.Egress(ctx, id, afterSeq)
}

func (r Runs) tenant(ctx context.Context, runID string) (string, error) {
	if r.TenantOf == nil {
		return "", nil
	}
	return r.TenantOf(ctx, runID)
}

func (r Runs) spec(ctx context.Context, runID, name, image string) (sandbox.Spec, error) {
	s := r.Spec
	s.Image = image
	s.Labels = map[string]string{LabelRun: runID, LabelSandbox: name}
	if r.NetworkOf != nil {
		n, err := r.NetworkOf(ctx, runID)
		if err != nil {
			return s, fmt.Errorf("the network rules of run %s: %w", runID, err)
		}
		s.Network = n
	}
	return s, nil
}

// replaceSpec is the spec of the sandbox that replaces oldID.
func (r Runs) replaceSpec(ctx context.Context, runID, name, image, oldID string) (sandbox.Spec, error) {
	spec, err := r.spec(ctx, runID, name, image)
	if err != nil {
		return spec, err
	}
	if old, err := r.M.Get(ctx, "", oldID); err == nil {
		// Same image, limits, backend and network rules as the one it
		// replaces (an attached sandbox's spec is only known this way,
		// and rules changed while it ran are its latest).
		spec.Image, spec.Backend, spec.Limits, spec.Env, spec.Workdir = old.Spec.Image, old.Spec.Backend, old.Spec.Limits, old.Spec.Env, old.Spec.Workdir
		spec.Network = old.Spec.Network
	}
	return spec, nil
}

// Create makes run's sandbox called name.
func (r Runs) Create(ctx context.Context, runID, name, image string) (string, error) {
	return r.CreateWithMemory(ctx, runID, name, image, 0)
}

// CreateWithMemory makes run's sandbox called name with a memory limit of
// its own (an agent run's; 0: Spec's).
func (r Runs) CreateWithMemory(ctx context.Context, runID, name, image string, memoryBytes int64) (string, error) {
	tenant, err := r.tenant(ctx, runID)
	if err != nil {
		return "", err
	}
	spec, err := r.spec(ctx, runID, name, image)
	if err != nil {
		return "", err
	}
	if memoryBytes > 0 {
		spec.Limits.MemoryBytes = memoryBytes
	}
	rec, err := r.M.Create(ctx, tenant, spec, nil)
	if err != nil {
		return "", err
	}
	return rec.ID, nil
}

// Executor reaches the executor of a running sandbox, for the loop's sandbox tools.
func (r Runs) Executor(ctx context.Context, id string) (sandboxtool.Executor, error) {
	c, err := r.M.Client(ctx, "", id)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return c, nil
}

// ExecutorStarted is when the executor of running sandbox id started, as
// it says.
func (r Runs) ExecutorStarted(ctx context.Context, id string) (time.Time, error) {
	c, err := r.M.Client(ctx, "", id)
	if err != nil {
		return time.Time{}, err
	}
	h, err := c.Hello(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, h.StartedUnixNano), nil
}

// Gone reports whether sandbox id ended, and why. A call asks after its
// executor went away: a death on its way to be recorded is waited for.
func (r Runs) Gone(ctx context.Context, id string) (bool, string) {
	if _, err := r.M.Get(ctx, "", id); errors.Is(err, errdefs.ErrNotFound) {
		return true, "it was removed (reins sandbox rm) or is no longer known"
	}
	rec, ended := r.M.Ended(ctx, "", id)
	if !ended {
		return false, ""
	}
	return true, rec.EndedWhy()
}

// OOMKills is how many processes of sandbox id its memory limit killed so
// far, and the limit.
func (r Runs) OOMKills(ctx context.Context, id string) (int, int64, error) {
	return r.M.OOMKills(ctx, "", id)
}

// Replace makes a new sandbox for run's name, reusing oldID's disk when it
// survived.
func (r Runs) Replace(ctx context.Context, runID, name, image, oldID string) (string, bool, error) {
	tenant, err := r.tenant(ctx, runID)
	if err != nil {
		return "", false, err
	}
	spec, err := r.replaceSpec(ctx, runID, name, image, oldID)
	if err != nil {
		return "", false, err
	}
	rec, restored, err := r.M.CreateFrom(ctx, tenant, spec, oldID)
	if err != nil {
		return "", false, err
	}
	return rec.ID, restored, nil
}

// Suspend releases sandbox id's compute, keeping its files.
func (r Runs) Suspend(ctx context.Context, id string) error { return r.M.Suspend(ctx, "", id) }

// Wake starts sandbox id again if it was suspended.
func (r Runs) Wake(ctx context.Context, id string) (bool, error) { return r.M.Wake(ctx, "", id) }

// Release deletes every sandbox of a run. Only the run's tenant's count:
// labels are the user's to set.
func (r Runs) Release(ctx context.Context, runID string) {
	tenant, err := r.tenant(ctx, runID)
	if err != nil {
		r.M.log.Warn("releasing a run's sandboxes", "run", runID, "err", err)
		return
	}
	for _, rec := range r.M.List(ctx, tenant, map[string]string{LabelRun: runID}) {
		if tenant == "" && rec.Tenant != "" {
			continue
		}
		if err := r.M.Delete(ctx, "", rec.ID); err != nil {
			r.M.log.Warn("releasing a run's sandbox", "run", runID, "sandbox", rec.ID, "err", err)
		}
	}
}

// Client returns a client of the executor of sandbox id of tenant ("" for
// any): the executor client package's, with its deadlines and bulk
// transfers.
func (m *Manager) Client(ctx context.Context, tenant, id string) (*client.Client, error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.activity = time.Now()
	if b.rec.State == sandbox.StateSuspended || b.rec.State == sandbox.StatePaused {
		return nil, fmt.Errorf("sandbox %s is %s: resume it first (reins sandbox resume %s): %w", id, b.rec.State, id, errdefs.ErrFailedPrecondition)
	}
	if b.rec.State != sandbox.StateRunning {
		return nil, fmt.Errorf("sandbox %s is %s%s: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
	if b.client == nil {
		c, err := client.Dial(ctx, b.endpoint(), b.rec.Token, m.clientOptions(b)...)
		if err != nil {
			return nil, err
		}
		b.client = c
	}
	return b.client, nil
}

// EnableGateway turns the model gateway on in sandbox id
// (Manager.EnableGateway), for an agent run of a program in it.
func (r Runs) EnableGateway(ctx context.Context, id string) ([]string, error) {
	return r.M.EnableGateway(ctx, id)
}

// GatewayOf is sandbox id's tenant and gateway model (Manager.GatewayOf).
func (r Runs) GatewayOf(ctx context.Context, id string) (tenant, model, script string, err error) {
	return r.M.GatewayOf(ctx, id)
}
