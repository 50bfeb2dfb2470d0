package executor

import (
	"context"
	"fmt"
	"path"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// StagingDir is where, inside a sandbox, files are staged for a host that
// reads and writes the sandbox's root filesystem directly (Stage, Place):
// on the root filesystem's own mount, so that a hard link or a rename
// moves a file in or out of it without a copy.
const StagingDir = "/.reins/xfer"

// prepareStaging empties and makes the staging directory: what an earlier
// life of the sandbox (or its processes) left there goes. Without it the
// executor stages nothing and transfers go over the socket.
func (s *Server) prepareStaging() {
	dir := s.cfg.StagingDir
	if dir == "" {
		return
	}
	if err := s.fs.Remove(dir, true); err != nil && errdefs.Kind(err) != errdefs.ErrNotFound {
		s.log.Warn("cannot empty the staging directory; transfers go over the socket", "dir", dir, "err", err)
		s.cfg.StagingDir = ""
		return
	}
	if err := s.fs.MakeDir(dir, true, 0o700); err != nil {
		s.log.Warn("cannot make the staging directory; transfers go over the socket", "dir", dir, "err", err)
		s.cfg.StagingDir = ""
	}
}

// stagedPath is the sandbox path of a staged file, refusing names that are
// not 32 lowercase hex digits (the caller's random choice).
func (s *Server) stagedPath(name string) (string, error) {
	if s.cfg.StagingDir == "" {
		return "", errdefs.WithMessage(errdefs.ErrFailedPrecondition, "this executor has no staging directory; use Upload and Download")
	}
	if len(name) != 32 {
		return "", errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("staged name %q: want 32 lowercase hex digits", name))
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("staged name %q: want 32 lowercase hex digits", name))
		}
	}
	return path.Join(s.cfg.StagingDir, name), nil
}

func (s *Server) Stage(ctx context.Context, req *connect.Request[executorv1.StageRequest]) (*connect.Response[executorv1.StageResponse], error) {
	dst, err := s.stagedPath(req.Msg.Name)
	if err != nil {
		return nil, err
	}
	fi, err := s.fs.Link(req.Msg.Path, dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.StageResponse{
		Size: uint64(fi.Size()), Mode: uint32(fi.Mode().Perm()), MtimeUnixNano: fi.ModTime().UnixNano(),
	}), nil
}

func (s *Server) Place(ctx context.Context, req *connect.Request[executorv1.PlaceRequest]) (*connect.Response[executorv1.PlaceResponse], error) {
	src, err := s.stagedPath(req.Msg.Name)
	if err != nil {
		return nil, err
	}
	n, err := s.fs.Place(src, req.Msg.Path, req.Msg.Mode, req.Msg.FollowLinks)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.PlaceResponse{Size: uint64(n)}), nil
}
