package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

type tenantKey struct{}

// withTenant is ctx for a call authorized as tenant ("" is the admin).
func withTenant(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, tenantKey{}, name)
}

// tenant is the caller's tenant, set by the auth middleware; "" is the
// admin, which sees every tenant's runs and sandboxes.
func tenant(ctx context.Context) string {
	name, _ := ctx.Value(tenantKey{}).(string)
	return name
}

// actor names who made a call, for the log ("admin" or the tenant).
func actor(ctx context.Context) string {
	if t := tenant(ctx); t != "" {
		return t
	}
	return "admin"
}

// NewToken returns a new API token: "reins_" and 64 hex digits.
func NewToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "reins_" + hex.EncodeToString(b)
}

// reinsBearer reports whether an Authorization header carries a reins
// token (the admin's and tenants' all start "reins_"), rather than a
// credential of an application's own.
func reinsBearer(header string) bool { return strings.HasPrefix(header, "Bearer reins_") }

// HashToken is what the store keeps of a tenant's token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

var errBadToken = errdefs.WithMessage(errdefs.ErrUnauthenticated,
	"missing or wrong token: set REINS_TOKEN (the admin token is in the data dir's admin.token; "+
		"an admin issues a tenant's with `reins tenant token NAME`)")

// authenticate returns the tenant an Authorization header speaks for ("" for
// the admin token). A tenant token is found by its hash, so no comparison
// runs over the secret; every token that is not the admin's is hashed and
// looked up, whatever it looks like, so the time taken tells nothing.
func (s *Server) authenticate(ctx context.Context, header string) (string, error) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return "", errBadToken
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) == 1 {
		return "", nil
	}
	if s.tenants == nil {
		return "", errBadToken
	}
	t, err := s.tenants.Store.TenantByToken(ctx, HashToken(tok))
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", errBadToken
	}
	if err != nil {
		return "", err
	}
	return t.Name, nil
}

// Tenants serves the tenant API (admin only) and says what each tenant may
// have at once.
type Tenants struct {
	Store store.Tenants
	// Defaults are the quotas of tenants whose own are 0. A default of 0
	// or less is no limit.
	Defaults store.Quota
	// CheckPolicy validates a default policy before it is stored.
	CheckPolicy func(policy string) error

	runMu sync.Mutex // held from a tenant's run count to its new run's row
}

// Quota returns tenant's quota with the defaults applied; 0 is no limit.
// The admin ("") has none.
func (t *Tenants) Quota(ctx context.Context, name string) (store.Quota, error) {
	if name == "" {
		return store.Quota{}, nil
	}
	tn, err := t.Store.GetTenant(ctx, name)
	if err != nil {
		return store.Quota{}, err
	}
	return t.effective(tn.Quota), nil
}

func (t *Tenants) effective(q store.Quota) store.Quota {
	pick := func(own, def int) int {
		switch {
		case own < 0:
			return 0
		case own == 0:
			return max(def, 0)
		}
		return own
	}
	return store.Quota{Sandboxes: pick(q.Sandboxes, t.Defaults.Sandboxes), Runs: pick(q.Runs, t.Defaults.Runs)}
}

// MaxSandboxes is tenant's limit of sandboxes not stopped (0: none), for
// manager.Config.
func (t *Tenants) MaxSandboxes(ctx context.Context, name string) (int, error) {
	q, err := t.Quota(ctx, name)
	return q.Sandboxes, err
}

// activeRuns are the statuses of runs that count against a quota: every
// one but the final ones.
var activeRuns = []string{string(runlog.StatusQueued), string(runlog.StatusRunning),
	string(runlog.StatusWaitingApproval), string(runlog.StatusPaused)}

// admitRun checks that the caller may start a run with spec: the
// sandboxes it attaches are the caller's, and its tenant is under its run
// quota. Call release once the run's row exists (or the start failed), so
// that concurrent starts are counted one after the other.
func (r *Runs) admitRun(ctx context.Context, spec runlog.Spec) (release func(), err error) {
	name := tenant(ctx)
	if r.server == nil {
		return func() {}, nil
	}
	// The admin's attached sandboxes are checked too: a run refused now
	// leaves no row, where one started would fail at its first tool call.
	for sb, image := range spec.Sandboxes {
		if id, ok := strings.CutPrefix(image, agent.AttachPrefix); ok {
			_, err := r.server.m.Get(ctx, name, id)
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, fmt.Errorf("sandbox %s not found, so the run cannot work in it (as its sandbox %q): "+
					"see reins sandbox ls, or leave out --in to get a new one: %w", id, sb, errdefs.ErrNotFound)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	t := r.server.tenants
	if name == "" {
		return func() {}, nil
	}
	if t == nil {
		return func() {}, nil
	}
	q, err := t.Quota(ctx, name)
	if err != nil {
		return nil, err
	}
	if q.Runs <= 0 {
		return func() {}, nil
	}
	t.runMu.Lock()
	runs, err := r.Store.ListRuns(ctx, store.RunFilter{Tenant: name, Statuses: activeRuns, Limit: q.Runs})
	if err != nil {
		t.runMu.Unlock()
		return nil, err
	}
	if len(runs) >= q.Runs {
		t.runMu.Unlock()
		return nil, fmt.Errorf("tenant %s has %d active runs, its limit: cancel some (reins runs cancel) or wait for them to finish, or raise the quota: %w",
			name, len(runs), errdefs.ErrResourceExhausted)
	}
	return t.runMu.Unlock, nil
}
