// Package manager runs sandboxes on this machine: it turns a Spec into a
// running sandbox (image, disk, overlay, backend, executor), keeps a
// persisted Record of each, re-attaches to them after a restart, and ends
// them for a reason (TTL, idle, death) that it records in words.
package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

// Paths inside every sandbox.
const (
	ExecutorTarget = "/.reins/bin/reins-executor"
	RunTarget      = "/.reins/run"
	// StagingTarget is the executor's staging directory for files the
	// host reads and writes through its view of the root filesystem
	// (executor.StagingDir; client.WithHostRoot).
	StagingTarget = "/.reins/xfer"
	socketName    = "executor.sock"
	// tokenEnv carries the executor's token in its init's environment
	// (the OCI spec, host-only), which the executor removes from what its
	// processes get. It is never a file the host writes where the sandbox
	// can plant a symlink.
	tokenEnv    = "REINS_EXECUTOR_TOKEN"
	defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// DefaultTmpdir is every sandbox's TMPDIR unless its image or its
	// spec sets another: /var/tmp is on the sandbox's disk in both
	// backends (gVisor's /tmp is a tmpfs), so what programs spool there
	// costs disk, not the memory limit (docs/decisions/0030-agents-image.md).
	DefaultTmpdir = "/var/tmp"
)

// Image is what the manager needs of a resolved image.
type Image struct {
	Digest     string
	Layers     []string // unpacked layer directories, lowest first
	Env        []string
	WorkingDir string
	// Screen is the image's display size (its sandbox.DisplayLabel);
	// "" when it has no display.
	Screen string
	Size   int64 // bytes of its layers, unpacked (0: unknown)
	Cached bool  // nothing was pulled, unpacked or built for it
}

// Images resolves image references, pulling them when needed.
type Images interface {
	Resolve(ctx context.Context, ref string, progress func(sandbox.Progress)) (Image, error)
}

// Config is how a Manager is set up.
type Config struct {
	Dir            string // where sandbox directories live
	ExecutorPath   string // host path of the static reins-executor binary
	Backends       map[string]sandbox.Backend
	DefaultBackend string
	DefaultImage   string
	Images         Images
	Defaults       sandbox.Limits // limits for fields a Spec leaves zero
	// TenantMax caps what a tenant's sandbox may ask for (zero fields:
	// the absolute ceilings alone); the admin is held only to those.
	TenantMax sandbox.Limits
	// CheckInterval is how often running sandboxes are checked for death,
	// TTL and idleness. Default 1s.
	CheckInterval time.Duration
	// StoppedRetention is how long a stopped sandbox stays listed (with
	// its reason) before it is forgotten. Default 1h.
	StoppedRetention time.Duration
	// ReadyTimeout bounds the wait for a new sandbox's executor. Default 30s.
	ReadyTimeout time.Duration
	// AnswerTimeout bounds the wait for an executor to start answering a
	// call. Default 20s.
	AnswerTimeout time.Duration
	// DiskPool is how many formatted disks of the default size to keep
	// ready, off the create path. Default 2; negative turns it off.
	DiskPool int
	// MaxSandboxes returns how many sandboxes that are not stopped a
	// tenant may have (0 or less: no limit). Nil, and the admin tenant "",
	// have no limit.
	MaxSandboxes func(ctx context.Context, tenant string) (int, error)
	// Network gives sandboxes their network boundary; nil: loopback only,
	// and rules that would let anything out are refused.
	Network Network
	// Gateway serves the model gateway's requests from sandboxes that
	// have one (gateway.SandboxFrom says which); nil: no sandbox may.
	Gateway http.Handler
	// Removed is told of each sandbox whose record is gone (rm, or a
	// stopped one forgotten), so what is kept of it elsewhere goes too.
	Removed func(id string)
	// Workspaces saves and restores sandboxes' upper layers (suspend,
	// snapshots, fork); nil: a suspend keeps the disk, and there are no
	// snapshots.
	Workspaces Workspaces
	// OnEvent, when set, is told of every lifecycle event (the run engine
	// copies its sandboxes' into runs' logs). It is called with the
	// sandbox's lock held: it must not call the manager about that
	// sandbox, and should not block.
	OnEvent func(LifecycleEvent)
	// ExpiryWarning is how long before a TTL runs out the expiring event
	// fires, for a spec that sets none. Default 1m.
	ExpiryWarning time.Duration
	// SuspendedRetention is how long a suspended sandbox is kept (from its
	// suspend, or an extend) before it is deleted with its workspace.
	// Default 7 days.
	SuspendedRetention time.Duration
	// CheckpointRetention is how long an unnamed snapshot (a run's
	// checkpoint) is kept. Default 7 days.
	CheckpointRetention time.Duration
	// Pool is the warm pool: per image, how many sandboxes wait ready
	// (pool.go; RunPool fills it). PoolWorkers is how many of them are
	// made at once: 1 (the default) or 2.
	Pool        []PoolSize
	PoolWorkers int
	Logger      *slog.Logger
}

// Manager runs sandboxes. Its methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	pool *rootfs.DiskPool
	warm *warmPool

	mu    sync.Mutex
	boxes map[string]*box
	// reserved counts sandboxes a fork has admitted but not yet made,
	// by tenant, so that the quota holds for all of them at once.
	reserved map[string]int
	users    []SnapshotUsers
	// templates resolves template:NAME images (templates.go).
	templates Templates

	events       events
	collecting   sync.Mutex // one collection of saved workspaces at a time
	snapMu       sync.Mutex // a named snapshot's check and write, as one
	lastMaintain time.Time

	// life ends the goroutines that wait on sandboxes (see watchDeath);
	// Close cancels it and waits for them.
	life    context.Context
	endLife context.CancelFunc
	waits   sync.WaitGroup
}

// box is one sandbox's in-memory state. mu serializes actions on it.
type box struct {
	// tenant and stopped mirror rec.Tenant and rec.State == stopped, for
	// lookups and quota counts that must not wait for an action's mu.
	tenant  string
	stopped atomic.Bool

	mu       sync.Mutex
	dir      string
	rec      Record
	activity time.Time // last API use, in memory only
	client   *client.Client
	// starts counts the sandbox's starts, so that a wait on an earlier
	// life does not act on a later one; watched is set while a wait
	// through the backend stands for the periodic liveness check.
	starts  int
	watched atomic.Bool
	// gateway serves the model gateway while the sandbox runs (gateway.go).
	gateway *gatewayServer
	// warned is the expiry the expiring event was sent for; retryAt when
	// an expired sandbox whose save failed is tried again.
	warned, retryAt time.Time
	// pausing is set while the sandbox's memory is being saved, for Get
	// to answer without waiting on mu (pause.go).
	pausing atomic.Pointer[pauseProgress]
}

// endpoint is where the sandbox's executor is reached: what its backend
// said, or for a record written before backends said (version 1), the
// socket in its control directory.
func (b *box) endpoint() string {
	if b.rec.Endpoint.Unix != "" {
		return b.rec.Endpoint.Unix
	}
	return filepath.Join(rootfs.Layout{Dir: b.dir}.Run(), socketName)
}

// New checks cfg and returns a Manager. Call Recover before serving.
func New(cfg Config) (*Manager, error) {
	if cfg.Dir == "" {
		return nil, errors.New("manager: no directory")
	}
	if len(cfg.Backends) == 0 {
		return nil, errors.New("manager: no backends")
	}
	if _, ok := cfg.Backends[cfg.DefaultBackend]; !ok {
		return nil, fmt.Errorf("manager: default backend %q is not configured", cfg.DefaultBackend)
	}
	if cfg.Images == nil {
		return nil, errors.New("manager: no image store")
	}
	if st, err := os.Stat(cfg.ExecutorPath); err != nil || st.IsDir() {
		return nil, fmt.Errorf("executor binary %q not found: build it with `make build` (bin/reins-executor) or pass --executor", cfg.ExecutorPath)
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = "busybox"
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = time.Second
	}
	if cfg.StoppedRetention == 0 {
		cfg.StoppedRetention = time.Hour
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AnswerTimeout == 0 {
		cfg.AnswerTimeout = 20 * time.Second
	}
	if cfg.DiskPool == 0 {
		cfg.DiskPool = 2
	}
	if cfg.ExpiryWarning == 0 {
		cfg.ExpiryWarning = time.Minute
	}
	if cfg.SuspendedRetention == 0 {
		cfg.SuspendedRetention = 7 * 24 * time.Hour
	}
	if cfg.CheckpointRetention == 0 {
		cfg.CheckpointRetention = 7 * 24 * time.Hour
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, boxes: map[string]*box{}, reserved: map[string]int{}}
	m.life, m.endLife = context.WithCancel(context.Background())
	var err error
	if m.warm, err = m.newWarmPool(cfg.Pool, cfg.PoolWorkers); err != nil {
		return nil, err
	}
	if cfg.DiskPool > 0 {
		spec, err := m.normalize(sandbox.Spec{})
		if err != nil {
			return nil, err
		}
		m.pool, err = rootfs.NewDiskPool(filepath.Join(cfg.Dir, poolDir), spec.Limits.DiskBytes, cfg.DiskPool)
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

// poolDir holds ready disks; Recover skips it (its name is not an id).
const poolDir = ".diskpool"

// DefaultLimits are used for what neither the Spec nor the Config sets.
var DefaultLimits = sandbox.Limits{CPUs: 1, MemoryBytes: 1 << 30, Pids: 4096, DiskBytes: 4 << 30}

// normalize fills a spec's defaults and checks it.
func (m *Manager) normalize(spec sandbox.Spec) (sandbox.Spec, error) {
	if spec.Image == "" {
		spec.Image = m.cfg.DefaultImage
	}
	if spec.Backend == "" {
		spec.Backend = m.cfg.DefaultBackend
	}
	if _, ok := m.cfg.Backends[spec.Backend]; !ok {
		return spec, fmt.Errorf("unknown backend %q: choose one of %s: %w", spec.Backend,
			strings.Join(slices.Sorted(maps.Keys(m.cfg.Backends)), ", "), errdefs.ErrInvalidArgument)
	}
	l, d := &spec.Limits, m.cfg.Defaults
	pick := func(v, c, def float64) float64 {
		if v != 0 {
			return v
		}
		if c != 0 {
			return c
		}
		return def
	}
	l.CPUs = pick(l.CPUs, d.CPUs, DefaultLimits.CPUs)
	l.MemoryBytes = int64(pick(float64(l.MemoryBytes), float64(d.MemoryBytes), float64(DefaultLimits.MemoryBytes)))
	l.Pids = int64(pick(float64(l.Pids), float64(d.Pids), float64(DefaultLimits.Pids)))
	l.DiskBytes = int64(pick(float64(l.DiskBytes), float64(d.DiskBytes), float64(DefaultLimits.DiskBytes)))
	switch {
	case l.CPUs < 0.01:
		return spec, fmt.Errorf("cpus %.3g is too small (minimum 0.01): %w", l.CPUs, errdefs.ErrInvalidArgument)
	case l.MemoryBytes < 16<<20:
		return spec, fmt.Errorf("memory %s is too small (minimum 16 MiB): %w", sandbox.FormatBytes(l.MemoryBytes), errdefs.ErrInvalidArgument)
	case l.Pids < 8:
		return spec, fmt.Errorf("pids %d is too small (minimum 8): %w", l.Pids, errdefs.ErrInvalidArgument)
	case l.DiskBytes < rootfs.MinDisk:
		return spec, fmt.Errorf("disk %s is too small (minimum 16 MiB): %w", sandbox.FormatBytes(l.DiskBytes), errdefs.ErrInvalidArgument)
	case spec.TTL < 0 || spec.IdleTimeout < 0 || spec.ExpiryWarning < 0:
		return spec, fmt.Errorf("ttl, idle timeout and expiry warning must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	switch spec.OnExpire {
	case "":
		spec.OnExpire = sandbox.ExpireSuspend
	case sandbox.ExpireSuspend, sandbox.ExpireDelete:
	default:
		return spec, fmt.Errorf("on-expire %q: choose suspend (the default: the workspace is kept, resume brings it back) or delete: %w",
			truncate(string(spec.OnExpire), 40), errdefs.ErrInvalidArgument)
	}
	if err := checkSizes(spec); err != nil {
		return spec, err
	}
	if err := m.checkGateway(spec); err != nil {
		return spec, err
	}
	if err := m.checkNetwork(spec.Network); err != nil {
		return spec, err
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return spec, fmt.Errorf("env %q is not KEY=VALUE: %w", truncate(kv, 80), errdefs.ErrInvalidArgument)
		}
	}
	screen, err := checkScreen(spec.Screen)
	if err != nil {
		return spec, err
	}
	spec.Screen = screen
	if spec.Workdir != "" {
		w := cleanWorkdir(spec.Workdir)
		if w == "" {
			return spec, fmt.Errorf("workdir %q must be an absolute path inside the sandbox, without .. or NUL, at most 1024 bytes: %w",
				truncate(spec.Workdir, 80), errdefs.ErrInvalidArgument)
		}
		spec.Workdir = w
	}
	return spec, nil
}

// Ceilings no sandbox passes: an ext4 file (the disk) of at most 16 TiB,
// and no more processes than the kernel's pid space.
const (
	maxDisk = 16 << 40
	maxPids = 4 << 20
)

// checkCeilings refuses limits over the absolute ceilings, or over
// TenantMax for a tenant's sandbox, before anything is made on the host.
func (m *Manager) checkCeilings(tenant string, l sandbox.Limits) error {
	c := sandbox.Limits{DiskBytes: maxDisk, Pids: maxPids}
	if tenant != "" {
		t := m.cfg.TenantMax
		c.CPUs, c.MemoryBytes = t.CPUs, t.MemoryBytes
		if t.DiskBytes > 0 && t.DiskBytes < c.DiskBytes {
			c.DiskBytes = t.DiskBytes
		}
		if t.Pids > 0 && t.Pids < c.Pids {
			c.Pids = t.Pids
		}
	}
	over := func(what, asked, most string) error {
		if tenant == "" {
			return fmt.Errorf("%s %s is more than any sandbox may have (%s): %w", what, asked, most, errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("%s %s is more than a tenant's sandbox may have (%s, set by reins serve --tenant-max-%s): %w",
			what, asked, most, what, errdefs.ErrInvalidArgument)
	}
	switch {
	case c.CPUs > 0 && l.CPUs > c.CPUs:
		return over("cpus", fmt.Sprintf("%g", l.CPUs), fmt.Sprintf("%g", c.CPUs))
	case c.MemoryBytes > 0 && l.MemoryBytes > c.MemoryBytes:
		return over("memory", sandbox.FormatBytes(l.MemoryBytes), sandbox.FormatBytes(c.MemoryBytes))
	case l.DiskBytes > c.DiskBytes:
		return over("disk", sandbox.FormatBytes(l.DiskBytes), sandbox.FormatBytes(c.DiskBytes))
	case l.Pids > c.Pids:
		return over("pids", fmt.Sprint(l.Pids), fmt.Sprint(c.Pids))
	}
	return nil
}

// Bounds on what a spec may carry: it is kept in memory and in every
// listing, and it is the user's to fill.
const (
	maxLabels     = 64
	maxLabelBytes = 1024 // a key and its value
	maxEnv        = 1024
	maxEnvBytes   = 256 << 10 // all of it
	// maxGatewayBytes bounds a gateway's model and inline script (a
	// script is at most 4 MiB, script.MaxBytes), kept in the record.
	maxGatewayBytes = 4<<20 + 1024
)

func checkSizes(spec sandbox.Spec) error {
	if len(spec.Labels) > maxLabels {
		return fmt.Errorf("%d labels: at most %d: %w", len(spec.Labels), maxLabels, errdefs.ErrInvalidArgument)
	}
	for k, v := range spec.Labels {
		if k == "" || len(k)+len(v) > maxLabelBytes {
			return fmt.Errorf("label %q: want a non-empty key, and at most %d bytes of key and value: %w", truncate(k, 80), maxLabelBytes, errdefs.ErrInvalidArgument)
		}
	}
	n := 0
	for _, kv := range spec.Env {
		n += len(kv)
	}
	if len(spec.Env) > maxEnv || n > maxEnvBytes {
		return fmt.Errorf("env of %d variables and %d bytes: at most %d and %s: %w", len(spec.Env), n, maxEnv, sandbox.FormatBytes(maxEnvBytes), errdefs.ErrInvalidArgument)
	}
	if g := spec.Gateway; g != nil && len(g.Model)+len(g.Script) > maxGatewayBytes {
		return fmt.Errorf("the gateway's model and script are %s: at most %s: %w", sandbox.FormatBytes(int64(len(g.Model)+len(g.Script))), sandbox.FormatBytes(maxGatewayBytes), errdefs.ErrInvalidArgument)
	}
	return nil
}

// cleanWorkdir returns the absolute, clean form of a working directory
// inside the sandbox, or "" when w is not one: relative, with a ".."
// element (a host-path trick even where it would be harmless), a NUL, or
// too long.
func cleanWorkdir(w string) string {
	if !strings.HasPrefix(w, "/") || len(w) > 1024 || strings.ContainsRune(w, 0) {
		return ""
	}
	for _, e := range strings.Split(w, "/") {
		if e == ".." {
			return ""
		}
	}
	return path.Clean(w)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func newID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Create makes and starts a sandbox of tenant ("" for the admin),
// reporting slow steps to progress (which may be nil). A tenant at its
// quota gets errdefs.ErrResourceExhausted and nothing is made. On failure
// nothing is left behind but a stopped record that says why.
func (m *Manager) Create(ctx context.Context, tenant string, spec sandbox.Spec, progress func(sandbox.Progress)) (sandbox.Info, error) {
	rec, _, err := m.create(ctx, tenant, spec, createOpts{progress: progress})
	return rec.Info, err
}

// createOpts are the ways a create can start from something other than an
// image alone.
type createOpts struct {
	oldID    string // a stopped sandbox whose disk to take over
	progress func(sandbox.Progress)
	// from is a saved workspace to restore over its image; origin says
	// so in the record ("fork:ID"; default from's reference).
	from   *SnapshotInfo
	origin string
	// reserved: the quota was checked and a place held (reserve).
	reserved bool
	// memory: restore the new sandbox from another's checkpoint, on a
	// copy of its disk, with its image (ForkMemory).
	memory *memorySource
}

// CreateFrom is Create for a sandbox that replaces stopped sandbox oldID:
// when oldID's disk survived, the new sandbox takes it over (restored says
// so) and sees its files.
func (m *Manager) CreateFrom(ctx context.Context, tenant string, spec sandbox.Spec, oldID string) (info sandbox.Info, restored bool, err error) {
	rec, restored, err := m.create(ctx, tenant, spec, createOpts{oldID: oldID})
	return rec.Info, restored, err
}

func (m *Manager) create(ctx context.Context, tenant string, spec sandbox.Spec, o createOpts) (Record, bool, error) {
	oldID, progress := o.oldID, o.progress
	if progress == nil {
		progress = func(sandbox.Progress) {}
	}
	warm, err := m.templateOf(tenant, &spec)
	if err != nil {
		return Record{}, false, err
	}
	spec, err = m.normalize(spec)
	if err != nil {
		return Record{}, false, err
	}
	if err := m.checkCeilings(tenant, spec.Limits); err != nil {
		return Record{}, false, err
	}
	limit, err := m.limit(ctx, tenant)
	if err != nil {
		return Record{}, false, err
	}
	// Refuse before pulling anything; admit checks again, atomically.
	if !o.reserved {
		if err := m.admit(tenant, limit, nil); err != nil {
			return Record{}, false, err
		}
	}
	if m.cfg.Network != nil {
		if err := m.cfg.Network.Check(ctx, tenant, spec.Network); err != nil {
			return Record{}, false, err
		}
	}
	if o.from == nil && !o.reserved { // a fork's are made from its source
		if rec, ok, err := m.fromPool(ctx, tenant, spec, oldID, limit); ok || err != nil {
			return rec, false, err
		}
	}
	rctx := ctx
	if tenant != "" {
		// A tenant's image comes from a public registry, anonymously:
		// the service dials no private address for it.
		rctx = image.Untrusted(ctx)
	}
	if err := m.fromTemplate(tenant, warm, &o); err != nil {
		return Record{}, false, err
	}
	if o.from == nil && o.memory == nil && strings.HasPrefix(spec.Image, SnapshotPrefix) {
		s, err := m.resolveSnapshot(tenant, strings.TrimPrefix(spec.Image, SnapshotPrefix))
		if err != nil {
			return Record{}, false, err
		}
		o.from = &s
	}
	var img Image
	if o.memory != nil {
		img = o.memory.img
	} else if o.from != nil {
		if m.cfg.Workspaces == nil {
			return Record{}, false, fmt.Errorf("this service keeps no workspaces, so it cannot make a sandbox from a snapshot: %w", errdefs.ErrUnimplemented)
		}
		img = snapshotImage(*o.from)
		if o.origin == "" {
			o.origin = snapshotRef(*o.from)
		}
	} else if img, err = m.cfg.Images.Resolve(rctx, spec.Image, progress); err != nil {
		return Record{}, false, err
	}
	screen, err := screenOf(spec, img)
	if err != nil {
		return Record{}, false, err
	}
	now := time.Now()
	b := &box{dir: filepath.Join(m.cfg.Dir, newID()), activity: now, tenant: tenant}
	b.rec = Record{
		Info: sandbox.Info{ID: filepath.Base(b.dir), Tenant: tenant, Spec: spec, State: sandbox.StateCreating,
			ImageDigest: img.Digest, CreatedAt: now, Screen: screen},
		Layers: img.Layers, ImageEnv: img.Env, ImageWorkdir: img.WorkingDir, Token: newToken(),
	}
	if o.from != nil {
		// Its workspace is the snapshot until it saves its own: the
		// fresh disk gets it at the start (localRoot).
		b.rec.Origin, b.rec.Workspace, b.rec.Base = o.origin, o.from.Digest, o.from.Digest
	}
	if o.memory != nil {
		b.rec.Origin = o.origin
	}
	if spec.Gateway != nil {
		b.rec.GatewayToken = newGatewayToken() // recorded below, before the sandbox (or anyone) sees it
	}
	if spec.TTL > 0 {
		b.rec.ExpiresAt = now.Add(spec.TTL)
	}
	if err := os.Mkdir(b.dir, 0o700); err != nil {
		return Record{}, false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := writeRecord(b.dir, &b.rec); err != nil {
		os.RemoveAll(b.dir)
		return Record{}, false, err
	}
	admit := m.admit
	if o.reserved {
		admit = m.admitReserved
	}
	if err := admit(tenant, limit, b); err != nil {
		os.RemoveAll(b.dir)
		return Record{}, false, err
	}

	log := m.log.With("sandbox", b.rec.ID, "tenant", tenant)
	restored := oldID != "" && m.takeDisk(oldID, b.dir)
	progress(sandbox.Progress{Phase: sandbox.PhaseBoot, Message: "starting " + spec.Backend + " sandbox"})
	start := m.start
	if o.memory != nil {
		start = func(ctx context.Context, b *box, _ Image) error { return m.restoreFork(ctx, b, o.memory) }
	}
	err = start(ctx, b, img)
	if err == nil && o.memory == nil { // a memory fork's start runs already
		err = m.warmLocked(ctx, b, warm) // a template's start, ready before the sandbox is handed over
	}
	if err != nil {
		log.Warn("create failed", "err", err)
		m.stopLocked(b, sandbox.ReasonError, errdefs.Public(err)) // its tenant reads it: no host path
		m.cleanup(b, true)
		return b.rec, false, fmt.Errorf("creating sandbox: %w", err)
	}
	m.emit(b, LifecycleEvent{Kind: EventCreated, Snapshot: b.rec.Workspace, Message: createdWords(b.rec)})
	log.Info("sandbox created", "image", spec.Image, "backend", spec.Backend, "restored_from", oldID, "origin", b.rec.Origin)
	return b.rec, restored, nil
}

// start boots the sandbox; b.mu is held. Its stages: the host-local root
// filesystem (skipped for a sandbox.RootMaker, which makes its own), the
// backend's start, and the executor's first answer.
func (m *Manager) start(ctx context.Context, b *box, img Image) error {
	bundle := m.bundle(b, img)
	backend := m.cfg.Backends[b.rec.Spec.Backend]
	t0 := time.Now()
	if _, remote := backend.(sandbox.RootMaker); remote {
		bundle.Image = sandbox.BundleImage{Ref: b.rec.Spec.Image, Digest: img.Digest}
		bundle.Executor = m.cfg.ExecutorPath
	} else if err := m.localRoot(ctx, b, img, &bundle); err != nil {
		return err
	}
	if err := m.attachNetwork(ctx, b, &bundle); err != nil {
		return err
	}
	t3 := time.Now()
	ep, err := backend.Start(ctx, bundle)
	if err != nil {
		return err
	}
	m.log.Debug("sandbox boot", "sandbox", b.rec.ID, "root", t3.Sub(t0), "backend_start", time.Since(t3))
	return m.connect(ctx, b, ep)
}

// bundle is what the backend gets to start b (before its root filesystem
// and network stages); b.mu is held.
func (m *Manager) bundle(b *box, img Image) sandbox.Bundle {
	spec := b.rec.Spec
	workdir := spec.Workdir
	if workdir == "" {
		workdir = cleanWorkdir(img.WorkingDir)
	}
	if workdir == "" {
		workdir = "/workspace"
	}
	// The executor makes the workdir, inside: the host never resolves a
	// path in the sandbox's root filesystem, whose symlinks the image or
	// an earlier life of the sandbox chose.
	bundle := sandbox.Bundle{
		ID:     b.rec.ID,
		Dir:    b.dir,
		Listen: RunTarget + "/" + socketName,
		Args: []string{ExecutorTarget,
			"--listen", RunTarget + "/" + socketName,
			"--root", "/",
			"--workdir", workdir, "--make-workdir",
			"--log-file", "/.reins/executor.log",
			"--staging-dir", StagingTarget,
		},
		// The gateway's variables win over the user's: a key set by hand
		// would defeat the point of the gateway.
		Env:      append(buildEnv(buildEnv(img.Env, spec.Env), gatewayEnv(b)), tokenEnv+"="+b.rec.Token),
		Cwd:      "/",
		Hostname: hostname(b.rec.ID),
		Limits:   spec.Limits,
	}
	if b.rec.GatewayToken != "" {
		// The executor owns the port before any process of the sandbox runs.
		bundle.Args = append(bundle.Args, "--gateway")
	}
	bundle.Args = append(bundle.Args, displayArgs(b.rec.Screen)...)
	return bundle
}

// connect waits for the executor of b's new (or restored) guest at ep to
// answer, and records b running; b.mu is held.
func (m *Manager) connect(ctx context.Context, b *box, ep sandbox.Endpoint) error {
	backend := m.cfg.Backends[b.rec.Spec.Backend]
	if ep.IsZero() {
		return fmt.Errorf("the %s backend gave no way to reach the sandbox's executor: %w", b.rec.Spec.Backend, errdefs.ErrInternal)
	}
	b.rec.Endpoint = ep
	t0 := time.Now()
	readyCtx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	ex, err := client.WaitReady(readyCtx, ep.Unix, b.rec.Token, m.clientOptions(b)...)
	if err != nil {
		return fmt.Errorf("the sandbox's executor did not start: %w%s", err, initLog(b.dir))
	}
	m.log.Debug("sandbox executor ready", "sandbox", b.rec.ID, "executor_ready", time.Since(t0))
	b.client = ex
	b.rec.Runtime = runtimeOf(backend)
	if err := m.setState(b, sandbox.StateRunning, "", ""); err != nil {
		return err
	}
	m.watchDeath(b)
	m.serveGateway(b)
	return nil
}

// localRoot is the host-local root filesystem stage: the sandbox's disk
// (from the pool or made now), mounted, the overlay of the image's layers
// over it, and the control directory; it fills in the bundle's Rootfs and
// Mounts. b.mu is held.
func (m *Manager) localRoot(ctx context.Context, b *box, img Image, bundle *sandbox.Bundle) error {
	l := rootfs.Layout{Dir: b.dir}
	disk := b.rec.Spec.Limits.DiskBytes
	t0 := time.Now()
	_, err := os.Stat(l.DiskImage())
	fresh := err != nil
	if fresh {
		m.pool.Take(l, disk)
	}
	if err := rootfs.CreateDisk(ctx, l, disk); err != nil {
		return err
	}
	t1 := time.Now()
	if err := rootfs.MountDisk(l); err != nil {
		return err
	}
	t2 := time.Now()
	// A fresh disk of a sandbox with a saved workspace (resumed, or made
	// from a snapshot) gets it back before the overlay sees the upper layer.
	if fresh && b.rec.Workspace != "" && m.cfg.Workspaces != nil {
		if err := m.cfg.Workspaces.Restore(ctx, b.rec.Workspace, l.Upper(), nil); err != nil {
			return fmt.Errorf("restoring the sandbox's saved workspace: %w", err)
		}
	}
	t3 := time.Now()
	if err := rootfs.MountOverlay(l, img.Layers); err != nil {
		return err
	}
	if err := rootfs.PrepareRun(l); err != nil {
		return err
	}
	m.log.Debug("sandbox root", "sandbox", b.rec.ID, "disk", t1.Sub(t0), "mount", t2.Sub(t1),
		"restore", t3.Sub(t2), "overlay", time.Since(t3))
	bundle.Rootfs = l.Rootfs()
	bundle.Mounts = []sandbox.Mount{
		{Source: m.cfg.ExecutorPath, Target: ExecutorTarget, ReadOnly: true},
		{Source: l.Run(), Target: RunTarget},
	}
	return nil
}

// clientOptions are how the manager talks to b's executor: with its
// deadline, and reading and writing single files through the host's view
// of its root filesystem (staged transfers; client.WithHostRoot).
// A sandbox.RootMaker's root is not on this host: its transfers all go
// through the executor.
func (m *Manager) clientOptions(b *box) []client.Option {
	opts := []client.Option{client.WithCallTimeout(m.cfg.AnswerTimeout)}
	if _, remote := m.cfg.Backends[b.rec.Spec.Backend].(sandbox.RootMaker); !remote {
		opts = append(opts, client.WithHostRoot(rootfs.Layout{Dir: b.dir}.Rootfs()))
	}
	return opts
}

// Backends lists the backends this manager can run, by name.
func (m *Manager) Backends() []sandbox.BackendInfo {
	var out []sandbox.BackendInfo
	for _, name := range slices.Sorted(maps.Keys(m.cfg.Backends)) {
		out = append(out, sandbox.BackendInfo{Name: name, Runtime: runtimeOf(m.cfg.Backends[name])})
	}
	return out
}

func runtimeOf(b sandbox.Backend) string {
	if v, ok := b.(sandbox.Versioner); ok {
		return v.Version()
	}
	return ""
}

// initLog returns the tail of the sandbox init's output, for error messages.
func initLog(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "init.log"))
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return "; its output was: " + strings.TrimSpace(string(data))
}

func buildEnv(image, user []string) []string {
	env := map[string]string{}
	var order []string
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = kv
	}
	add(defaultPath)
	add("HOME=/root")
	add("TMPDIR=" + DefaultTmpdir)
	for _, kv := range image {
		add(kv)
	}
	for _, kv := range user {
		add(kv)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, env[k])
	}
	return out
}

// limit is tenant's sandbox quota; 0 is none.
func (m *Manager) limit(ctx context.Context, tenant string) (int, error) {
	if tenant == "" || m.cfg.MaxSandboxes == nil {
		return 0, nil
	}
	return m.cfg.MaxSandboxes(ctx, tenant)
}

// admit refuses a new sandbox of tenant when the tenant has limit
// sandboxes that are not stopped, and otherwise registers b (if not nil),
// all under m.mu, so that concurrent creates cannot overshoot the limit.
func (m *Manager) admit(tenant string, limit int, b *box) error {
	return m.reserve(tenant, limit, 0, b)
}

// admitReserved registers b, whose place reserve held (and holds until
// its unreserve: for that while the tenant's count is the more cautious).
func (m *Manager) admitReserved(tenant string, _ int, b *box) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.boxes[b.rec.ID] = b
	return nil
}

// reserve is admit for n sandboxes more at once (a fork: all or none):
// it holds n places (unreserve gives back the ones not used) and, with b,
// registers it.
func (m *Manager) reserve(tenant string, limit, n int, b *box) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.quotaLocked(tenant, limit, n); err != nil {
		return err
	}
	m.reserved[tenant] += n
	if b != nil {
		m.boxes[b.rec.ID] = b
	}
	return nil
}

// quotaLocked refuses n sandboxes more (at least one) of tenant when
// they would pass its limit (> 0), counting those that are not stopped
// and the places reserved; m.mu is held.
func (m *Manager) quotaLocked(tenant string, limit, n int) error {
	if limit <= 0 {
		return nil
	}
	have := m.reserved[tenant]
	for _, o := range m.boxes {
		if o.tenant == tenant && !o.stopped.Load() {
			have++
		}
	}
	if have+max(n, 1) > limit {
		if n > 1 {
			return fmt.Errorf("tenant %s has %d sandboxes of its limit of %d: %d more would pass it: remove some (reins sandbox rm) or raise the quota: %w",
				tenant, have, limit, n, errdefs.ErrResourceExhausted)
		}
		return fmt.Errorf("tenant %s has %d running sandboxes, its limit: remove some (reins sandbox rm) or raise the quota: %w",
			tenant, have, errdefs.ErrResourceExhausted)
	}
	return nil
}

// unreserve gives back n places reserve held.
func (m *Manager) unreserve(tenant string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reserved[tenant] -= n
}

// lookup returns the sandbox with id if tenant may see it ("" sees every
// sandbox), or else a not-found error that names it: another tenant's
// sandbox is answered exactly as one that does not exist.
func (m *Manager) lookup(tenant, id string) (*box, error) {
	m.mu.Lock()
	b, ok := m.boxes[id]
	owner := ""
	if ok {
		owner = b.tenant // a pool sandbox's changes at its hand-out, under m.mu
	}
	m.mu.Unlock()
	if !ok || tenant != "" && owner != tenant {
		return nil, fmt.Errorf("sandbox %s not found: %w", truncate(id, 64), errdefs.ErrNotFound)
	}
	return b, nil
}

// Get returns a sandbox's record, refreshed from its backend; tenant is
// the caller's ("" for the admin).
func (m *Manager) Get(ctx context.Context, tenant, id string) (sandbox.Info, error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	if p := b.pausing.Load(); p != nil {
		return p.now(), nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.State == sandbox.StateRunning && m.refreshLocked(ctx, b, true) {
		return m.measureLocked(ctx, b), nil
	}
	return b.rec.Info, nil
}

// measureLocked returns a running sandbox's Info with the memory its
// backend measures now, keeping a new peak in its record.
func (m *Manager) measureLocked(ctx context.Context, b *box) sandbox.Info {
	ur, ok := m.cfg.Backends[b.rec.Spec.Backend].(sandbox.UsageReporter)
	if !ok {
		return b.rec.Info
	}
	u, err := ur.Usage(ctx, b.rec.ID)
	if err != nil {
		m.log.Debug("usage", "sandbox", b.rec.ID, "err", err)
		return b.rec.Info
	}
	if u.PeakMemoryBytes > b.rec.PeakMemoryBytes {
		b.rec.PeakMemoryBytes = u.PeakMemoryBytes
		if err := writeRecord(b.dir, &b.rec); err != nil {
			m.log.Warn("writing record failed", "sandbox", b.rec.ID, "err", err)
		}
	}
	info := b.rec.Info
	info.MemoryBytes = u.MemoryBytes
	return info
}

// List returns the sandboxes of tenant ("" for all) whose labels include
// every label given.
func (m *Manager) List(ctx context.Context, tenant string, labels map[string]string) []sandbox.Info {
	m.mu.Lock()
	var boxes []*box
	for _, b := range m.boxes {
		if tenant == "" || b.tenant == tenant {
			boxes = append(boxes, b)
		}
	}
	m.mu.Unlock()
	var out []sandbox.Info
	for _, b := range boxes {
		b.mu.Lock()
		r := b.rec.Info
		b.mu.Unlock()
		if r.State == sandbox.StateCreating && r.ID == "" {
			continue
		}
		match := true
		for k, v := range labels {
			if r.Spec.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b sandbox.Info) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

// Delete ends a sandbox of tenant ("" for any) and removes everything it
// had.
func (m *Manager) Delete(ctx context.Context, tenant, id string) error {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := m.removeLocked(b, sandbox.ReasonKilled, "removed by a user"); err != nil {
		return err
	}
	m.log.Info("sandbox removed", "sandbox", id)
	return nil
}

// removeLocked stops b for reason (unless it has stopped) and removes
// everything it had, its record too; b.mu is held.
func (m *Manager) removeLocked(b *box, reason sandbox.Reason, msg string) error {
	if b.rec.State != sandbox.StateStopped {
		m.stopLocked(b, reason, msg)
	}
	if err := m.cleanup(b, false); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.boxes, b.rec.ID)
	m.mu.Unlock()
	m.removed(b.rec.ID)
	if b.rec.Workspace != "" {
		m.collectSoon()
	}
	return nil
}

func (m *Manager) removed(id string) {
	if m.cfg.Removed != nil {
		m.cfg.Removed(id)
	}
}

// cleanup removes a stopped sandbox's files. With keepRecord, the record
// stays (so ls shows why it stopped) and only the disk goes.
func (m *Manager) cleanup(b *box, keepRecord bool) error {
	l := rootfs.Layout{Dir: b.dir}
	if keepRecord {
		if err := rootfs.Unmount(l); err != nil {
			return err
		}
		remove := []string{l.Disk(), l.Rootfs(), l.Run(), checkpointDir(b.dir), filepath.Join(b.dir, checkpointRecord)}
		switch b.rec.Reason {
		case sandbox.ReasonTTLExpired, sandbox.ReasonIdleTimeout, sandbox.ReasonKilled:
			remove = append(remove, l.DiskImage())
		default:
			// It died: its disk survives (until the record is
			// forgotten) so that a replacement can reuse its files.
		}
		for _, p := range remove {
			os.RemoveAll(p)
		}
		return nil
	}
	return rootfs.Remove(l)
}

// expire acts on a sandbox whose TTL or idle timeout ran out: a running
// one is suspended (Spec.OnExpire suspend, with reason as its
// SuspendedReason) or stopped for reason with its files deleted (delete);
// a suspended one past its retention is stopped and its workspace let go.
// The record stays, so a user sees why.
func (m *Manager) expire(b *box, reason sandbox.Reason, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.rec.State {
	case sandbox.StateRunning:
		if reason == sandbox.ReasonTTLExpired && (b.rec.ExpiresAt.IsZero() || time.Now().Before(b.rec.ExpiresAt)) {
			return // extended meanwhile
		}
	case sandbox.StateSuspended, sandbox.StatePaused:
		if b.rec.ExpiresAt.IsZero() || time.Now().Before(b.rec.ExpiresAt) {
			return // resumed or extended meanwhile, or just suspended
		}
		m.log.Info(string(b.rec.State)+" sandbox deleted", "sandbox", b.rec.ID, "message", msg)
		m.stopLocked(b, reason, msg)
		if err := m.cleanup(b, true); err != nil {
			m.log.Warn("cleanup failed", "sandbox", b.rec.ID, "err", err)
		}
		m.collectSoon()
		return
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), expireTimeout)
	defer cancel()
	if b.rec.Spec.OnExpire != sandbox.ExpireDelete {
		if now := time.Now(); now.Before(b.retryAt) {
			return
		}
		if _, err := m.suspendLocked(ctx, b, reason); err != nil {
			// It keeps running; try again a while later.
			b.retryAt = time.Now().Add(suspendRetry)
			m.log.Warn("suspending an expired sandbox failed", "sandbox", b.rec.ID, "err", err)
			m.emit(b, LifecycleEvent{Kind: EventExpiring, Reason: reason,
				Message: fmt.Sprintf("%s, but saving its workspace failed (%v): it keeps running, and the suspend is tried again in %s", msg, errdefs.Public(err), suspendRetry)})
		}
		return
	}
	m.log.Info("sandbox ended", "sandbox", b.rec.ID, "reason", reason, "message", msg)
	// Its peak memory, while its cgroup is still there to say it.
	mctx, mcancel := context.WithTimeout(ctx, 5*time.Second)
	m.measureLocked(mctx, b)
	mcancel()
	m.stopLocked(b, reason, msg)
	if err := m.cleanup(b, true); err != nil {
		m.log.Warn("cleanup failed", "sandbox", b.rec.ID, "err", err)
	}
}

// expireTimeout bounds an expiry's suspend (two saves of the workspace);
// suspendRetry is how long an expired sandbox whose save failed runs on
// before the next try.
const (
	expireTimeout = 10 * time.Minute
	suspendRetry  = time.Minute
)

func stoppedWhy(r Record) string {
	if r.State != sandbox.StateStopped {
		return ""
	}
	s := " (" + string(r.Reason)
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s + ")"
}

// takeDisk moves the surviving disk of stopped sandbox oldID into dir.
func (m *Manager) takeDisk(oldID, dir string) bool {
	old, err := m.lookup("", oldID)
	if err != nil {
		return false
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	if old.rec.State != sandbox.StateStopped {
		return false
	}
	l := rootfs.Layout{Dir: old.dir}
	if rootfs.Unmount(l) != nil {
		return false
	}
	return os.Rename(l.DiskImage(), rootfs.Layout{Dir: dir}.DiskImage()) == nil
}
