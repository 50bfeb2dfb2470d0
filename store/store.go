// Package store is the brain's durable memory: runs, their append-only event
// logs, pending approvals, and a content-addressed blob store for large
// payloads. The event log is the only source of truth of a run; everything
// else about a run (its status, usage) is a summary the loop keeps beside it
// for listing, rewritten in the same transaction as the event that changes
// it.
//
// Implementations: store/sqlite (one file, WAL). Every implementation passes
// storetest.Run, and those that persist storetest.RunReopen.
package store

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
)

// Run is the summary row of one run.
type Run struct {
	ID        string          `json:"id"`
	Tenant    string          `json:"tenant"`
	Status    string          `json:"status"` // queued, running, waiting_approval, paused, succeeded, failed, cancelled
	Spec      json.RawMessage `json:"spec"`   // the RunSpec as given
	Summary   json.RawMessage `json:"summary,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	// LastSeq is the sequence number of the run's last event (0: none).
	LastSeq int64 `json:"last_seq"`
}

// Event is one entry of a run's log. Seq starts at 1 and has no gaps.
type Event struct {
	RunID string          `json:"run_id"`
	Seq   int64           `json:"seq"`
	Type  string          `json:"type"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data"`
}

// RunFilter selects runs for ListRuns.
type RunFilter struct {
	Tenant   string   // "" = all tenants
	Statuses []string // empty = any
	Limit    int      // 0 = a default of 100
	Before   string   // page: runs created before this run id
}

// RunUpdate changes a run's summary along with an append.
type RunUpdate struct {
	Status  string          // "" = unchanged
	Summary json.RawMessage // nil = unchanged
}

// Store holds runs and their logs. Appends are atomic and ordered: Append
// writes the events and the run update in one transaction, and fails with
// errdefs.ErrFailedPrecondition (a conflict) when the run's last seq is not
// afterSeq — so two writers can never interleave a run's log.
//
// What returned without error is durable: it survives kill -9 of the
// process. JSON payloads (Spec, Summary, Data) must be valid JSON or empty
// (errdefs.ErrInvalidArgument) and come back byte for byte; times come back
// in UTC with at least microsecond precision. An unknown run id is
// errdefs.ErrNotFound. storetest.Run checks all of this.
type Store interface {
	// CreateRun stores a new run and the first events of its log,
	// numbered from 1, in one transaction: the run never exists without
	// them, even after a crash. A zero CreatedAt becomes now, a zero
	// UpdatedAt CreatedAt, an empty Status "queued"; LastSeq is ignored
	// (it becomes len(events)), and so are the events' RunID and Seq; an
	// event's zero Time becomes CreatedAt. A taken id, by any tenant, is
	// errdefs.ErrAlreadyExists; an event is checked as Append checks it.
	CreateRun(ctx context.Context, run Run, events ...Event) error
	// GetRun returns run id. With a non-empty tenant, another tenant's run
	// is errdefs.ErrNotFound, exactly as a missing one: existence never
	// leaks across tenants.
	GetRun(ctx context.Context, tenant, id string) (Run, error)
	// ListRuns returns runs newest first (CreatedAt, then creation order).
	// A Before that does not exist, or that the filter's tenant does not
	// own, is errdefs.ErrNotFound.
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// Append adds events numbered afterSeq+1, afterSeq+2, … and applies
	// update, and returns the new last seq. The events' RunID and Seq are
	// ignored; a zero Time becomes now. With no events it applies update
	// alone, under the same afterSeq check. Once ctx is done before the
	// write began, nothing is written; an Append that began reports its
	// real outcome.
	Append(ctx context.Context, runID string, afterSeq int64, events []Event, update RunUpdate) (lastSeq int64, err error)
	// Events returns the run's events with seq > afterSeq in order, at most
	// limit of them (0: all). Past the end of the log it returns none.
	Events(ctx context.Context, runID string, afterSeq int64, limit int) ([]Event, error)
	Close() error
}

// Blobs is a content-addressed store for large payloads (screenshots, long
// outputs, tarballs), referenced from events by digest ("sha256:" and 64
// lowercase hex digits). Put streams (memory does not grow with size) and
// returns once the blob is durable, so an event may then reference it. Open
// of a digest not stored is errdefs.ErrNotFound, of a malformed one
// errdefs.ErrInvalidArgument. Implementations: store/blob (a directory);
// each passes storetest.RunBlobs.
type Blobs interface {
	Put(ctx context.Context, r io.Reader) (digest string, size int64, err error)
	Open(ctx context.Context, digest string) (io.ReadCloser, error)
}

// Tenant is the isolation scope of API tokens, runs and sandboxes, and the
// unit of quotas. Its name is its id. The admin is no tenant: it is the
// empty name, which store methods read as "every tenant".
type Tenant struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	Quota     Quota     `json:"quota"`
	// TokenIssuedAt is when the tenant's token was issued; zero: it has
	// none yet.
	TokenIssuedAt time.Time `json:"token_issued_at,omitzero"`
	// Policy is the tenant's default policy document (YAML or JSON),
	// layered under each run's own; "" for none.
	Policy string `json:"policy,omitempty"`
}

// Quota bounds what one tenant has at once. In each field 0 means the
// service's default and a negative number no limit.
type Quota struct {
	Sandboxes int `json:"sandboxes"` // sandboxes not stopped
	Runs      int `json:"runs"`      // runs not finished
}

// Tenants holds tenants and their API tokens, of which it keeps only a
// hash (the caller hashes; the store never sees a token). A tenant has at
// most one token: setting a new one revokes the old. An unknown tenant or
// token hash is errdefs.ErrNotFound. Implementations pass
// storetest.RunTenants.
type Tenants interface {
	// CreateTenant stores a new tenant without a token. A zero CreatedAt
	// becomes now; TokenIssuedAt is ignored. A name CheckTenantName
	// refuses is errdefs.ErrInvalidArgument, a taken one
	// errdefs.ErrAlreadyExists.
	CreateTenant(ctx context.Context, t Tenant) error
	GetTenant(ctx context.Context, name string) (Tenant, error)
	// ListTenants returns every tenant, by name.
	ListTenants(ctx context.Context) ([]Tenant, error)
	SetTenantQuota(ctx context.Context, name string, q Quota) error
	// SetTenantPolicy sets the tenant's default policy ("" for none).
	SetTenantPolicy(ctx context.Context, name, policy string) error
	// SetTenantToken makes hash the tenant's only token and returns the
	// tenant as it now is.
	SetTenantToken(ctx context.Context, name, hash string) (Tenant, error)
	// TenantByToken returns the tenant whose token has this hash.
	TenantByToken(ctx context.Context, hash string) (Tenant, error)
}

// MaxTenantName is the longest tenant name.
const MaxTenantName = 40

// CheckTenantName accepts 1 to 40 lowercase letters, digits and '-'.
func CheckTenantName(name string) error {
	ok := name != "" && len(name) <= MaxTenantName
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("tenant name %q: use 1 to %d lowercase letters, digits and '-': %w", name, MaxTenantName, errdefs.ErrInvalidArgument)
	}
	return nil
}

// EgressRecord is one entry of a sandbox's egress log and its place in
// it.
type EgressRecord struct {
	// Seq numbers a sandbox's entries from 1, in the order they were
	// appended, without gaps (the oldest may have been dropped: see
	// EgressLog).
	Seq   int64        `json:"seq"`
	Entry egress.Entry `json:"entry"`
}

// MaxEgressPerSandbox is how many entries of one sandbox's egress log an
// EgressLog keeps: a sandbox decides how many connections it opens, and
// must not fill the service's disk by opening them. 100 000 entries are
// about 30 MB of SQLite.
const MaxEgressPerSandbox = 100_000

// EgressLog holds the egress logs of sandboxes: every connection (and
// DNS query) the egress proxy allowed or denied. Entries belong to a
// tenant, who alone (with the admin, "") reads them. Implementations pass
// storetest.RunEgress.
type EgressLog interface {
	// AppendEgress stores entries, in one transaction, as tenant's: each
	// goes at the end of its sandbox's log (entries of several sandboxes
	// may come in one batch; Entry.Sandbox says whose each is, and an
	// empty one is errdefs.ErrInvalidArgument, which writes nothing). A
	// zero Time becomes now. In the same transaction a sandbox's log is
	// cut to its newest MaxEgressPerSandbox entries (the implementation
	// may be built with a smaller bound; never a larger one).
	AppendEgress(ctx context.Context, tenant string, entries []egress.Entry) error
	// ListEgress returns sandbox's entries with seq > afterSeq, oldest
	// first, at most limit of them (0: a default of 1000). Tenant ""
	// sees every sandbox's; a tenant sees only the entries it appended,
	// and another tenant's sandbox has none (never an error: existence
	// does not leak). Times come back in UTC, microsecond precision at
	// least.
	ListEgress(ctx context.Context, tenant, sandbox string, afterSeq int64, limit int) ([]EgressRecord, error)
	// DeleteEgress removes a sandbox's whole log (when the sandbox is
	// removed). Deleting a log that does not exist is not an error.
	DeleteEgress(ctx context.Context, sandbox string) error
}

// DefaultEgressLimit is ListEgress's limit when none is given.
const DefaultEgressLimit = 1000

// SecretMeta describes a stored secret without its value.
type SecretMeta struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"` // the last PutSecret
	Size      int       `json:"size"`       // bytes of the sealed value as stored
}

// MaxSealedSecret is the largest sealed value Secrets stores.
const MaxSealedSecret = 64 << 10

// Secrets holds tenants' secrets, sealed: the store sees only what the
// caller (package secret) encrypted, never a value in clear. A secret is
// named by its scope and its name. The scope is a tenant's name, or ""
// for the admin's own secrets: "" is a scope like any other here, not
// "every tenant", and no method reaches across scopes (another scope's
// secret is errdefs.ErrNotFound, exactly as a missing one). A name is
// 1 to 128 bytes without NUL and a scope "" or a name CheckTenantName
// accepts, else errdefs.ErrInvalidArgument; so is an empty sealed value
// or one over MaxSealedSecret. Deleting a tenant, where a store can,
// deletes its secrets with it. Times come back in UTC. Implementations
// pass storetest.RunSecrets.
type Secrets interface {
	// PutSecret stores sealed as the secret, replacing any value it had,
	// and reports whether it is new. A new secret is created and updated
	// at now; a replaced one keeps its CreatedAt and is updated at now.
	PutSecret(ctx context.Context, tenant, name string, sealed []byte, now time.Time) (created bool, err error)
	// GetSecret returns the sealed value, or errdefs.ErrNotFound.
	GetSecret(ctx context.Context, tenant, name string) (sealed []byte, err error)
	// ListSecrets returns the scope's secrets by name (bytewise).
	ListSecrets(ctx context.Context, tenant string) ([]SecretMeta, error)
	// DeleteSecret removes the secret, or is errdefs.ErrNotFound.
	DeleteSecret(ctx context.Context, tenant, name string) error
}

// MaxSecretName is the longest name Secrets stores.
const MaxSecretName = 128

// CheckSecretKey checks the scope and name of a secret as every Secrets
// implementation does.
func CheckSecretKey(tenant, name string) error {
	if tenant != "" {
		if err := CheckTenantName(tenant); err != nil {
			return err
		}
	}
	if name == "" || len(name) > MaxSecretName || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("secret name of %d bytes: use 1 to %d bytes, no NUL: %w", len(name), MaxSecretName, errdefs.ErrInvalidArgument)
	}
	return nil
}
