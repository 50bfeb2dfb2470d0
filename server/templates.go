package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox/template"
	"github.com/reinsdev/reins/server/wire"
)

// Templates is what the template calls need: builds, and the records of
// tenant's templates (tenant "" is the admin's own, not everyone's: a
// template name is per tenant). *template.Builder is one.
type Templates interface {
	Build(ctx context.Context, tenant string, spec template.Spec, progress func(template.Progress)) (template.Template, error)
	List(tenant string) ([]template.Template, error)
	Delete(tenant, name string) error
}

// WithTemplates serves BuildTemplate, ListTemplates and DeleteTemplate.
func (s *Server) WithTemplates(t Templates) *Server {
	s.templates = t
	return s
}

func (s *Server) templatesOrErr() (Templates, error) {
	if s.templates == nil {
		return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service builds no templates")
	}
	return s.templates, nil
}

// BuildTemplate runs a build and streams its progress; the last message
// carries the template. A failed step ends the call with that step's
// output and exit code; the client going away cancels the build (the
// steps it finished stay cached).
func (s *Server) BuildTemplate(ctx context.Context, req *connect.Request[reinsv1.BuildTemplateRequest], stream *connect.ServerStream[reinsv1.BuildTemplateResponse]) error {
	ts, err := s.templatesOrErr()
	if err != nil {
		return err
	}
	spec, err := templateSpecFromProto(req.Msg)
	if err != nil {
		return err
	}
	if err := CheckImage(tenant(ctx), spec.From); err != nil {
		return err
	}
	var mu sync.Mutex
	var last time.Time
	progress := func(p template.Progress) {
		mu.Lock()
		defer mu.Unlock()
		msg := &reinsv1.TemplateProgress{Step: int32(p.Step), Steps: int32(p.Steps), What: p.What, Cached: p.Cached, Output: string(p.Output)}
		if sp := p.Sub; sp != nil {
			// At most ten sub-progress updates a second, but always the last.
			if time.Since(last) < 100*time.Millisecond && (sp.Total == 0 || sp.Done < sp.Total) {
				return
			}
			last = time.Now()
			msg.Progress = &reinsv1.Progress{Phase: wire.ProgressPhase(sp.Phase), Item: sp.Item, Done: sp.Done, Total: sp.Total, Message: sp.Message}
		}
		// A send that fails means the client left: the build's context
		// ends with it.
		stream.Send(&reinsv1.BuildTemplateResponse{Msg: &reinsv1.BuildTemplateResponse_Progress{Progress: msg}})
	}
	t, err := ts.Build(ctx, tenant(ctx), spec, progress)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return stream.Send(&reinsv1.BuildTemplateResponse{Msg: &reinsv1.BuildTemplateResponse_Template{Template: TemplateToProto(t)}})
}

func (s *Server) ListTemplates(ctx context.Context, req *connect.Request[reinsv1.ListTemplatesRequest]) (*connect.Response[reinsv1.ListTemplatesResponse], error) {
	ts, err := s.templatesOrErr()
	if err != nil {
		return nil, err
	}
	list, err := ts.List(tenant(ctx))
	if err != nil {
		return nil, err
	}
	resp := &reinsv1.ListTemplatesResponse{}
	for _, t := range list {
		resp.Templates = append(resp.Templates, TemplateToProto(t))
	}
	return connect.NewResponse(resp), nil
}

func (s *Server) DeleteTemplate(ctx context.Context, req *connect.Request[reinsv1.DeleteTemplateRequest]) (*connect.Response[reinsv1.DeleteTemplateResponse], error) {
	ts, err := s.templatesOrErr()
	if err != nil {
		return nil, err
	}
	if err := ts.Delete(tenant(ctx), req.Msg.Name); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.DeleteTemplateResponse{}), nil
}

func templateSpecFromProto(m *reinsv1.BuildTemplateRequest) (template.Spec, error) {
	if m.ReadyTimeoutMs < 0 {
		return template.Spec{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the ready timeout must not be negative")
	}
	spec := template.Spec{
		Name: m.Name, From: m.From, Start: m.Start, Ready: m.Ready, Backend: m.Backend, NoCache: m.NoCache,
		ReadyTimeout: time.Duration(m.ReadyTimeoutMs) * time.Millisecond,
	}
	for i, st := range m.Steps {
		switch v := st.Step.(type) {
		case *reinsv1.TemplateStep_Run:
			spec.Steps = append(spec.Steps, template.Step{Kind: template.StepRun, Text: v.Run})
		case *reinsv1.TemplateStep_Env:
			spec.Steps = append(spec.Steps, template.Step{Kind: template.StepEnv, Text: v.Env})
		case *reinsv1.TemplateStep_Copy:
			spec.Steps = append(spec.Steps, template.Step{Kind: template.StepCopy, Tar: v.Copy.GetTar(), Dst: v.Copy.GetDst(), Src: v.Copy.GetSrc()})
		default:
			return template.Spec{}, fmt.Errorf("step %d is empty: give run, copy or env: %w", i+1, errdefs.ErrInvalidArgument)
		}
	}
	return spec, spec.Check()
}

// TemplateToProto converts a template for the wire: copy steps without
// their tar.
func TemplateToProto(t template.Template) *reinsv1.Template {
	p := &reinsv1.Template{
		Name: t.Name, From: t.From, Start: t.Start, Ready: t.Ready, Snapshot: t.Snapshot,
		CreatedUnixNano: t.CreatedAt.UnixNano(), Bytes: t.Bytes, CachedSteps: int32(t.CachedSteps), Env: t.Env,
	}
	for _, st := range t.Steps {
		switch st.Kind {
		case template.StepRun:
			p.Steps = append(p.Steps, &reinsv1.TemplateStep{Step: &reinsv1.TemplateStep_Run{Run: st.Text}})
		case template.StepEnv:
			p.Steps = append(p.Steps, &reinsv1.TemplateStep{Step: &reinsv1.TemplateStep_Env{Env: st.Text}})
		case template.StepCopy:
			p.Steps = append(p.Steps, &reinsv1.TemplateStep{Step: &reinsv1.TemplateStep_Copy{Copy: &reinsv1.TemplateCopy{Dst: st.Dst, Src: st.Src}}})
		}
	}
	return p
}
