package executor

import (
	"context"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// NoDisplay is the error of a computer call on a sandbox without a
// display: it names the image to use.
var NoDisplay = errdefs.WithMessage(errdefs.ErrFailedPrecondition,
	"this sandbox has no display: computer use needs a desktop sandbox (create one with --image desktop)")

// Computer drives the display (package executor/computer): one action at
// a time, the X server started on the first.
func (s *Server) Computer(ctx context.Context, req *connect.Request[executorv1.ComputerRequest]) (*connect.Response[executorv1.ComputerResponse], error) {
	if s.display == nil {
		return nil, NoDisplay
	}
	resp, err := s.display.Do(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// startDisplay starts the X server before a process runs, so that a
// program started by exec finds the DISPLAY its environment names. A
// failure is the program's to report (it cannot open the display); the
// next computer call says why. After one failure execs stop trying (an
// image without Xvfb would pay for the attempt on every exec); computer
// calls still do.
func (s *Server) startDisplay(ctx context.Context) {
	if s.display == nil || s.displayFailed.Load() || s.display.Running() {
		return
	}
	if err := s.display.Start(ctx); err != nil {
		s.displayFailed.Store(true)
		s.log.Warn("cannot start the display", "err", err)
	}
}

// helloDisplay is the display for Hello, nil for none.
func (s *Server) helloDisplay() *executorv1.Display {
	if s.display == nil {
		return nil
	}
	w, h := s.display.Size()
	return &executorv1.Display{Width: uint32(w), Height: uint32(h), Running: s.display.Running()}
}

func (s *Server) capabilities() []string {
	if s.display == nil {
		return Capabilities
	}
	return append(Capabilities[:len(Capabilities):len(Capabilities)], "computer")
}
