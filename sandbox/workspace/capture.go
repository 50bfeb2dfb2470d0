package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Capture saves the upper layer upper (a directory the sandbox wrote)
// into the store and returns its snapshot. The sandbox should be stopped
// or flushed and quiet: what it changes during the walk may or may not be
// in the snapshot, but nothing it does makes the walk leave upper, follow
// a link, block, or read more than the bounds.
func (s *Store) Capture(ctx context.Context, upper string, o CaptureOptions) (Snapshot, error) {
	top, err := openDir(unix.AT_FDCWD, upper)
	if err != nil {
		return Snapshot{}, fmt.Errorf("the sandbox's workspace cannot be opened: %w", osErr(err))
	}
	defer unix.Close(top)
	if o.MaxBytes == 0 {
		var st unix.Statfs_t
		if err := unix.Fstatfs(top, &st); err != nil {
			return Snapshot{}, fmt.Errorf("the sandbox's workspace: %w", osErr(err))
		}
		o.MaxBytes = int64(st.Blocks) * st.Bsize
	}
	if o.MaxBytes < 0 {
		o.MaxBytes = 1<<63 - 1
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	parentHex := ""
	if o.Parent != "" {
		if parentHex, err = parseDigest(o.Parent); err != nil {
			return Snapshot{}, err
		}
	}
	r, collecting := s.begin(parentHex)
	defer s.end(r, parentHex)

	mfd, err := unix.Openat(s.manifests, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return Snapshot{}, fmt.Errorf("capturing the workspace: %w", storeError(err))
	}
	mf := os.NewFile(uintptr(mfd), "manifest")
	defer mf.Close()
	h := sha256.New()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c := &capture{
		s: s, ctx: ctx, cancel: cancel, o: o, refs: r, verify: collecting,
		enc:   newEncoder(&hashWriter{mf, h}),
		order: make(chan *pending, 1024),
		jobs:  make(chan *pending, 64),
		links: map[[2]uint64]uint64{},
		xbuf:  make([]byte, 64<<10),
		dbuf:  make([]byte, 64<<10),
	}
	if parentHex != "" {
		c.cur = s.parentCursor(parentHex)
		if c.cur != nil {
			defer c.cur.f.Close()
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < workers(); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.worker()
		}()
	}
	wrote := make(chan error, 1)
	go func() { wrote <- c.writer() }()
	werr := c.walkTop(top)
	close(c.jobs)
	close(c.order)
	wg.Wait()
	if err := <-wrote; err != nil {
		return Snapshot{}, err
	}
	if werr != nil {
		return Snapshot{}, werr
	}
	t := trailer{entries: c.index, files: c.files, bytes: c.bytes.Load(), skipped: c.skipped}
	if err := c.enc.finish(t); err != nil {
		return Snapshot{}, fmt.Errorf("capturing the workspace: %w", storeError(err))
	}
	hexd := hex.EncodeToString(h.Sum(nil))
	if err := s.commit(mfd, hexd); err != nil {
		return Snapshot{}, fmt.Errorf("capturing the workspace: %w", err)
	}
	return Snapshot{Digest: digestPrefix + hexd, Files: t.files, Bytes: t.bytes, StoredBytes: c.stored.Load(), Skipped: t.skipped}, nil
}

// commit makes the new chunks and the manifest mfd durable, then names the
// manifest: a snapshot exists once all it needs is on stable storage.
func (s *Store) commit(mfd int, hexd string) error {
	if err := unix.Syncfs(s.root); err != nil {
		return storeError(err)
	}
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", mfd), s.manifests, hexd, unix.AT_SYMLINK_FOLLOW)
	if err != nil && err != unix.EEXIST {
		return storeError(err)
	}
	if err := unix.Fsync(s.manifests); err != nil {
		return storeError(err)
	}
	return nil
}

func workers() int { return max(2, 4*runtime.GOMAXPROCS(0)) }

type hashWriter struct {
	f *os.File
	h interface{ Write([]byte) (int, error) }
}

func (w *hashWriter) Write(b []byte) (int, error) {
	w.h.Write(b)
	return w.f.Write(b)
}

// capture is one Capture's state. The walk (one goroutine) opens every
// entry and sends it, in order, to the writer; files go to the workers
// too, which read and store their content; the writer waits for each in
// turn and encodes it.
type capture struct {
	s      *Store
	ctx    context.Context
	cancel context.CancelCauseFunc // with the error that stops the capture
	o      CaptureOptions
	refs   *refs
	verify bool // a Collect was running when the capture began
	enc    *encoder
	cur    *cursor

	order chan *pending
	jobs  chan *pending

	// The walk's own.
	index   int64 // entries numbered so far
	skipped int64
	links   map[[2]uint64]uint64 // (dev, ino) of hard-linked files → entry number
	xbuf    []byte
	dbuf    []byte

	// The writer's own.
	files int64

	bytes, stored atomic.Int64
}

// pending is one entry on its way to the manifest.
type pending struct {
	e    entry
	path string // for errors
	fd   int
	st   unix.Stat_t
	done chan struct{} // a file being read; nil when e is complete
	err  error
}

func (c *capture) walkTop(top int) error {
	var st unix.Stat_t
	if err := unix.Fstat(top, &st); err != nil {
		return fmt.Errorf("the sandbox's workspace: %w", osErr(err))
	}
	p := &pending{e: entry{kind: kDir}, path: "/"}
	if err := c.meta(&p.e.meta, &st, top, "", "/"); err != nil {
		return err
	}
	if err := c.emit(p); err != nil {
		return err
	}
	if c.cur != nil && (c.cur.peek() == nil || c.cur.e.kind != kDir) {
		c.cur = nil
	} else if c.cur != nil {
		c.cur.take()
	}
	return c.walkDir(top, "", 0, c.cur)
}

func (c *capture) emit(p *pending) error {
	if p.e.kind != kEnd {
		if c.index >= c.o.MaxEntries {
			return c.tooMany()
		}
		c.index++
	}
	select {
	case c.order <- p:
		return nil
	case <-c.ctx.Done():
		return c.stopped()
	}
}

// stopped is why the capture stopped: the error of the file or entry that
// stopped it, or the caller's context's. (Every other read then stops
// too; its error must not be the one reported.)
func (c *capture) stopped() error { return context.Cause(c.ctx) }

func (c *capture) tooMany() error {
	return errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf(
		"the workspace holds more than %d entries, the cap for a snapshot", c.o.MaxEntries))
}

// walkDir walks the directory fd (path, depth deep). cur, if not nil, is
// the parent snapshot's cursor inside the same directory.
func (c *capture) walkDir(fd int, path string, depth int, cur *cursor) error {
	ents, err := readDir(fd, c.o.MaxEntries-c.index, c.dbuf)
	if err == errTooMany {
		return c.tooMany()
	}
	if err != nil {
		return fmt.Errorf("reading the workspace's directory %q: %w", displayPath(path), err)
	}
	for _, d := range ents {
		if c.ctx.Err() != nil {
			return c.stopped()
		}
		if err := c.child(fd, path, depth, d, cur); err != nil {
			return err
		}
	}
	return c.emit(&pending{e: entry{kind: kEnd}})
}

func displayPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// child captures the entry d of the directory dfd.
func (c *capture) child(dfd int, dir string, depth int, d dirent, cur *cursor) error {
	path := dir + "/" + d.name
	var prev *entry // the parent snapshot's entry of this name, copied
	if cur != nil {
		if pe := cur.find(d.name); pe != nil {
			prev = pe.clone()
			if prev.kind == kDir {
				// Past the rest of it, whether the walk went in or not.
				defer cur.skipDir()
			}
		}
	}
	for attempt := 0; attempt < 3; attempt++ {
		if d.typ == unix.DT_REG && prev != nil && prev.kind == kFile {
			var st unix.Stat_t
			if unix.Fstatat(dfd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				if done, err := c.reuse(prev, &st, path); done || err != nil {
					return err
				}
			}
		}
		if d.typ == unix.DT_REG || d.typ == unix.DT_DIR || d.typ == unix.DT_UNKNOWN {
			fd, err := unix.Openat(dfd, d.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
			switch err {
			case nil:
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err != nil {
					unix.Close(fd)
					return fmt.Errorf("the workspace's %q: %w", path, osErr(err))
				}
				switch st.Mode & unix.S_IFMT {
				case unix.S_IFDIR:
					var pc *cursor
					if prev != nil && prev.kind == kDir {
						pc = cur
					}
					return c.dir(fd, &st, d.name, path, depth, pc)
				case unix.S_IFREG:
					return c.file(fd, &st, d.name, path)
				}
				unix.Close(fd) // swapped for something else since readdir
			case unix.ENOENT:
				return nil // gone since readdir
			case unix.ELOOP, unix.ENXIO, unix.ENODEV, unix.EACCES, unix.EPERM, unix.EWOULDBLOCK, unix.EOPNOTSUPP:
				// A link, a socket, a device (nodev): not to be opened.
			default:
				return fmt.Errorf("the workspace's %q: %w", path, osErr(err))
			}
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
			return nil
		} else if err != nil {
			return fmt.Errorf("the workspace's %q: %w", path, osErr(err))
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return c.symlink(dfd, &st, d.name, path)
		case unix.S_IFCHR:
			if st.Rdev == 0 {
				return c.special(dfd, &st, d.name, path, kWhiteout)
			}
		case unix.S_IFREG, unix.S_IFDIR:
			d.typ = unix.DT_UNKNOWN // swapped since readdir: open it after all
			continue
		}
		c.skipped++ // a socket, fifo or device: never captured
		return nil
	}
	c.skipped++ // kept changing under the walk
	return nil
}

func (c *capture) dir(fd int, st *unix.Stat_t, name, path string, depth int, cur *cursor) error {
	defer unix.Close(fd)
	if depth+1 >= MaxDepth {
		return errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf(
			"the workspace's directories nest deeper than %d levels (at %q), the cap for a snapshot", MaxDepth, truncate(path)))
	}
	p := &pending{e: entry{kind: kDir, name: name}, path: path}
	if err := c.meta(&p.e.meta, st, fd, "", path); err != nil {
		return err
	}
	if err := c.emit(p); err != nil {
		return err
	}
	return c.walkDir(fd, path, depth+1, cur)
}

func truncate(p string) string {
	if len(p) > 200 {
		return p[:200] + "..."
	}
	return p
}

func (c *capture) file(fd int, st *unix.Stat_t, name, path string) error {
	p := &pending{e: entry{kind: kFile, name: name, size: st.Size}, path: path, fd: fd, st: *st}
	if st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if n, ok := c.links[key]; ok {
			unix.Close(fd)
			return c.emit(&pending{e: entry{kind: kLink, name: name, link: n}, path: path})
		}
		c.links[key] = uint64(c.index)
		p.e.linked = true
	}
	setMeta(&p.e.meta, st)
	p.done = make(chan struct{})
	if err := c.emit(p); err != nil {
		unix.Close(fd)
		return err
	}
	select {
	case c.jobs <- p:
		return nil
	case <-c.ctx.Done():
		unix.Close(fd)
		p.err = c.stopped()
		close(p.done)
		return p.err
	}
}

// reuse takes prev, the parent snapshot's entry of the file st at path,
// when the file has not changed since (same inode, size, times, owner
// and mode), and reports whether it did.
func (c *capture) reuse(prev *entry, st *unix.Stat_t, path string) (bool, error) {
	m := &prev.meta
	if st.Mode&unix.S_IFMT != unix.S_IFREG || m.ino != st.Ino || prev.size != st.Size ||
		m.mtime != st.Mtim || m.ctime != st.Ctim || m.mode != st.Mode || m.uid != st.Uid || m.gid != st.Gid {
		return false, nil
	}
	if st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if _, ok := c.links[key]; ok {
			return false, nil // a second name of a file: the normal path links it
		}
	}
	for _, ch := range prev.chunks {
		c.s.ref(c.refs, ch.sum)
		if c.verify {
			var cst unix.Stat_t
			if unix.Fstatat(c.s.chunks, chunkName(ch.sum), &cst, unix.AT_SYMLINK_NOFOLLOW) != nil || cst.Size != ch.n {
				return false, nil
			}
		}
	}
	e := *prev
	e.linked = false
	if st.Nlink > 1 {
		c.links[[2]uint64{st.Dev, st.Ino}] = uint64(c.index)
		e.linked = true
	}
	e.meta.atime = st.Atim
	c.bytes.Add(e.dataBytes())
	return true, c.emit(&pending{e: e, path: path})
}

func (c *capture) symlink(dfd int, st *unix.Stat_t, name, path string) error {
	buf := make([]byte, maxPath+1)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		if err == unix.ENOENT || err == unix.EINVAL { // gone or swapped
			c.skipped++
			return nil
		}
		return fmt.Errorf("the workspace's %q: %w", path, osErr(err))
	}
	if n == 0 || n > maxPath {
		c.skipped++
		return nil
	}
	p := &pending{e: entry{kind: kSymlink, name: name, target: string(buf[:n])}, path: path}
	if err := c.meta(&p.e.meta, st, -1, fmt.Sprintf("/proc/self/fd/%d/%s", dfd, name), path); err != nil {
		return err
	}
	return c.emit(p)
}

func (c *capture) special(dfd int, st *unix.Stat_t, name, path string, kind byte) error {
	p := &pending{e: entry{kind: kind, name: name}, path: path}
	if err := c.meta(&p.e.meta, st, -1, fmt.Sprintf("/proc/self/fd/%d/%s", dfd, name), path); err != nil {
		return err
	}
	return c.emit(p)
}

func setMeta(m *meta, st *unix.Stat_t) {
	m.mode, m.uid, m.gid = st.Mode, st.Uid, st.Gid
	m.atime, m.mtime, m.ctime, m.ino = st.Atim, st.Mtim, st.Ctim, st.Ino
}

// meta fills m from st and the extended attributes of fd, or else of the
// path lpath (never followed).
func (c *capture) meta(m *meta, st *unix.Stat_t, fd int, lpath, path string) error {
	setMeta(m, st)
	xs, err := readXattrs(fd, lpath, c.xbuf)
	if err != nil {
		return fmt.Errorf("the workspace's %q: %w", path, err)
	}
	m.xattrs = xs
	return nil
}

// worker reads the files the walk sends it.
func (c *capture) worker() {
	buf := make([]byte, ChunkSize)
	xbuf := make([]byte, 64<<10)
	for p := range c.jobs {
		if c.ctx.Err() != nil {
			p.err = c.stopped()
		} else {
			p.err = c.read(p, buf, xbuf)
		}
		unix.Close(p.fd)
		if p.err != nil {
			c.cancel(p.err)
		}
		close(p.done)
	}
}

// read stores the content of the file p.fd in chunks on the grid: the
// data of each grid cell (for a sparse file, from its first data to its
// last; holes elsewhere are not stored).
func (c *capture) read(p *pending, buf, xbuf []byte) error {
	xs, err := readXattrs(p.fd, "", xbuf)
	if err != nil {
		return fmt.Errorf("the workspace's %q: %w", p.path, err)
	}
	p.e.meta.xattrs = xs
	size := p.st.Size
	sparse := p.st.Blocks*512 < size
	for off := int64(0); off < size; {
		if c.ctx.Err() != nil {
			return c.stopped()
		}
		start, end := off, min(size, (off/ChunkSize+1)*ChunkSize)
		if sparse {
			var ok bool
			if start, end, ok = dataInCell(p.fd, off, size); !ok {
				break
			}
		}
		n, err := preadFull(p.fd, buf[:end-start], start)
		if err != nil {
			return fmt.Errorf("reading the workspace's %q: %w", p.path, osErr(err))
		}
		if n > 0 {
			if err := c.chunk(&p.e, buf[:n], start); err != nil {
				return err
			}
		}
		if n < int(end-start) {
			break // the file shrank under the walk
		}
		off = (start/ChunkSize + 1) * ChunkSize
	}
	return nil
}

func (c *capture) chunk(e *entry, data []byte, off int64) error {
	if c.bytes.Add(int64(len(data))) > c.o.MaxBytes {
		return errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf(
			"the workspace holds more than %d bytes, the cap for its snapshot", c.o.MaxBytes))
	}
	sum := sha(data)
	c.s.ref(c.refs, sum)
	wrote, err := c.s.putChunk(sum, data)
	if err != nil {
		return fmt.Errorf("capturing the workspace: %w", err)
	}
	if wrote {
		c.stored.Add(int64(len(data)))
	}
	e.chunks = append(e.chunks, chunkRef{off: off, n: int64(len(data)), sum: sum})
	return nil
}

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

// dataInCell finds the first data at or after off in a sparse file and
// returns the span from it to the end of the last data in its grid cell.
func dataInCell(fd int, off, size int64) (start, end int64, ok bool) {
	start, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if err != nil || start >= size {
		return 0, 0, false
	}
	cellEnd := min(size, (start/ChunkSize+1)*ChunkSize)
	end = start
	for end < cellEnd {
		h, err := unix.Seek(fd, end, unix.SEEK_HOLE)
		if err != nil {
			return start, cellEnd, true
		}
		end = min(h, cellEnd)
		if end >= cellEnd {
			break
		}
		d, err := unix.Seek(fd, end, unix.SEEK_DATA)
		if err != nil || d >= cellEnd {
			break
		}
		end = d
	}
	return start, end, true
}

func preadFull(fd int, b []byte, off int64) (int, error) {
	total := 0
	for total < len(b) {
		n, err := unix.Pread(fd, b[total:], off+int64(total))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, err
		}
		if n == 0 {
			break
		}
		total += n
	}
	return total, nil
}

// writer encodes the entries in order as they complete.
func (c *capture) writer() error {
	var first error
	last := time.Now()
	for p := range c.order {
		if p.done != nil {
			<-p.done
		}
		if first == nil && p.err != nil {
			c.cancel(p.err)
			first = c.stopped() // p's own error, or the one that stopped p
		}
		if first != nil {
			continue
		}
		if err := c.enc.entry(&p.e); err != nil {
			first = fmt.Errorf("capturing the workspace: %w", storeError(err))
			c.cancel(first)
			continue
		}
		if p.e.kind != kDir && p.e.kind != kEnd {
			c.files++
		}
		if c.o.Progress != nil && time.Since(last) > 100*time.Millisecond {
			last = time.Now()
			c.o.Progress(Progress{Files: c.files, Bytes: c.bytes.Load()})
		}
	}
	if first == nil && c.o.Progress != nil {
		c.o.Progress(Progress{Files: c.files, Bytes: c.bytes.Load()})
	}
	return first
}

var errTooMany = errors.New("too many entries")

type dirent struct {
	name string
	typ  uint8
}

// readDir reads the names in the directory fd, from its start, sorted,
// refusing more than max of them.
func readDir(fd int, max int64, buf []byte) ([]dirent, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, osErr(err)
	}
	var out []dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, osErr(err)
		}
		if n <= 0 {
			break
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			if reclen < 19 || reclen > len(b) {
				break
			}
			typ := b[18]
			name := b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if s := string(name); s != "." && s != ".." {
				if int64(len(out)) >= max {
					return nil, errTooMany
				}
				out = append(out, dirent{s, typ})
			}
		}
	}
	slices.SortFunc(out, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// keepXattr says which extended attributes a snapshot carries: the
// user's, the security ones, ACLs, other trusted ones, and of overlayfs's
// own only what says what the upper layer hides or renames (opaque,
// redirect). The rest of overlayfs's (origin, impure, nlink, upper,
// uuid…) name inodes of the disk the snapshot outlives.
func keepXattr(name string) bool {
	for _, p := range []string{"trusted.overlay.", "user.overlay."} {
		if rest, ok := strings.CutPrefix(name, p); ok {
			return rest == "opaque" || rest == "redirect"
		}
	}
	for _, p := range []string{"user.", "trusted.", "security.", "system.posix_acl_access", "system.posix_acl_default"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// readXattrs reads the kept extended attributes of fd, or else of lpath
// (never followed), sorted by name.
func readXattrs(fd int, lpath string, buf []byte) ([]xattr, error) {
	var n int
	var err error
	if fd >= 0 {
		n, err = unix.Flistxattr(fd, buf)
	} else {
		n, err = unix.Llistxattr(lpath, buf)
	}
	switch {
	case err == unix.ENOTSUP || err == unix.ENOENT || n == 0:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing extended attributes: %w", osErr(err))
	}
	var names []string
	for _, nm := range strings.Split(string(buf[:n]), "\x00") {
		if nm == "" {
			continue
		}
		if strings.HasSuffix(nm, ".overlay.metacopy") {
			return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition,
				"it is an overlayfs metadata-only copy, whose data is in the image: snapshots need the overlay mounted without metacopy")
		}
		if keepXattr(nm) {
			names = append(names, nm)
		}
	}
	slices.Sort(names)
	var out []xattr
	for _, nm := range names {
		var v int
		if fd >= 0 {
			v, err = unix.Fgetxattr(fd, nm, buf)
		} else {
			v, err = unix.Lgetxattr(lpath, nm, buf)
		}
		if err == unix.ENODATA {
			continue // removed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("reading extended attribute %q: %w", nm, osErr(err))
		}
		out = append(out, xattr{nm, string(buf[:v])})
	}
	return out, nil
}

// osErr gives a system error met on a sandbox's files its kind, without a
// host path.
func osErr(err error) error {
	switch err {
	case unix.ENOSPC, unix.EDQUOT:
		return fmt.Errorf("%v: %w", err, errdefs.ErrNoSpace)
	case unix.ENOENT:
		return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return fmt.Errorf("%v: %w", err, errdefs.ErrPermissionDenied)
	}
	return err
}

// cursor reads a parent snapshot alongside the walk: both are in the same
// order, so the entry of each name is found by reading forward.
type cursor struct {
	f      *os.File
	d      *decoder
	e      entry
	have   bool
	broken bool
}

func (s *Store) parentCursor(hexd string) *cursor {
	f, err := s.openManifest(hexd)
	if err != nil {
		return nil
	}
	d, err := newDecoder(f, sha256.New(), 1<<62)
	if err != nil {
		f.Close()
		return nil
	}
	return &cursor{f: f, d: d}
}

func (c *cursor) peek() *entry {
	if c.broken {
		return nil
	}
	if !c.have {
		if err := c.d.next(&c.e); err != nil {
			c.broken = true
			return nil
		}
		c.have = true
	}
	return &c.e
}

func (c *cursor) take() { c.have = false }

// skipDir reads past the rest of the directory the cursor is in.
func (c *cursor) skipDir() {
	for depth := 1; depth > 0; {
		e := c.peek()
		if e == nil {
			return
		}
		c.take()
		switch e.kind {
		case kDir:
			depth++
		case kEnd:
			depth--
		}
	}
}

// find returns the entry named name in the cursor's directory, reading
// past (and skipping the subtrees of) the names before it. The entry is
// valid until the cursor moves.
func (c *cursor) find(name string) *entry {
	for {
		e := c.peek()
		if e == nil || e.kind == kEnd || e.name > name {
			return nil
		}
		c.take()
		if e.name == name {
			return e
		}
		if e.kind == kDir {
			c.skipDir()
		}
	}
}

func (e *entry) clone() *entry {
	x := *e
	x.chunks = slices.Clone(e.chunks)
	x.meta.xattrs = slices.Clone(e.meta.xattrs)
	return &x
}
