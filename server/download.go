package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"sync"

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
	opts := s.apiOptions(connect.WithCompression("gzip", nil, nil))
	mux.Handle(executorv1connect.ExecutorDownloadProcedure, s.withExecutor(
		connect.NewServerStreamHandler(executorv1connect.ExecutorDownloadProcedure, s.download, opts...)))
}

// downloadChunk is the size of the messages the service sends.
const downloadChunk = 1 << 20

// downloadsPerSandbox is how many downloads of one sandbox the service
// serves at a time; more wait for one to end. Each holds a chunk (read
// from the staged file, or the executor's message) while it is sent, in
// the service's memory, not the sandbox's: without a bound, a caller that
// opens many downloads and reads none grows the service by ~2 MiB each
// (TestHostileStagingStalledDownloads).
const downloadsPerSandbox = 4

// downloadSlots bounds the downloads served at a time, per sandbox.
type downloadSlots struct {
	mu sync.Mutex
	m  map[string]*slots
}

type slots struct {
	ch    chan struct{}
	users int // holding or waiting; the entry goes at 0
}

// acquire waits for one of sandbox id's slots (or for ctx) and returns
// its release.
func (d *downloadSlots) acquire(ctx context.Context, id string) (release func(), err error) {
	d.mu.Lock()
	if d.m == nil {
		d.m = map[string]*slots{}
	}
	sl := d.m[id]
	if sl == nil {
		sl = &slots{ch: make(chan struct{}, downloadsPerSandbox)}
		d.m[id] = sl
	}
	sl.users++
	d.mu.Unlock()
	leave := func() {
		d.mu.Lock()
		if sl.users--; sl.users == 0 {
			delete(d.m, id)
		}
		d.mu.Unlock()
	}
	select {
	case sl.ch <- struct{}{}:
		return func() { <-sl.ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

func (s *Server) download(ctx context.Context, req *connect.Request[executorv1.DownloadRequest], stream *connect.ServerStream[executorv1.DownloadResponse]) error {
	id, ex := s.executor(ctx)
	release, err := s.downloads.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer release()
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
