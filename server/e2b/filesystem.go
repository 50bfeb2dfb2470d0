package e2b

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/reinsdev/reins/api/e2b/envd/filesystem"
	"github.com/reinsdev/reins/api/e2b/envd/filesystem/filesystemconnect"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// filesystemService is envd's filesystem.Filesystem over the executor's
// file calls. Paths are the sandbox's: they are handed to the executor
// as they are (a relative one made absolute under the caller's home),
// never opened by the service.
type filesystemService struct{ h *Handler }

var _ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)

// maxListed is the most entries ListDir answers; a larger tree is refused
// in words rather than cut without a word (envd's answer has no
// truncation flag).
const maxListed = 10000

// entryInfo is envd's EntryInfo for the executor's FileInfo: mode as Go's
// fs.FileMode (type bits and permissions, as envd answers it), and its
// ls-style string.
func entryInfo(fi *executorv1.FileInfo) *filesystem.EntryInfo {
	mode := fs.FileMode(fi.Mode & 0o777)
	if fi.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if fi.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if fi.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	e := &filesystem.EntryInfo{
		Name: fi.Name, Path: fi.Path, Size: int64(min(fi.Size, 1<<63-1)),
		Owner: fi.Owner, Group: fi.Group,
		ModifiedTime: timestamppb.New(time.Unix(0, fi.MtimeUnixNano)),
	}
	switch fi.Type {
	case executorv1.FileType_FILE_TYPE_FILE:
		e.Type = filesystem.FileType_FILE_TYPE_FILE
	case executorv1.FileType_FILE_TYPE_DIR:
		e.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
		mode |= fs.ModeDir
	case executorv1.FileType_FILE_TYPE_SYMLINK:
		e.Type = filesystem.FileType_FILE_TYPE_SYMLINK
		mode |= fs.ModeSymlink
		target := fi.SymlinkTarget
		e.SymlinkTarget = &target
	default:
		mode |= fs.ModeIrregular
	}
	e.Mode, e.Permissions = uint32(mode), mode.String()
	return e
}

// paths reads a call's account and makes its paths absolute.
func paths(hdr http.Header, ps ...*string) error {
	acct, err := accountOf(hdr)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if *p == "" {
			return errdefs.WithMessage(errdefs.ErrInvalidArgument, "the path is empty")
		}
		*p = acct.abs(*p)
	}
	return nil
}

func stat(ctx context.Context, sb *client.Sandbox, p string) (*filesystem.EntryInfo, error) {
	resp, err := client.Unary(ctx, sb, sb.RPC().Stat, &executorv1.StatRequest{Path: p})
	if err != nil {
		return nil, err
	}
	return entryInfo(resp.Info), nil
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	p := req.Msg.Path
	if err := paths(req.Header(), &p); err != nil {
		return nil, err
	}
	e, err := stat(ctx, callOf(ctx).sb, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	sb, p := callOf(ctx).sb, req.Msg.Path
	acct, err := accountOf(req.Header())
	if err != nil {
		return nil, err
	}
	p = acct.abs(p)
	// envd answers already_exists for an existing directory (the SDK's
	// makeDir then says false); the executor's MakeDir with parents
	// does not.
	if _, err := stat(ctx, sb, p); err == nil {
		return nil, errdefs.WithMessage(errdefs.ErrAlreadyExists, fmt.Sprintf("%s already exists", p))
	} else if errdefs.Kind(err) != errdefs.ErrNotFound {
		return nil, err
	}
	if err := makeDir(ctx, sb, acct, p); err != nil {
		return nil, err
	}
	e, err := stat(ctx, sb, p)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

// makeDir makes p and its parents as the account, as envd does: they
// are the account's, and where it may not write it may not make them.
func makeDir(ctx context.Context, sb *client.Sandbox, acct account, p string) error {
	if msg, err := runArgv(ctx, sb, acct.name, []string{"mkdir", "-p", "--", p}); err != nil || msg != "" {
		return cmp.Or(err, errdefs.WithMessage(errdefs.ErrPermissionDenied, fmt.Sprintf("cannot make %s as %s: %s", p, acct.name, msg)))
	}
	return nil
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	sb, src, dst := callOf(ctx).sb, req.Msg.Source, req.Msg.Destination
	if err := paths(req.Header(), &src, &dst); err != nil {
		return nil, err
	}
	if _, err := client.Unary(ctx, sb, sb.RPC().Move, &executorv1.MoveRequest{Src: src, Dst: dst, Overwrite: true}); err != nil {
		return nil, err
	}
	e, err := stat(ctx, sb, dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	sb, p := callOf(ctx).sb, req.Msg.Path
	if err := paths(req.Header(), &p); err != nil {
		return nil, err
	}
	resp, err := client.Unary(ctx, sb, sb.RPC().ListDir, &executorv1.ListDirRequest{Path: p, Depth: max(req.Msg.Depth, 1), Limit: maxListed})
	if err != nil {
		return nil, err
	}
	if resp.Truncated {
		return nil, errdefs.WithMessage(errdefs.ErrTooLarge,
			fmt.Sprintf("%s has more than %d entries down to depth %d: list less deep, or a subdirectory", p, maxListed, max(req.Msg.Depth, 1)))
	}
	out := &filesystem.ListDirResponse{Entries: make([]*filesystem.EntryInfo, len(resp.Entries))}
	for i, fi := range resp.Entries {
		out.Entries[i] = entryInfo(fi)
	}
	return connect.NewResponse(out), nil
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	sb, p := callOf(ctx).sb, req.Msg.Path
	if err := paths(req.Header(), &p); err != nil {
		return nil, err
	}
	if _, err := client.Unary(ctx, sb, sb.RPC().Remove, &executorv1.RemoveRequest{Path: p, Recursive: true}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// fsEvent is envd's event for a change under the watched directory dir:
// its name relative to dir.
func fsEvent(ctx context.Context, sb *client.Sandbox, dir string, ch *executorv1.FileChange, withEntry bool) *filesystem.FilesystemEvent {
	name := strings.TrimPrefix(strings.TrimPrefix(ch.Path, dir), "/")
	if ch.Path == dir {
		name = path.Base(dir)
	}
	ev := &filesystem.FilesystemEvent{Name: name, Type: filesystem.EventType(ch.Op)}
	if withEntry && ch.Op != executorv1.ChangeOp_CHANGE_OP_REMOVE && ch.Op != executorv1.ChangeOp_CHANGE_OP_RENAME {
		if e, err := stat(ctx, sb, ch.Path); err == nil {
			ev.Entry = e
		}
	}
	return ev
}

// errLost ends a watch whose events the executor could not keep: envd's
// events have no way to say some were lost, and none is lost silently.
func errLost(n uint64) error {
	return errdefs.WithMessage(errdefs.ErrResourceExhausted,
		fmt.Sprintf("%d changes were lost because they came faster than they were read: watch again, and list the directory to catch up", n))
}

func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	sb, dir := callOf(ctx).sb, req.Msg.Path
	if err := paths(req.Header(), &dir); err != nil {
		return err
	}
	s := &watchSender{send: stream.Send}
	ka := &filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}
	stop := func() {}
	defer func() { stop() }()
	err := sb.Watch(ctx, &executorv1.WatchRequest{Path: dir, Recursive: req.Msg.Recursive}, func(ev *executorv1.WatchEvent) error {
		switch e := ev.Event.(type) {
		case *executorv1.WatchEvent_Started:
			// A modified executor may say it again: one ticker, still.
			stop()
			stop = every(keepaliveInterval(req.Header()), func() { s.event(ka) })
			return s.event(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}})
		case *executorv1.WatchEvent_Change:
			return s.event(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{
				Filesystem: fsEvent(ctx, sb, dir, e.Change, req.Msg.IncludeEntry)}})
		case *executorv1.WatchEvent_Dropped:
			return errLost(e.Dropped)
		}
		return nil
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// watchSender serialises a WatchDir stream's sends.
type watchSender struct {
	mu   sync.Mutex
	send func(*filesystem.WatchDirResponse) error
}

func (s *watchSender) event(ev *filesystem.WatchDirResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.send(ev)
}
