// Package image turns image references into directories ready to be stacked
// as the read-only lower layers of a sandbox's overlayfs root.
//
// A Store is a content-addressed cache in one directory:
//
//	DIR/layers/sha256/<diffid>/       an unpacked layer (an overlayfs lowerdir)
//	DIR/layers/sha256/<diffid>.json   its size
//	DIR/images/sha256/<digest>.json   an image: config and layer list
//	DIR/refs/<sha256 of ref>.json     a reference and the image it names
//	DIR/tmp/                          work in progress (same filesystem, so
//	                                  finished work is renamed into place)
//
// Layers are named by the digest of their uncompressed tar (the OCI diff ID),
// so images that share a layer share its directory. A layer directory appears
// only by an atomic rename of a fully unpacked and verified temporary
// directory: whoever sees it sees all of it. Within a process, one Resolve
// unpacks a layer while the others wait; across processes the first rename
// wins and the loser discards its copy.
//
// Whiteouts are stored in overlayfs form (a 0:0 character device for
// ".wh.NAME", the xattr trusted.overlay.opaque=y for ".wh..wh..opq"), so the
// directories can be given to overlayfs as they are: lowerdir lists them
// highest first, that is Image.Layers reversed. (A store run by a user
// other than root writes user.overlay.opaque, for overlayfs's userxattr
// mode, and skips ownership and device nodes.) Entries that would land
// outside the layer's directory, by "..", an absolute name or a symlink,
// fail the layer.
//
// References:
//
//	busybox, busybox:latest    built from DefaultBusybox(), the static busybox
//	                           `make deps` builds (Debian's, with wget -T)
//	debian, debian:bookworm    built once with debootstrap --variant=minbase,
//	                           with python3, pip, node, npm, git, curl, ssh added
//	agents, agents:latest      debian plus Claude Code and Codex, their native
//	                           binaries from the npm registry (agents.go)
//	desktop, desktop:latest    debian plus Xvfb, a window manager, xterm,
//	                           Chromium and fonts, with a display (desktop.go)
//	oci:PATH[:TAG|@DIGEST]     an OCI image layout directory
//	docker-archive:PATH        a `docker save` tarball
//	anything else              a registry reference, e.g. python:3.12-slim
//
// A registry reference resolved once is served from the store afterwards,
// with no network (Remove it to pull again); local layouts and archives are
// re-read each time, which is cheap, and only their new layers are unpacked.
//
// An image whose config names no working directory gets DefaultWorkingDir,
// /workspace, and one whose environment has no PATH gets DefaultPath. The
// built-in images have a /workspace directory; for others the backend
// creates it.
//
// Registries are spoken to over HTTPS, except loopback ones (localhost,
// 127.0.0.0/8, ::1) and those named with WithInsecureRegistries, which may
// use plain HTTP. Credentials come from the docker config file.
package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/reinsdev/reins/errdefs"
)

const (
	// DefaultWorkingDir is the working directory of images whose config sets
	// none: the sandbox's workspace. Backends create it if it is missing.
	DefaultWorkingDir = "/workspace"
	// DefaultPath is added to the environment of images that set no PATH.
	DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Image is an image ready to mount.
type Image struct {
	Ref string // the reference, canonicalized (e.g. index.docker.io/library/python:3.12-slim)
	// Digest is the manifest digest (of the platform's manifest, for a
	// multi-platform image). A docker-archive has no manifest: there it is
	// the config digest, Docker's image ID.
	Digest string
	// Layers are the absolute directories of the unpacked layers, lowest
	// first. overlayfs wants them the other way round in lowerdir.
	Layers []string
	Config Config
	Size   int64 // bytes of the uncompressed layers
	// Cached is true when the store had the image: Resolve pulled,
	// unpacked and built nothing (a tenant's registry image still has
	// its manifest fetched).
	Cached bool
}

// Config is the part of an image's config a sandbox uses.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// Labels are the image's config labels (sandbox.DisplayLabel gives
	// it a display).
	Labels map[string]string `json:"labels,omitempty"`
}

// Phases reported in Progress.
const (
	PhasePull   = "pull"   // downloading (and unpacking as it arrives) a registry layer
	PhaseUnpack = "unpack" // unpacking a layer from a local layout or archive
	PhaseBuild  = "build"  // building a built-in image
)

// Progress reports how a Resolve is getting on. Done and Total count bytes
// in PhasePull and PhaseUnpack (of one layer, compressed bytes for pulls;
// of a package a build downloads) and steps in PhaseBuild; Total is 0 when
// unknown. Message carries a line of a build's output.
type Progress struct {
	Phase   string
	Layer   string // the layer's digest, when the report is about one layer
	Done    int64
	Total   int64
	Message string
}

// ImageSummary is one entry of List.
type ImageSummary struct {
	Ref    string
	Digest string
	Size   int64
	Layers int
}

// Store is a cache of unpacked images in one directory. It is safe for
// concurrent use. Several processes may resolve images in one directory at
// once, but Prune must run only while no other process is resolving.
type Store struct {
	dir  string
	opts options
	log  *slog.Logger

	refLocks   keyedMutex
	layerLocks keyedMutex
	pins       pinSet

	transport *httpGuard
	tenantTr  http.RoundTripper // pulls for tenants (untrusted.go)
}

type options struct {
	busybox      string
	debootstrap  string
	debianMirror string
	aptSources   string
	insecure     []string
	keychain     authn.Keychain
	platform     v1.Platform
	logger       *slog.Logger
	jobs         int
	retry        *remote.Backoff // tests shorten the registry client's retries
	buildCache   string
	npmRegistry  string
	// agentPackages replaces agentPackages (tests build from their own
	// registry).
	agentPackages []npmPackage
}

// Option configures a Store.
type Option func(*options)

// WithBusybox sets the static busybox binary the busybox image is built
// from (default DefaultBusybox()).
func WithBusybox(path string) Option { return func(o *options) { o.busybox = path } }

// WithDebootstrap sets the debootstrap program (default: debootstrap on PATH).
func WithDebootstrap(path string) Option { return func(o *options) { o.debootstrap = path } }

// WithDebianMirror sets the Debian mirror the debian image is built from
// (default: the first bookworm source in /etc/apt/sources.list{,.d}, else
// http://deb.debian.org/debian).
func WithDebianMirror(url string) Option { return func(o *options) { o.debianMirror = url } }

// WithInsecureRegistries lets the named registries (host or host:port) be
// reached over plain HTTP. Loopback registries (localhost, 127.0.0.0/8,
// ::1) always may; every other registry must speak HTTPS.
func WithInsecureRegistries(hosts ...string) Option {
	return func(o *options) { o.insecure = append(o.insecure, hosts...) }
}

// WithKeychain sets where registry credentials come from (default
// authn.DefaultKeychain: the docker config file).
func WithKeychain(k authn.Keychain) Option { return func(o *options) { o.keychain = k } }

// WithPlatform sets the platform picked from multi-platform images
// (default linux and the architecture this program was built for).
func WithPlatform(p v1.Platform) Option { return func(o *options) { o.platform = p } }

// WithBuildCache keeps the root filesystems the store builds with
// debootstrap (the debian image) in dir, one directory per recipe, and
// starts from them instead of building again: a store in a new data dir
// (a test's, a second service's) then copies a finished root in seconds
// rather than running debootstrap for minutes. dir is the operator's
// (serve's default is /var/cache/reins/builds); "" keeps nothing. The
// agents image's npm tarballs are kept there too, in dir/npm, by name and
// version.
func WithBuildCache(dir string) Option { return func(o *options) { o.buildCache = dir } }

// WithNPMRegistry sets the npm registry the agents image's packages are
// downloaded from (default: what `npm config get registry` says, else
// DefaultNPMRegistry). Whatever it serves must match the sha512 reins pins.
func WithNPMRegistry(url string) Option { return func(o *options) { o.npmRegistry = url } }

// DefaultBuildCache is where reins serve keeps built root filesystems.
const DefaultBuildCache = "/var/cache/reins/builds"

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// NewStore opens the store in dir, creating it if needed.
func NewStore(dir string, opts ...Option) (*Store, error) {
	o := options{
		busybox:    DefaultBusybox(),
		aptSources: "/etc/apt",
		keychain:   authn.DefaultKeychain,
		platform:   v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		jobs:       3,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if dir == "" {
		return nil, fmt.Errorf("image store: no directory given: %w", errdefs.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", dir, err)
	}
	s := &Store{dir: abs, opts: o, log: o.logger}
	s.transport = s.newTransport()
	s.tenantTr = s.untrustedTransport()
	// Private, every directory of it: layers hold what images hold
	// (set-user-ID programs, secrets), and nothing outside reins needs to
	// reach them (overlayfs reads lower layers with the mounter's
	// credentials). A store an older version made 0711 is tightened.
	for _, d := range []string{
		abs,
		filepath.Join(abs, "layers"),
		filepath.Join(abs, "layers", "sha256"),
		filepath.Join(abs, "images"),
		filepath.Join(abs, "images", "sha256"),
		filepath.Join(abs, "refs"),
		filepath.Join(abs, "tmp"),
	} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image store %s: %w", abs, err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("image store %s: %w", abs, err)
		}
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Resolve returns the image ref names, ready to mount, pulling, unpacking or
// building it first if the store does not have it. progress, if not nil,
// is called with reports as the work goes on, never concurrently; it must
// be quick.
func (s *Store) Resolve(ctx context.Context, ref string, progress func(Progress)) (*Image, error) {
	r, err := s.parseRef(ref)
	if err != nil {
		return nil, err
	}
	unlock, err := s.refLocks.lock(ctx, r.key)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, canceled(err))
	}
	defer unlock()
	report := serialize(progress)
	switch r.kind {
	case refBusybox:
		return s.resolveBusybox(ctx, r, report)
	case refDebian:
		return s.resolveDebian(ctx, r, report)
	case refAgents:
		return s.resolveAgents(ctx, r, report)
	case refDesktop:
		return s.resolveDesktop(ctx, r, report)
	case refOCI:
		return s.resolveOCI(ctx, r, report)
	case refDockerArchive:
		return s.resolveDockerArchive(ctx, r, report)
	default:
		return s.resolveRemote(ctx, r, report)
	}
}

// serialize makes a progress callback that is safe to call from several
// goroutines and never nil.
func serialize(f func(Progress)) func(Progress) {
	if f == nil {
		return func(Progress) {}
	}
	var mu sync.Mutex
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		f(p)
	}
}

// List returns the images in the store, by reference.
func (s *Store) List(ctx context.Context) ([]ImageSummary, error) {
	refs, err := s.readRefs()
	if err != nil {
		return nil, err
	}
	var out []ImageSummary
	for _, rr := range refs {
		if err := ctx.Err(); err != nil {
			return nil, canceled(err)
		}
		ir, err := s.readImage(rr.Digest)
		if err != nil {
			continue // removed under us, or half-written by a crash
		}
		out = append(out, ImageSummary{Ref: rr.Ref, Digest: rr.Digest, Size: ir.Size, Layers: len(ir.Layers)})
	}
	slices.SortFunc(out, func(a, b ImageSummary) int { return strings.Compare(a.Ref, b.Ref) })
	return out, nil
}

// Remove forgets ref. Its layers stay until Prune finds no image using them.
func (s *Store) Remove(ctx context.Context, ref string) error {
	r, err := s.parseRef(ref)
	if err != nil {
		return err
	}
	unlock, err := s.refLocks.lock(ctx, r.key)
	if err != nil {
		return fmt.Errorf("image %q: %w", ref, canceled(err))
	}
	defer unlock()
	rr, err := s.readRef(r.key)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image %q is not in the store: %w", ref, errdefs.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if err := os.Remove(s.refPath(r.key)); err != nil {
		return fmt.Errorf("image %q: %w", ref, err)
	}
	// Drop the image record too unless another reference names it, so that
	// a digest reference is pulled again rather than served from the store.
	refs, err := s.readRefs()
	if err != nil {
		return err
	}
	for _, other := range refs {
		if other.Digest == rr.Digest {
			return nil
		}
	}
	s.pins.ifUnpinned(imagePin(rr.Digest), func() {
		err = os.Remove(s.imagePath(rr.Digest))
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image %q: %w", ref, err)
	}
	return nil
}

// canceled adds errdefs.ErrCanceled or errdefs.ErrTimeout to a context's
// error, keeping the context error too.
func canceled(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w (%w)", errdefs.ErrTimeout, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%w (%w)", errdefs.ErrCanceled, err)
	}
	return err
}

// kindError is an error whose text is already complete, of a kind, with
// the cause kept for errors.As.
type kindError struct {
	msg   string
	kind  error
	cause error
}

func (e *kindError) Error() string   { return e.msg }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.cause} }

func imagePin(digest string) string { return "image:" + digest }

// imageConfig converts an OCI config into a Config, filling the defaults.
func imageConfig(c v1.Config) Config {
	cfg := Config{
		Env:        slices.Clone(c.Env),
		WorkingDir: c.WorkingDir,
		User:       c.User,
		Entrypoint: slices.Clone(c.Entrypoint),
		Cmd:        slices.Clone(c.Cmd),
		Labels:     maps.Clone(c.Labels),
	}
	if cfg.WorkingDir == "" {
		cfg.WorkingDir = DefaultWorkingDir
	}
	if !slices.ContainsFunc(cfg.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		cfg.Env = append([]string{DefaultPath}, cfg.Env...)
	}
	return cfg
}
