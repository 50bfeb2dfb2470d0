package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
)

// The agents image is the debian image with a second layer holding the
// agent programs people most often run inside a sandbox, taken from the
// npm registry as the native binaries their npm packages ship (neither
// needs node): Claude Code's platform package and Codex's. The versions
// and the tarballs' sha512 are pinned here; a new version is a change to
// these constants, which also rebuilds the image (docs/images.md).
const (
	ClaudeCodeVersion = "2.1.332"
	CodexVersion      = "0.171.0"
)

// npmPackage is one npm tarball the agents image is made from.
type npmPackage struct {
	Name    string // e.g. "@anthropic-ai/claude-code-linux-x64"
	Version string
	// Integrity is the tarball's sha512 in npm's form ("sha512-BASE64"),
	// pinned: the registry's dist.integrity must say the same.
	Integrity string
	// Sub is the directory of the package (below its top directory,
	// npm's "package/") that goes to Dir in the image.
	Sub string
	Dir string // e.g. "opt/claude-code"
	// Links are symbolic links made in the image, by path, to a file in
	// Dir: "usr/local/bin/claude" -> "claude".
	Links map[string]string
}

// agentPackages are the agents image's packages, for x86-64 Linux.
var agentPackages = []npmPackage{
	{
		Name: "@anthropic-ai/claude-code-linux-x64", Version: ClaudeCodeVersion,
		Integrity: "sha512-f4JWhzwYutJIHScC7/dYOPX6s28tt7ZADhsOi8zwOHq5fFPEuUeChh2NMfinSg0GrUckYxaeebC4h0DqiKzLcw==",
		Dir:       "opt/claude-code",
		Links:     map[string]string{"usr/local/bin/claude": "claude"},
	},
	{
		// @openai/codex's optional dependency @openai/codex-linux-x64 is
		// an alias of this version of @openai/codex.
		Name: "@openai/codex", Version: CodexVersion + "-linux-x64",
		Integrity: "sha512-l66NZkQgdk2C3pbcfULDz42yEUB581MVA6I+Y43Wp4OIqEy73HCdmZ0GTjeAHY2ycuH4N00d9VsLrwT1jxshTw==",
		Sub:       "vendor/x86_64-unknown-linux-musl",
		Dir:       "opt/codex",
		Links:     map[string]string{"usr/local/bin/codex": "bin/codex"},
	},
}

// agentsEnv is added to the image's environment: the programs' pinned
// versions are the image's, so Claude Code does not update itself.
var agentsEnv = []string{"DISABLE_AUTOUPDATER=1"}

// DefaultNPMRegistry is the registry the agents image's packages come
// from when neither WithNPMRegistry nor npm's own configuration names one.
const DefaultNPMRegistry = "https://registry.npmjs.org/"

// Caps on what the registry sends: a package document, a tarball, and
// what a tarball may unpack to.
const (
	maxNPMDocument = 1 << 20
	maxNPMTarball  = 1 << 30
	maxNPMUnpacked = 4 << 30
	maxNPMEntries  = 100_000
)

// agentsSource names the recipe: the debian image's and every package
// pinned, so that a new version builds the image again.
func agentsSource(pkgs []npmPackage) string {
	var b strings.Builder
	b.WriteString(debianImageSource + "; npm")
	for _, p := range pkgs {
		fmt.Fprintf(&b, " %s@%s=%s:%s->%s", p.Name, p.Version, p.Integrity, p.Sub, p.Dir)
	}
	return b.String()
}

func (s *Store) resolveAgents(ctx context.Context, r *parsedRef, report func(Progress)) (*Image, error) {
	pkgs := agentPackages
	if len(s.opts.agentPackages) > 0 {
		pkgs = s.opts.agentPackages
	}
	source := agentsSource(pkgs)
	if img, ok := s.cached(r.key, source); ok {
		return img, nil
	}
	if arch := s.opts.platform.Architecture; arch != "amd64" {
		return nil, &kindError{
			msg:  fmt.Sprintf("image %q: it is built for x86-64 (amd64) only, not %s", r.orig, arch),
			kind: errdefs.ErrFailedPrecondition,
		}
	}
	// The base: the debian image, built or copied from the build cache
	// if this store lacks it, its layer pinned while ours is made.
	unlock, err := s.refLocks.lock(ctx, debianKey)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, canceled(err))
	}
	debian, err := s.parseRef(debianKey)
	if err == nil {
		_, err = s.resolveDebian(ctx, debian, report)
	}
	var base *imageRecord
	if err == nil {
		base, err = s.recordOf(debianKey)
	}
	unlock()
	if err != nil {
		return nil, err
	}
	defer s.pins.pin(base.Layers...)()

	// The registry is asked for only when a tarball is not in the cache.
	registry := sync.OnceValues(func() (string, error) { return s.npmRegistry(ctx) })
	cfg := v1.Config{Env: append([]string{DefaultPath}, agentsEnv...), Cmd: []string{"bash"}, WorkingDir: DefaultWorkingDir}
	return s.buildOn(ctx, r, source, base, cfg, report, func(ctx context.Context, root string) error {
		for _, p := range pkgs {
			if err := s.installNPM(ctx, registry, p, root, report); err != nil {
				return err
			}
		}
		return nil
	})
}

// installNPM puts p's package directory at p.Dir in root, from the build
// cache's unpacked copy or else from its tarball (keeping an unpacked
// copy), and makes p.Links, each to an executable file of the package.
func (s *Store) installNPM(ctx context.Context, registry func() (string, error), p npmPackage, root string, report func(Progress)) error {
	what := p.Name + "@" + p.Version
	dst := filepath.Join(root, p.Dir)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	cached := s.npmUnpacked(p)
	if fi, err := os.Lstat(cached); err == nil && fi.IsDir() {
		report(Progress{Phase: PhaseBuild, Message: fmt.Sprintf("copying %s, unpacked earlier, from the build cache", what)})
		if err := copyTree(ctx, cached, dst); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	} else {
		tgz, done, err := s.npmTarball(ctx, registry, p, report)
		if err != nil {
			return err
		}
		staging, err := s.tempDir("npm")
		if err == nil {
			err = unpackNPM(ctx, p, tgz, staging, dst, report)
			removeTemp(staging)
		}
		done()
		if err != nil {
			return err
		}
		s.keepUnpacked(ctx, dst, cached)
	}
	for link, target := range p.Links {
		if err := checkExecutable(root, path.Join(p.Dir, target)); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		lp := filepath.Join(root, link)
		if err := os.MkdirAll(filepath.Dir(lp), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/"+path.Join(p.Dir, target), lp); err != nil {
			return err
		}
	}
	report(Progress{Phase: PhaseBuild, Message: fmt.Sprintf("installed %s in /%s", what, p.Dir)})
	return nil
}

// npmUnpacked is where the build cache keeps p's package unpacked, named
// by name, version and a digest of what it was made from.
func (s *Store) npmUnpacked(p npmPackage) string {
	if s.opts.buildCache == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(p.Integrity + "\x00" + p.Sub))
	return strings.TrimSuffix(s.npmFile(p), ".tgz") + "-" + hex.EncodeToString(sum[:4])
}

// keepUnpacked copies an unpacked package to the build cache (through a
// temporary directory renamed into place); a cache it cannot write costs
// only the next build's unpacking.
func (s *Store) keepUnpacked(ctx context.Context, src, dst string) {
	if dst == "" {
		return
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), ".tmp-")
	if err != nil {
		s.log.Warn("build cache", "err", err)
		return
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(ctx, src, tmp); err != nil {
		s.log.Warn("build cache", "err", err)
		return
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return
	}
	if err := os.Rename(tmp, dst); err != nil && !os.IsExist(err) {
		s.log.Warn("build cache", "err", err)
	}
}

// recordOf returns the record of the image the store files under key.
func (s *Store) recordOf(key string) (*imageRecord, error) {
	rr, err := s.readRef(key)
	if err != nil {
		return nil, fmt.Errorf("image %q: its record: %w", key, err)
	}
	return s.readImage(rr.Digest)
}

// npmRegistry returns the registry's URL, ending in "/": WithNPMRegistry's,
// else what `npm config get registry` says when npm is installed, else
// DefaultNPMRegistry.
func (s *Store) npmRegistry(ctx context.Context) (string, error) {
	reg := s.opts.npmRegistry
	if reg == "" {
		reg = DefaultNPMRegistry
		if npm, err := exec.LookPath("npm"); err == nil {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			out, err := exec.CommandContext(ctx, npm, "config", "get", "registry").Output()
			cancel()
			if line := strings.TrimSpace(string(out)); err == nil && strings.HasPrefix(line, "http") {
				reg = line
			}
		}
	}
	u, err := url.Parse(reg)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("the npm registry %q is not an http(s) URL: %w", reg, errdefs.ErrInvalidArgument)
	}
	return strings.TrimSuffix(reg, "/") + "/", nil
}

// npmFile is where the build cache keeps p's tarball: by name and version.
func (s *Store) npmFile(p npmPackage) string {
	name := strings.ReplaceAll(strings.TrimPrefix(p.Name, "@"), "/", "+")
	return filepath.Join(s.opts.buildCache, "npm", name+"@"+p.Version+".tgz")
}

// npmTarball returns a file holding p's tarball, its integrity checked:
// the build cache's copy, or one downloaded from the registry (and kept in
// the build cache, when there is one). done removes a file that is not the
// cache's.
func (s *Store) npmTarball(ctx context.Context, registryOf func() (string, error), p npmPackage, report func(Progress)) (file string, done func(), err error) {
	want, err := parseIntegrity(p.Integrity)
	if err != nil {
		return "", nil, err
	}
	if s.opts.buildCache != "" {
		cached := s.npmFile(p)
		if f, err := os.Open(cached); err == nil {
			got, err := sha512Of(ctx, f)
			f.Close()
			if err == nil && bytes.Equal(got, want) {
				report(Progress{Phase: PhaseBuild, Message: fmt.Sprintf("%s@%s from the build cache", p.Name, p.Version)})
				return cached, func() {}, nil
			}
			if err := ctx.Err(); err != nil {
				return "", nil, canceled(err)
			}
			s.log.Warn("build cache: a tarball does not match its integrity; downloading it again", "file", cached)
			os.Remove(cached)
		}
	}
	registry, err := registryOf()
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(s.dir, "tmp")
	if s.opts.buildCache != "" {
		dir = filepath.Join(s.opts.buildCache, "npm")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", nil, fmt.Errorf("the build cache: %w", err)
		}
	}
	tmp, err := os.CreateTemp(dir, fmt.Sprintf("%d-npm-*.tgz", os.Getpid()))
	if err != nil {
		return "", nil, err
	}
	remove := func() { os.Remove(tmp.Name()) }
	err = s.downloadNPM(ctx, registry, p, want, tmp, report)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		remove()
		return "", nil, err
	}
	if s.opts.buildCache == "" {
		return tmp.Name(), remove, nil
	}
	if err := os.Rename(tmp.Name(), s.npmFile(p)); err != nil {
		remove()
		return "", nil, fmt.Errorf("the build cache: %w", err)
	}
	return s.npmFile(p), func() {}, nil
}

// npmVersion is the part of a registry's version document we read.
type npmVersion struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Dist    struct {
		Integrity string `json:"integrity"`
		Tarball   string `json:"tarball"`
	} `json:"dist"`
}

// downloadNPM writes p's tarball from the registry to w, failing unless
// its sha512 is want.
func (s *Store) downloadNPM(ctx context.Context, registry string, p npmPackage, want []byte, w io.Writer, report func(Progress)) error {
	what := p.Name + "@" + p.Version
	client := &http.Client{Transport: s.transport, Timeout: 30 * time.Minute}
	fail := func(format string, args ...any) error {
		return &kindError{
			msg:  fmt.Sprintf("%s from the npm registry %s: ", what, registry) + fmt.Sprintf(format, args...),
			kind: errdefs.ErrUnavailable,
		}
	}
	get := func(u string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fail("%v", err)
		}
		req.Header.Set("Accept", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, canceled(ctx.Err())
			}
			return nil, fail("%v: check the network, or name another registry (npm config set registry URL)", err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fail("GET %s answered %s", u, resp.Status)
		}
		return resp, nil
	}
	// The version's document: scoped names have their "/" escaped.
	resp, err := get(registry + strings.Replace(p.Name, "/", "%2f", 1) + "/" + url.PathEscape(p.Version))
	if err != nil {
		return err
	}
	doc, err := io.ReadAll(io.LimitReader(resp.Body, maxNPMDocument+1))
	resp.Body.Close()
	if err != nil {
		return fail("reading its document: %v", err)
	}
	if len(doc) > maxNPMDocument {
		return fail("its document is over %d bytes", maxNPMDocument)
	}
	var v npmVersion
	if err := json.Unmarshal(doc, &v); err != nil {
		return fail("its document is not JSON: %v", err)
	}
	if v.Name != p.Name || v.Version != p.Version {
		return fail("the registry answered with %q version %q", v.Name, v.Version)
	}
	if v.Dist.Integrity != p.Integrity {
		return fail("the registry says its integrity is %q, not %q as reins pins it: the registry serves another tarball under this version", v.Dist.Integrity, p.Integrity)
	}
	tu, err := url.Parse(v.Dist.Tarball)
	if err != nil || (tu.Scheme != "https" && tu.Scheme != "http") {
		return fail("its tarball's address %q is not an http(s) URL", v.Dist.Tarball)
	}
	if resp, err = get(v.Dist.Tarball); err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.ContentLength > maxNPMTarball {
		return fail("its tarball is %d bytes, over %d", resp.ContentLength, maxNPMTarball)
	}
	h := sha512.New()
	body := &progressReader{
		ctx: ctx, r: io.LimitReader(resp.Body, maxNPMTarball+1), report: report,
		p: Progress{Phase: PhasePull, Message: "downloading " + what, Total: max(resp.ContentLength, 0)},
	}
	n, err := io.Copy(io.MultiWriter(w, h), body)
	if err != nil {
		if ctx.Err() != nil {
			return canceled(ctx.Err())
		}
		return fail("downloading its tarball: %v", err)
	}
	if n > maxNPMTarball {
		return fail("its tarball is over %d bytes", maxNPMTarball)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		return &kindError{
			msg: fmt.Sprintf("%s from the npm registry %s: the tarball's sha512 is %s, not the pinned %s: refused (nothing was kept)",
				what, registry, base64.StdEncoding.EncodeToString(got), p.Integrity),
			kind: errdefs.ErrUnavailable,
		}
	}
	return nil
}

// parseIntegrity decodes "sha512-BASE64".
func parseIntegrity(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, "sha512-")
	sum, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(sum) != sha512.Size {
		return nil, fmt.Errorf("integrity %q is not a sha512: %w", s, errdefs.ErrInvalidArgument)
	}
	return sum, nil
}

func sha512Of(ctx context.Context, r io.Reader) ([]byte, error) {
	h := sha512.New()
	if _, err := io.Copy(h, &progressReader{ctx: ctx, r: r, report: func(Progress) {}}); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// unpackNPM unpacks the npm tarball tgz, an archive from a registry we
// do not trust, through the hardened extractor into staging, a new empty
// directory, then moves the package's Sub to dst.
func unpackNPM(ctx context.Context, p npmPackage, tgz, staging, dst string, report func(Progress)) error {
	what := p.Name + "@" + p.Version
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	zr, err := gzip.NewReader(&progressReader{
		ctx: ctx, r: f, report: report,
		p: Progress{Phase: PhaseUnpack, Message: "unpacking " + what, Total: fi.Size()},
	})
	if err != nil {
		return fmt.Errorf("%s: its tarball is not gzip: %w", what, err)
	}
	opts := archive.Options{MaxBytes: maxNPMUnpacked, MaxEntries: maxNPMEntries}
	if _, _, err := opts.Extract(zr, staging); err != nil {
		if ctx.Err() != nil {
			return canceled(ctx.Err())
		}
		return fmt.Errorf("%s: its tarball was refused: %w", what, err)
	}
	// npm takes the first component of every entry as the package's
	// directory; we want exactly one, a directory.
	ents, err := os.ReadDir(staging)
	if err != nil {
		return err
	}
	if len(ents) != 1 {
		return fmt.Errorf("%s: its tarball has %d top-level entries, want one directory", what, len(ents))
	}
	// Every component from the top to Sub must be a directory the
	// extractor made, not a symbolic link (one to "/" would move the
	// host's files into the image).
	rel := path.Join(ents[0].Name(), p.Sub)
	if err := realDirs(staging, rel); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := os.Rename(filepath.Join(staging, rel), dst); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return os.Chmod(dst, 0o755)
}

// realDirs fails unless every component of rel below base is a directory
// (no symbolic link), seen without following any.
func realDirs(base, rel string) error {
	p := base
	for c := range strings.SplitSeq(rel, "/") {
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("its tarball has no %s", rel)
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("its tarball's %s is a symbolic link, not a directory", strings.TrimPrefix(p, base+"/"))
		}
		if !fi.IsDir() {
			return fmt.Errorf("its tarball's %s is not a directory", rel)
		}
	}
	return nil
}

// checkExecutable fails unless rel, below root, is an executable regular
// file reached through directories only.
func checkExecutable(root, rel string) error {
	if err := realDirs(root, path.Dir(rel)); err != nil {
		return err
	}
	fi, err := os.Lstat(filepath.Join(root, rel))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("/%s is not an executable file in its package", rel)
	}
	return nil
}
