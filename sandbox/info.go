package sandbox

import (
	"fmt"
	"time"
)

// Info is what a caller of the sandbox service may know of a sandbox: its
// spec, where it is in its life and why, and what ran it. How to reach its
// executor (the token, the endpoint) and the host's bookkeeping (process
// ids, layers) are not in it: they stay with whoever runs the sandbox.
type Info struct {
	ID          string `json:"id"`
	Tenant      string `json:"tenant,omitempty"` // its owner, who alone (with the admin, "") sees it
	Spec        Spec   `json:"spec"`
	State       State  `json:"state"`
	Reason      Reason `json:"reason,omitempty"`
	Message     string `json:"message,omitempty"`
	ImageDigest string `json:"image_digest,omitempty"`
	// CreatedAt, StoppedAt and ExpiresAt (the TTL's deadline) are zero
	// when they have not happened or do not apply.
	CreatedAt time.Time `json:"created_at"`
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	OOMKills  int       `json:"oom_kills,omitempty"` // processes the memory limit killed so far
	LastOOM   time.Time `json:"last_oom,omitzero"`
	// Runtime names what the backend ran it with when it last started
	// ("runsc 0.0.0-…, platform systrap").
	Runtime string `json:"runtime,omitempty"`
	// MemoryBytes is the memory a running sandbox had in use when Get
	// asked its backend, PeakMemoryBytes the most it has used (kept once
	// it stops), both as its memory limit counts (for gVisor, the
	// sandbox's kernel included); 0 when not measured.
	MemoryBytes     uint64 `json:"memory_bytes,omitempty"`
	PeakMemoryBytes uint64 `json:"peak_memory_bytes,omitempty"`
	// Origin is the snapshot or template it was made from
	// ("snapshot:NAME", "template:NAME", "fork:ID"); "" for an image.
	Origin string `json:"origin,omitempty"`
	// Workspace is the digest of its newest saved workspace, the one a
	// suspended sandbox resumes on; "" when none was saved.
	Workspace string `json:"workspace,omitempty"`
	// SuspendedReason says why a suspended sandbox was suspended
	// (ReasonTTLExpired, ReasonIdleTimeout); "" when a user asked.
	SuspendedReason Reason `json:"suspended_reason,omitempty"`
	// Screen is the size of its display ("1280x800"); "" when its image
	// has none.
	Screen string `json:"screen,omitempty"`
	// HeldBy names the person holding its screen (a take-over); "" when
	// no one does. Not recorded: a restart of the service hands it back.
	HeldBy string `json:"held_by,omitempty"`
}

// EndedWhy says in words why a stopped sandbox ended, the way a user is
// told: "killed: out of memory (limit 1 GiB)", "sandbox stopped:
// ttl_expired (its TTL of 5s ran out)".
func (i Info) EndedWhy() string {
	if i.Reason == ReasonOOMKilled {
		return "killed: out of memory (limit " + FormatBytes(i.Spec.Limits.MemoryBytes) + ")"
	}
	s := fmt.Sprintf("sandbox stopped: %s", i.Reason)
	if i.Message != "" {
		s += " (" + i.Message + ")"
	}
	return s
}

// Progress reports how a create is getting on: pulling and unpacking its
// image, booting. Done and Total count what Phase counts (bytes for a
// pull); Total is 0 when unknown.
type Progress struct {
	Phase   string // image.Phase* or PhaseBoot
	Item    string
	Done    int64
	Total   int64
	Message string
}

// PhaseBoot is the Progress phase of starting the sandbox, after its image.
const PhaseBoot = "boot"

// BackendInfo names a backend the service can run and what it runs
// ("runsc 0.0.0-…, platform systrap"; "" when the backend does not say).
type BackendInfo struct {
	Name    string
	Runtime string
}

// LabelPool is the label of a sandbox of the service's warm pool (its
// value: the pool's image), from its create; LabelPoolReady ("true") is
// added once it waits ready. No spec may set a label that begins with
// LabelPool.
const (
	LabelPool      = "reins.pool"
	LabelPoolReady = "reins.pool.ready"
)
