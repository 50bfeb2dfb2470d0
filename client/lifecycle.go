package client

import (
	"context"
	"time"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// SaveTimeout bounds the calls that save or restore a workspace (suspend,
// resume, snapshot, fork): a large workspace takes a while, a hung
// service must not hang the call.
const SaveTimeout = 30 * time.Minute

// Suspend saves sandbox id's workspace and deletes its guest.
func (c *Client) Suspend(ctx context.Context, id string) (*reinsv1.SuspendSandboxResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, SaveTimeout)
	defer cancel()
	resp, err := c.sandboxes.Suspend(ctx, connect.NewRequest(&reinsv1.SuspendSandboxRequest{Id: id}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg, nil
}

// Resume brings a suspended or paused sandbox back.
func (c *Client) Resume(ctx context.Context, id string) (*reinsv1.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, SaveTimeout)
	defer cancel()
	resp, err := c.sandboxes.Resume(ctx, connect.NewRequest(&reinsv1.ResumeSandboxRequest{Id: id}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Sandbox, nil
}

// Snapshot saves sandbox id's workspace as snapshot name.
func (c *Client) Snapshot(ctx context.Context, id, name string) (*reinsv1.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, SaveTimeout)
	defer cancel()
	resp, err := c.sandboxes.Snapshot(ctx, connect.NewRequest(&reinsv1.SnapshotSandboxRequest{Id: id, Name: name}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Snapshot, nil
}

// Fork makes count sandboxes from sandbox id's current state.
func (c *Client) Fork(ctx context.Context, id string, count int) ([]*reinsv1.Sandbox, error) {
	return c.ForkWith(ctx, id, count, false)
}

// ForkWith is Fork, with the source's memory and processes too when
// memory is set (a backend that can checkpoint: gvisor).
func (c *Client) ForkWith(ctx context.Context, id string, count int, memory bool) ([]*reinsv1.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, SaveTimeout)
	defer cancel()
	resp, err := c.sandboxes.Fork(ctx, connect.NewRequest(&reinsv1.ForkSandboxRequest{Id: id, Count: int32(count), Memory: memory}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Sandboxes, nil
}

// ListSnapshots lists the caller's snapshots.
func (c *Client) ListSnapshots(ctx context.Context) ([]*reinsv1.Snapshot, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.sandboxes.ListSnapshots(ctx, connect.NewRequest(&reinsv1.ListSnapshotsRequest{}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Snapshots, nil
}

// DeleteSnapshot removes one of the caller's snapshots (a name, or an
// unnamed one's digest).
func (c *Client) DeleteSnapshot(ctx context.Context, name string) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.sandboxes.DeleteSnapshot(ctx, connect.NewRequest(&reinsv1.DeleteSnapshotRequest{Name: name}))
	return c.wrap(err)
}

// Events calls onEvent with the lifecycle events of sandbox id ("" for all
// the caller's) after afterSeq; with follow it waits for new ones until
// ctx ends (then it returns nil).
func (c *Client) Events(ctx context.Context, id string, afterSeq int64, follow bool, onEvent func(*reinsv1.SandboxLifecycleEvent) error) error {
	stream, err := c.sandboxes.Events(ctx, connect.NewRequest(&reinsv1.SandboxEventsRequest{Id: id, AfterSeq: afterSeq, Follow: follow}))
	if err != nil {
		return c.wrap(err)
	}
	defer stream.Close()
	for stream.Receive() {
		if err := onEvent(stream.Msg()); err != nil {
			return err
		}
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		return c.wrap(err)
	}
	return nil
}
