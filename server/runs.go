package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/agent"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/server/wire"
	"github.com/reinsdev/reins/store"
)

// Runs serves the run API over an agent engine and its store.
type Runs struct {
	Engine *agent.Engine
	Store  store.Store
	// DefaultModel is used for runs that name none.
	DefaultModel string

	server *Server // set by Server.WithRuns; admitRun checks through it
}

var _ reinsv1connect.RunServiceHandler = (*Runs)(nil)

func (r *Runs) Start(ctx context.Context, req *connect.Request[reinsv1.StartRunRequest]) (*connect.Response[reinsv1.StartRunResponse], error) {
	spec, err := wire.SpecFromProto(req.Msg.Spec)
	if err != nil {
		return nil, err
	}
	if spec.Network, err = normalizeNetwork(ctx, spec.Network); err != nil {
		return nil, err
	}
	// Output only: the service fills them from the archive, and a digest
	// a client named could be another tenant's blob.
	spec.Uploads, spec.UploadsDigest = nil, ""
	if len(req.Msg.Uploads) > 0 {
		if spec.UploadsDigest, spec.Uploads, err = r.Engine.PutUploads(ctx, req.Msg.Uploads); err != nil {
			return nil, err
		}
	}
	if err := agent.CheckModelName(spec.Model); err != nil {
		return nil, err
	}
	if spec.Model == "" && spec.Agent == "" {
		// An agent program with no model asks for its own, forwarded as
		// asked to the provider of its wire.
		spec.Model = r.DefaultModel
	}
	release, err := r.admitRun(ctx, spec)
	if err != nil {
		return nil, err
	}
	id, err := r.Engine.Start(ctx, tenant(ctx), spec)
	release()
	if err != nil {
		return nil, err
	}
	run, err := r.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.StartRunResponse{Run: run}), nil
}

func (r *Runs) get(ctx context.Context, id string) (*reinsv1.Run, error) {
	row, err := r.Store.GetRun(ctx, tenant(ctx), id)
	if err != nil {
		return nil, err
	}
	run := RunToProto(row)
	if row.Status == string(runlog.StatusWaitingApproval) || row.Status == string(runlog.StatusPaused) {
		pending, err := r.Engine.PendingApprovals(ctx, tenant(ctx), id)
		if err != nil {
			return nil, err
		}
		for _, p := range pending {
			run.Pending = append(run.Pending, &reinsv1.PendingCall{CallId: p.CallID, Tool: p.Tool, Input: string(p.Input), Rule: p.Rule, Reason: p.Reason})
		}
	}
	return run, nil
}

func (r *Runs) Get(ctx context.Context, req *connect.Request[reinsv1.GetRunRequest]) (*connect.Response[reinsv1.GetRunResponse], error) {
	run, err := r.get(ctx, req.Msg.Id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.GetRunResponse{Run: run}), nil
}

func (r *Runs) List(ctx context.Context, req *connect.Request[reinsv1.ListRunsRequest]) (*connect.Response[reinsv1.ListRunsResponse], error) {
	var statuses []string
	for _, p := range req.Msg.Statuses {
		s := wire.RunStatusFromProto(p)
		if s == "" {
			return nil, fmt.Errorf("run status %v is not one this service knows: ask for RUN_STATUS_QUEUED, _RUNNING, _WAITING_APPROVAL, _PAUSED, _SUCCEEDED, _FAILED or _CANCELLED: %w", p, errdefs.ErrInvalidArgument)
		}
		statuses = append(statuses, string(s))
	}
	rows, err := r.Store.ListRuns(ctx, store.RunFilter{Tenant: tenant(ctx), Statuses: statuses, Limit: int(req.Msg.Limit)})
	if err != nil {
		return nil, err
	}
	resp := &reinsv1.ListRunsResponse{}
	for _, row := range rows {
		resp.Runs = append(resp.Runs, RunToProto(row))
	}
	return connect.NewResponse(resp), nil
}

func (r *Runs) Events(ctx context.Context, req *connect.Request[reinsv1.RunEventsRequest], stream *connect.ServerStream[reinsv1.RunEvent]) error {
	id, after := req.Msg.Id, req.Msg.AfterSeq
	if _, err := r.Store.GetRun(ctx, tenant(ctx), id); err != nil {
		return err
	}
	for {
		// Subscribe before reading, so no append falls between the two.
		changed := r.Engine.Changed(id)
		evs, err := r.Store.Events(ctx, id, after, 500)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			ev.RunID = id
			if err := stream.Send(wire.Event(ev)); err != nil {
				return err
			}
			after = ev.Seq
			if ev.Type == runlog.EventFinished {
				return nil
			}
		}
		if len(evs) == 500 {
			continue
		}
		if !req.Msg.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(2 * time.Second):
			// Appends by another process of the service (later: a
			// shared store) are seen by polling.
		}
	}
}

func (r *Runs) Cancel(ctx context.Context, req *connect.Request[reinsv1.CancelRunRequest]) (*connect.Response[reinsv1.CancelRunResponse], error) {
	if err := r.Engine.Cancel(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.CancelRunResponse{}), nil
}

func (r *Runs) Answer(ctx context.Context, req *connect.Request[reinsv1.AnswerRunRequest]) (*connect.Response[reinsv1.AnswerRunResponse], error) {
	if err := r.Engine.Answer(ctx, tenant(ctx), req.Msg.Id, "admin", req.Msg.Text); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.AnswerRunResponse{}), nil
}

func (r *Runs) ListArtifacts(ctx context.Context, req *connect.Request[reinsv1.ListArtifactsRequest]) (*connect.Response[reinsv1.ListArtifactsResponse], error) {
	arts, err := r.Engine.Artifacts(ctx, tenant(ctx), req.Msg.Id)
	if err != nil {
		return nil, err
	}
	resp := &reinsv1.ListArtifactsResponse{}
	for _, a := range arts {
		resp.Artifacts = append(resp.Artifacts, wire.Artifact(a))
	}
	return connect.NewResponse(resp), nil
}

func (r *Runs) GetArtifact(ctx context.Context, req *connect.Request[reinsv1.GetArtifactRequest], stream *connect.ServerStream[reinsv1.GetArtifactResponse]) error {
	rc, _, err := r.Engine.OpenArtifact(ctx, tenant(ctx), req.Msg.Id, req.Msg.NameOrDigest)
	if err != nil {
		return err
	}
	defer rc.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if serr := stream.Send(&reinsv1.GetArtifactResponse{Data: buf[:n]}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// RunToProto converts a run row for the wire.
func RunToProto(row store.Run) *reinsv1.Run {
	var spec runlog.Spec
	json.Unmarshal(row.Spec, &spec)
	var sum runlog.Summary
	json.Unmarshal(row.Summary, &sum)
	return &reinsv1.Run{
		Id:              row.ID,
		Status:          wire.RunStatus(runlog.Status(row.Status)),
		Spec:            wire.Spec(spec),
		Steps:           int32(sum.Steps),
		Usage:           wire.Usage(sum.Usage),
		CostUsd:         sum.Cost,
		Text:            sum.Text,
		Reason:          sum.Reason,
		CreatedUnixNano: row.CreatedAt.UnixNano(),
		UpdatedUnixNano: row.UpdatedAt.UnixNano(),
		LastSeq:         row.LastSeq,
		Sandboxes:       sum.Sandbox,
	}
}

func (r *Runs) Approve(ctx context.Context, req *connect.Request[reinsv1.ApproveRequest]) (*connect.Response[reinsv1.ApproveResponse], error) {
	d := runlog.ApprovalDecided{CallID: req.Msg.CallId, Approved: true, Actor: actor(ctx), Always: req.Msg.Always}
	if req.Msg.Edit != "" {
		if !json.Valid([]byte(req.Msg.Edit)) {
			return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "--edit is not valid JSON: give the tool's arguments as a JSON object")
		}
		d.Edited = json.RawMessage(req.Msg.Edit)
	}
	if err := r.Engine.Decide(ctx, tenant(ctx), req.Msg.Id, d); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.ApproveResponse{}), nil
}

func (r *Runs) Deny(ctx context.Context, req *connect.Request[reinsv1.DenyRequest]) (*connect.Response[reinsv1.DenyResponse], error) {
	d := runlog.ApprovalDecided{CallID: req.Msg.CallId, Approved: false, Actor: actor(ctx), Reason: req.Msg.Reason}
	if err := r.Engine.Decide(ctx, tenant(ctx), req.Msg.Id, d); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.DenyResponse{}), nil
}

func (r *Runs) Pause(ctx context.Context, req *connect.Request[reinsv1.PauseRunRequest]) (*connect.Response[reinsv1.PauseRunResponse], error) {
	if err := r.Engine.Pause(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.PauseRunResponse{}), nil
}

func (r *Runs) Resume(ctx context.Context, req *connect.Request[reinsv1.ResumeRunRequest]) (*connect.Response[reinsv1.ResumeRunResponse], error) {
	if err := r.Engine.Resume(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.ResumeRunResponse{}), nil
}

func (r *Runs) Fork(ctx context.Context, req *connect.Request[reinsv1.ForkRunRequest]) (*connect.Response[reinsv1.ForkRunResponse], error) {
	if err := agent.CheckModelName(req.Msg.Model); err != nil {
		return nil, err
	}
	release, err := r.admitRun(ctx, runlog.Spec{})
	if err != nil {
		return nil, err
	}
	id, err := r.Engine.Fork(ctx, tenant(ctx), req.Msg.Id, req.Msg.AtSeq, req.Msg.Model, req.Msg.Script)
	release()
	if err != nil {
		return nil, err
	}
	run, err := r.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.ForkRunResponse{Run: run}), nil
}

func (r *Runs) Verify(ctx context.Context, req *connect.Request[reinsv1.VerifyRunRequest]) (*connect.Response[reinsv1.VerifyRunResponse], error) {
	release, err := r.admitRun(ctx, runlog.Spec{})
	if err != nil {
		return nil, err
	}
	id, err := r.Engine.Verify(ctx, tenant(ctx), req.Msg.Id)
	release()
	if err != nil {
		return nil, err
	}
	run, err := r.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.VerifyRunResponse{Run: run}), nil
}

func (r *Runs) Compare(ctx context.Context, req *connect.Request[reinsv1.CompareRunsRequest]) (*connect.Response[reinsv1.CompareRunsResponse], error) {
	d, err := r.Engine.Compare(ctx, tenant(ctx), req.Msg.Recorded, req.Msg.Replayed)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return connect.NewResponse(&reinsv1.CompareRunsResponse{Same: true}), nil
	}
	return connect.NewResponse(&reinsv1.CompareRunsResponse{Index: int32(d.Index), Step: int32(d.Step), Tool: d.Tool,
		RecordedText: d.Recorded, ReplayedText: d.Replayed}), nil
}
