package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"path"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Whiteouts says what an extraction makes of OCI whiteout entries, the files
// named ".wh.NAME" by which an image layer deletes what lower layers hold.
type Whiteouts int

const (
	// NoWhiteouts keeps ".wh." entries as the ordinary files they look like
	// (sandbox cp).
	NoWhiteouts Whiteouts = iota
	// OverlayWhiteouts writes them in overlayfs's form: ".wh.NAME" becomes
	// NAME, a 0:0 character device made by the extractor itself (the
	// archive's own device entries are still refused), ".wh..wh..opq" the
	// attribute trusted.overlay.opaque=y on its directory; other ".wh..wh."
	// entries (aufs bookkeeping) are skipped.
	OverlayWhiteouts
	// UserOverlayWhiteouts is OverlayWhiteouts with user.overlay.opaque, the
	// attribute overlayfs reads when mounted with userxattr (by a user other
	// than root, who may not set trusted.* attributes).
	UserOverlayWhiteouts
)

// Default caps of an extraction (see Options).
const (
	DefaultMaxBytes   = 64 << 30
	DefaultMaxEntries = 4 << 20
)

// Options says how to extract. The zero value is right for sandbox cp, in
// either direction: an archive from someone we do not trust, unpacked into a
// directory that may already hold files.
type Options struct {
	Whiteouts Whiteouts
	// Layer says the archive is an image layer unpacked into a new, empty
	// directory it owns whole, by the image store. Then the archive's "."
	// entry applies to the destination; a later entry replaces an earlier
	// one whatever their types (a directory with all it holds); symbolic
	// links the archive made inside the destination are followed by later
	// entries (as long as they lead nowhere outside); set-user-ID and
	// set-group-ID bits and extended attributes are kept; and, when the
	// process is root, so is ownership.
	Layer bool
	// MaxBytes caps the bytes of file content (the sizes the entries
	// claim); MaxEntries the number of entries. 0 means DefaultMaxBytes or
	// DefaultMaxEntries, a negative value no cap.
	MaxBytes   int64
	MaxEntries int64
}

// Extract unpacks the tar stream r under the directory dst, which is made if
// missing. It returns the number of files (regular files and links) made and
// the bytes of file content written. It stops at the end-of-archive marker and
// does not read r further. See the package comment for what it refuses.
func Extract(r io.Reader, dst string) (files int, bytes int64, err error) {
	return Options{}.Extract(r, dst)
}

// ExtractRoot is Extract into an already opened root.
func ExtractRoot(r io.Reader, root *os.Root) (files int, bytes int64, err error) {
	return Options{}.ExtractRoot(r, root)
}

// Extract is the package's Extract with the options o.
func (o Options) Extract(r io.Reader, dst string) (files int, bytes int64, err error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, 0, osError(dst, err)
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return 0, 0, osError(dst, err)
	}
	defer root.Close()
	return o.ExtractRoot(r, root)
}

// ExtractRoot is the package's ExtractRoot with the options o.
func (o Options) ExtractRoot(r io.Reader, root *os.Root) (files int, bytes int64, err error) {
	top, err := root.OpenFile(".", os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return 0, 0, osError(root.Name(), err)
	}
	defer top.Close()
	bp := getBuf()
	defer putBuf(bp)
	x := &extractor{
		opts:     o,
		root:     root,
		rootFD:   int(top.Fd()),
		buf:      *bp,
		dirs:     make(map[string]int),
		seed:     maphash.MakeSeed(),
		made:     make(map[uint64]struct{}),
		chown:    o.Layer && os.Geteuid() == 0,
		maxBytes: limit(o.MaxBytes, DefaultMaxBytes),
		maxEnts:  limit(o.MaxEntries, DefaultMaxEntries),
	}
	defer x.closeDirs()
	src := &sourceReader{r: r}
	tr := tar.NewReader(src)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return x.files, x.bytes, streamError(x.files, err, src.err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.files, x.bytes, err
		}
	}
	return x.files, x.bytes, x.finishDirs()
}

// streamError reports err, met reading the stream after files entries.
// When the source read without failing (srcErr nil), the tar in it is
// malformed: an invalid argument. Otherwise the source's own error (a
// broken connection, a cancelled context) keeps its kind.
func streamError(files int, err, srcErr error) error {
	if srcErr == nil {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("reading the tar stream after %d files: %v", files, err))
	}
	if !errors.Is(err, srcErr) {
		err = srcErr
	}
	return fmt.Errorf("reading the tar stream after %d files: %w", files, err)
}

// sourceReader remembers the error its reader failed with (not its end),
// so that a tar reader's error is told from its source's by what happened,
// not by its text.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

func limit(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 1<<63 - 1
	}
	return v
}

type extractor struct {
	opts   Options
	root   *os.Root
	rootFD int
	buf    []byte
	chown  bool // restore ownership (Layer mode, as root)

	files, entries    int
	bytes             int64
	maxBytes, maxEnts int64
	late              []dirFix
	dirs              map[string]int // open directories by name; see dirs.go
	linked            []string       // of dirs, those reached through a layer's link
	seed              maphash.Seed
	made              map[uint64]struct{} // hashes of the non-directories made, for hard links
}

// dirFix is what a directory gets once it is filled: its mode (when it
// keeps its owner out, which would stop us filling it) and its times
// (which filling it changes).
type dirFix struct {
	name  string
	mode  uint32
	chmod bool
	hdr   *tar.Header
}

// Names longer than the system takes are refused before they reach it.
const (
	maxName = 4095 // PATH_MAX less the NUL
	maxPart = 255  // NAME_MAX
)

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	x.entries++
	if int64(x.entries) > x.maxEnts {
		return refuseKind(errdefs.ErrTooLarge, hdr.Name, fmt.Sprintf(
			"is past the cap of %d entries an archive may hold", x.maxEnts))
	}
	if err := refuseType(hdr); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := entryName(hdr.Name)
	if err != nil {
		return err
	}
	x.trimDirs()
	if name == "." {
		return x.top(hdr)
	}
	dir, base := split(name)
	if x.opts.Whiteouts != NoWhiteouts && strings.HasPrefix(base, whiteoutPrefix) {
		return x.whiteout(hdr, dir, base)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(hdr, name, dir, base)
	case tar.TypeSymlink:
		return x.symlink(hdr, name, dir, base)
	case tar.TypeLink:
		return x.link(hdr, name, dir, base)
	}
	return x.file(hdr, r, name, dir, base)
}

// refuseType refuses the entries no archive may carry, and types we do not
// know.
func refuseType(hdr *tar.Header) error {
	const why = ": images and archives may not carry device nodes, fifos or sockets"
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar:
		return refuse(hdr.Name, fmt.Sprintf("is a character device (%d:%d)%s", hdr.Devmajor, hdr.Devminor, why))
	case tar.TypeBlock:
		return refuse(hdr.Name, fmt.Sprintf("is a block device (%d:%d)%s", hdr.Devmajor, hdr.Devminor, why))
	case tar.TypeFifo:
		return refuse(hdr.Name, "is a fifo"+why)
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
	case len(raw) > maxName:
		return "", refuse(raw, fmt.Sprintf("has a name of %d bytes, more than the %d a path may have", len(raw), maxName))
	}
	for part := range strings.SplitSeq(raw, "/") {
		if part == ".." {
			return "", refuse(raw, "has a \"..\" component that leaves the destination")
		}
		if len(part) > maxPart {
			return "", refuse(raw, fmt.Sprintf("has a component of %d bytes, more than the %d a file name may have", len(part), maxPart))
		}
	}
	return path.Clean(raw), nil
}

func split(name string) (dir, base string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return ".", name
	}
	return name[:i], name[i+1:]
}

func refuse(name, why string) error {
	return refuseKind(errdefs.ErrInvalidArgument, name, why)
}

func refuseKind(kind error, name, why string) error {
	return &EntryError{Name: name, Err: errdefs.WithMessage(kind, why+"; refusing to extract it"), refusal: true}
}

// EntryError is an error met while extracting one entry.
type EntryError struct {
	Name    string // the entry's name, as in the archive
	Err     error
	refusal bool // Err says why the entry is refused, as a predicate
}

func (e *EntryError) Error() string {
	name := e.Name
	if len(name) > 200 {
		name = name[:200] + "..."
	}
	if e.refusal {
		return fmt.Sprintf("entry %q %v", name, e.Err)
	}
	return fmt.Sprintf("entry %q: %v", name, e.Err)
}
func (e *EntryError) Unwrap() error { return e.Err }

// entryError reports err, met while extracting the entry name.
func entryError(name string, err error) error {
	if _, ok := err.(*EntryError); ok {
		return err
	}
	if IsEscape(err) {
		return refuse(name, "would be written through a symbolic link that leads outside the destination")
	}
	if k := errdefs.Kind(osError(name, err)); k != nil && errdefs.Kind(err) == nil {
		err = errdefs.WithMessage(k, describe(err)) // the kind, without repeating the name
	}
	return &EntryError{Name: name, Err: err}
}

// top is the archive's entry for the destination itself: a layer's root
// directory gets its attributes; anything else leaves the destination alone.
func (x *extractor) top(hdr *tar.Header) error {
	if !x.opts.Layer {
		return nil
	}
	if hdr.Typeflag != tar.TypeDir {
		return refuse(hdr.Name, "names the destination itself but is not a directory")
	}
	if err := x.owner(x.rootFD, -1, "", hdr); err != nil {
		return entryError(hdr.Name, err)
	}
	x.late = append(x.late, dirFix{name: ".", mode: x.dirMode(hdr.Mode), chmod: true, hdr: hdr})
	return nil
}

func (x *extractor) mkdir(hdr *tar.Header, name, dir, base string) error {
	pfd, err := x.dir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	mode := x.dirMode(hdr.Mode)
	err = unix.Mkdirat(pfd, base, mode&0o777|0o700)
	fresh := err == nil
	if err == unix.EEXIST {
		err = x.existingDir(pfd, name, base)
		if err == errNotDir && x.opts.Layer {
			if err = x.remove(pfd, name, base); err == nil {
				err = unix.Mkdirat(pfd, base, mode&0o777|0o700)
				fresh = err == nil
			}
		}
	}
	if err == errNotDir {
		return refuse(hdr.Name, "is a directory, but something else is in its place; remove it first")
	}
	if err != nil {
		return entryError(hdr.Name, err)
	}
	if !fresh && !x.opts.Layer {
		return nil // a directory already there keeps its mode and times
	}
	fd, err := x.dir(hdr.Name, name, false)
	if err != nil {
		return err
	}
	if err := x.owner(fd, -1, "", hdr); err != nil {
		return entryError(hdr.Name, err)
	}
	fix := dirFix{name: name, mode: mode, hdr: hdr}
	switch {
	case mode&0o700 != 0o700 || x.opts.Layer:
		fix.chmod = true // at the end: we must be able to fill it first
	case mode != mode&^umaskBits():
		if err := unix.Fchmod(fd, mode); err != nil {
			return entryError(hdr.Name, err)
		}
	}
	x.late = append(x.late, fix)
	return nil
}

// existingDir checks that what is at base, which exists, is a directory.
func (x *extractor) existingDir(pfd int, name, base string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return errNotDir
	}
	return nil
}

// finishDirs gives directories their last mode and times, deepest first;
// of a directory's entries, the last counts.
func (x *extractor) finishDirs() error {
	done := make(map[string]bool, len(x.late))
	for i := len(x.late) - 1; i >= 0; i-- {
		d := x.late[i]
		if done[d.name] {
			continue
		}
		done[d.name] = true
		x.trimDirs()
		fd, err := x.dir(d.hdr.Name, d.name, false)
		if err != nil {
			if x.opts.Layer {
				continue // replaced by a later entry
			}
			return err
		}
		if d.chmod {
			if err := unix.Fchmod(fd, d.mode); err != nil {
				return entryError(d.hdr.Name, err)
			}
		}
		if err := futimens(fd, d.hdr); err != nil {
			return entryError(d.hdr.Name, err)
		}
	}
	return nil
}

func (x *extractor) file(hdr *tar.Header, r io.Reader, name, dir, base string) error {
	if hdr.Size < 0 || hdr.Size > x.maxBytes-x.bytes {
		return refuseKind(errdefs.ErrTooLarge, hdr.Name, fmt.Sprintf(
			"claims %d bytes, which would take the archive past its cap of %d bytes of file content", hdr.Size, x.maxBytes))
	}
	pfd, err := x.dir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	mode := x.fileMode(hdr.Mode)
	create := mode
	if x.opts.Layer {
		create = 0o600 // the mode is set after the owner, which clears set-id bits
	}
	var fd int
	err = x.make(pfd, name, base, func() (err error) {
		fd, err = unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, create)
		return err
	})
	if err != nil {
		return entryError(hdr.Name, err)
	}
	n, err := x.copy(fd, r)
	if err == nil {
		err = x.owner(fd, -1, "", hdr)
	}
	if err == nil && (x.opts.Layer || mode&^umaskBits() != mode) {
		err = unix.Fchmod(fd, mode)
	}
	if err == nil {
		err = futimens(fd, hdr)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(pfd, base, 0) // never leave a partial file behind
		return entryError(hdr.Name, err)
	}
	x.remember(name)
	x.files++
	x.bytes += n
	return nil
}

// copy writes what r holds to fd through the pooled buffer.
func (x *extractor) copy(fd int, r io.Reader) (int64, error) {
	var total int64
	for {
		n, rerr := r.Read(x.buf)
		for b := x.buf[:n]; len(b) > 0; {
			w, err := unix.Write(fd, b)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return total, err
			}
			b = b[w:]
			total += int64(w)
		}
		switch rerr { // by identity: a wrapped error is the stream's, not the tar's
		case nil:
		case io.EOF:
			return total, nil
		case io.ErrUnexpectedEOF:
			return total, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the tar stream ends inside it")
		default:
			return total, rerr
		}
	}
}

func (x *extractor) symlink(hdr *tar.Header, name, dir, base string) error {
	switch {
	case hdr.Linkname == "":
		return refuse(hdr.Name, "is a symbolic link with an empty target")
	case len(hdr.Linkname) > maxName, strings.IndexByte(hdr.Linkname, 0) >= 0:
		return refuse(hdr.Name, "is a symbolic link with a target longer than a path may be, or with a NUL byte")
	}
	pfd, err := x.dir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	err = x.make(pfd, name, base, func() error { return unix.Symlinkat(hdr.Linkname, pfd, base) })
	if err == nil {
		err = x.owner(-1, pfd, base, hdr)
	}
	if err == nil && !hdr.ModTime.IsZero() {
		err = unix.UtimesNanoAt(pfd, base, times(hdr), unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return entryError(hdr.Name, err)
	}
	x.remember(name)
	x.files++
	return nil
}

// link makes a hard link. Its target must be a file, link or symbolic link
// an earlier entry of this archive made: a link to a file that was there
// before would let a later entry's content, or anyone who edits the copy,
// reach that file.
func (x *extractor) link(hdr *tar.Header, name, dir, base string) error {
	target, err := entryName(hdr.Linkname)
	if err != nil {
		return refuse(hdr.Name, fmt.Sprintf("is a hard link to %q, outside the destination", hdr.Linkname))
	}
	if target == name || strings.HasPrefix(target, name+"/") || !x.wasMade(target) {
		return refuse(hdr.Name, fmt.Sprintf("is a hard link to %q, which no earlier entry of the archive made", hdr.Linkname))
	}
	tdir, tbase := split(target)
	tfd, err := x.dir(hdr.Name, tdir, false)
	if err != nil {
		return err
	}
	pfd, err := x.dir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	err = x.make(pfd, name, base, func() error { return unix.Linkat(tfd, tbase, pfd, base, 0) })
	if err != nil {
		return entryError(hdr.Name, err)
	}
	x.remember(name)
	x.files++
	return nil
}

func (x *extractor) remember(name string) {
	x.made[maphash.String(x.seed, name)] = struct{}{}
}

func (x *extractor) wasMade(name string) bool {
	_, ok := x.made[maphash.String(x.seed, name)]
	return ok
}

// make runs mk, which makes base in the directory pfd. If something is in
// the way, it is removed (never followed) and mk runs again; a directory in
// the way is removed, with what it holds, only from a layer.
func (x *extractor) make(pfd int, name, base string, mk func() error) error {
	err := mk()
	if err != unix.EEXIST {
		return err
	}
	if err := x.remove(pfd, name, base); err != nil {
		return err
	}
	return mk()
}

// remove deletes base from the directory pfd: not a directory, except
// from a layer.
func (x *extractor) remove(pfd int, name, base string) error {
	x.forget(name) // it may be a directory, or a link a layer's walk followed
	err := unix.Unlinkat(pfd, base, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if x.existingDir(pfd, name, base) != nil {
		return err
	}
	if !x.opts.Layer {
		return errdefs.WithMessage(errdefs.ErrAlreadyExists, "a directory is in the way; remove it first")
	}
	return x.root.RemoveAll(name)
}

// whiteout records in overlayfs's form that a lower layer's dir/NAME is
// deleted (.wh.NAME), or that all of a lower layer's dir is (.wh..wh..opq).
func (x *extractor) whiteout(hdr *tar.Header, dir, base string) error {
	pfd, err := x.dir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	switch {
	case base == whiteoutOpaque:
		attr := opaqueXattr
		if x.opts.Whiteouts == UserOverlayWhiteouts {
			attr = userOpaqueXattr
		}
		if err := unix.Fsetxattr(pfd, attr, []byte("y"), 0); err != nil {
			return entryError(hdr.Name, err)
		}
		return nil
	case strings.HasPrefix(base, whiteoutMeta):
		return nil
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." {
		return refuse(hdr.Name, "is a whiteout that names nothing")
	}
	err = x.make(pfd, path.Join(dir, target), target, func() error {
		return unix.Mknodat(pfd, target, unix.S_IFCHR, 0)
	})
	if err != nil {
		return entryError(hdr.Name, err)
	}
	return nil
}

const (
	whiteoutPrefix  = ".wh."
	whiteoutMeta    = ".wh..wh."     // aufs bookkeeping, never content
	whiteoutOpaque  = ".wh..wh..opq" // hide everything below this dir in lower layers
	opaqueXattr     = "trusted.overlay.opaque"
	userOpaqueXattr = "user.overlay.opaque"
	paxXattr        = "SCHILY.xattr."
)

// owner restores, in Layer mode, the entry's owner (as root) and extended
// attributes, on fd or else on base in the directory pfd (never followed).
func (x *extractor) owner(fd, pfd int, base string, hdr *tar.Header) error {
	if !x.opts.Layer {
		return nil
	}
	if x.chown {
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
	for k, v := range hdr.PAXRecords {
		attr, ok := strings.CutPrefix(k, paxXattr)
		if !ok || strings.HasPrefix(attr, "trusted.overlay.") || strings.HasPrefix(attr, "user.overlay.") {
			continue // overlayfs's own attributes come only from whiteouts
		}
		var err error
		if fd >= 0 {
			err = unix.Fsetxattr(fd, attr, []byte(v), 0)
		} else {
			err = unix.Lsetxattr(fmt.Sprintf("/proc/self/fd/%d/%s", pfd, base), attr, []byte(v), 0)
		}
		if err != nil && err != unix.ENOTSUP && !(err == unix.EPERM && !x.chown) {
			return fmt.Errorf("xattr %s: %w", attr, err)
		}
	}
	return nil
}

// fileMode is a file entry's mode. Set-user-ID and set-group-ID are dropped
// except from layers: an archive from a sandbox must not plant them.
func (x *extractor) fileMode(m int64) uint32 {
	if x.opts.Layer {
		return uint32(m) & 0o7777
	}
	return uint32(m) & 0o777
}

func (x *extractor) dirMode(m int64) uint32 {
	if x.opts.Layer {
		return uint32(m) & 0o7777
	}
	return uint32(m) & 0o1777
}

func times(hdr *tar.Header) []unix.Timespec {
	at := hdr.AccessTime
	if at.IsZero() {
		at = hdr.ModTime
	}
	return []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
}

// futimens sets fd's times from hdr through the descriptor (utimensat with
// no path), which is cheaper than a path and cannot be redirected.
func futimens(fd int, hdr *tar.Header) error {
	if hdr.ModTime.IsZero() {
		return nil
	}
	ts := times(hdr)
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// umaskBits is the process's umask as a mode word.
func umaskBits() uint32 { return uint32(umask()) }
