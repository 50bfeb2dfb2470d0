package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server/wire"
)

// Images resolves images ahead of a Create (*manager.Manager is one):
// for tenant ("" the admin) as its Create would, reporting slow steps to
// progress.
type Images interface {
	ResolveImage(ctx context.Context, tenant, ref string, progress func(sandbox.Progress)) (sandbox.ImageInfo, error)
}

// WithImages serves BuildImage.
func (s *Server) WithImages(i Images) *Server {
	s.images = i
	return s
}

// BuildImage resolves (builds, pulls) an image ahead of a Create,
// streaming progress, and answers what it resolved.
func (s *Server) BuildImage(ctx context.Context, req *connect.Request[reinsv1.BuildImageRequest], stream *connect.ServerStream[reinsv1.BuildImageResponse]) error {
	if err := CheckImage(tenant(ctx), req.Msg.Image); err != nil {
		return err
	}
	if s.images == nil {
		return fmt.Errorf("this service builds images only when a sandbox is created: create one with --image %s: %w", req.Msg.Image, errdefs.ErrUnimplemented)
	}
	ps := newProgressSender(func(p *reinsv1.Progress) {
		stream.Send(&reinsv1.BuildImageResponse{Msg: &reinsv1.BuildImageResponse_Progress{Progress: p}})
	})
	info, err := s.images.ResolveImage(ctx, tenant(ctx), req.Msg.Image, ps.report)
	if err != nil {
		return err
	}
	return ps.last(func() error {
		return stream.Send(&reinsv1.BuildImageResponse{Msg: &reinsv1.BuildImageResponse_Image{Image: &reinsv1.ImageInfo{
			Ref: info.Ref, Digest: info.Digest, SizeBytes: info.Size, Cached: info.Cached, Screen: info.Screen,
		}}})
	})
}

// progressSender sends a stream's progress messages: at most ten a second
// per item, but always an item's last one, never two at once.
type progressSender struct {
	mu   sync.Mutex
	sent map[string]time.Time
	send func(*reinsv1.Progress)
}

func newProgressSender(send func(*reinsv1.Progress)) *progressSender {
	return &progressSender{sent: map[string]time.Time{}, send: send}
}

func (ps *progressSender) report(p sandbox.Progress) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	key := p.Phase + p.Item
	if t := ps.sent[key]; time.Since(t) < 100*time.Millisecond && (p.Total == 0 || p.Done < p.Total) {
		return
	}
	ps.sent[key] = time.Now()
	ps.send(&reinsv1.Progress{Phase: wire.ProgressPhase(p.Phase), Item: p.Item, Done: p.Done, Total: p.Total, Message: p.Message})
}

// last sends the stream's last message with send, after any progress.
func (ps *progressSender) last(send func() error) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return send()
}
