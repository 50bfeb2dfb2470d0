package executor

import (
	"context"
	"errors"
	"io"
	"path"
	"sync"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/files"
)

func (s *Server) Stat(ctx context.Context, req *connect.Request[executorv1.StatRequest]) (*connect.Response[executorv1.StatResponse], error) {
	info, err := s.fs.Stat(req.Msg.Path)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.StatResponse{Info: info}), nil
}

func (s *Server) ListDir(ctx context.Context, req *connect.Request[executorv1.ListDirRequest]) (*connect.Response[executorv1.ListDirResponse], error) {
	entries, truncated, err := s.fs.ListDir(ctx, req.Msg.Path, int(req.Msg.Depth), int(req.Msg.Limit))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.ListDirResponse{Entries: entries, Truncated: truncated}), nil
}

func (s *Server) ReadFile(ctx context.Context, req *connect.Request[executorv1.ReadFileRequest]) (*connect.Response[executorv1.ReadFileResponse], error) {
	data, size, eof, err := s.fs.ReadFile(req.Msg.Path, req.Msg.Offset, req.Msg.Limit)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.ReadFileResponse{Data: data, Size: size, Eof: eof}), nil
}

func (s *Server) ReadLines(ctx context.Context, req *connect.Request[executorv1.ReadLinesRequest]) (*connect.Response[executorv1.ReadLinesResponse], error) {
	m := req.Msg
	lines, total, size, binary, err := s.fs.ReadLines(m.Path, m.FirstLine, int(m.MaxLines), int(m.MaxLineBytes))
	if err != nil {
		return nil, err
	}
	resp := &executorv1.ReadLinesResponse{TotalLines: total, Size: size, Binary: binary}
	for _, l := range lines {
		resp.Lines = append(resp.Lines, &executorv1.Line{Text: l.Text, Cut: l.Cut})
	}
	return connect.NewResponse(resp), nil
}

func (s *Server) WriteFile(ctx context.Context, req *connect.Request[executorv1.WriteFileRequest]) (*connect.Response[executorv1.WriteFileResponse], error) {
	m := req.Msg
	if err := s.fs.WriteFile(m.Path, m.Data, m.Mode, m.MakeParents); err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.WriteFileResponse{Size: uint64(len(m.Data))}), nil
}

func (s *Server) EditFile(ctx context.Context, req *connect.Request[executorv1.EditFileRequest]) (*connect.Response[executorv1.EditFileResponse], error) {
	m := req.Msg
	n, err := s.fs.EditFile(m.Path, m.Old, m.New, m.ReplaceAll)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.EditFileResponse{Replacements: uint32(n)}), nil
}

func (s *Server) MakeDir(ctx context.Context, req *connect.Request[executorv1.MakeDirRequest]) (*connect.Response[executorv1.MakeDirResponse], error) {
	if err := s.fs.MakeDir(req.Msg.Path, req.Msg.Parents, req.Msg.Mode); err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.MakeDirResponse{}), nil
}

func (s *Server) Remove(ctx context.Context, req *connect.Request[executorv1.RemoveRequest]) (*connect.Response[executorv1.RemoveResponse], error) {
	if err := s.fs.Remove(req.Msg.Path, req.Msg.Recursive); err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.RemoveResponse{}), nil
}

func (s *Server) Move(ctx context.Context, req *connect.Request[executorv1.MoveRequest]) (*connect.Response[executorv1.MoveResponse], error) {
	if err := s.fs.Move(req.Msg.Src, req.Msg.Dst, req.Msg.Overwrite); err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.MoveResponse{}), nil
}

func (s *Server) Glob(ctx context.Context, req *connect.Request[executorv1.GlobRequest]) (*connect.Response[executorv1.GlobResponse], error) {
	paths, truncated, err := s.fs.Glob(ctx, req.Msg.Pattern, req.Msg.Dir, int(req.Msg.Limit))
	if err != nil {
		return nil, err
	}
	resp := &executorv1.GlobResponse{Paths: paths, Truncated: truncated}
	if req.Msg.Info {
		for _, p := range paths {
			info, err := s.fs.Stat(p)
			if err != nil {
				// Gone since the walk saw it: its name alone.
				info = &executorv1.FileInfo{Path: p, Name: path.Base(p)}
			}
			resp.Entries = append(resp.Entries, info)
		}
	}
	return connect.NewResponse(resp), nil
}

func (s *Server) Grep(ctx context.Context, req *connect.Request[executorv1.GrepRequest]) (*connect.Response[executorv1.GrepResponse], error) {
	m := req.Msg
	matches, truncated, err := s.fs.Grep(ctx, m.Pattern, m.Path, files.GrepOptions{
		Include: m.Include, IgnoreCase: m.IgnoreCase, Literal: m.Literal, Limit: int(m.Limit),
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.GrepResponse{Matches: matches, Truncated: truncated}), nil
}

// Upload unpacks a tar stream under the header's directory as it arrives:
// memory does not grow with the size of the stream.
func (s *Server) Upload(ctx context.Context, stream *connect.ClientStream[executorv1.UploadRequest]) (*connect.Response[executorv1.UploadResponse], error) {
	if !stream.Receive() {
		err := stream.Err()
		if err == nil {
			err = errdefs.WithMessage(errdefs.ErrInvalidArgument, "the Upload stream is empty; send the header first")
		}
		return nil, err
	}
	hdr := stream.Msg().GetHeader()
	if hdr == nil {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			"the first Upload message must be the header (the directory to unpack under)")
	}
	dir := hdr.Dir
	if dir == "" {
		dir = s.fs.Workdir()
	}
	if err := s.fs.MakeDir(dir, true, 0); err != nil {
		return nil, err
	}
	abs, err := s.fs.Resolve(dir)
	if err != nil {
		return nil, err
	}
	root, err := s.fs.OpenRoot(abs)
	if err != nil {
		return nil, err
	}
	defer root.Close()

	r := &uploadReader{stream: stream, h: newAsyncHash()}
	defer r.h.close()
	defer r.release()
	s.memory.begin()
	defer func() { s.memory.end(r.n) }()
	nfiles, nbytes, err := archive.ExtractRoot(r, root)
	if err == nil {
		bp := copyPool.Get().(*[]byte)
		_, err = io.CopyBuffer(io.Discard, r, *bp) // the end-of-archive padding counts in the hash
		copyPool.Put(bp)
	}
	if r.err != nil && r.err != io.EOF {
		return nil, r.err // the client's stream broke: that is the story
	}
	if err != nil {
		return nil, uploadError(abs, err)
	}
	return connect.NewResponse(&executorv1.UploadResponse{
		Files:  uint32(nfiles),
		Bytes:  uint64(nbytes),
		Sha256: r.h.sum(),
	}), nil
}

func uploadError(dir string, err error) error {
	var ee *archive.EntryError
	if isNoSpace(err) {
		target := dir
		if errors.As(err, &ee) {
			target = path.Join(dir, ee.Name)
		}
		return files.NoSpace(target)
	}
	if errors.As(err, &ee) {
		if k := errdefs.Kind(err); k != nil {
			return errdefs.WithMessage(k, "uploading to "+dir+": "+err.Error())
		}
	}
	return err
}

// uploadReader reads the tar bytes of an Upload stream, hashing them.
type uploadReader struct {
	stream *connect.ClientStream[executorv1.UploadRequest]
	h      *asyncHash
	cur    []byte
	held   []byte // the buffer cur is in, until the next message
	n      int64  // bytes received
	err    error
}

// Read fills p as far as the messages go: the tar reader then writes files
// in whole buffers, not in pieces cut at message boundaries.
func (r *uploadReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(r.cur) == 0 {
			if n > 0 && r.err != nil {
				break
			}
			if err := r.next(); err != nil {
				if n > 0 {
					break
				}
				return 0, err
			}
			continue
		}
		c := copy(p[n:], r.cur)
		r.cur = r.cur[c:]
		n += c
	}
	return n, nil
}

func (r *uploadReader) next() error {
	r.release()
	if r.err != nil {
		return r.err
	}
	if !r.stream.Receive() {
		r.err = r.stream.Err()
		if r.err == nil {
			r.err = io.EOF
		}
		return r.err
	}
	msg := r.stream.Msg()
	if msg.GetHeader() != nil {
		r.err = errdefs.WithMessage(errdefs.ErrInvalidArgument, "the Upload stream has a second header; send only data after the first")
		return r.err
	}
	r.cur = msg.GetData()
	r.held = r.cur
	r.n += int64(len(r.cur))
	r.h.start(r.cur)
	return nil
}

// release gives the buffer of the message read last back to the codec's
// pool (see codec), once it is hashed.
func (r *uploadReader) release() {
	r.h.wait()
	if r.held != nil {
		putChunk(r.held)
		r.held, r.cur = nil, nil
	}
}

// downloadChunk is the size of Download's messages: each costs a few socket
// writes, which gVisor makes expensive (1 MiB measured faster than 256 KiB).
const downloadChunk = 1 << 20

var copyPool = sync.Pool{New: func() any { b := make([]byte, downloadChunk); return &b }}

// Download sends a tar stream of a file or directory; the last message
// carries the sha256 of the whole stream.
func (s *Server) Download(ctx context.Context, req *connect.Request[executorv1.DownloadRequest], stream *connect.ServerStream[executorv1.DownloadResponse]) error {
	root, name, abs, err := s.fs.OpenParent(req.Msg.Path)
	if err != nil {
		return err
	}
	defer root.Close()
	prefix := path.Base(abs)
	if abs == "/" {
		prefix = ""
	}
	bp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bp)
	w := &downloadWriter{stream: stream, h: newAsyncHash(), buf: (*bp)[:0]}
	defer w.h.close()
	s.memory.begin()
	defer func() { s.memory.end(w.n) }()
	if err := archive.WriteRoot(w, root, name, prefix); err != nil {
		if w.err != nil {
			return streamError(w.err)
		}
		return err
	}
	if err := w.flush(); err != nil {
		return streamError(err)
	}
	w.msg.Data = nil
	w.msg.Sha256 = w.h.sum()
	return stream.Send(&w.msg)
}

// downloadWriter cuts the tar stream into messages of downloadChunk bytes.
// (Connect marshals each into a pooled buffer that keeps its size: no
// allocation per message once warm.)
type downloadWriter struct {
	stream *connect.ServerStream[executorv1.DownloadResponse]
	h      *asyncHash
	buf    []byte // filling up to downloadChunk
	msg    executorv1.DownloadResponse
	n      int64 // bytes sent
	err    error
}

func (w *downloadWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	w.n += int64(n)
	for len(p) > 0 {
		c := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+c]
		p = p[c:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *downloadWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.msg.Data = w.buf
	w.h.start(w.buf) // hashed while it is written to the socket
	err := w.stream.Send(&w.msg)
	w.h.wait()
	w.buf = w.buf[:0]
	if err != nil {
		w.err = err
	}
	return err
}
