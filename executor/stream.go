package executor

import (
	"context"
	"errors"
	"io"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// ReadStream sends one regular file's bytes in chunks of downloadChunk,
// its info first: the raw file route of the service (GET
// /v1/sandboxes/{id}/files) relays them as they come.
func (s *Server) ReadStream(ctx context.Context, req *connect.Request[executorv1.ReadStreamRequest], stream *connect.ServerStream[executorv1.ReadStreamResponse]) error {
	file, info, err := s.fs.OpenRead(req.Msg.Path)
	if err != nil {
		return err
	}
	defer file.Close()
	if err := stream.Send(&executorv1.ReadStreamResponse{Info: info}); err != nil {
		return streamError(err)
	}
	bp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bp)
	var n int64
	s.memory.begin()
	defer func() { s.memory.end(n) }()
	msg := &executorv1.ReadStreamResponse{}
	for {
		c, rerr := io.ReadFull(file, *bp)
		if c > 0 {
			msg.Data = (*bp)[:c]
			if err := stream.Send(msg); err != nil {
				return streamError(err)
			}
			n += int64(c)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return nil
		}
		if rerr != nil {
			return errdefs.WithMessage(errdefs.ErrInternal, "reading "+info.Path+": "+rerr.Error())
		}
	}
}

// WriteStream writes one file from a stream of chunks, atomically (see
// files.Pending): a stream that breaks, or a disk that fills, leaves the
// old file as it was and no partial one.
func (s *Server) WriteStream(ctx context.Context, stream *connect.ClientStream[executorv1.WriteStreamRequest]) (*connect.Response[executorv1.WriteStreamResponse], error) {
	if !stream.Receive() {
		err := stream.Err()
		if err == nil {
			err = errdefs.WithMessage(errdefs.ErrInvalidArgument, "the WriteStream stream is empty; send the header first")
		}
		return nil, err
	}
	hdr := stream.Msg().GetHeader()
	if hdr == nil {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			"the first WriteStream message must be the header (the file's path)")
	}
	w, err := s.fs.Create(hdr.Path, hdr.Mode, hdr.MakeParents)
	if err != nil {
		return nil, err
	}
	s.memory.begin()
	defer func() { s.memory.end(w.Size()) }()
	ended := false
	for stream.Receive() {
		var err error
		switch m := stream.Msg().Msg.(type) {
		case *executorv1.WriteStreamRequest_Data:
			if ended {
				err = errdefs.WithMessage(errdefs.ErrInvalidArgument, "the WriteStream stream has data after its end")
				break
			}
			_, err = w.Write(m.Data)
			putChunk(m.Data)
		case *executorv1.WriteStreamRequest_End:
			ended = true
		default:
			err = errdefs.WithMessage(errdefs.ErrInvalidArgument, "the WriteStream stream has a second header; send only data after the first")
		}
		if err != nil {
			w.Abort()
			return nil, err
		}
	}
	err = stream.Err()
	if err == nil && !ended || errors.Is(err, context.Canceled) || ctx.Err() != nil {
		err = errdefs.WithMessage(errdefs.ErrCanceled, "the write of "+hdr.Path+" was cut before its end; the file is unchanged")
	}
	if err != nil {
		w.Abort()
		return nil, err
	}
	if err := w.Commit(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.WriteStreamResponse{Size: uint64(w.Size())}), nil
}
