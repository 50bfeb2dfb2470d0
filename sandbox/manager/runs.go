package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// Labels that tie a sandbox to the run that uses it.
const (
	LabelRun     = "reins.run"
	LabelSandbox = "reins.sandbox"
)

var _ agent.Sandboxes = Runs{}

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

const goneWhy = "it was removed (reins sandbox rm) or is no longer known"

// Gone reports whether sandbox id ended, and why. A call asks after its
// executor went away: a death on its way to be recorded is waited for.
func (r Runs) Gone(ctx context.Context, id string) (bool, string) {
	if _, err := r.M.Get(ctx, "", id); errors.Is(err, errdefs.ErrNotFound) {
		return true, goneWhy
	}
	rec, ended := r.M.Ended(ctx, "", id)
	if !ended {
		// Removed while the wait looked (an rm stops, then forgets it).
		if _, err := r.M.Get(ctx, "", id); errors.Is(err, errdefs.ErrNotFound) {
			return true, goneWhy
		}
		return false, ""
	}
	return true, rec.EndedWhy()
}

// OOMKills is how many processes of sandbox id its memory limit killed so
// far, and the limit.
func (r Runs) OOMKills(ctx context.Context, id string) (int, int64, error) {
	return r.M.OOMKills(ctx, "", id)
}

// Replace makes a new sandbox for run's name in place of oldID: on
// oldID's disk when it survived, else on the workspace of checkpoint
// snapshot (looked up among the run's tenant's snapshots only), else on
// the image.
func (r Runs) Replace(ctx context.Context, runID, name, image, oldID, snapshot string) (agent.Replacement, error) {
	tenant, err := r.tenant(ctx, runID)
	if err != nil {
		return agent.Replacement{}, err
	}
	spec, err := r.replaceSpec(ctx, runID, name, image, oldID)
	if err != nil {
		return agent.Replacement{}, err
	}
	if snapshot == "" || r.M.diskSurvived(oldID) {
		rec, restored, err := r.M.CreateFrom(ctx, tenant, spec, oldID)
		if errors.Is(err, errdefs.ErrNotFound) && strings.HasPrefix(spec.Image, runlog.SnapshotImagePrefix) && spec.Image != image {
			// The lost one was made from a snapshot since deleted (a
			// fork's checkpoint past its retention): the run's image.
			spec.Image = image
			rec, restored, err = r.M.CreateFrom(ctx, tenant, spec, oldID)
		}
		if err != nil || restored || snapshot == "" {
			return agent.Replacement{ID: rec.ID, From: fromOf(restored)}, err
		}
		// The disk went between the look and the take: the checkpoint,
		// rather than nothing.
		if err := r.M.Delete(ctx, "", rec.ID); err != nil {
			r.M.log.Warn("replacing a run's sandbox", "run", runID, "sandbox", rec.ID, "err", err)
		}
	}
	fromSnap := spec
	fromSnap.Image = runlog.SnapshotImagePrefix + snapshot
	rec, err := r.M.Create(ctx, tenant, fromSnap, nil)
	if err == nil {
		return agent.Replacement{ID: rec.ID, From: runlog.FromSnapshot, Snapshot: snapshot}, nil
	}
	if ctx.Err() != nil || !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrUnimplemented) {
		return agent.Replacement{}, err
	}
	why := fmt.Sprintf("the checkpoint %s could not be restored: %v", snapshot, err)
	rec, err = r.M.Create(ctx, tenant, spec, nil)
	return agent.Replacement{ID: rec.ID, From: runlog.FromImage, Why: why}, err
}

func fromOf(restored bool) string {
	if restored {
		return runlog.FromDisk
	}
	return runlog.FromImage
}

// diskSurvived reports whether stopped sandbox id still has its disk for
// a replacement to take.
func (m *Manager) diskSurvived(id string) bool {
	b, err := m.lookup("", id)
	if err != nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.State != sandbox.StateStopped {
		return false
	}
	_, err = os.Lstat(rootfs.Layout{Dir: b.dir}.DiskImage())
	return err == nil
}

// Suspend releases sandbox id's compute, keeping its files: the workspace
// it saved, when it saves one.
func (r Runs) Suspend(ctx context.Context, id string) (agent.Workspace, error) {
	_, s, err := r.M.SuspendSandbox(ctx, "", id, "")
	if err != nil {
		return agent.Workspace{}, err
	}
	return agent.Workspace{Digest: s.Digest, Files: s.Files, Bytes: s.Bytes}, nil
}

// Wake starts sandbox id again if it was suspended (or paused), saying on
// which saved workspace and why it had been suspended.
func (r Runs) Wake(ctx context.Context, id string) (agent.Woken, error) {
	// Read under the box's lock, not Get: this is asked before every
	// tool call, and a running sandbox needs nothing more.
	b, err := r.M.lookup("", id)
	if err != nil {
		return agent.Woken{}, err
	}
	b.mu.Lock()
	before := b.rec.Info
	b.mu.Unlock()
	if before.State != sandbox.StateSuspended && before.State != sandbox.StatePaused {
		return agent.Woken{}, nil
	}
	woke, err := r.M.Wake(ctx, "", id)
	if err != nil || !woke {
		return agent.Woken{}, err
	}
	w := agent.Woken{Woke: true, Reason: string(before.SuspendedReason)}
	if before.State == sandbox.StateSuspended {
		w.Workspace = before.Workspace
	}
	return w, nil
}

// Checkpoint saves running sandbox id's workspace as an unnamed snapshot
// of the run's tenant.
func (r Runs) Checkpoint(ctx context.Context, runID, id string) (agent.Workspace, error) {
	tenant, err := r.tenant(ctx, runID)
	if err != nil {
		return agent.Workspace{}, err
	}
	s, err := r.M.Snapshot(ctx, tenant, id, "")
	if err != nil {
		return agent.Workspace{}, err
	}
	return agent.Workspace{Digest: s.Digest, Files: s.Files, Bytes: s.Bytes}, nil
}

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
	return m.client(ctx, tenant, id, true)
}

// QuietClient is Client for calls that only look (the executor's Usage,
// Hello, Health: `reins sandbox show`): they do not count as activity, so
// a sandbox watched by its owner still reaches its idle timeout.
func (m *Manager) QuietClient(ctx context.Context, tenant, id string) (*client.Client, error) {
	return m.client(ctx, tenant, id, false)
}

func (m *Manager) client(ctx context.Context, tenant, id string, active bool) (*client.Client, error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if active {
		b.activity = time.Now()
	}
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

// ImageScreen is the display size a run's sandbox of image would have
// ("" for none), for the loop to decide at a run's start whether to offer
// the computer tool: an attached sandbox's (agent.AttachPrefix+ID) own,
// else Manager.ImageScreen's.
func (r Runs) ImageScreen(ctx context.Context, tenant, image string) (string, error) {
	if id, ok := strings.CutPrefix(image, agent.AttachPrefix); ok {
		info, err := r.M.Get(ctx, tenant, id)
		return info.Screen, err
	}
	return r.M.ImageScreen(ctx, tenant, image)
}

// Held says whether a person holds sandbox id's screen (Manager.Held),
// for the loop's computer calls to wait on.
func (r Runs) Held(id string) (by string, released <-chan struct{}) { return r.M.Held(id) }
