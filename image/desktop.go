package image

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// The desktop image is the debian image with an X desktop a computer-use
// agent drives: Xvfb, matchbox-window-manager, xterm, Chromium and fonts,
// plus the X tools that baselines, benchmarks and people reach for (xwd,
// xdotool, xdpyinfo, netpbm's xwdtopnm and pnmtopng). It is one layer: the
// debian image's root (from the build cache, or the debian image's layer)
// with Debian's packages installed by apt-get --no-install-recommends from
// the same mirror, docs, manuals and translations dropped, and the result
// kept in the build cache under its recipe (desktopSource).
//
// The display is X display :0 (DesktopDisplay), socket /tmp/.X11-unix/X0:
// the image sets DISPLAY=:0 and labels itself sandbox.DisplayLabel =
// sandbox.DefaultScreen, which is how the manager knows it has a display.
// The image starts no X server: the executor starts Xvfb on :0 at the
// sandbox's screen size on the first computer call, with the window
// manager. matchbox-window-manager shows every top-level window full
// screen at 0,0 with no decorations, so what an agent clicks is where a
// test expects it (docs/decisions/0040-desktop-window-manager.md).
//
// /usr/local/bin/browser (desktop_browser.sh) starts Chromium with the
// flags a sandbox needs (docs/images.md).

// DesktopDisplay is the X display of a desktop sandbox.
const DesktopDisplay = ":0"

// desktopPackages are installed on top of the debian image.
var desktopPackages = []string{
	"xvfb", "matchbox-window-manager", "xterm", "chromium",
	"x11-apps", "x11-utils", "xdotool", "netpbm",
	// DejaVu for the terminal, Liberation for the metrics of the fonts
	// web pages ask for (Arial, Times, Courier), Noto for most scripts,
	// WenQuanYi Micro Hei for Chinese, Japanese and Korean (5 MB, where
	// Noto's CJK fonts are 90 MB; Droid Sans Fallback's registered font
	// lacks Hangul).
	"fonts-dejavu-core", "fonts-liberation2", "fonts-noto-core", "fonts-wqy-microhei",
}

// desktopBrowser is /usr/local/bin/browser.
//
//go:embed desktop_browser.sh
var desktopBrowser []byte

// desktopPolicy is Chromium's managed policy in the image
// (/etc/chromium/policies/managed/reins.json): no sign-in, sync, safe
// browsing, search suggestions, prediction, network time, updates or
// translation. With the wrapper's flags it keeps Chromium from calling
// Google's hosts on its own: without them, a fresh browser made about 25
// refused connections in its first minute, noise in the egress log and
// in a run's output; with them, 4 to 6 at the first start in a sandbox
// (sign-in and push messaging) and none after (measured by hand in a
// desktop sandbox).
//
//go:embed desktop_chromium_policy.json
var desktopPolicy []byte

// desktopEnv is added to the image's environment.
var desktopEnv = []string{"DISPLAY=" + DesktopDisplay}

// desktopSource names the recipe: the debian image's, every package, the
// tidying and the browser script, so a change to any builds it again.
func desktopSource() string {
	sum := sha256.Sum256(append(append([]byte(nil), desktopBrowser...), desktopPolicy...))
	return debianSource + "; apt-get install --no-install-recommends " + strings.Join(desktopPackages, " ") +
		"; tidy " + strings.Join(desktopDropped, " ") + "; browser " + hex.EncodeToString(sum[:8])
}

// desktopDropped are the directories whose contents the build removes:
// documentation (but each package's copyright file), manuals and message
// translations (sandboxes run in C.UTF-8). Chromium's own locales, in
// /usr/lib/chromium, stay.
var desktopDropped = []string{"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale"}

func (s *Store) resolveDesktop(ctx context.Context, r *parsedRef, report func(Progress)) (*Image, error) {
	// The build cache keeps the root under desktopSource; the image's
	// recipe adds the account, to the copy.
	source := desktopSource()
	imageSource := source + userRecipe
	if img, ok := s.cached(r.key, imageSource); ok {
		return img, nil
	}
	if os.Geteuid() != 0 {
		return nil, &kindError{msg: fmt.Sprintf("image %q: building it needs root (apt-get in a chroot)", r.orig), kind: errdefs.ErrFailedPrecondition}
	}
	cfg := v1.Config{
		Env:        append([]string{DefaultPath}, desktopEnv...),
		Cmd:        []string{"bash"},
		WorkingDir: DefaultWorkingDir,
		Labels:     map[string]string{sandbox.DisplayLabel: sandbox.DefaultScreen},
	}
	if s.inBuildCache(source) {
		return s.build(ctx, r, imageSource, cfg, report, func(ctx context.Context, root string) error {
			if err := s.fromBuildCache(ctx, source, root, report); err != nil {
				return err
			}
			return addUser(root, "/bin/bash")
		})
	}
	mirror, err := s.debianMirror(ctx, r)
	if err != nil {
		return nil, err
	}
	base, release, err := s.debianRoot(ctx, report)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	defer release()
	report(Progress{Phase: PhaseBuild, Message: fmt.Sprintf("installing %d packages from %s on the debian image (a minute or more)", len(desktopPackages), mirror)})
	return s.build(ctx, r, imageSource, cfg, report, func(ctx context.Context, root string) error {
		if err := base(ctx, root); err != nil {
			return err
		}
		if err := aptSetup(root, mirror); err != nil {
			return err
		}
		if err := aptInstall(ctx, root, report, desktopPackages...); err != nil {
			return err
		}
		if err := tidyDesktop(root); err != nil {
			return err
		}
		s.toBuildCache(ctx, source, root)
		return addUser(root, "/bin/bash")
	})
}

// debianRoot returns a function that copies the debian image's root into
// a directory: from the build cache if it has one, else from the debian
// image's layer (built first if the store lacks it, and pinned until
// release is called).
func (s *Store) debianRoot(ctx context.Context, report func(Progress)) (copyTo func(ctx context.Context, root string) error, release func(), err error) {
	if s.inBuildCache(debianSource) {
		return func(ctx context.Context, root string) error {
			return s.fromBuildCache(ctx, debianSource, root, report)
		}, func() {}, nil
	}
	unlock, err := s.refLocks.lock(ctx, debianKey)
	if err != nil {
		return nil, nil, canceled(err)
	}
	defer unlock()
	debian, err := s.parseRef(debianKey)
	if err != nil {
		return nil, nil, err
	}
	img, err := s.resolveDebian(ctx, debian, report)
	if err != nil {
		return nil, nil, err
	}
	rec, err := s.recordOf(debianKey)
	if err != nil {
		return nil, nil, err
	}
	if len(img.Layers) != 1 {
		return nil, nil, fmt.Errorf("the debian image has %d layers, want one", len(img.Layers))
	}
	release = s.pins.pin(rec.Layers...)
	return func(ctx context.Context, root string) error {
		report(Progress{Phase: PhaseBuild, Message: "copying the debian image's root"})
		return copyTree(ctx, img.Layers[0], root)
	}, release, nil
}

// aptSetup readies a tidied Debian root for apt-get: the host's DNS
// configuration and hosts file (tidyDebian takes them out again) and
// mirror as its only source.
func aptSetup(root, mirror string) error {
	for _, name := range []string{"etc/resolv.conf", "etc/hosts"} {
		text, err := os.ReadFile(filepath.Join("/", name))
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := replaceFile(filepath.Join(root, name), text); err != nil {
			return err
		}
	}
	return replaceFile(filepath.Join(root, "etc/apt/sources.list"), []byte("deb "+mirror+" "+debianSuite+" main\n"))
}

// replaceFile writes a new regular file at p, removing what was there
// first (never following a symbolic link left in the root).
func replaceFile(p string, text []byte) error {
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(p, text, 0o644)
}

// tidyDesktop drops what the image need not carry (desktopDropped, apt's
// caches), puts the browser script in place and tidies the rest as the
// debian image is tidied.
func tidyDesktop(root string) error {
	for _, dir := range desktopDropped {
		if err := dropBelow(filepath.Join(root, dir)); err != nil {
			return err
		}
	}
	m, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/*.bin"))
	for _, f := range m {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	bin := filepath.Join(root, "usr/local/bin/browser")
	if err := replaceFile(bin, desktopBrowser); err != nil {
		return err
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		return err
	}
	policy := filepath.Join(root, "etc/chromium/policies/managed")
	if err := os.MkdirAll(policy, 0o755); err != nil {
		return err
	}
	if err := replaceFile(filepath.Join(policy, "reins.json"), desktopPolicy); err != nil {
		return err
	}
	return tidyDebian(root)
}

// dropBelow removes everything below dir except files named copyright
// (each package's licence, which Debian asks to keep) and the directories
// leading to them.
func dropBelow(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		switch {
		case p == dir:
		case d.IsDir():
			dirs = append(dirs, p)
		case d.Name() != "copyright":
			return os.Remove(p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Deepest first; one still holding a copyright file stays.
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i])
	}
	return nil
}
