package client

import (
	"context"
	"io"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
)

func (c *Client) runs() reinsv1connect.RunServiceClient {
	return reinsv1connect.NewRunServiceClient(c.http, c.URL)
}

// StartRun starts an agent run.
func (c *Client) StartRun(ctx context.Context, spec *reinsv1.RunSpec) (*reinsv1.Run, error) {
	return c.StartRunWithUploads(ctx, spec, nil)
}

// StartRunWithUploads starts a run whose sandbox gets the files of the
// tar archive uploads (names are sandbox paths without the leading "/",
// at most 12 MiB) before its first step; see RunSpec.uploads.
func (c *Client) StartRunWithUploads(ctx context.Context, spec *reinsv1.RunSpec, uploads []byte) (*reinsv1.Run, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.runs().Start(ctx, connect.NewRequest(&reinsv1.StartRunRequest{Spec: spec, Uploads: uploads}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Run, nil
}

// GetRun returns a run.
func (c *Client) GetRun(ctx context.Context, id string) (*reinsv1.Run, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.runs().Get(ctx, connect.NewRequest(&reinsv1.GetRunRequest{Id: id}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Run, nil
}

// ListRuns lists runs, newest first, optionally of some statuses.
func (c *Client) ListRuns(ctx context.Context, statuses []reinsv1.RunStatus) ([]*reinsv1.Run, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.runs().List(ctx, connect.NewRequest(&reinsv1.ListRunsRequest{Statuses: statuses}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Runs, nil
}

// RunEvents calls fn with each event of a run's log after afterSeq; with
// follow, until the run finishes.
func (c *Client) RunEvents(ctx context.Context, id string, afterSeq int64, follow bool, fn func(*reinsv1.RunEvent) error) error {
	stream, err := c.runs().Events(ctx, connect.NewRequest(&reinsv1.RunEventsRequest{Id: id, AfterSeq: afterSeq, Follow: follow}))
	if err != nil {
		return c.wrap(err)
	}
	return receive(c, stream, fn)
}

// CancelRun ends a run now.
func (c *Client) CancelRun(ctx context.Context, id string) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.runs().Cancel(ctx, connect.NewRequest(&reinsv1.CancelRunRequest{Id: id}))
	return c.wrap(err)
}

// AnswerRun replies to a run waiting on ask_human.
func (c *Client) AnswerRun(ctx context.Context, id, text string) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.runs().Answer(ctx, connect.NewRequest(&reinsv1.AnswerRunRequest{Id: id, Text: text}))
	return c.wrap(err)
}

// Artifacts lists a run's artifacts.
func (c *Client) Artifacts(ctx context.Context, id string) ([]*reinsv1.Artifact, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.runs().ListArtifacts(ctx, connect.NewRequest(&reinsv1.ListArtifactsRequest{Id: id}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Artifacts, nil
}

// DownloadArtifact writes an artifact (by name or digest) to w.
func (c *Client) DownloadArtifact(ctx context.Context, id, nameOrDigest string, w io.Writer) error {
	stream, err := c.runs().GetArtifact(ctx, connect.NewRequest(&reinsv1.GetArtifactRequest{Id: id, NameOrDigest: nameOrDigest}))
	if err != nil {
		return c.wrap(err)
	}
	defer stream.Close()
	for stream.Receive() {
		if _, err := w.Write(stream.Msg().Data); err != nil {
			return err
		}
	}
	return c.wrap(stream.Err())
}

// Approve lets a held call run; edit (JSON) replaces its arguments; always
// approves the tool for the rest of the run.
func (c *Client) Approve(ctx context.Context, id, callID, edit string, always bool) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.runs().Approve(ctx, connect.NewRequest(&reinsv1.ApproveRequest{Id: id, CallId: callID, Edit: edit, Always: always}))
	return c.wrap(err)
}

// Deny refuses a held call; the model receives the reason.
func (c *Client) Deny(ctx context.Context, id, callID, reason string) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.runs().Deny(ctx, connect.NewRequest(&reinsv1.DenyRequest{Id: id, CallId: callID, Reason: reason}))
	return c.wrap(err)
}

// PauseRun stops a run at its next safe point.
func (c *Client) PauseRun(ctx context.Context, id string) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.runs().Pause(ctx, connect.NewRequest(&reinsv1.PauseRunRequest{Id: id}))
	return c.wrap(err)
}

// ResumeRun continues a paused run.
func (c *Client) ResumeRun(ctx context.Context, id string) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.runs().Resume(ctx, connect.NewRequest(&reinsv1.ResumeRunRequest{Id: id}))
	return c.wrap(err)
}

// ForkRun starts a run from another's history up to atSeq.
func (c *Client) ForkRun(ctx context.Context, id string, atSeq int64, model, script string) (*reinsv1.Run, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.runs().Fork(ctx, connect.NewRequest(&reinsv1.ForkRunRequest{Id: id, AtSeq: atSeq, Model: model, Script: script}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Run, nil
}

// VerifyRun starts a run replaying id's recorded model responses.
func (c *Client) VerifyRun(ctx context.Context, id string) (*reinsv1.Run, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.runs().Verify(ctx, connect.NewRequest(&reinsv1.VerifyRunRequest{Id: id}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Run, nil
}

// CompareRuns reports the first divergence in tool results.
func (c *Client) CompareRuns(ctx context.Context, recorded, replayed string) (*reinsv1.CompareRunsResponse, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.runs().Compare(ctx, connect.NewRequest(&reinsv1.CompareRunsRequest{Recorded: recorded, Replayed: replayed}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg, nil
}
