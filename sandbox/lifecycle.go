package sandbox

import "time"

// Lifecycle vocabulary of short-lived sandboxes
// (docs/decisions/0032-short-lived-sandboxes.md): snapshot records and
// lifecycle events, as the manager keeps them and the API shows them.

// SnapshotVersion is bumped when SnapshotInfo changes in a way old code
// cannot read.
const SnapshotVersion = 1

// SnapshotInfo is a snapshot record: a saved workspace, on the image it
// was taken on, that a sandbox can be made from. It is written before it
// is answered, so it survives a restart of the service.
type SnapshotInfo struct {
	Version int    `json:"version"`
	Tenant  string `json:"tenant,omitempty"`
	// Name is the tenant's name for it; "" for an unnamed save (a run's
	// checkpoint, a fork's source), found by digest.
	Name    string `json:"name,omitempty"`
	Digest  string `json:"digest"`
	Sandbox string `json:"sandbox"` // the sandbox it was taken of
	// The image it sits on: what the sandbox ran (its Spec.Image), and
	// what is needed to mount it again.
	Image        string   `json:"image"`
	ImageDigest  string   `json:"image_digest"`
	Layers       []string `json:"layers"`
	ImageEnv     []string `json:"image_env,omitempty"`
	ImageWorkdir string   `json:"image_workdir,omitempty"`
	// ImageScreen is the display of the sandbox it was taken of ("" for
	// none): a sandbox made from it has one of that size.
	ImageScreen string    `json:"image_screen,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	Files       int64     `json:"files"`
	Bytes       int64     `json:"bytes"`
	StoredBytes int64     `json:"stored_bytes"`
	// NeededBy names who needs it ("sandbox:ID", "template:NAME"), filled
	// in when it is listed; never stored.
	NeededBy []string `json:"-"`
}

// Kinds of lifecycle event.
const (
	EventCreated   = "created"
	EventExpiring  = "expiring"
	EventSuspended = "suspended"
	EventResumed   = "resumed"
	EventPaused    = "paused"
	EventSnapshot  = "snapshot"
	EventForked    = "forked"
	EventStopped   = "stopped"
)

// LifecycleEvent is one step in a sandbox's life, numbered in the order the
// manager saw them (Seq grows across all sandboxes, from 1 at the start of
// the process: events are kept in memory only).
type LifecycleEvent struct {
	Seq     int64
	Sandbox string
	Tenant  string
	Time    time.Time
	Kind    string
	Reason  Reason // why it expired, was suspended or stopped
	Message string
	// At is when an expiring sandbox expires.
	At time.Time
	// Snapshot is the workspace digest involved (suspended, snapshot,
	// forked).
	Snapshot string
}
