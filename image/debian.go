package image

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/reinsdev/reins/errdefs"
)

const (
	debianSuite         = "bookworm"
	defaultDebianMirror = "http://deb.debian.org/debian"
	// debianPackages are added to debootstrap's minbase: what coding
	// agents reach for first (python3 with its standard library) and what
	// they need on a network: TLS roots, curl, git, pip and venv, node,
	// ssh and DNS lookups (docs/decisions/0025-debian-network-tools.md).
	debianPackages = "python3,python3-pip,python3-venv,ca-certificates,curl,git,openssh-client,bind9-host,nodejs"
	// debianAptPackages are installed after debootstrap with apt-get in
	// the new root: debootstrap's own resolver leaves npm's node-*
	// dependencies unconfigurable.
	debianAptPackages = "npm"
	// debianSource names the recipe, so a store built by an older one
	// (minbase alone) builds the image again.
	debianSource = "debootstrap --variant=minbase --include=" + debianPackages + " " + debianSuite + "; apt-get install " + debianAptPackages
	// debianImageSource names the image's recipe: the build cache keeps
	// debootstrap's root (debianSource), the account is added to a copy.
	debianImageSource = debianSource + userRecipe
)

func (s *Store) resolveDebian(ctx context.Context, r *parsedRef, report func(Progress)) (*Image, error) {
	if img, ok := s.cached(r.key, debianImageSource); ok {
		return img, nil
	}
	fail := func(kind error, format string, args ...any) error {
		return &kindError{msg: fmt.Sprintf("image %q: ", r.orig) + fmt.Sprintf(format, args...), kind: kind}
	}
	if os.Geteuid() != 0 {
		return nil, fail(errdefs.ErrFailedPrecondition, "building it with debootstrap needs root")
	}
	cfg := v1.Config{Env: []string{DefaultPath}, Cmd: []string{"bash"}, WorkingDir: DefaultWorkingDir}
	if s.inBuildCache(debianSource) {
		return s.build(ctx, r, debianImageSource, cfg, report, func(ctx context.Context, root string) error {
			if err := s.fromBuildCache(ctx, debianSource, root, report); err != nil {
				return err
			}
			return addUser(root, "/bin/bash")
		})
	}
	prog, err := exec.LookPath(cmp.Or(s.opts.debootstrap, "debootstrap"))
	if err != nil {
		return nil, fail(errdefs.ErrFailedPrecondition, "debootstrap is not installed (%v): install the Debian package debootstrap", err)
	}
	mirror, err := s.debianMirror(ctx, r)
	if err != nil {
		return nil, err
	}
	report(Progress{Phase: PhaseBuild, Message: fmt.Sprintf("%s from %s (a minute or more)", debianSource, mirror)})
	return s.build(ctx, r, debianImageSource, cfg, report, func(ctx context.Context, root string) error {
		if err := debootstrap(ctx, prog, mirror, root, report); err != nil {
			return err
		}
		if err := aptInstall(ctx, root, report, strings.Fields(debianAptPackages)...); err != nil {
			return err
		}
		if err := tidyDebian(root); err != nil {
			return err
		}
		s.toBuildCache(ctx, debianSource, root)
		return addUser(root, "/bin/bash")
	})
}

// debianMirror returns the Debian mirror builds install from (the
// store's, else the host's apt source for the suite), failing unless it
// serves the suite.
func (s *Store) debianMirror(ctx context.Context, r *parsedRef) (string, error) {
	mirror := s.opts.debianMirror
	if mirror == "" {
		mirror = aptMirror(s.opts.aptSources, debianSuite)
	}
	if err := checkMirror(ctx, mirror); err != nil {
		return "", &kindError{
			msg:   fmt.Sprintf("image %q: the Debian mirror %s is unavailable (%v): check the network or pass another mirror", r.orig, mirror, err),
			kind:  errdefs.ErrUnavailable,
			cause: err,
		}
	}
	return mirror, nil
}

// buildCacheDir is where the build cache keeps the root of recipe.
func (s *Store) buildCacheDir(recipe string) string {
	sum := sha256.Sum256([]byte(recipe))
	return filepath.Join(s.opts.buildCache, hex.EncodeToString(sum[:8]))
}

// inBuildCache reports whether the build cache has a root built by recipe.
func (s *Store) inBuildCache(recipe string) bool {
	if s.opts.buildCache == "" {
		return false
	}
	fi, err := os.Lstat(filepath.Join(s.buildCacheDir(recipe), "root"))
	return err == nil && fi.IsDir()
}

// fromBuildCache copies the root built earlier by recipe into root.
func (s *Store) fromBuildCache(ctx context.Context, recipe, root string, report func(Progress)) error {
	dir := s.buildCacheDir(recipe)
	// Progress reaches tenants: it names no path of the host.
	report(Progress{Phase: PhaseBuild, Message: "copying the root built earlier from the build cache"})
	return copyTree(ctx, filepath.Join(dir, "root"), root)
}

// copyTree copies what the directory src holds into dst, which exists,
// keeping modes, owners, links and times (cp -a).
func copyTree(ctx context.Context, src, dst string) error {
	if out, err := exec.CommandContext(ctx, "cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return canceled(ctx.Err())
		}
		return fmt.Errorf("copying the cached build %s: %v: %s", src, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// toBuildCache keeps a copy of a finished root for later stores; a cache
// it cannot write costs only the next build's time.
func (s *Store) toBuildCache(ctx context.Context, recipe, root string) {
	if s.opts.buildCache == "" {
		return
	}
	dir := s.buildCacheDir(recipe)
	if err := os.MkdirAll(s.opts.buildCache, 0o700); err != nil {
		s.log.Warn("build cache", "err", err)
		return
	}
	tmp, err := os.MkdirTemp(s.opts.buildCache, ".tmp-")
	if err != nil {
		s.log.Warn("build cache", "err", err)
		return
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.CommandContext(ctx, "cp", "-a", root, filepath.Join(tmp, "root")).CombinedOutput(); err != nil {
		s.log.Warn("build cache: copying the root", "err", err, "output", strings.TrimSpace(string(out)))
		return
	}
	os.WriteFile(filepath.Join(tmp, "recipe"), []byte(recipe+"\n"), 0o600)
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		s.log.Warn("build cache", "err", err)
	}
}

// aptMirror returns the first apt source that serves suite, or the
// default mirror.
func aptMirror(aptDir, suite string) string {
	var files []string
	files = append(files, filepath.Join(aptDir, "sources.list"))
	for _, pat := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", pat))
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var m string
		if strings.HasSuffix(f, ".sources") {
			m = deb822Mirror(string(b), suite)
		} else {
			m = oneLineMirror(string(b), suite)
		}
		if m != "" {
			return strings.TrimSuffix(m, "/")
		}
	}
	return defaultDebianMirror
}

// oneLineMirror reads "deb [opts] URI SUITE COMPONENTS..." lines.
func oneLineMirror(text, suite string) string {
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) >= 2 && f[1] == suite {
			return f[0]
		}
	}
	return ""
}

// deb822Mirror reads stanzas of "Types:", "URIs:" and "Suites:" fields.
func deb822Mirror(text, suite string) string {
	for stanza := range strings.SplitSeq(text, "\n\n") {
		fields := map[string][]string{}
		for line := range strings.Lines(stanza) {
			k, v, ok := strings.Cut(line, ":")
			if !ok || strings.HasPrefix(line, "#") || strings.HasPrefix(line, " ") {
				continue
			}
			fields[strings.ToLower(strings.TrimSpace(k))] = strings.Fields(v)
		}
		if !slices.Contains(fields["types"], "deb") || !slices.Contains(fields["suites"], suite) || len(fields["uris"]) == 0 {
			continue
		}
		return fields["uris"][0]
	}
	return ""
}

// checkMirror fetches the suite's Release file.
func checkMirror(ctx context.Context, mirror string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, mirror+"/dists/"+debianSuite+"/Release", nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", req.URL, resp.Status)
	}
	return nil
}

// debootstrap runs debootstrap into root, forwarding its output as
// progress. Done counts packages retrieved, validated, extracted, unpacked
// and configured; Total is known once the downloads are over.
func debootstrap(ctx context.Context, prog, mirror, root string, report func(Progress)) error {
	cmd := exec.CommandContext(ctx, prog, "--variant=minbase", "--include="+debianPackages, debianSuite, root, mirror)
	var packages, done, total int64
	err := runBuildStep(ctx, cmd, func(line string) {
		step, ok := debootstrapStep(line)
		if ok {
			done++
			if step == "Retrieving" {
				packages++
			}
			if step == "Extracting" && total == 0 {
				total = 5 * packages
			}
		}
		p := Progress{Phase: PhaseBuild, Message: line, Done: done, Total: total}
		if total > 0 && p.Done >= total {
			p.Done = total - 1
		}
		report(p)
	})
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("debootstrap %w", err)
	}
	if err != nil {
		return err
	}
	report(Progress{Phase: PhaseBuild, Message: "debootstrap finished", Done: total, Total: total})
	return nil
}

// aptInstall installs packages into the Debian tree at root with its own
// apt-get, from the mirror debootstrap wrote into its sources.list, with
// /proc mounted for the packages' scripts; lists and downloads are
// dropped afterwards by tidyDebian.
func aptInstall(ctx context.Context, root string, report func(Progress), packages ...string) error {
	proc := filepath.Join(root, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("mounting /proc in the new root: %w", err)
	}
	defer syscall.Unmount(proc, syscall.MNT_DETACH)
	var steps aptSteps
	forward := func(line string) { report(steps.progress(line)) }
	for _, args := range [][]string{
		{"apt-get", "-q", "update"},
		append([]string{"apt-get", "-q", "-y", "--no-install-recommends", "install"}, packages...),
	} {
		cmd := exec.CommandContext(ctx, "chroot", append([]string{root}, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8"}
		if err := runBuildStep(ctx, cmd, forward); err != nil {
			if ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("%s %w", strings.Join(args[:2], " "), err)
		}
	}
	report(Progress{Phase: PhaseBuild, Message: "apt-get install finished", Done: steps.total, Total: steps.total})
	return nil
}

// aptSteps counts apt-get install's steps: each package is fetched
// ("Get:"), unpacked and set up, three steps, and their number is known
// from the line "N upgraded, M newly installed, ...".
type aptSteps struct{ done, total int64 }

func (a *aptSteps) progress(line string) Progress {
	f := strings.Fields(line)
	switch {
	case len(f) >= 4 && f[1] == "upgraded," && f[3] == "newly":
		var up, n int64
		if _, err := fmt.Sscan(f[0]+" "+f[2], &up, &n); err == nil {
			a.total = 3 * (up + n)
		}
	case len(f) >= 2 && (strings.HasPrefix(f[0], "Get:") || f[0] == "Unpacking" || f[0] == "Setting" && f[1] == "up"):
		a.done = min(a.done+1, max(a.total-1, 0))
	}
	return Progress{Phase: PhaseBuild, Message: line, Done: a.done, Total: a.total}
}

// runBuildStep runs cmd in its own process group (cancelled with SIGTERM
// to the group, which lets debootstrap unmount what it mounted), handing
// each line of its output to line. Its error ends "failed (...); its last
// lines: ...".
func runBuildStep(ctx context.Context, cmd *exec.Cmd, line func(string)) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return fmt.Errorf("failed to start: %w", err)
	}
	var tail []string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if tail = append(tail, sc.Text()); len(tail) > 20 {
			tail = tail[1:]
		}
		line(sc.Text())
	}
	io.Copy(io.Discard, pr)
	pr.Close()
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return canceled(ctx.Err())
		}
		return fmt.Errorf("failed (%v); its last lines:\n%s", err, strings.Join(tail, "\n"))
	}
	return nil
}

// debootstrapStep recognizes "I: Retrieving NAME VERSION" and the like.
func debootstrapStep(line string) (string, bool) {
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "I:" {
		return "", false
	}
	switch f[1] {
	case "Retrieving", "Validating":
		return f[1], len(f) >= 4 // a package has a name and a version
	case "Extracting", "Unpacking", "Configuring":
		return f[1], true
	}
	return "", false
}

// tidyDebian drops what debootstrap leaves that an image should not carry:
// downloaded packages, package lists and the host's DNS and name. It
// leaves /etc/resolv.conf an empty regular file, for the service to mount
// its own over, and /etc/hosts naming loopback (HostsFile).
func tidyDebian(root string) error {
	for _, pat := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*"} {
		m, _ := filepath.Glob(filepath.Join(root, pat))
		for _, f := range m {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, text := range map[string][]byte{"etc/resolv.conf": nil, "etc/hostname": nil, "etc/hosts": HostsFile("")} {
		// Removed first: debootstrap may leave a symlink (the host's
		// resolv.conf can be one), which WriteFile would follow.
		p := filepath.Join(root, name)
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.WriteFile(p, text, 0o644); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(root, "workspace"), 0o755)
}
