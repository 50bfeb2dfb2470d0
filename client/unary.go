package client

import (
	"context"
	"errors"
	"io"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// RunCommand runs one command in the sandbox to completion (the service's
// RunCommand; req.SandboxId is set from s).
func (s *Sandbox) RunCommand(ctx context.Context, req *reinsv1.RunCommandRequest) (*reinsv1.RunCommandResponse, error) {
	return nil, errors.New("client: RunCommand is not built yet")
}

// ReadRaw streams the file at path (absolute, in the sandbox) as raw
// bytes: GET /v1/sandboxes/{id}/files?path=. The caller closes it.
func (s *Sandbox) ReadRaw(ctx context.Context, path string) (io.ReadCloser, error) {
	return nil, errors.New("client: ReadRaw is not built yet")
}

// WriteRaw writes r's bytes to the file at path, replacing it (parents
// made): PUT /v1/sandboxes/{id}/files?path=. size is r's length, or -1
// when unknown (the body is then chunked).
func (s *Sandbox) WriteRaw(ctx context.Context, path string, r io.Reader, size int64) error {
	return errors.New("client: WriteRaw is not built yet")
}
