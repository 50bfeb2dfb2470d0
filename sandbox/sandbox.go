// Package sandbox is the vocabulary of reins' hands: what a sandbox is, the
// states it moves through, why it ends, and the small interface each
// isolation technology (a Backend) implements. Backends live in
// sub-packages (gvisor, runc, fake) and import this package, never the
// reverse; cmd/reins chooses them by name.
//
// A sandbox moves through these states:
//
//	creating ──▶ running ◀──▶ paused
//	               │  ▲
//	               ▼  │
//	            suspended
//
//	any ──▶ stopped (with a Reason)
//
// A stopped sandbox always carries a Reason and a message in words, so a user
// is told why it ended (out of memory, TTL, idle, killed, lost, …), never a
// bare exit status.
package sandbox

import (
	"context"
	"fmt"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
)

// State is where a sandbox is in its life.
type State string

const (
	StateCreating  State = "creating"
	StateRunning   State = "running"
	StatePaused    State = "paused"
	StateSuspended State = "suspended"
	StateStopped   State = "stopped"
)

// Reason says why a sandbox stopped.
type Reason string

const (
	ReasonExited      Reason = "exited"       // its init ended on its own
	ReasonOOMKilled   Reason = "oom_killed"   // the memory limit killed it
	ReasonTTLExpired  Reason = "ttl_expired"  // it lived past its TTL
	ReasonIdleTimeout Reason = "idle_timeout" // nothing ran for its idle timeout
	ReasonKilled      Reason = "killed"       // a user removed it
	ReasonLost        Reason = "lost"         // it vanished (host reboot, crash while the service was down)
	ReasonError       Reason = "error"        // it could not be created or failed on its own
)

// Limits are the resources a sandbox may use. Zero means the default.
type Limits struct {
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"` // size of the writable layer
}

// Spec is what a user asks for when creating a sandbox.
type Spec struct {
	Image       string            `json:"image"`
	Backend     string            `json:"backend"`
	Limits      Limits            `json:"limits"`
	TTL         time.Duration     `json:"ttl,omitempty"`
	IdleTimeout time.Duration     `json:"idle_timeout,omitempty"`
	Env         []string          `json:"env,omitempty"` // K=V
	Labels      map[string]string `json:"labels,omitempty"`
	Workdir     string            `json:"workdir,omitempty"`
	// Network is the sandbox's network boundary (egress.Rules; the zero
	// value is egress mode with an empty allowlist: nothing leaves).
	Network egress.Rules `json:"network,omitzero"`
	// Gateway, when set, gives the sandbox the model gateway (package
	// gateway): its environment points the model SDKs at the gateway on
	// the sandbox's loopback, with a placeholder token of its own.
	Gateway *GatewaySpec `json:"gateway,omitempty"`
	// OnExpire is what the TTL or idle timeout running out does; empty
	// is ExpireSuspend.
	OnExpire ExpireAction `json:"on_expire,omitempty"`
	// ExpiryWarning is how long before the expiry an "expiring" event
	// fires; 0 is the service's default.
	ExpiryWarning time.Duration `json:"expiry_warning,omitempty"`
	// Screen is the display's size, "WIDTHxHEIGHT", for an image that
	// has a display (DisplayLabel); "" is the image's own size.
	Screen string `json:"screen,omitempty"`
}

// ExpireAction is what happens to a sandbox whose TTL or idle timeout
// runs out.
type ExpireAction string

const (
	// ExpireSuspend saves the workspace and deletes the guest; resume
	// boots a fresh one on it (E2B's autoPause). The default.
	ExpireSuspend ExpireAction = "suspend"
	// ExpireDelete stops the sandbox for good, with the reason.
	ExpireDelete ExpireAction = "delete"
)

// GatewaySpec is a sandbox's model gateway.
type GatewaySpec struct {
	// Model is where its calls go (provider:name, script:NAME); empty
	// sends each call to the provider of its wire, with the model asked.
	Model string `json:"model,omitempty"`
	// Script is a script: Model's inline JSON.
	Script string `json:"script,omitempty"`
}

// Mount is a bind mount from the host into a sandbox.
type Mount struct {
	Source   string `json:"source"` // host path
	Target   string `json:"target"` // path inside the sandbox
	ReadOnly bool   `json:"read_only"`
}

// Bundle is everything a Backend needs to start a sandbox. The Manager
// prepares it. For a backend on this host the root filesystem is already
// mounted (an overlay of the image's layers over the sandbox's own writable
// layer) and the executor binary and the control directory are bind mounts;
// a RootMaker gets Image and Executor instead, and no Rootfs or Mounts.
type Bundle struct {
	ID     string  `json:"id"`
	Dir    string  `json:"dir"`    // host directory owned by this sandbox; the backend may keep files here
	Rootfs string  `json:"rootfs"` // mounted root filesystem ("" for a RootMaker)
	Mounts []Mount `json:"mounts"`
	// Image is what the sandbox runs, for a RootMaker to make its root
	// filesystem from; Executor is the host path of the static executor
	// binary, which a RootMaker puts at Args[0] its own way.
	Image    BundleImage `json:"image,omitzero"`
	Executor string      `json:"executor,omitempty"`
	Args     []string    `json:"args"` // the init process (the executor)
	Env      []string    `json:"env"`
	Cwd      string      `json:"cwd"`
	Hostname string      `json:"hostname"`
	// Listen is where the executor serves, as a path inside the sandbox
	// (a unix socket under one of Mounts' targets); the backend says in
	// Start how the host reaches it. Empty: the sandbox runs no executor.
	Listen string `json:"listen,omitempty"`
	// NetNS is the path of a network namespace the sandbox joins (one the
	// service made, with its veth and rules); empty gives it a new one
	// with only loopback.
	NetNS  string `json:"netns,omitempty"`
	Limits Limits `json:"limits"`
}

// BundleImage names a sandbox's image as the service resolved it.
type BundleImage struct {
	Ref    string `json:"ref"`    // as the user named it ("debian", "ghcr.io/x/y:1")
	Digest string `json:"digest"` // the manifest the service resolved it to
}

// Endpoint is where the service reaches a sandbox's executor, as its
// backend says (containerd's ControllerInstance.Address): callers dial it,
// never build an address themselves. The manager persists it in the
// sandbox's record, so a restarted service reaches the executor again
// without asking the backend. A unix socket on this host is the only kind
// today; a pod or a VM adds its own field.
type Endpoint struct {
	// Unix is the host path of the executor's unix socket. Its directory
	// is the service's; the name in it is the sandbox's to write, so the
	// client never follows it (executor/client).
	Unix string `json:"unix,omitempty"`
}

// IsZero reports whether e names no endpoint.
func (e Endpoint) IsZero() bool { return e.Unix == "" }

// HostPath maps a path inside the sandbox to the host path of the bind
// mount that holds it (the longest target that contains it), for backends
// whose sandboxes see host directories through Mounts.
func (b Bundle) HostPath(inside string) (string, bool) {
	inside = path.Clean(inside)
	best, found := "", false
	bestLen := -1
	for _, m := range b.Mounts {
		t := path.Clean(m.Target)
		rel, ok := strings.CutPrefix(inside, t)
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) || len(t) <= bestLen {
			continue
		}
		best, found, bestLen = m.Source+rel, true, len(t)
	}
	return best, found
}

// UnixEndpoint is the Endpoint of a bundle whose executor listens on a
// unix socket in one of its bind mounts: the socket's host path.
func (b Bundle) UnixEndpoint() (Endpoint, error) {
	if b.Listen == "" {
		return Endpoint{}, nil
	}
	p, ok := b.HostPath(b.Listen)
	if !ok {
		return Endpoint{}, fmt.Errorf("sandbox %s: the executor's socket %s is in no mount the host can reach: %w", b.ID, b.Listen, errdefs.ErrInvalidArgument)
	}
	return Endpoint{Unix: p}, nil
}

// Status is what a Backend knows about a sandbox it started.
type Status struct {
	Running   bool
	Pid       int // host pid of the init (or the sandbox process); 0 when stopped
	ExitCode  int // when stopped
	OOMKills  int // times the memory limit killed a process in it, so far
	OOMKilled bool
}

// Backend is one isolation technology. Implementations must be safe for
// concurrent use and must keep no state in memory that a restart of the
// service would lose: Status of a sandbox started by an earlier process of
// the service must work.
type Backend interface {
	// Name is the name users choose the backend by ("gvisor", "runc").
	Name() string
	// Start creates the sandbox described by b and starts its init. It
	// returns when the init runs, with where its executor (b.Listen) is
	// reached; it does not wait for the executor.
	Start(ctx context.Context, b Bundle) (Endpoint, error)
	// Status reports on a sandbox; errdefs.ErrNotFound if the backend has no
	// trace of it.
	Status(ctx context.Context, id string) (Status, error)
	// Kill stops every process of the sandbox; it stays known to Status.
	Kill(ctx context.Context, id string) error
	// Delete kills what is left and removes every trace of the sandbox the
	// backend made. Deleting an unknown sandbox is not an error.
	Delete(ctx context.Context, id string) error
}

// RootMaker is implemented by backends that make a sandbox's root
// filesystem themselves, away from this host's disks: a Kubernetes pod
// pulls its image on its node, a VM boots a disk built from it. The manager
// then skips its host-local stage (the sandbox's disk, the overlay of the
// image's layers, the control directory) and passes a Bundle with Image
// and Executor set and no Rootfs or Mounts. Such a sandbox's files are the
// backend's to keep: the manager has no disk of its to hand a replacement.
type RootMaker interface {
	MakesRoot()
}

// Checkpointer is implemented by backends that can save a running
// sandbox's memory and processes and restore them (gVisor's runsc
// checkpoint and restore): pause and, where it can, fork and warm
// templates (docs/decisions/0032-short-lived-sandboxes.md).
//
// The sandbox's init must hold no host socket when it is saved (gVisor
// cannot save one): the executor lets go of its own when asked before the
// checkpoint, and listens again on RelistenSignal, which the backend
// sends after a restore and after a checkpoint that failed.
type Checkpointer interface {
	// Checkpoint saves sandbox id's memory and processes under dir (a
	// directory the service made, on the host, that the sandbox cannot
	// reach) and ends the sandbox. When it fails the sandbox runs on, as
	// it was, and the error says why (errdefs.ErrNoSpace for a full host
	// disk).
	Checkpoint(ctx context.Context, id, dir string) error
	// Restore starts the sandbox b from the image Checkpoint left in dir,
	// its processes continuing where they were, and returns where its
	// executor is reached, as Start does. b may be another sandbox's
	// (a fork): its root filesystem must hold the same files.
	Restore(ctx context.Context, b Bundle, dir string) (Endpoint, error)
}

// RelistenSignal is sent to a sandbox's init after a restore, and after a
// checkpoint that failed, so that an init that let go of its host sockets
// for the checkpoint takes them again (executor.ListenAgainSignal).
const RelistenSignal = syscall.SIGUSR2

// Usage is a sandbox's resource use, as a backend measures it from the host.
type Usage struct {
	MemoryBytes uint64
	// PeakMemoryBytes is the most memory the sandbox has had charged to
	// it (for gVisor, the sandbox's kernel included), as its memory limit
	// counts it; 0 when the host keeps no peak.
	PeakMemoryBytes uint64
	CPUSeconds      float64
	Pids            uint64
}

// UsageReporter is implemented by backends that can measure a sandbox from
// the host.
type UsageReporter interface {
	Usage(ctx context.Context, id string) (Usage, error)
}

// Waiter is implemented by backends that can tell when a sandbox's init
// ends without being asked again and again (containerd's Wait): Wait
// blocks until then, or until ctx ends, and returns the final Status.
type Waiter interface {
	Wait(ctx context.Context, id string) (Status, error)
}

// Versioner is implemented by backends that can name the runtime they run
// sandboxes with and how ("runsc 0.0.0-…, platform systrap"), as users are
// shown it.
type Versioner interface {
	Version() string
}
