package client

import (
	"context"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// OpenFile opens the sandbox's regular file p for reading its bytes as
// they are (the service's raw file route): from the host's view of the
// sandbox's root when the file can be staged, else over the socket
// (ReadStream). info describes the file (its size: exactly what the
// reader yields, or the read fails). Close the reader.
func (c *Client) OpenFile(ctx context.Context, p string) (r io.ReadCloser, info *executorv1.FileInfo, err error) {
	if f, st, ok := c.stageFile(ctx, p); ok {
		info := &executorv1.FileInfo{Path: p, Type: executorv1.FileType_FILE_TYPE_FILE,
			Size: st.Size, Mode: st.Mode, MtimeUnixNano: st.MtimeUnixNano}
		return &stagedFile{exactReader: exactReader{r: f, n: int64(st.Size)}, f: f, c: c}, info, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.bulk.ReadStream(ctx, connect.NewRequest(&executorv1.ReadStreamRequest{Path: p}))
	if err != nil {
		cancel()
		return nil, nil, c.wrap(ctx, err)
	}
	if !stream.Receive() || stream.Msg().Info == nil {
		err := stream.Err()
		stream.Close()
		cancel()
		if err == nil {
			return nil, nil, errdefs.WithMessage(errdefs.ErrUnavailable, "the executor ended the read of "+p+" before describing the file")
		}
		return nil, nil, c.wrap(ctx, err)
	}
	info = stream.Msg().Info
	return &streamFile{c: c, ctx: ctx, cancel: cancel, stream: stream, left: int64(info.Size)}, info, nil
}

// stagedFile reads a staged file: exactly its announced size.
type stagedFile struct {
	exactReader
	f *os.File
	c *Client
}

func (s *stagedFile) Close() error { return s.c.release(s.f) }

// streamFile reads a ReadStream's chunks. It yields no more than the size
// the executor announced (a file that grows while it is read is cut
// there) and fails when fewer come (one that shrank).
type streamFile struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	stream *connect.ServerStreamForClient[executorv1.ReadStreamResponse]
	cur    []byte
	left   int64
	err    error
}

func (s *streamFile) Read(p []byte) (int, error) {
	for len(s.cur) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if !s.stream.Receive() {
			s.err = s.c.wrap(s.ctx, s.stream.Err())
			if s.err == nil && s.left > 0 {
				s.err = errdefs.WithMessage(errdefs.ErrFailedPrecondition, "the file shrank while it was read; try again")
			}
			if s.err == nil {
				s.err = io.EOF
			}
			continue
		}
		s.cur = s.stream.Msg().Data
		if int64(len(s.cur)) > s.left {
			s.cur = s.cur[:s.left]
		}
		s.left -= int64(len(s.cur))
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

func (s *streamFile) Close() error {
	s.cancel()
	return s.stream.Close()
}

// WriteFileFrom writes what r yields to the sandbox's file p, replacing it
// atomically, its parents made; mode 0 gives 0644 (a replaced file's own,
// over the socket). It goes through the host's view of the sandbox's disk
// when it can (staging), else over the socket (WriteStream); either way the
// disk's limit holds, and a failure leaves no partial file. It returns the
// bytes written.
func (c *Client) WriteFileFrom(ctx context.Context, p string, mode uint32, r io.Reader) (int64, error) {
	name, n, ok, err := c.stageWrite(r, nil)
	if err != nil {
		return 0, fmt.Errorf("writing %s: %w", p, err)
	}
	if !ok {
		return c.writeStream(ctx, p, mode, r)
	}
	pr, err := c.rpc.Place(ctx, connect.NewRequest(&executorv1.PlaceRequest{Name: name, Path: p, Mode: mode, FollowLinks: true}))
	if err == nil {
		if pr.Msg.Size != uint64(n) {
			return 0, errdefs.WithMessage(errdefs.ErrInternal, fmt.Sprintf("writing %s: wrote %d bytes, the sandbox has %d", p, n, pr.Msg.Size))
		}
		return n, nil
	}
	defer removeStaged(c.hostRoot, name)
	if !placeElsewhere(err) {
		return 0, c.wrap(ctx, err)
	}
	// Another mount (a tmpfs /tmp): the bytes are read back from the
	// staged file and sent over the socket.
	f, err := OpenStaged(c.hostRoot, name, n)
	if err != nil || !c.hold(f) {
		return 0, errdefs.WithMessage(errdefs.ErrFailedPrecondition, "writing "+p+": the staged file changed before it was placed; try again")
	}
	defer c.release(f)
	return c.writeStream(ctx, p, mode, &exactReader{r: f, n: n})
}

// writeStream is WriteFileFrom over the socket.
func (c *Client) writeStream(ctx context.Context, p string, mode uint32, r io.Reader) (int64, error) {
	ctx, wd, cancel := c.watch(ctx)
	defer cancel()
	stream := c.bulk.WriteStream(ctx)
	msg := &executorv1.WriteStreamRequest{Msg: &executorv1.WriteStreamRequest_Header{
		Header: &executorv1.WriteStreamHeader{Path: p, Mode: mode, MakeParents: true}}}
	err := stream.Send(msg)
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	data := &executorv1.WriteStreamRequest_Data{}
	msg.Msg = data
	var sent int64
	for err == nil {
		wd.stop() // reading our side may take its time
		n, rerr := r.Read(*bp)
		if n > 0 {
			data.Data = (*bp)[:n]
			wd.kick()
			err = stream.Send(msg) // marshals before returning: the buffer can be reused
			sent += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			// Cut the call, so the executor drops the partial file.
			cancel()
			stream.CloseAndReceive()
			return 0, fmt.Errorf("reading the bytes to write to %s: %w", p, rerr)
		}
	}
	if err == nil {
		// The bytes are complete: only now may the executor keep them.
		err = stream.Send(&executorv1.WriteStreamRequest{Msg: &executorv1.WriteStreamRequest_End{End: true}})
	}
	// A Send error (io.EOF) means the executor ended the call: its answer
	// says why.
	wd.kick()
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return 0, c.wrap(ctx, err)
	}
	if resp.Msg.Size != uint64(sent) {
		return 0, errdefs.WithMessage(errdefs.ErrInternal, fmt.Sprintf("writing %s: sent %d bytes, the executor wrote %d", p, sent, resp.Msg.Size))
	}
	return sent, nil
}
