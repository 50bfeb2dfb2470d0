package server

// Stubs of issue 11's calls until their owners build them (decision 0032).

import (
	"context"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
)

func (s *Server) BuildTemplate(ctx context.Context, req *connect.Request[reinsv1.BuildTemplateRequest], stream *connect.ServerStream[reinsv1.BuildTemplateResponse]) error {
	return errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot BuildTemplate yet")
}

func (s *Server) ListTemplates(ctx context.Context, req *connect.Request[reinsv1.ListTemplatesRequest]) (*connect.Response[reinsv1.ListTemplatesResponse], error) {
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot ListTemplates yet")
}

func (s *Server) DeleteTemplate(ctx context.Context, req *connect.Request[reinsv1.DeleteTemplateRequest]) (*connect.Response[reinsv1.DeleteTemplateResponse], error) {
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot DeleteTemplate yet")
}
