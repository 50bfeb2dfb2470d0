package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

const (
	whiteoutPrefix  = ".wh."
	whiteoutMeta    = ".wh..wh."     // aufs bookkeeping, never content
	whiteoutOpaque  = ".wh..wh..opq" // hide everything below this dir in lower layers
	opaqueXattr     = "trusted.overlay.opaque"
	userOpaqueXattr = "user.overlay.opaque"
	paxXattr        = "SCHILY.xattr."
)

// unpacker writes one layer's tar stream into a directory.
//
// Every path is resolved through an os.Root, so neither ".." nor a symlink
// (the layer's own or a planted one) can lead outside the directory. The
// last component is then handled with *at system calls on the parent's
// descriptor that never follow a symlink. Parents are cached because
// consecutive entries mostly share one.
type unpacker struct {
	root    *os.Root
	chown   bool // we are root: apply ownership and device nodes
	dirs    map[string]*os.File
	retired []*os.File // dropped from dirs, closed before the next entry
	times   []dirTime
	buf     []byte
}

type dirTime struct {
	name  string
	atime time.Time
	mtime time.Time
}

// unpackTar extracts the tar stream r into dir, an existing empty
// directory, translating OCI whiteouts to overlayfs ones.
func unpackTar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	u := &unpacker{
		root:  root,
		chown: os.Geteuid() == 0,
		dirs:  make(map[string]*os.File),
		buf:   make([]byte, 1<<20),
	}
	defer u.close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading layer: %w", err)
		}
		u.closeRetired()
		if err := u.entry(hdr, tr); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	return u.finishDirs()
}

func (u *unpacker) close() {
	u.closeRetired()
	for _, f := range u.dirs {
		f.Close()
	}
	u.root.Close()
}

func (u *unpacker) closeRetired() {
	for _, f := range u.retired {
		f.Close()
	}
	u.retired = u.retired[:0]
}

// cleanName makes a tar entry name relative to the layer root, refusing
// names that are absolute or climb out of it.
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("absolute path in layer: %w", errdefs.ErrInvalidArgument)
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path escapes the layer: %w", errdefs.ErrInvalidArgument)
	}
	return c, nil
}

func splitName(name string) (dir, base string) {
	dir, base = path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	return dir, base
}

// parent returns an open descriptor of the directory dir inside the root,
// creating it (and its parents) if missing.
func (u *unpacker) parent(dir string) (*os.File, error) {
	if f := u.dirs[dir]; f != nil {
		return f, nil
	}
	if len(u.dirs) >= 64 {
		for k, f := range u.dirs {
			u.retired = append(u.retired, f)
			delete(u.dirs, k)
		}
	}
	f, err := u.openDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := u.root.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		f, err = u.openDir(dir)
	}
	if err != nil {
		return nil, err
	}
	u.dirs[dir] = f
	return f, nil
}

// openDir opens a directory in the root. O_DIRECTORY matters: opening a
// fifo a layer planted where a directory should be would block forever.
func (u *unpacker) openDir(dir string) (*os.File, error) {
	return u.root.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
}

// forget drops cached directories at or below name, which is being removed.
func (u *unpacker) forget(name string) {
	for k, f := range u.dirs {
		if k == name || strings.HasPrefix(k, name+"/") {
			u.retired = append(u.retired, f)
			delete(u.dirs, k)
		}
	}
}

// remove deletes whatever is at name (base in the directory pfd).
func (u *unpacker) remove(pfd int, name, base string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(pfd, base, 0)
	}
	u.forget(name)
	return u.root.RemoveAll(name)
}

// create runs mk, and if something is already at base, removes it and
// runs mk again: a later entry replaces an earlier one.
func (u *unpacker) create(pfd int, name, base string, mk func() error) error {
	err := mk()
	if err == unix.EEXIST {
		if err := u.remove(pfd, name, base); err != nil {
			return err
		}
		err = mk()
	}
	return err
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("layer root is not a directory: %w", errdefs.ErrInvalidArgument)
		}
		return u.dir(name, hdr)
	}
	dir, base := splitName(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(dir, base)
	}
	if hdr.Typeflag == tar.TypeDir {
		return u.dir(name, hdr)
	}
	pf, err := u.parent(dir)
	if err != nil {
		return err
	}
	pfd := int(pf.Fd())
	switch hdr.Typeflag {
	case tar.TypeReg:
		return u.file(pfd, name, base, hdr, r)
	case tar.TypeSymlink:
		err = u.create(pfd, name, base, func() error { return unix.Symlinkat(hdr.Linkname, pfd, base) })
	case tar.TypeLink:
		return u.hardlink(pfd, name, base, hdr.Linkname)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		var made bool
		if made, err = u.node(pfd, name, base, hdr); err == nil && !made {
			return nil
		}
	default:
		return fmt.Errorf("unsupported tar entry type %q: %w", hdr.Typeflag, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return err
	}
	return u.attrs(pfd, -1, base, hdr)
}

// whiteout records in overlayfs form that a lower layer's dir/NAME is
// deleted (.wh.NAME), or that all of a lower layer's dir is (.wh..wh..opq).
func (u *unpacker) whiteout(dir, base string) error {
	pf, err := u.parent(dir)
	if err != nil {
		return err
	}
	pfd := int(pf.Fd())
	switch {
	case base == whiteoutOpaque:
		attr := opaqueXattr
		if !u.chown {
			// Only root sets trusted.* attributes; overlayfs mounted
			// with userxattr (in a user namespace) reads this one.
			attr = userOpaqueXattr
		}
		return unix.Fsetxattr(pfd, attr, []byte("y"), 0)
	case strings.HasPrefix(base, whiteoutMeta):
		return nil
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." || target == ".." {
		return fmt.Errorf("malformed whiteout: %w", errdefs.ErrInvalidArgument)
	}
	name := path.Join(dir, target)
	return u.create(pfd, name, target, func() error {
		return unix.Mknodat(pfd, target, unix.S_IFCHR, 0)
	})
}

func (u *unpacker) dir(name string, hdr *tar.Header) error {
	if name != "." {
		parentDir, base := splitName(name)
		pf, err := u.parent(parentDir)
		if err != nil {
			return err
		}
		pfd := int(pf.Fd())
		err = unix.Mkdirat(pfd, base, 0o755)
		if err == unix.EEXIST {
			// A directory stays (with what is in it); anything else goes.
			var st unix.Stat_t
			if err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				if err = unix.Unlinkat(pfd, base, 0); err == nil {
					err = unix.Mkdirat(pfd, base, 0o755)
				}
			}
		}
		if err != nil {
			return err
		}
	}
	f, err := u.parent(name)
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	if err := u.attrs(fd, fd, "", hdr); err != nil {
		return err
	}
	u.times = append(u.times, dirTime{name: name, atime: atime(hdr), mtime: hdr.ModTime})
	return nil
}

// finishDirs sets directories' times last, since filling a directory
// changes its mtime.
func (u *unpacker) finishDirs() error {
	for i := len(u.times) - 1; i >= 0; i-- {
		t := u.times[i]
		f := u.dirs[t.name]
		if f == nil {
			var err error
			if f, err = u.openDir(t.name); err != nil {
				continue // replaced by a later entry
			}
			u.retired = append(u.retired, f)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(t.atime.UnixNano()), unix.NsecToTimespec(t.mtime.UnixNano())}
		if err := unix.UtimesNanoAt(int(f.Fd()), ".", ts, 0); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		u.closeRetired()
	}
	return nil
}

func (u *unpacker) file(pfd int, name, base string, hdr *tar.Header, r io.Reader) error {
	var fd int
	err := u.create(pfd, name, base, func() (err error) {
		fd, err = unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	// Hide f's ReadFrom so that the copy uses our large buffer.
	if _, err := io.CopyBuffer(struct{ io.Writer }{f}, r, u.buf); err != nil {
		return err
	}
	return u.attrs(pfd, fd, base, hdr)
}

func (u *unpacker) hardlink(pfd int, name, base, linkname string) error {
	target, err := cleanName(linkname)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", linkname, err)
	}
	tdir, tbase := splitName(target)
	tf, err := u.parent(tdir)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", linkname, err)
	}
	tfd := int(tf.Fd())
	return u.create(pfd, name, base, func() error {
		return unix.Linkat(tfd, tbase, pfd, base, 0)
	})
}

// node makes a device node or fifo; it reports false if it could not
// because we are not root.
func (u *unpacker) node(pfd int, name, base string, hdr *tar.Header) (bool, error) {
	mode := uint32(hdr.Mode) & 0o7777
	switch hdr.Typeflag {
	case tar.TypeChar:
		mode |= unix.S_IFCHR
	case tar.TypeBlock:
		mode |= unix.S_IFBLK
	default:
		mode |= unix.S_IFIFO
	}
	dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
	err := u.create(pfd, name, base, func() error { return unix.Mknodat(pfd, base, mode, dev) })
	if err == unix.EPERM && !u.chown && hdr.Typeflag != tar.TypeFifo {
		return false, nil // only root makes device nodes; a sandbox gets its own /dev anyway
	}
	return err == nil, err
}

func atime(hdr *tar.Header) time.Time {
	if hdr.AccessTime.IsZero() {
		return hdr.ModTime
	}
	return hdr.AccessTime
}

// attrs applies ownership, mode, xattrs and times to base in the directory
// pfd, or to fd if it is not -1 (an open regular file or directory).
func (u *unpacker) attrs(pfd, fd int, base string, hdr *tar.Header) error {
	isLink := hdr.Typeflag == tar.TypeSymlink
	if u.chown {
		var err error
		if fd >= 0 {
			err = unix.Fchown(fd, hdr.Uid, hdr.Gid)
		} else {
			err = unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if !isLink {
		// After chown, which clears set-id bits.
		mode := uint32(hdr.Mode) & 0o7777
		var err error
		if fd >= 0 {
			err = unix.Fchmod(fd, mode)
		} else {
			err = unix.Fchmodat(pfd, base, mode, 0) // a device node or fifo: nothing to follow
		}
		if err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	for k, v := range hdr.PAXRecords {
		attr, ok := strings.CutPrefix(k, paxXattr)
		if !ok || strings.HasPrefix(attr, "trusted.overlay.") || strings.HasPrefix(attr, "user.overlay.") {
			continue // overlayfs's own attributes come only from whiteouts
		}
		var err error
		if fd >= 0 {
			err = unix.Fsetxattr(fd, attr, []byte(v), 0)
		} else {
			err = unix.Lsetxattr("/proc/self/fd/"+strconv.Itoa(pfd)+"/"+base, attr, []byte(v), 0)
		}
		if err != nil && err != unix.ENOTSUP && !(err == unix.EPERM && !u.chown) {
			return fmt.Errorf("xattr %s: %w", attr, err)
		}
	}
	if hdr.Typeflag == tar.TypeDir {
		return nil // set by finishDirs
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime(hdr).UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("times: %w", err)
	}
	return nil
}
