package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Restore writes the snapshot digest into upper, an empty directory (a
// fresh disk's upper layer, before the overlay is mounted). The manifest
// is read as hostile (see the package comment); an error names the entry
// it is about, and what Restore made is removed again.
func (s *Store) Restore(ctx context.Context, digest, upper string, progress func(Progress)) error {
	_, err := s.restore(ctx, digest, upper, progress, false)
	return err
}

// RestoreAs is Restore that also returns a snapshot of upper as restored:
// the same content (it restores the same tree), recorded with the new
// disk's inodes and change times, so that the next Capture of upper with
// it as Parent skips the files the sandbox did not change since (with
// digest as Parent it would read them all: a fresh disk has new inodes).
func (s *Store) RestoreAs(ctx context.Context, digest, upper string, progress func(Progress)) (Snapshot, error) {
	return s.restore(ctx, digest, upper, progress, true)
}

func (s *Store) restore(ctx context.Context, digest, upper string, progress func(Progress), record bool) (Snapshot, error) {
	hexd, f, t, err := s.manifest(digest)
	if err != nil {
		return Snapshot{}, fmt.Errorf("restoring: %w", err)
	}
	defer f.Close()
	dec, err := newDecoder(f, sha256.New(), DefaultMaxEntries)
	if err != nil {
		return Snapshot{}, fmt.Errorf("restoring workspace snapshot %s: %w", digest, err)
	}
	top, err := openDir(unix.AT_FDCWD, upper)
	if err != nil {
		return Snapshot{}, fmt.Errorf("the sandbox's new workspace cannot be opened: %w", osErr(err))
	}
	defer unix.Close(top)
	dbuf := make([]byte, 4096)
	if ents, err := readDir(top, 1, dbuf); err != nil || len(ents) > 0 {
		return Snapshot{}, errdefs.WithMessage(errdefs.ErrFailedPrecondition, "a workspace is restored only into an empty directory (a fresh disk)")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &restorer{s: s, ctx: ctx, cancel: cancel, top: top, dec: dec, total: t.bytes, progress: progress,
		jobs: make(chan *rjob, 64), linked: map[uint64]linkTarget{}}
	var rec *recorder
	if record {
		if rec, err = s.newRecorder(); err != nil {
			return Snapshot{}, fmt.Errorf("restoring workspace snapshot %s: %w", digest, err)
		}
		defer rec.f.Close()
		r.order = make(chan *rpend, 1024)
		go rec.run(r.order)
	}
	var wg sync.WaitGroup
	for i := 0; i < workers(); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker()
		}()
	}
	err = r.run()
	close(r.jobs)
	wg.Wait()
	if err == nil {
		err = r.firstErr()
	}
	if err == nil {
		err = dec.verify(hexd)
	}
	snap := Snapshot{Digest: digest, Files: t.files, Bytes: t.bytes, Skipped: t.skipped}
	if rec != nil {
		close(r.order)
		if rerr := <-rec.done; err == nil && rerr != nil {
			err = rerr
		}
		if err == nil {
			snap.Digest, err = rec.commit(t)
		}
	}
	if err != nil {
		r.closeStack()
		removeContents(top, 0)
		return Snapshot{}, fmt.Errorf("restoring workspace snapshot %s: %w", digest, err)
	}
	if progress != nil {
		progress(Progress{Files: r.files.Load(), Bytes: r.bytes.Load(), TotalBytes: r.total})
	}
	return snap, nil
}

// recorder writes the manifest of a restored tree (RestoreAs).
type recorder struct {
	s    *Store
	f    *os.File
	h    hash.Hash
	enc  *encoder
	done chan error
}

// rpend is one restored entry on its way to the recorder: a file's once
// its worker has set it (and knows its inode and change time).
type rpend struct {
	e   *entry
	job *rjob
}

func (s *Store) newRecorder() (*recorder, error) {
	fd, err := unix.Openat(s.manifests, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return nil, storeError(err)
	}
	f := os.NewFile(uintptr(fd), "manifest")
	rec := &recorder{s: s, f: f, h: sha256.New(), done: make(chan error, 1)}
	rec.enc = newEncoder(&hashWriter{f, rec.h})
	return rec, nil
}

func (rec *recorder) run(order chan *rpend) {
	var first error
	for p := range order {
		if p.job != nil {
			<-p.job.done
			p.e.meta.ino, p.e.meta.ctime = p.job.ino, p.job.ctime
		} else {
			p.e.meta.ino, p.e.meta.ctime = 0, unix.Timespec{}
		}
		if first == nil {
			if err := rec.enc.entry(p.e); err != nil {
				first = storeError(err)
			}
		}
	}
	rec.done <- first
}

// commit makes the recorded manifest durable (its chunks are already) and
// names it.
func (rec *recorder) commit(t trailer) (string, error) {
	if err := rec.enc.finish(t); err != nil {
		return "", storeError(err)
	}
	if err := rec.f.Sync(); err != nil {
		return "", storeError(err)
	}
	hexd := hex.EncodeToString(rec.h.Sum(nil))
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", rec.f.Fd()), rec.s.manifests, hexd, unix.AT_SYMLINK_FOLLOW)
	if err != nil && err != unix.EEXIST {
		return "", storeError(err)
	}
	if err := unix.Fsync(rec.s.manifests); err != nil {
		return "", storeError(err)
	}
	return digestPrefix + hexd, nil
}

type restorer struct {
	s        *Store
	ctx      context.Context
	cancel   context.CancelFunc
	top      int
	dec      *decoder
	stack    []frame
	linked   map[uint64]linkTarget // entry number → where that file is
	n        uint64                // entries numbered so far
	jobs     chan *rjob
	order    chan *rpend // RestoreAs: every entry, in order, to the recorder
	last     *rjob       // the file job the last entry made
	total    int64
	progress func(Progress)

	files, bytes atomic.Int64
	mu           sync.Mutex
	err          error
}

type frame struct {
	fd   int
	path string
	meta meta
}

type linkTarget struct {
	dir, name string
	ino       uint64
}

type rjob struct {
	fd   int
	e    *entry
	path string
	made made
	// RestoreAs: closed once the file is set, with its inode and change
	// time then.
	done  chan struct{}
	ino   uint64
	ctime unix.Timespec
}

// made is what a new inode has before attrs sets it: its owner and mode
// as the kernel made them (known), so that attrs skips a chown or chmod
// that would change nothing (two of a small file's few syscalls).
type made struct {
	known    bool
	uid, gid uint32
	mode     uint32 // permission bits
}

var euid, egid = uint32(os.Geteuid()), uint32(os.Getegid())

// newInode is what the kernel makes of an inode created with perm in a
// directory of meta parent: the process's owner, the directory's group
// if it is set-group-ID (and that bit, for a directory), perm less the
// umask.
func newInode(parent *meta, perm uint32, dir bool) made {
	m := made{known: true, uid: euid, gid: egid, mode: perm &^ umask()}
	if parent.mode&unix.S_ISGID != 0 {
		m.gid = parent.gid
		if dir {
			m.mode |= unix.S_ISGID
		}
	}
	return m
}

// umask is the process's file mode creation mask, read once from
// /proc/self/status (umask(2) would change it for every thread for a
// moment); unknown, it counts as masking everything.
var umask = sync.OnceValue(func() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m) & 0o777
			}
		}
	}
	return 0o777
})

func (r *restorer) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.cancel()
}

func (r *restorer) firstErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *restorer) closeStack() {
	for _, f := range r.stack {
		if f.fd != r.top {
			unix.Close(f.fd)
		}
	}
	r.stack = nil
}

func (r *restorer) run() error {
	var e entry
	last := time.Now()
	for {
		if err := r.ctx.Err(); err != nil {
			if ferr := r.firstErr(); ferr != nil {
				return ferr
			}
			return err
		}
		err := r.dec.next(&e)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		r.last = nil
		if err := r.entry(&e); err != nil {
			return err
		}
		if r.order != nil {
			p := &rpend{job: r.last}
			if p.job != nil {
				p.e = p.job.e
			} else {
				p.e = e.clone()
			}
			select {
			case r.order <- p:
			case <-r.ctx.Done():
			}
		}
		if r.progress != nil && time.Since(last) > 100*time.Millisecond {
			last = time.Now()
			r.progress(Progress{Files: r.files.Load(), Bytes: r.bytes.Load(), TotalBytes: r.total})
		}
	}
}

func (r *restorer) entry(e *entry) error {
	if e.kind == kEnd {
		f := r.stack[len(r.stack)-1]
		r.stack = r.stack[:len(r.stack)-1]
		err := futimens(f.fd, f.meta.atime, f.meta.mtime)
		if f.fd != r.top {
			unix.Close(f.fd)
		}
		if err != nil {
			return entryErr(f.path, err)
		}
		return nil
	}
	idx := r.n
	r.n++
	if len(r.stack) == 0 { // the top directory
		r.stack = append(r.stack, frame{fd: r.top, path: "", meta: e.meta})
		return entryErr("/", r.attrs(r.top, -1, "", &e.meta, true, made{}))
	}
	parent := r.stack[len(r.stack)-1]
	pfd := parent.fd
	path := parent.path + "/" + e.name
	switch e.kind {
	case kDir:
		perm := e.meta.mode & 0o777
		if err := unix.Mkdirat(pfd, e.name, perm); err != nil {
			return entryErr(path, err)
		}
		fd, err := openDir(pfd, e.name)
		if err != nil {
			return entryErr(path, err)
		}
		r.stack = append(r.stack, frame{fd: fd, path: path, meta: e.meta})
		return entryErr(path, r.attrs(fd, -1, "", &e.meta, true, newInode(&parent.meta, perm, true)))
	case kFile:
		perm := e.meta.mode & 0o777
		fd, err := unix.Openat(pfd, e.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
		if err != nil {
			return entryErr(path, err)
		}
		if e.linked {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return entryErr(path, err)
			}
			r.linked[idx] = linkTarget{dir: parent.path, name: e.name, ino: st.Ino}
		}
		j := &rjob{fd: fd, e: e.clone(), path: path, made: newInode(&parent.meta, perm, false)}
		if r.order != nil {
			j.done = make(chan struct{})
			r.last = j
		}
		if len(e.chunks) > 4096 {
			r.file(j, make([]byte, ChunkSize))
			return r.firstErr()
		}
		select {
		case r.jobs <- j:
			return nil
		case <-r.ctx.Done():
			j.finish()
			return r.ctx.Err()
		}
	case kSymlink:
		if err := unix.Symlinkat(e.target, pfd, e.name); err != nil {
			return entryErr(path, err)
		}
		r.files.Add(1)
		return entryErr(path, r.attrs(-1, pfd, e.name, &e.meta, false, made{}))
	case kWhiteout:
		if err := unix.Mknodat(pfd, e.name, unix.S_IFCHR, 0); err != nil {
			return entryErr(path, err)
		}
		r.files.Add(1)
		return entryErr(path, r.attrs(-1, pfd, e.name, &e.meta, true, made{}))
	case kLink:
		r.files.Add(1)
		return entryErr(path, r.link(e, pfd))
	}
	return entryErr(path, fmt.Errorf("unknown kind %q", e.kind))
}

// attrs gives what fd, or else name in the directory pfd (never
// followed), is its owner, mode, extended attributes and, for all but
// directories (which get theirs once filled), times. Owner first: a
// change of owner clears set-ID bits and file capabilities.
func (r *restorer) attrs(fd, pfd int, name string, m *meta, chmod bool, now made) error {
	lpath := ""
	if fd < 0 {
		lpath = fmt.Sprintf("/proc/self/fd/%d/%s", pfd, name)
	}
	var err error
	if !now.known || now.uid != m.uid || now.gid != m.gid {
		if fd >= 0 {
			err = unix.Fchown(fd, int(m.uid), int(m.gid))
		} else {
			err = unix.Fchownat(pfd, name, int(m.uid), int(m.gid), unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return fmt.Errorf("setting its owner: %w", err)
		}
		now.known = false // a chown may clear set-ID bits
	}
	if chmod && (!now.known || now.mode != m.mode&0o7777) {
		if fd >= 0 {
			err = unix.Fchmod(fd, m.mode&0o7777)
		} else {
			// A whiteout this restore just made, in a directory only it
			// writes: nothing can have replaced it with a link.
			err = unix.Fchmodat(pfd, name, m.mode&0o7777, 0)
		}
		if err != nil {
			return fmt.Errorf("setting its mode: %w", err)
		}
	}
	for _, a := range m.xattrs {
		if fd >= 0 {
			err = unix.Fsetxattr(fd, a.name, []byte(a.value), 0)
		} else {
			err = unix.Lsetxattr(lpath, a.name, []byte(a.value), 0)
		}
		if err != nil {
			return fmt.Errorf("setting its extended attribute %q: %w", a.name, err)
		}
	}
	if fd < 0 {
		ts := []unix.Timespec{m.atime, m.mtime}
		if err := unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("setting its times: %w", err)
		}
	}
	return nil
}

// link makes the hard link e, in the directory pfd, to a file this
// restore made (an earlier entry marked as hard-linked).
func (r *restorer) link(e *entry, pfd int) error {
	t, ok := r.linked[e.link]
	if !ok {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "it is a hard link to an entry that is not a hard-linked file of this snapshot; refusing it")
	}
	dfd, err := r.walk(t.dir)
	if err != nil {
		return err
	}
	if dfd != r.top {
		defer unix.Close(dfd)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, t.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != t.ino {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "its hard link target is no longer the file this restore made; refusing it")
	}
	return unix.Linkat(dfd, t.name, pfd, e.name, 0)
}

// walk opens the directory dir (a "/"-separated path this restore made)
// from the top, one component at a time, never following a link.
func (r *restorer) walk(dir string) (int, error) {
	fd := r.top
	for _, c := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
		if c == "" {
			continue
		}
		nfd, err := openDir(fd, c)
		if fd != r.top {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}

func (r *restorer) worker() {
	buf := make([]byte, ChunkSize)
	for j := range r.jobs {
		if r.ctx.Err() != nil {
			j.finish()
			continue
		}
		r.file(j, buf)
	}
}

// file writes the content of j (its chunks at their offsets; holes stay
// holes), then its attributes, and closes it.
func (r *restorer) file(j *rjob, buf []byte) {
	err := r.fill(j, buf)
	if err == nil {
		err = r.attrs(j.fd, -1, "", &j.e.meta, true, j.made)
	}
	if err == nil {
		err = futimens(j.fd, j.e.meta.atime, j.e.meta.mtime)
	}
	if err == nil && j.done != nil {
		var st unix.Stat_t
		if err = unix.Fstat(j.fd, &st); err == nil {
			j.ino, j.ctime = st.Ino, st.Ctim
		}
	}
	if cerr := j.finish(); err == nil {
		err = cerr
	}
	if err != nil {
		r.fail(entryErr(j.path, err))
		return
	}
	r.files.Add(1)
}

// finish closes the job's file and says it is done.
func (j *rjob) finish() error {
	err := unix.Close(j.fd)
	if j.done != nil {
		close(j.done)
	}
	return err
}

func (r *restorer) fill(j *rjob, buf []byte) error {
	var end int64
	for _, c := range j.e.chunks {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		b, err := r.s.readChunk(c, buf)
		if err != nil {
			return err
		}
		for off := 0; off < len(b); {
			n, err := unix.Pwrite(j.fd, b[off:], c.off+int64(off))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			off += n
		}
		end = c.off + c.n
		r.bytes.Add(c.n)
	}
	if end < j.e.size {
		if err := unix.Ftruncate(j.fd, j.e.size); err != nil {
			return err
		}
	}
	return nil
}

// entryErr names the entry an error is about; a full disk says so.
func entryErr(path string, err error) error {
	if err == nil {
		return nil
	}
	if path == "" {
		path = "/"
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return errdefs.WithMessage(errdefs.ErrNoSpace, fmt.Sprintf(
			"the sandbox's disk is too small for its workspace: no space left writing %q; give the sandbox a larger disk", truncate(path)))
	}
	if k := errdefs.Kind(err); k != nil {
		return fmt.Errorf("entry %q: %w", truncate(path), err)
	}
	return fmt.Errorf("entry %q: %w", truncate(path), osErr(err))
}

func futimens(fd int, atime, mtime unix.Timespec) error {
	ts := [2]unix.Timespec{atime, mtime}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// removeContents deletes what is in the directory fd, never following a
// link: what a failed restore made.
func removeContents(fd, depth int) {
	if depth > MaxDepth+1 {
		return
	}
	ents, err := readDir(fd, 1<<62, make([]byte, 16<<10))
	if err != nil {
		return
	}
	for _, d := range ents {
		if unix.Unlinkat(fd, d.name, 0) == nil {
			continue
		}
		if sub, err := openDir(fd, d.name); err == nil {
			removeContents(sub, depth+1)
			unix.Close(sub)
			unix.Unlinkat(fd, d.name, unix.AT_REMOVEDIR)
		}
	}
}
