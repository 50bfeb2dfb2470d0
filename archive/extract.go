package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/reinsdev/reins/errdefs"
)

// Extract unpacks the tar stream r under the directory dst, which is made if
// missing. It returns the number of files (regular files and links) made and
// the bytes of file content written. It stops at the end-of-archive marker and
// does not read r further. See the package comment for what it refuses.
func Extract(r io.Reader, dst string) (files int, bytes int64, err error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, 0, osError(dst, err)
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return 0, 0, osError(dst, err)
	}
	defer root.Close()
	return ExtractRoot(r, root)
}

// ExtractRoot is Extract into an already opened root.
func ExtractRoot(r io.Reader, root *os.Root) (files int, bytes int64, err error) {
	bp := getBuf()
	defer putBuf(bp)
	x := &extractor{root: root, buf: *bp}
	defer x.closeParent()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return x.files, x.bytes, errdefs.WithMessage(errdefs.ErrInvalidArgument,
				fmt.Sprintf("reading the tar stream after %d files: %v", x.files, err))
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.files, x.bytes, err
		}
	}
	for i := len(x.lateDirs) - 1; i >= 0; i-- {
		d := x.lateDirs[i]
		if err := root.Chmod(d.name, d.mode); err != nil {
			return x.files, x.bytes, entryError(d.name, err)
		}
	}
	return x.files, x.bytes, nil
}

type lateDir struct {
	name string
	mode fs.FileMode
}

type extractor struct {
	root  *os.Root
	buf   []byte
	files int
	bytes int64
	// lateDirs get their mode at the end: a directory without owner write
	// permission must stay writable while its contents are unpacked.
	lateDirs []lateDir
	// parent caches the directory the last file went to: tar streams list a
	// directory's files together, and creating a file through an open
	// directory costs one openat instead of one per path component.
	parentName string
	parent     *os.Root
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	name, err := entryName(hdr.Name)
	if err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA && hdr.Typeflag != tar.TypeGNUSparse {
		x.closeParent() // the tree may change shape: do not trust the cached directory
	}
	if name == "." {
		return nil // the destination itself
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(name, hdr)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return x.file(name, hdr, r)
	case tar.TypeSymlink:
		return x.symlink(name, hdr)
	case tar.TypeLink:
		return x.link(name, hdr)
	case tar.TypeChar, tar.TypeBlock:
		return refuse(hdr.Name, "is a device node")
	case tar.TypeFifo:
		return refuse(hdr.Name, "is a fifo")
	case tar.TypeXGlobalHeader:
		return nil
	}
	return refuse(hdr.Name, fmt.Sprintf("has an unsupported type %q", hdr.Typeflag))
}

// entryName checks an entry's name and returns it cleaned.
func entryName(raw string) (string, error) {
	switch {
	case raw == "":
		return "", refuse(raw, "has an empty name")
	case strings.IndexByte(raw, 0) >= 0:
		return "", refuse(raw, "has a NUL byte in its name")
	case strings.HasPrefix(raw, "/"):
		return "", refuse(raw, "has an absolute name")
	}
	for part := range strings.SplitSeq(raw, "/") {
		if part == ".." {
			return "", refuse(raw, "has a \"..\" component that leaves the destination")
		}
	}
	return path.Clean(raw), nil
}

func refuse(name, why string) error {
	return &EntryError{Name: name, Err: errdefs.WithMessage(errdefs.ErrInvalidArgument, why+"; refusing to extract it"), refusal: true}
}

// EntryError is an error met while extracting one entry.
type EntryError struct {
	Name    string // the entry's name, as in the archive
	Err     error
	refusal bool // Err says why the entry is refused, as a predicate
}

func (e *EntryError) Error() string {
	if e.refusal {
		return fmt.Sprintf("tar entry %q %v", e.Name, e.Err)
	}
	return fmt.Sprintf("tar entry %q: %v", e.Name, e.Err)
}
func (e *EntryError) Unwrap() error { return e.Err }

// entryError reports err, met while extracting the entry name.
func entryError(name string, err error) error {
	if IsEscape(err) {
		return refuse(name, "would be written through a symbolic link that leads outside the destination")
	}
	if k := errdefs.Kind(osError(name, err)); k != nil && errdefs.Kind(err) == nil {
		err = errdefs.WithMessage(k, describe(err)) // the kind, without repeating the name
	}
	return &EntryError{Name: name, Err: err}
}

func (x *extractor) dir(name string, hdr *tar.Header) error {
	mode := dirMode(hdr.Mode)
	err := x.root.Mkdir(name, mode|0o700)
	if errors.Is(err, fs.ErrNotExist) {
		if err = x.root.MkdirAll(path.Dir(name), 0o755); err == nil {
			err = x.root.Mkdir(name, mode|0o700)
		}
	}
	if errors.Is(err, fs.ErrExist) {
		fi, lerr := x.root.Lstat(name)
		switch {
		case lerr != nil:
			err = lerr
		case fi.IsDir():
			err = nil
		default: // a file or a symlink: replace it, never follow it
			if err = x.root.Remove(name); err == nil {
				err = x.root.Mkdir(name, mode|0o700)
			}
		}
	}
	if err != nil {
		return entryError(hdr.Name, err)
	}
	if mode&0o700 != 0o700 {
		x.lateDirs = append(x.lateDirs, lateDir{name, mode})
		return nil
	}
	if mode.Perm()&^umask() != mode.Perm() {
		if err := x.root.Chmod(name, mode); err != nil {
			return entryError(hdr.Name, err)
		}
	}
	return nil
}

func (x *extractor) file(name string, hdr *tar.Header, r io.Reader) error {
	dir, base := path.Split(name)
	parent, err := x.openParent(path.Clean(dir))
	if err != nil {
		return entryError(hdr.Name, err)
	}
	mode := fileMode(hdr.Mode)
	f, fresh, err := create(parent, base, mode)
	if err != nil {
		return entryError(hdr.Name, err)
	}
	n, err := io.CopyBuffer(onlyWriter{f}, onlyReader{r}, x.buf)
	if err == nil && (!fresh || mode&^umask() != mode) {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = futimens(f, hdr.ModTime)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		parent.Remove(base) // never leave a partial file behind
		return entryError(hdr.Name, err)
	}
	x.files++
	x.bytes += n
	return nil
}

// openParent returns the directory dir, made if missing, reusing the last one.
func (x *extractor) openParent(dir string) (*os.Root, error) {
	if x.parent != nil && x.parentName == dir {
		return x.parent, nil
	}
	x.closeParent()
	r, err := x.root.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err = x.root.MkdirAll(dir, 0o755); err == nil {
			r, err = x.root.OpenRoot(dir)
		}
	}
	if err != nil {
		return nil, err
	}
	x.parent, x.parentName = r, dir
	return r, nil
}

func (x *extractor) closeParent() {
	if x.parent != nil {
		x.parent.Close()
		x.parent, x.parentName = nil, ""
	}
}

// create makes the file base in dir, replacing what is there without ever
// following a symbolic link. fresh reports that the file did not exist.
func create(dir *os.Root, base string, mode fs.FileMode) (f *os.File, fresh bool, err error) {
	for range 3 {
		f, err := dir.OpenFile(base, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if !errors.Is(err, fs.ErrExist) {
			return f, true, err
		}
		fi, err := dir.Lstat(base)
		switch {
		case err != nil:
			return nil, false, err
		case fi.Mode().IsRegular():
			f, err := dir.OpenFile(base, os.O_WRONLY|os.O_TRUNC, 0)
			return f, false, err
		case fi.IsDir():
			return nil, false, errdefs.WithMessage(errdefs.ErrAlreadyExists, "a directory is in the way")
		}
		if err := dir.Remove(base); err != nil {
			return nil, false, err
		}
	}
	return nil, false, errdefs.WithMessage(errdefs.ErrAlreadyExists, "something keeps replacing it")
}

func (x *extractor) symlink(name string, hdr *tar.Header) error {
	if hdr.Linkname == "" {
		return refuse(hdr.Name, "is a symbolic link with an empty target")
	}
	err := x.replace(name, func() error { return x.root.Symlink(hdr.Linkname, name) })
	if err != nil {
		return entryError(hdr.Name, err)
	}
	x.files++
	return nil
}

func (x *extractor) link(name string, hdr *tar.Header) error {
	target, err := entryName(hdr.Linkname)
	if err != nil {
		return refuse(hdr.Name, fmt.Sprintf("is a hard link to %q, outside the destination", hdr.Linkname))
	}
	err = x.replace(name, func() error { return x.root.Link(target, name) })
	if err != nil {
		return entryError(hdr.Name, err)
	}
	x.files++
	return nil
}

// replace runs mk, which makes name; if something is already there (and is
// not a directory) it is removed first.
func (x *extractor) replace(name string, mk func() error) error {
	err := mk()
	if errors.Is(err, fs.ErrNotExist) {
		if err = x.root.MkdirAll(path.Dir(name), 0o755); err == nil {
			err = mk()
		}
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := x.root.Lstat(name)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errdefs.WithMessage(errdefs.ErrAlreadyExists, "a directory is in the way")
	}
	if err := x.root.Remove(name); err != nil {
		return err
	}
	return mk()
}

// fileMode keeps the permission and sticky bits of a tar mode; set-user-ID and
// set-group-ID are dropped: an archive from a sandbox must not plant them.
func fileMode(m int64) fs.FileMode {
	return fs.FileMode(m & 0o777)
}

func dirMode(m int64) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// futimens sets f's modification time (and access time) through its
// descriptor, which is cheaper than a path and cannot be redirected.
func futimens(f *os.File, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	ts := [2]syscall.Timespec{syscall.NsecToTimespec(t.UnixNano()), syscall.NsecToTimespec(t.UnixNano())}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	err = rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_UTIMENSAT, fd, 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return &fs.PathError{Op: "futimens", Path: f.Name(), Err: errno}
	}
	return nil
}
