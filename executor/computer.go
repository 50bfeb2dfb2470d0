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

// Computer drives the display (package executor/computer).
func (s *Server) Computer(ctx context.Context, req *connect.Request[executorv1.ComputerRequest]) (*connect.Response[executorv1.ComputerResponse], error) {
	return nil, NoDisplay
}
