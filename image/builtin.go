package image

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Built-in images are built into a directory under DIR/tmp, which is then
// named by the digest of a canonical tar of it (entries in lexical order,
// times zeroed) and renamed into DIR/layers like any unpacked layer. Their
// image digest is that of an OCI manifest listing the layer uncompressed.

// BusyboxVersion names the busybox build scripts/build-busybox.sh makes
// (Debian's version and our recipe's), which a test checks.
const BusyboxVersion = "1.35.0-4+deb12u1-reins1"

// BusyboxCacheDir is where `make deps` builds busybox, one directory per
// BusyboxVersion.
const BusyboxCacheDir = "/var/cache/reins/busybox"

// DefaultBusybox is the static busybox the busybox image is built from:
// $REINS_BUSYBOX if set, else the build in BusyboxCacheDir. Debian's own
// busybox-static is not used: its wget segfaults on -T
// (docs/decisions/0024-busybox-wget.md).
func DefaultBusybox() string {
	if p := os.Getenv("REINS_BUSYBOX"); p != "" {
		return p
	}
	return filepath.Join(BusyboxCacheDir, BusyboxVersion, "busybox")
}

// busyboxFix says how to get the busybox the image needs.
const busyboxFix = "run `make deps` as root, which builds it (scripts/build-busybox.sh), or set REINS_BUSYBOX to a static busybox"

func (s *Store) resolveBusybox(ctx context.Context, r *parsedRef, report func(Progress)) (*Image, error) {
	bb := s.opts.busybox
	fi, err := os.Stat(bb)
	if err != nil {
		return nil, &kindError{
			msg:   fmt.Sprintf("image %q: %s is missing: %s", r.orig, bb, busyboxFix),
			kind:  errdefs.ErrFailedPrecondition,
			cause: err,
		}
	}
	// Rebuilt when the host's busybox changes.
	source := fmt.Sprintf("%s size=%d mtime=%d", bb, fi.Size(), fi.ModTime().UnixNano()) + userRecipe
	if img, ok := s.cached(r.key, source); ok {
		return img, nil
	}
	if err := checkStatic(bb); err != nil {
		return nil, &kindError{
			msg:   fmt.Sprintf("image %q: %s: %v: %s", r.orig, bb, err, busyboxFix),
			kind:  errdefs.ErrFailedPrecondition,
			cause: err,
		}
	}
	applets, err := busyboxApplets(ctx, bb)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	cfg := v1.Config{Env: []string{DefaultPath}, Cmd: []string{"sh"}, WorkingDir: DefaultWorkingDir}
	report(Progress{Phase: PhaseBuild, Message: "building busybox from the host's busybox"}) // no host path: progress reaches tenants
	return s.build(ctx, r, source, cfg, report, func(ctx context.Context, root string) error {
		if err := fillBusybox(root, bb, applets); err != nil {
			return err
		}
		return addUser(root, "/bin/sh")
	})
}

// checkStatic fails unless path is a statically linked ELF executable.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("is dynamically linked")
		}
	}
	return nil
}

// busyboxApplets returns where busybox's applets go (e.g. "usr/bin/awk").
func busyboxApplets(ctx context.Context, bb string) ([]string, error) {
	out, err := exec.CommandContext(ctx, bb, "--list-full").Output()
	prefix := ""
	if err != nil || len(out) == 0 {
		if out, err = exec.CommandContext(ctx, bb, "--list").Output(); err != nil {
			return nil, fmt.Errorf("listing busybox applets: %w", err)
		}
		prefix = "bin/"
	}
	var applets []string
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		p := path.Clean(prefix + line)
		if p == "bin/busybox" || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			continue
		}
		applets = append(applets, p)
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("busybox %s lists no applets", bb)
	}
	return applets, nil
}

const (
	busyboxPasswd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	busyboxGroup  = "root:x:0:\nnobody:x:65534:\n"
)

func fillBusybox(root, bb string, applets []string) error {
	for _, d := range []struct {
		name string
		perm os.FileMode
	}{
		{"bin", 0o755}, {"sbin", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
		{"etc", 0o755}, {"dev", 0o755}, {"proc", 0o755}, {"sys", 0o755},
		{"home", 0o755}, {"var", 0o755}, {"root", 0o700}, {"workspace", 0o755},
		{"tmp", 0o777 | os.ModeSticky}, {"var/tmp", 0o777 | os.ModeSticky},
	} {
		p := filepath.Join(root, d.name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, d.perm); err != nil {
			return err
		}
	}
	if err := copyFile(bb, filepath.Join(root, "bin/busybox"), 0o755); err != nil {
		return err
	}
	for _, a := range applets {
		p := filepath.Join(root, a)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/bin/busybox", p); err != nil && !os.IsExist(err) {
			return err
		}
	}
	for name, text := range map[string]string{
		"etc/passwd": busyboxPasswd, "etc/group": busyboxGroup,
		"etc/hosts": string(HostsFile("")), "etc/nsswitch.conf": nsswitch,
		// The service bind-mounts its own over it; an empty regular file
		// gives the mount a target and tells resolvers nothing meanwhile.
		"etc/resolv.conf": "",
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func notHostChar(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.')
}

// nsswitch makes glibc (static busybox's wget, debian's programs) read
// /etc/hosts before asking DNS.
const nsswitch = "passwd: files\ngroup: files\nhosts: files dns\n"

// HostsFile is the /etc/hosts of a sandbox named hostname: loopback's
// names, and hostname on 127.0.1.1 as Debian does (a name with other
// characters than letters, digits, '-' and '.' is left out). The built-in images
// carry HostsFile(""); a backend that knows the sandbox's hostname may
// mount HostsFile(name) over it, as it mounts /etc/resolv.conf.
func HostsFile(hostname string) []byte {
	s := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"
	if hostname != "" && !strings.ContainsFunc(hostname, notHostChar) {
		s += "127.0.1.1\t" + hostname + "\n"
	}
	return []byte(s)
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst, perm)
	}
	return err
}

// build makes a one-layer image with fill and records it under r's key.
func (s *Store) build(ctx context.Context, r *parsedRef, source string, cfg v1.Config, report func(Progress), fill func(ctx context.Context, root string) error) (*Image, error) {
	return s.buildOn(ctx, r, source, nil, cfg, report, fill)
}

// buildOn makes an image of base's layers (none if base is nil) and one
// more made with fill, and records it under r's key. The caller pins
// base's layers.
func (s *Store) buildOn(ctx context.Context, r *parsedRef, source string, base *imageRecord, cfg v1.Config, report func(Progress), fill func(ctx context.Context, root string) error) (*Image, error) {
	tmp, err := s.tempDir("build")
	if err != nil {
		return nil, err
	}
	defer removeTemp(tmp)
	if err := fill(ctx, tmp); err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	unmountUnder(tmp) // in case a build left something mounted: never hash or keep it
	report(Progress{Phase: PhaseBuild, Message: "computing the layer's digest"})
	diffID, size, err := hashTree(ctx, tmp)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	defer s.pins.pin(diffID)()
	dir, err := s.layerDir(diffID)
	if err != nil {
		return nil, err
	}
	unlock, err := s.layerLocks.lock(ctx, diffID)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, canceled(err))
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		err = s.placeLayer(tmp, dir, diffID, size)
		if err != nil {
			unlock()
			return nil, err
		}
	}
	unlock()

	var layers []builtLayer
	var diffIDs []string
	total := size
	if base != nil {
		for _, d := range base.Layers {
			layers = append(layers, builtLayer{d, s.readLayerSize(d)})
			diffIDs = append(diffIDs, d)
		}
		total += base.Size
	}
	layers = append(layers, builtLayer{diffID, size})
	diffIDs = append(diffIDs, diffID)
	digest, err := manifestDigest(cfg, s.opts.platform, layers)
	if err != nil {
		return nil, err
	}
	defer s.pins.pin(imagePin(digest))()
	ir := &imageRecord{Digest: digest, Config: imageConfig(cfg), Layers: diffIDs, Size: total}
	if err := s.record(r.key, source, ir); err != nil {
		return nil, err
	}
	img, ok := s.imageFromRecord(r.key, ir)
	if !ok {
		return nil, fmt.Errorf("image %q: a layer of its base went missing while it was built: resolve it again", r.orig)
	}
	report(Progress{Phase: PhaseBuild, Message: "built " + r.key})
	return img, nil
}

// builtLayer is a layer of a built image: its diff ID and size.
type builtLayer struct {
	diffID string
	size   int64
}

// manifestDigest is the digest of the OCI manifest of an image whose
// layers, lowest first, are stored uncompressed.
func manifestDigest(cfg v1.Config, platform v1.Platform, layers []builtLayer) (string, error) {
	cf := v1.ConfigFile{Architecture: platform.Architecture, OS: "linux", Config: cfg, RootFS: v1.RootFS{Type: "layers"}}
	var descs []v1.Descriptor
	for _, l := range layers {
		h, err := v1.NewHash(l.diffID)
		if err != nil {
			return "", err
		}
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, h)
		descs = append(descs, v1.Descriptor{MediaType: types.OCIUncompressedLayer, Size: l.size, Digest: h})
	}
	cfgJSON, err := json.Marshal(cf)
	if err != nil {
		return "", err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cfgJSON)), Digest: sha256Hash(cfgJSON)},
		Layers:        descs,
	}
	mJSON, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	return sha256Hash(mJSON).String(), nil
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// hashTree returns the digest and size of a canonical tar of the tree at
// root: lexical order, times zeroed, no user or group names.
func hashTree(ctx context.Context, root string) (string, int64, error) {
	h := sha256.New()
	n := &countWriter{}
	tw := tar.NewWriter(io.MultiWriter(h, n))
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return canceled(err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return "", 0, fmt.Errorf("hashing the built layer: %w", err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n.n, nil
}

// removeTemp removes a work directory, first unmounting anything a build
// left mounted in it (debootstrap mounts /proc and /sys in its target).
func removeTemp(dir string) error {
	unmountUnder(dir)
	return os.RemoveAll(dir)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range mounts {
		unix.Unmount(mp, unix.MNT_DETACH)
	}
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
