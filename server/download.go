package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/errdefs"
)

// Download is served, not proxied as bytes: a single file is read from the
// host's view of the sandbox's root filesystem (staged transfers,
// docs/decisions/0017-staged-transfers.md) instead of crossing the
// executor's socket, and anything else is relayed message by message from
// the executor's own Download. Either way the caller gets the same tar
// stream and, last, its sha256 (computed here on the staged path, checked
// against the executor's on the relayed one).
func (s *Server) handleDownload(mux *http.ServeMux) {
	opts := s.handlerOptions(connect.WithCompression("gzip", nil, nil))
	mux.Handle(executorv1connect.ExecutorDownloadProcedure, s.withExecutor(
		connect.NewServerStreamHandler(executorv1connect.ExecutorDownloadProcedure, s.download, opts...)))
}

// downloadChunk is the size of the messages the service sends.
const downloadChunk = 1 << 20

func (s *Server) download(ctx context.Context, req *connect.Request[executorv1.DownloadRequest], stream *connect.ServerStream[executorv1.DownloadResponse]) error {
	id, ex := s.executor(ctx)
	r, ok, err := ex.StagedDownload(ctx, req.Msg.Path)
	if err != nil {
		return s.downloadError(id, err)
	}
	if !ok {
		sum, err := ex.Download(ctx, req.Msg.Path, sender{stream})
		if err != nil {
			return s.downloadError(id, err)
		}
		return stream.Send(&executorv1.DownloadResponse{Sha256: sum})
	}
	defer r.Close()
	h := sha256.New()
	buf := make([]byte, downloadChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			if err := stream.Send(&executorv1.DownloadResponse{Data: buf[:n]}); err != nil {
				return err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	return stream.Send(&executorv1.DownloadResponse{Sha256: hex.EncodeToString(h.Sum(nil))})
}

func (s *Server) downloadError(id string, err error) error {
	if errors.Is(err, errdefs.ErrUnavailable) {
		return s.executorDown(id, err)
	}
	return err
}

// sender sends what Download writes (one message's data per write) to the
// caller as it comes: backpressure holds end to end.
type sender struct {
	stream *connect.ServerStream[executorv1.DownloadResponse]
}

func (w sender) Write(p []byte) (int, error) {
	if err := w.stream.Send(&executorv1.DownloadResponse{Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}
