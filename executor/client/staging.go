package client

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
)

// Staged transfers (docs/decisions/0017-staged-transfers.md): when the
// host sees the sandbox's root filesystem (the host-local backends mount
// it), a single regular file does not cross the executor's socket, whose
// every byte gVisor makes expensive. A download asks the executor to
// hard-link the file into the staging directory (Stage) and reads it from
// the host; an upload writes the file into the staging directory from the
// host and asks the executor to move it into place (Place). Directories,
// and any file the executor will not stage, go as tar streams as before.
//
// The staging directory is the sandbox's to write: the host reaches it
// only beneath a descriptor of the root filesystem's mount point (a host
// directory), with openat2 refusing every symbolic link, magic link and
// mount crossing; it opens a staged file as O_PATH first and reads it only
// when it is a regular file, and no more of it than the executor announced
// (which the file's size must match); it creates files with O_EXCL.

// stagingName is StagingDir (executor package) beneath the root.
const stagingName = ".reins/xfer"

// WithHostRoot says where the host sees the sandbox's root filesystem (a
// directory the caller owns: the overlay's mount point), enabling staged
// transfers of single files.
func WithHostRoot(dir string) Option {
	return func(c *Client) { c.hostRoot = dir }
}

var confined = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// ErrNotStaged is returned when the staging directory or a staged file is
// not what the host expects (a symlink, another mount, not a regular file,
// not the announced size): the sandbox changed it.
var ErrNotStaged = errors.New("the staged file is not a regular file of the announced size beneath the staging directory")

// openStagingDir opens the staging directory beneath hostRoot (O_PATH),
// refusing symlinks and mounts on the way.
func openStagingDir(hostRoot string) (int, error) {
	root, err := unix.Open(hostRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, stagingName, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: uint64(confined),
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR) {
		return -1, ErrNotStaged
	}
	return fd, err
}

// OpenStaged opens the file the executor staged as name, for reading at
// most size bytes: it must be a regular file of exactly size bytes
// (ErrNotStaged otherwise), reached beneath hostRoot without following
// any link. It never opens a fifo, a device or anything outside.
func OpenStaged(hostRoot, name string, size int64) (*os.File, error) {
	dir, err := openStagingDir(hostRoot)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	p, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: uint64(confined),
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return nil, ErrNotStaged
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(p)
	var st unix.Stat_t
	if err := unix.Fstat(p, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != size {
		return nil, ErrNotStaged
	}
	// Reopen the very inode for reading through our own descriptor's
	// magic link (host procfs), whatever the name points to by now.
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", p), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Ino != st.Ino || st2.Dev != st.Dev || st2.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, ErrNotStaged
	}
	return os.NewFile(uintptr(fd), name), nil
}

// CreateStaged creates the file name in the staging directory beneath
// hostRoot, new (O_EXCL), without following any link, owned by the
// staging directory's owner (the sandbox's root, as the host numbers it).
func CreateStaged(hostRoot, name string) (*os.File, error) {
	dir, err := openStagingDir(hostRoot)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return nil, err
	}
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Mode:    0o600,
		Resolve: uint64(confined),
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EEXIST) {
		return nil, ErrNotStaged
	}
	if err != nil {
		return nil, err
	}
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		unix.Unlinkat(dir, name, 0)
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// removeStaged unlinks name from the staging directory (an upload that
// failed before Place).
func removeStaged(hostRoot, name string) {
	if dir, err := openStagingDir(hostRoot); err == nil {
		unix.Unlinkat(dir, name, 0)
		unix.Close(dir)
	}
}

// hold records f as an open staged file, closed by Close; false (and f
// closed) when the client is closed already.
func (c *Client) hold(f *os.File) bool {
	c.stagedMu.Lock()
	defer c.stagedMu.Unlock()
	if c.closed {
		f.Close()
		return false
	}
	if c.staged == nil {
		c.staged = map[*os.File]struct{}{}
	}
	c.staged[f] = struct{}{}
	return true
}

// release closes a file hold recorded.
func (c *Client) release(f *os.File) error {
	c.stagedMu.Lock()
	delete(c.staged, f)
	c.stagedMu.Unlock()
	return f.Close()
}

// errClosedDuring is a staged transfer cut by Close: the sandbox stopped.
func errClosedDuring(what string) error {
	return errdefs.WithMessage(errdefs.ErrUnavailable, fmt.Sprintf("the sandbox stopped during the %s; start it and try again", what))
}

func stagedName() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// stageFile stages the sandbox file p and opens it from the host, or says
// ok false when it cannot be staged (a directory, an executor without
// staging, another mount, a staging directory the sandbox tampered with):
// then the caller reads it over the socket. The file is held (see hold):
// release it.
func (c *Client) stageFile(ctx context.Context, p string) (f *os.File, st *executorv1.StageResponse, ok bool) {
	if c.hostRoot == "" {
		return nil, nil, false
	}
	base := path.Base(path.Clean(p))
	if base == "." || base == "/" || strings.Contains(p, "..") {
		return nil, nil, false // the socket path names it as the executor resolves it
	}
	// A host view without the staging directory (a runc sandbox's, whose
	// root is mounted elsewhere; one the sandbox broke) reads nothing:
	// then do not make the sandbox link (and perhaps copy up) the file.
	dir, derr := openStagingDir(c.hostRoot)
	if derr != nil {
		return nil, nil, false
	}
	unix.Close(dir)
	name := stagedName()
	resp, err := c.rpc.Stage(ctx, connect.NewRequest(&executorv1.StageRequest{Path: p, Name: name}))
	if err != nil {
		// Not a regular file, not there, an executor without staging, a
		// staging directory the sandbox broke: the socket path does it,
		// or says why not in its own words.
		return nil, nil, false
	}
	f, oerr := OpenStaged(c.hostRoot, name, int64(resp.Msg.Size))
	// Unlinked as soon as we hold it (or failed to): the sandbox's disk
	// keeps the link for no longer than the open.
	// (A link left behind by a failed Remove goes when the executor next
	// starts: it empties the staging directory.)
	c.rpc.Remove(ctx, connect.NewRequest(&executorv1.RemoveRequest{Path: path.Join("/", stagingName, name)}))
	if oerr != nil || !c.hold(f) {
		return nil, nil, false // tampered with, gone, or closed: the socket it is
	}
	return f, resp.Msg, true
}

// stageOut stages the sandbox file p and returns a tar stream of it read
// from the host, or ok false when it cannot be staged (see stageFile).
func (c *Client) stageOut(ctx context.Context, p string) (r io.ReadCloser, ok bool, err error) {
	f, st, ok := c.stageFile(ctx, p)
	if !ok {
		return nil, false, nil
	}
	var hb bytes.Buffer
	tw := tar.NewWriter(&hb)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Base(path.Clean(p)), Size: int64(st.Size), Mode: int64(st.Mode & 0o7777),
		ModTime: time.Unix(0, st.MtimeUnixNano)}
	if err := tw.WriteHeader(hdr); err != nil {
		c.release(f)
		return nil, false, err
	}
	pad := (512 - hdr.Size%512) % 512
	return &stagedTar{
		Reader: io.MultiReader(&hb, &exactReader{r: f, n: hdr.Size}, bytes.NewReader(make([]byte, pad+1024))),
		f:      f, c: c,
	}, true, nil
}

type stagedTar struct {
	io.Reader
	f *os.File
	c *Client
}

func (s *stagedTar) Close() error { return s.c.release(s.f) }

// exactReader reads exactly n bytes of r: fewer is an error (the file
// shrank while it was read), and it never reads past n.
type exactReader struct {
	r io.Reader
	n int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.n {
		p = p[:e.n]
	}
	n, err := e.r.Read(p)
	e.n -= int64(n)
	if errors.Is(err, os.ErrClosed) {
		return n, errClosedDuring("download")
	}
	if err == io.EOF && e.n > 0 {
		return n, errdefs.WithMessage(errdefs.ErrFailedPrecondition, "the file shrank while it was downloaded; try again")
	}
	if e.n == 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

// stageIn uploads the local regular file src as dir/<base of src>
// through the staging directory, or says ok false when it cannot (no host
// root, a staging directory the sandbox tampered with, an executor
// without staging).
func (c *Client) stageIn(ctx context.Context, src, dir string) (resp *executorv1.UploadResponse, ok bool, err error) {
	if c.hostRoot == "" {
		return nil, false, nil
	}
	in, err := os.Open(src)
	if err != nil {
		return nil, false, nil // the tar path says it in its words
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, false, nil
	}
	mt := fi.ModTime()
	name, n, ok, err := c.stageWrite(in, &mt)
	if !ok || err != nil {
		if err != nil {
			err = fmt.Errorf("uploading %s to %s: %w", filepath.Base(src), dir, err)
		}
		return nil, ok, err
	}
	if dir == "" {
		dir = "."
	}
	pr, err := c.rpc.Place(ctx, connect.NewRequest(&executorv1.PlaceRequest{
		Name: name, Path: path.Join(dir, filepath.Base(src)), Mode: uint32(fi.Mode().Perm()),
	}))
	if err != nil {
		removeStaged(c.hostRoot, name)
		// Another mount (a tmpfs /tmp), an executor without staging:
		// the tar path does it.
		if placeElsewhere(err) {
			return nil, false, nil
		}
		return nil, true, err
	}
	if pr.Msg.Size != uint64(n) {
		return nil, true, errdefs.WithMessage(errdefs.ErrInternal, fmt.Sprintf(
			"upload of %s: wrote %d bytes, the sandbox has %d", filepath.Base(src), n, pr.Msg.Size))
	}
	return &executorv1.UploadResponse{Files: 1, Bytes: uint64(n)}, true, nil
}

// placeElsewhere reports a Place the executor could not do by a rename
// (another mount, an executor without staging): the socket path can.
func placeElsewhere(err error) bool {
	k := errdefs.Kind(err)
	return k == errdefs.ErrUnimplemented || k == errdefs.ErrFailedPrecondition
}

// stageWrite writes what r yields into a new file of the staging
// directory, from the host (with mtime as its time, when set), and
// returns the file's name and size for Place. ok false: there is no
// staging directory to write to, and nothing was read from r. On an
// error nothing is left staged; a full disk is errdefs.ErrNoSpace.
func (c *Client) stageWrite(r io.Reader, mtime *time.Time) (name string, n int64, ok bool, err error) {
	if c.hostRoot == "" {
		return "", 0, false, nil
	}
	name = stagedName()
	out, err := CreateStaged(c.hostRoot, name)
	if err != nil {
		return "", 0, false, nil
	}
	if !c.hold(out) {
		removeStaged(c.hostRoot, name)
		return "", 0, false, nil
	}
	n, err = out.ReadFrom(r)
	if err == nil && mtime != nil { // the time the tar path would keep
		// Through the file's own reference to its descriptor: Close
		// (from another goroutine) cannot free and reuse the number
		// under it.
		var rc syscall.RawConn
		if rc, err = out.SyscallConn(); err == nil {
			mt := unix.NsecToTimeval(mtime.UnixNano())
			var terr error
			if err = rc.Control(func(fd uintptr) { terr = unix.Futimes(int(fd), []unix.Timeval{mt, mt}) }); err == nil {
				err = terr
			}
		}
	}
	if cerr := c.release(out); err == nil {
		err = cerr
	}
	if errors.Is(err, os.ErrClosed) {
		err = errClosedDuring("upload")
	}
	if err != nil {
		removeStaged(c.hostRoot, name)
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return "", 0, true, errdefs.WithMessage(errdefs.ErrNoSpace,
				"the sandbox's disk is full; free space in the sandbox or create it with a larger disk")
		}
		return "", 0, true, err
	}
	return name, n, true, nil
}

// copyStaged extracts a staged tar stream into dst.
func copyStaged(r io.Reader, dst string) (int, int64, error) {
	files, n, err := archive.Extract(r, dst)
	if err == nil {
		_, err = io.Copy(io.Discard, r)
	}
	return files, n, err
}

// StagedDownload is Download's fast path on its own, for a relay (the
// service's API): a tar stream of the regular file p read from the host's
// view of the sandbox's root, or ok false when p cannot be staged (then
// use Download). Close the reader.
func (c *Client) StagedDownload(ctx context.Context, p string) (r io.ReadCloser, ok bool, err error) {
	return c.stageOut(ctx, p)
}
