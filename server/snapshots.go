package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Snapshots is what Snapshot, Fork, ListSnapshots and DeleteSnapshot need
// of the sandboxes: the manager has it.
type Snapshots interface {
	Snapshot(ctx context.Context, tenant, id, name string) (sandbox.SnapshotInfo, error)
	Fork(ctx context.Context, tenant, id string, n int) ([]sandbox.Info, error)
	ListSnapshots(ctx context.Context, tenant string) ([]sandbox.SnapshotInfo, error)
	DeleteSnapshot(ctx context.Context, tenant, name string) error
}

// memoryForker is what a fork with memory needs: the manager has it
// (ForkMemory, on a backend that can checkpoint).
type memoryForker interface {
	ForkMemory(ctx context.Context, tenant, id string, n int) ([]sandbox.Info, error)
}

// WithSnapshots serves Snapshot, Fork, ListSnapshots and DeleteSnapshot.
func (s *Server) WithSnapshots(x Snapshots) *Server {
	s.snapshots = x
	return s
}

func (s *Server) needSnapshots() error {
	if s.snapshots == nil {
		return fmt.Errorf("this service keeps no snapshots: %w", errdefs.ErrUnimplemented)
	}
	return nil
}

// Snapshot saves a running sandbox's workspace under a name.
func (s *Server) Snapshot(ctx context.Context, req *connect.Request[reinsv1.SnapshotSandboxRequest]) (*connect.Response[reinsv1.SnapshotSandboxResponse], error) {
	if err := s.needSnapshots(); err != nil {
		return nil, err
	}
	if req.Msg.Name == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "a snapshot needs a name (reins sandbox snapshot ID --name NAME)")
	}
	snap, err := s.snapshots.Snapshot(ctx, tenant(ctx), req.Msg.Id, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.SnapshotSandboxResponse{Snapshot: SnapshotToProto(snap)}), nil
}

// Fork makes count sandboxes from a running sandbox's current state.
func (s *Server) Fork(ctx context.Context, req *connect.Request[reinsv1.ForkSandboxRequest]) (*connect.Response[reinsv1.ForkSandboxResponse], error) {
	if err := s.needSnapshots(); err != nil {
		return nil, err
	}
	fork := s.snapshots.Fork
	if req.Msg.Memory {
		mf, ok := s.snapshots.(memoryForker)
		if !ok {
			return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot fork a sandbox's memory: fork without --memory")
		}
		fork = mf.ForkMemory
	}
	infos, err := fork(ctx, tenant(ctx), req.Msg.Id, int(req.Msg.Count))
	if err != nil {
		return nil, err
	}
	resp := &reinsv1.ForkSandboxResponse{}
	for _, info := range infos {
		resp.Sandboxes = append(resp.Sandboxes, RecordToProto(info))
	}
	return connect.NewResponse(resp), nil
}

// ListSnapshots lists the caller's snapshots, each with who needs it.
func (s *Server) ListSnapshots(ctx context.Context, req *connect.Request[reinsv1.ListSnapshotsRequest]) (*connect.Response[reinsv1.ListSnapshotsResponse], error) {
	if err := s.needSnapshots(); err != nil {
		return nil, err
	}
	list, err := s.snapshots.ListSnapshots(ctx, tenant(ctx))
	if err != nil {
		return nil, err
	}
	resp := &reinsv1.ListSnapshotsResponse{}
	for _, snap := range list {
		resp.Snapshots = append(resp.Snapshots, SnapshotToProto(snap))
	}
	return connect.NewResponse(resp), nil
}

// DeleteSnapshot removes one of the caller's snapshots, refused while
// something needs it.
func (s *Server) DeleteSnapshot(ctx context.Context, req *connect.Request[reinsv1.DeleteSnapshotRequest]) (*connect.Response[reinsv1.DeleteSnapshotResponse], error) {
	if err := s.needSnapshots(); err != nil {
		return nil, err
	}
	if err := s.snapshots.DeleteSnapshot(ctx, tenant(ctx), req.Msg.Name); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.DeleteSnapshotResponse{}), nil
}

// SnapshotToProto converts a snapshot record for the wire: never its
// host-side layer paths.
func SnapshotToProto(s sandbox.SnapshotInfo) *reinsv1.Snapshot {
	return &reinsv1.Snapshot{
		Name: s.Name, Digest: s.Digest, Sandbox: s.Sandbox, Image: s.Image, ImageDigest: s.ImageDigest,
		CreatedUnixNano: nano(s.CreatedAt), Files: s.Files, Bytes: s.Bytes, StoredBytes: s.StoredBytes,
		NeededBy: s.NeededBy,
	}
}
