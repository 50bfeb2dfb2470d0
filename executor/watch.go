package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// The bounds of Watch: watches at once per executor, directories per
// watch, events buffered per watch while its caller is slow.
const (
	MaxWatches    = 32
	MaxWatchDirs  = 4096
	WatchBuffered = 4096
)

// watchCount is the watches running (Server.watches).
type watchCount struct{ n atomic.Int32 }

func (c *watchCount) acquire() bool {
	if c.n.Add(1) > MaxWatches {
		c.n.Add(-1)
		return false
	}
	return true
}

func (c *watchCount) release() { c.n.Add(-1) }

// Watch reports changes under a directory with inotify (which gVisor
// implements), until the caller goes away.
func (s *Server) Watch(ctx context.Context, req *connect.Request[executorv1.WatchRequest], stream *connect.ServerStream[executorv1.WatchEvent]) error {
	if !s.watches.acquire() {
		return errdefs.WithMessage(errdefs.ErrResourceExhausted,
			fmt.Sprintf("the sandbox already has %d watches, the most it keeps: stop one first", MaxWatches))
	}
	defer s.watches.release()
	abs, err := s.fs.Resolve(req.Msg.Path)
	if err != nil {
		return err
	}
	info, err := s.fs.Stat(abs)
	if err != nil {
		return err
	}
	if info.Type != executorv1.FileType_FILE_TYPE_DIR {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("%s is not a directory: watch the directory it is in", abs))
	}
	w, err := newWatcher(s.fs.HostPath, req.Msg.Recursive)
	if err != nil {
		return err
	}
	defer w.close()
	if err := w.add(abs); err != nil {
		return err
	}
	if err := stream.Send(&executorv1.WatchEvent{Event: &executorv1.WatchEvent_Started{Started: &executorv1.WatchStarted{}}}); err != nil {
		return nil
	}
	go w.read()
	go func() { <-ctx.Done(); w.file.Close() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.failed:
			return err
		case <-w.lost:
		case ch := <-w.events:
			if err := w.sendDropped(stream); err != nil {
				return nil
			}
			if err := stream.Send(&executorv1.WatchEvent{Event: &executorv1.WatchEvent_Change{Change: ch}}); err != nil {
				return nil
			}
			continue
		}
		if err := w.sendDropped(stream); err != nil {
			return nil
		}
	}
}

// watcher is one inotify instance: its watched directories by
// descriptor, and the changes read but not yet sent.
type watcher struct {
	file      *os.File
	fd        int
	hostPath  func(string) string
	recursive bool
	dirs      map[int32]string // watch descriptor → directory inside the sandbox (read's goroutine after add)
	top       int32            // the watched directory's descriptor
	events    chan *executorv1.FileChange
	lost      chan struct{} // a wake-up: dropped grew
	dropped   atomic.Uint64
	failed    chan error
}

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

func newWatcher(hostPath func(string) string, recursive bool) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, errdefs.WithMessage(errdefs.ErrResourceExhausted, "the sandbox cannot make an inotify instance: "+err.Error())
	}
	return &watcher{
		file: os.NewFile(uintptr(fd), "inotify"), fd: fd, hostPath: hostPath, recursive: recursive,
		dirs: map[int32]string{}, events: make(chan *executorv1.FileChange, WatchBuffered),
		lost: make(chan struct{}, 1), failed: make(chan error, 1),
	}, nil
}

func (w *watcher) close() { w.file.Close() }

// add watches dir and, recursively, the directories under it (not
// following symbolic links).
func (w *watcher) add(dir string) error {
	if len(w.dirs) >= MaxWatchDirs {
		return errdefs.WithMessage(errdefs.ErrResourceExhausted,
			fmt.Sprintf("the watch would cover more than %d directories: watch a smaller tree, or not recursively", MaxWatchDirs))
	}
	wd, err := unix.InotifyAddWatch(w.fd, w.hostPath(dir), watchMask)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return errdefs.WithMessage(errdefs.ErrResourceExhausted, "the sandbox's inotify watches are used up")
		}
		return errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("cannot watch %s: %v", dir, err))
	}
	if len(w.dirs) == 0 {
		w.top = int32(wd)
	}
	w.dirs[int32(wd)] = dir
	if !w.recursive {
		return nil
	}
	entries, err := os.ReadDir(w.hostPath(dir))
	if err != nil {
		return nil // gone or unreadable since: nothing under it to watch
	}
	for _, e := range entries {
		if e.IsDir() { // a symbolic link is not entered
			if err := w.add(path.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// read turns inotify's records into changes until the file is closed.
func (w *watcher) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			return // closed: the caller went away
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			end := off + unix.SizeofInotifyEvent + int(raw.Len)
			if end > n {
				break
			}
			name := cString(buf[off+unix.SizeofInotifyEvent : end])
			off = end
			if err := w.record(raw.Wd, raw.Mask, name); err != nil {
				w.failed <- err
				return
			}
		}
	}
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// record queues the change one inotify record says, or counts it lost.
func (w *watcher) record(wd int32, mask uint32, name string) error {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.lose()
		return nil
	}
	dir, ok := w.dirs[wd]
	if !ok {
		return nil
	}
	if mask&unix.IN_IGNORED != 0 {
		delete(w.dirs, wd)
		return nil
	}
	p := dir
	if name != "" {
		p = path.Join(dir, name)
	}
	var op executorv1.ChangeOp
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		op = executorv1.ChangeOp_CHANGE_OP_CREATE
		if mask&unix.IN_ISDIR != 0 && w.recursive {
			if err := w.add(p); err != nil {
				return err
			}
		}
	case mask&unix.IN_MODIFY != 0:
		op = executorv1.ChangeOp_CHANGE_OP_WRITE
	case mask&unix.IN_DELETE != 0:
		op = executorv1.ChangeOp_CHANGE_OP_REMOVE
	case mask&unix.IN_MOVED_FROM != 0:
		op = executorv1.ChangeOp_CHANGE_OP_RENAME
	case mask&unix.IN_ATTRIB != 0:
		op = executorv1.ChangeOp_CHANGE_OP_CHMOD
	case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
		// Its parent's watch reports it, if it is watched; the top
		// directory's own end is reported here.
		if wd != w.top {
			return nil
		}
		op = executorv1.ChangeOp_CHANGE_OP_REMOVE
	default:
		return nil
	}
	select {
	case w.events <- &executorv1.FileChange{Path: strings.ToValidUTF8(p, "\uFFFD"), Op: op}:
	default:
		w.lose()
	}
	return nil
}

func (w *watcher) lose() {
	w.dropped.Add(1)
	select {
	case w.lost <- struct{}{}:
	default:
	}
}

func (w *watcher) sendDropped(stream *connect.ServerStream[executorv1.WatchEvent]) error {
	n := w.dropped.Swap(0)
	if n == 0 {
		return nil
	}
	return stream.Send(&executorv1.WatchEvent{Event: &executorv1.WatchEvent_Dropped{Dropped: n}})
}
