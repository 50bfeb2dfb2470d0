package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sync/errgroup"

	"github.com/reinsdev/reins/errdefs"
)

type refKind int

const (
	refRegistry refKind = iota
	refBusybox
	refDebian
	refAgents
	refDesktop
	refOCI
	refDockerArchive
)

// parsedRef is a reference and the key the store files it under.
type parsedRef struct {
	orig string
	kind refKind
	key  string
	path string         // oci:, docker-archive:
	sel  string         // oci: the ":tag" or "@digest" selecting an image
	name name.Reference // registry references
}

const (
	busyboxKey = "busybox:latest"
	debianKey  = "debian:bookworm"
	agentsKey  = "agents:latest"
	desktopKey = "desktop:latest"
)

// hostPathKinds are the reference prefixes whose rest is a path on the
// service's host.
var hostPathKinds = []string{"oci:", "docker-archive:"}

// NamesHostPath reports whether ref names a path on the service's host
// (oci:PATH, docker-archive:PATH): the operator's to name, never a
// tenant's. It reads nothing. Case and spaces do not hide one.
func NamesHostPath(ref string) bool {
	ref = strings.ToLower(strings.TrimSpace(ref))
	for _, k := range hostPathKinds {
		if strings.HasPrefix(ref, k) {
			return true
		}
	}
	return false
}

func (s *Store) parseRef(ref string) (*parsedRef, error) {
	r := &parsedRef{orig: ref}
	switch {
	case ref == "":
		return nil, fmt.Errorf("empty image reference: %w", errdefs.ErrInvalidArgument)
	case ref == "busybox" || ref == busyboxKey:
		r.kind, r.key = refBusybox, busyboxKey
	case ref == "debian" || ref == debianKey:
		r.kind, r.key = refDebian, debianKey
	case ref == "agents" || ref == agentsKey:
		r.kind, r.key = refAgents, agentsKey
	case ref == "desktop" || ref == desktopKey:
		r.kind, r.key = refDesktop, desktopKey
	case strings.HasPrefix(ref, "oci:"):
		r.kind = refOCI
		p, sel := splitLayoutRef(strings.TrimPrefix(ref, "oci:"))
		abs, err := filepath.Abs(p)
		if err != nil || p == "" {
			return nil, fmt.Errorf("image %q: bad layout path: %w", ref, errdefs.ErrInvalidArgument)
		}
		r.path, r.sel, r.key = abs, sel, "oci:"+abs+sel
	case strings.HasPrefix(ref, "docker-archive:"):
		r.kind = refDockerArchive
		p := strings.TrimPrefix(ref, "docker-archive:")
		abs, err := filepath.Abs(p)
		if err != nil || p == "" {
			return nil, fmt.Errorf("image %q: bad archive path: %w", ref, errdefs.ErrInvalidArgument)
		}
		r.path, r.key = abs, "docker-archive:"+abs
	default:
		n, err := name.ParseReference(ref)
		if err != nil {
			return nil, fmt.Errorf("image %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
		}
		if s.insecure(n.Context().RegistryStr()) {
			if n, err = name.ParseReference(ref, name.Insecure); err != nil {
				return nil, fmt.Errorf("image %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
			}
		}
		r.kind, r.name, r.key = refRegistry, n, n.Name()
	}
	return r, nil
}

// splitLayoutRef splits "PATH", "PATH:TAG" and "PATH@DIGEST". A PATH that
// exists as it is wins over a split.
func splitLayoutRef(s string) (path, sel string) {
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	if i := strings.LastIndex(s, "@"); i > 0 {
		return s[:i], s[i:]
	}
	if i := strings.LastIndex(s, ":"); i > 0 && !strings.Contains(s[i:], "/") {
		return s[:i], s[i:]
	}
	return s, ""
}

// pending is an image whose layers are to be made present.
type pending struct {
	digest string
	config v1.Config
	layers []layerSource
}

// install unpacks what p lacks and records it under key.
func (s *Store) install(ctx context.Context, key, source string, p *pending, report func(Progress)) (*Image, error) {
	pins := []string{imagePin(p.digest)}
	for _, l := range p.layers {
		pins = append(pins, l.diffID)
	}
	defer s.pins.pin(pins...)()

	dirs := make([]string, len(p.layers))
	sizes := make([]int64, len(p.layers))
	cached := true
	for _, l := range p.layers {
		if dir, err := s.layerDir(l.diffID); err != nil || !isDir(dir) {
			cached = false
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.jobs)
	for i, l := range p.layers {
		g.Go(func() error {
			var err error
			dirs[i], sizes[i], err = s.ensureLayer(gctx, l, report)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	ir := &imageRecord{Digest: p.digest, Config: imageConfig(p.config)}
	for i, l := range p.layers {
		ir.Layers = append(ir.Layers, l.diffID)
		ir.Size += sizes[i]
	}
	if err := s.record(key, source, ir); err != nil {
		return nil, err
	}
	return &Image{Ref: key, Digest: p.digest, Layers: dirs, Config: ir.Config, Size: ir.Size, Cached: cached}, nil
}

// pendingImage lists img's layers to be read compressed (as stored).
func pendingImage(img v1.Image, phase string) (*pending, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	p := &pending{digest: digest.String(), config: cf.Config}
	for _, l := range layers {
		diffID, err := l.DiffID()
		if err != nil {
			return nil, err
		}
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		size, err := l.Size()
		if err != nil {
			return nil, err
		}
		p.layers = append(p.layers, layerSource{
			diffID: diffID.String(), digest: d.String(), size: size, phase: phase, open: l.Compressed,
		})
	}
	return p, nil
}

func (s *Store) resolveRemote(ctx context.Context, r *parsedRef, report func(Progress)) (*Image, error) {
	// A tenant's image is fetched (its manifest; layers come from the
	// cache by content) anonymously each time: one the operator pulled
	// with credentials of its own is not the tenant's to use.
	trusted := !isUntrusted(ctx)
	if img, ok := s.cached(r.key, ""); ok && trusted {
		return img, nil
	}
	// A digest names the same content wherever it was pulled from.
	if d, ok := r.name.(name.Digest); ok && trusted {
		if ir, err := s.readImage(d.DigestStr()); err == nil {
			if img, ok := s.imageFromRecord(r.key, ir); ok {
				if err := s.record(r.key, "", ir); err != nil {
					return nil, err
				}
				img.Cached = true
				return img, nil
			}
		}
	}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(s.opts.keychain),
		remote.WithTransport(s.transport),
		remote.WithPlatform(s.opts.platform),
	}
	if isUntrusted(ctx) {
		// A tenant's pull: public registries only, and none of the
		// operator's credentials.
		opts[1] = remote.WithAuth(authn.Anonymous)
		opts[2] = remote.WithTransport(s.tenantTr)
	}
	if s.opts.retry != nil {
		opts = append(opts, remote.WithRetryBackoff(*s.opts.retry))
	}
	img, err := s.remoteImage(r, opts)
	if err != nil {
		return nil, s.registryError(ctx, r, err)
	}
	p, err := pendingImage(img, PhasePull)
	if err != nil {
		return nil, s.registryError(ctx, r, err)
	}
	out, err := s.install(ctx, r.key, "", p, report)
	var se *sourceError
	switch {
	case err == nil:
	case errors.As(err, &se) && errdefs.Kind(err) == nil:
		err = s.registryError(ctx, r, err)
	default:
		err = fmt.Errorf("image %q: %w", r.orig, err)
	}
	return out, err
}

// remoteImage fetches the manifest of r, picking our platform from an index.
func (s *Store) remoteImage(r *parsedRef, opts []remote.Option) (v1.Image, error) {
	desc, err := remote.Get(r.name, opts...)
	if err != nil {
		return nil, err
	}
	if !desc.MediaType.IsIndex() {
		return desc.Image()
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, err
	}
	child, err := s.pickPlatform(r, idx)
	if err != nil {
		return nil, err
	}
	return idx.Image(child)
}

// pickPlatform returns the manifest in idx for the store's platform.
func (s *Store) pickPlatform(r *parsedRef, idx v1.ImageIndex) (v1.Hash, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	want := s.opts.platform
	var have []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			continue
		}
		if m.Platform.Satisfies(want) {
			return m.Digest, nil
		}
		have = append(have, m.Platform.String())
	}
	return v1.Hash{}, &kindError{
		msg: fmt.Sprintf("image %q has no %s variant (it has: %s)",
			r.orig, want.String(), strings.Join(have, ", ")),
		kind: errdefs.ErrNotFound,
	}
}

// registryError says what went wrong talking to r's registry, with a kind.
func (s *Store) registryError(ctx context.Context, r *parsedRef, err error) error {
	host := r.name.Context().RegistryStr()
	var ke *kindError
	var te *transport.Error
	var ue *url.Error
	switch {
	case errors.As(err, &ke):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("image %q: %w", r.orig, canceled(ctx.Err()))
	case errors.As(err, &te):
		return &kindError{
			msg:   fmt.Sprintf("image %q: registry %s answered: %s", r.orig, host, answer(te)),
			kind:  registryKind(te),
			cause: err,
		}
	case errors.As(err, &ue):
		return &kindError{
			msg:   fmt.Sprintf("image %q: registry %s is unreachable: %v", r.orig, host, err),
			kind:  errdefs.ErrUnavailable,
			cause: err,
		}
	case errors.As(err, new(*sourceError)), errors.As(err, new(*net.OpError)),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return &kindError{
			msg:   fmt.Sprintf("image %q: reading from registry %s failed: %v", r.orig, host, err),
			kind:  errdefs.ErrUnavailable,
			cause: err,
		}
	}
	return &kindError{
		msg:   fmt.Sprintf("image %q from registry %s: %v", r.orig, host, err),
		kind:  errdefs.ErrInternal,
		cause: err,
	}
}

// answer renders a registry's error response: its codes and messages.
func answer(te *transport.Error) string {
	var parts []string
	for _, d := range te.Errors {
		if d.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", d.Code, d.Message))
		} else {
			parts = append(parts, string(d.Code))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("HTTP %d %s", te.StatusCode, http.StatusText(te.StatusCode))
	}
	return strings.Join(parts, "; ")
}

func registryKind(te *transport.Error) error {
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
			return errdefs.ErrNotFound
		case transport.UnauthorizedErrorCode:
			return errdefs.ErrUnauthenticated
		case transport.DeniedErrorCode:
			return errdefs.ErrPermissionDenied
		case transport.TooManyRequestsErrorCode:
			return errdefs.ErrResourceExhausted
		}
	}
	switch {
	case te.StatusCode == http.StatusNotFound:
		return errdefs.ErrNotFound
	case te.StatusCode == http.StatusUnauthorized:
		return errdefs.ErrUnauthenticated
	case te.StatusCode == http.StatusForbidden:
		return errdefs.ErrPermissionDenied
	case te.StatusCode == http.StatusTooManyRequests:
		return errdefs.ErrResourceExhausted
	case te.StatusCode >= 500:
		return errdefs.ErrUnavailable
	}
	return errdefs.ErrInternal
}

// insecure reports whether a registry may be spoken to over plain HTTP.
func (s *Store) insecure(hostport string) bool {
	if slices.Contains(s.opts.insecure, hostport) {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if slices.Contains(s.opts.insecure, host) || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// httpGuard refuses plain HTTP to registries that are not insecure. The
// registry client itself falls back to HTTP for private addresses too,
// which would let anyone on the path serve us an image.
type httpGuard struct {
	base    http.RoundTripper
	allowed func(host string) bool
}

func (g *httpGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !g.allowed(req.URL.Host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("plain HTTP to %s refused: only loopback registries and those named by WithInsecureRegistries may use it", req.URL.Host)
	}
	return g.base.RoundTrip(req)
}

func (s *Store) newTransport() *httpGuard {
	base := remote.DefaultTransport.(*http.Transport).Clone()
	return &httpGuard{base: base, allowed: s.insecure}
}

// CloseIdleConnections closes the store's idle registry connections.
func (s *Store) CloseIdleConnections() {
	s.transport.base.(*http.Transport).CloseIdleConnections()
}

// isDir reports whether p is a directory (a present layer).
func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
