package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
)

// Hello is the handshake: the executor's version and capabilities.
func (c *Client) Hello(ctx context.Context) (*executorv1.HelloResponse, error) {
	resp, err := c.rpc.Hello(ctx, connect.NewRequest(&executorv1.HelloRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// Health returns nil when the executor answers.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.rpc.Health(ctx, connect.NewRequest(&executorv1.HealthRequest{}))
	return err
}

// Sync asks the executor to flush the sandbox's cached writes to its disk,
// before the host reads its upper layer.
func (c *Client) Sync(ctx context.Context) error {
	_, err := c.rpc.Sync(ctx, connect.NewRequest(&executorv1.SyncRequest{}))
	return err
}

// Usage reports the sandbox's resource use as seen from inside.
func (c *Client) Usage(ctx context.Context) (*executorv1.UsageResponse, error) {
	resp, err := c.rpc.Usage(ctx, connect.NewRequest(&executorv1.UsageRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// Exec runs req and calls onEvent (if not nil) with each event, Started
// first, as they arrive. It returns how the process ended. With
// req.Background set it returns (nil, nil) once the process has started;
// Start is the simpler way.
func (c *Client) Exec(ctx context.Context, req *executorv1.ExecRequest, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error) {
	ctx, wd, cancel := c.watch(ctx)
	defer cancel()
	stream, err := c.rpc.Exec(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, c.wrap(ctx, err)
	}
	defer stream.Close()
	return c.events(ctx, wd, stream, onEvent, req.Background)
}

// Start starts req in the background and returns its Started event (the pid,
// and whether an idempotency key found an earlier process).
func (c *Client) Start(ctx context.Context, req *executorv1.ExecRequest) (*executorv1.Started, error) {
	r := proto.CloneOf(req)
	r.Background = true
	var started *executorv1.Started
	_, err := c.Exec(ctx, r, func(ev *executorv1.ExecEvent) {
		if s := ev.GetStarted(); s != nil {
			started = s
		}
	})
	if err == nil && started == nil {
		err = errdefs.WithMessage(errdefs.ErrUnavailable, "the executor ended the stream without saying the process started")
	}
	return started, err
}

// Attach replays the output pid still holds and, with follow, streams the
// rest; it returns how the process ended (nil without follow while it runs).
func (c *Client) Attach(ctx context.Context, pid int32, follow bool, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error) {
	ctx, wd, cancel := c.watch(ctx)
	defer cancel()
	stream, err := c.rpc.Attach(ctx, connect.NewRequest(&executorv1.AttachRequest{Pid: pid, Follow: follow}))
	if err != nil {
		return nil, c.wrap(ctx, err)
	}
	defer stream.Close()
	return c.events(ctx, wd, stream, onEvent, !follow)
}

func (c *Client) events(ctx context.Context, wd *watchdog, stream *connect.ServerStreamForClient[executorv1.ExecEvent],
	onEvent func(*executorv1.ExecEvent), mayEnd bool) (*executorv1.Exited, error) {
	for stream.Receive() {
		wd.stop() // it answered; a process may then be silent for as long as it likes
		ev := stream.Msg()
		if onEvent != nil {
			onEvent(ev)
		}
		if ex := ev.GetExited(); ex != nil {
			return ex, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, c.wrap(ctx, err)
	}
	if mayEnd {
		return nil, nil
	}
	return nil, errdefs.WithMessage(errdefs.ErrUnavailable, fmt.Sprintf(
		"the executor at %s ended the stream before the process exited", c.socket))
}

// Run runs argv and returns its output (all of it: a foreground command
// waits for its reader) and how it ended.
func (c *Client) Run(ctx context.Context, argv ...string) (stdout, stderr []byte, exit *executorv1.Exited, err error) {
	var o, e bytes.Buffer
	exit, err = c.Exec(ctx, &executorv1.ExecRequest{Argv: argv}, func(ev *executorv1.ExecEvent) {
		o.Write(ev.GetStdout())
		e.Write(ev.GetStderr())
	})
	return o.Bytes(), e.Bytes(), exit, err
}

// WriteStdin writes data to a process's stdin and, with closeStdin, closes it.
func (c *Client) WriteStdin(ctx context.Context, pid int32, data []byte, closeStdin bool) error {
	_, err := c.rpc.WriteStdin(ctx, connect.NewRequest(&executorv1.WriteStdinRequest{Pid: pid, Data: data, Close: closeStdin}))
	return err
}

// ResizePTY sets the size of a process's terminal.
func (c *Client) ResizePTY(ctx context.Context, pid int32, rows, cols uint32) error {
	_, err := c.rpc.ResizePTY(ctx, connect.NewRequest(&executorv1.ResizePTYRequest{Pid: pid, Rows: rows, Cols: cols}))
	return err
}

// Signal sends sig (0: SIGKILL) to a process's process group.
func (c *Client) Signal(ctx context.Context, pid int32, sig syscall.Signal) error {
	_, err := c.rpc.Signal(ctx, connect.NewRequest(&executorv1.SignalRequest{Pid: pid, Signal: int32(sig)}))
	return err
}

// ListProcesses lists the running and the remembered processes.
func (c *Client) ListProcesses(ctx context.Context) ([]*executorv1.ProcessInfo, error) {
	resp, err := c.rpc.ListProcesses(ctx, connect.NewRequest(&executorv1.ListProcessesRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.Processes, nil
}

// Stat describes a file (a final symbolic link is not followed).
func (c *Client) Stat(ctx context.Context, path string) (*executorv1.FileInfo, error) {
	resp, err := c.rpc.Stat(ctx, connect.NewRequest(&executorv1.StatRequest{Path: path}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.Info, nil
}

// ListDir lists a directory down to depth levels, at most limit entries
// (0: the executor's defaults).
func (c *Client) ListDir(ctx context.Context, path string, depth, limit uint32) (*executorv1.ListDirResponse, error) {
	resp, err := c.rpc.ListDir(ctx, connect.NewRequest(&executorv1.ListDirRequest{Path: path, Depth: depth, Limit: limit}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// ReadFile reads a whole file of at most 16 MiB (errdefs.ErrTooLarge
// beyond: use ReadFileRange or Download).
func (c *Client) ReadFile(ctx context.Context, path string) ([]byte, error) {
	resp, err := c.ReadFileRange(ctx, path, 0, 0)
	if err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// ReadFileRange reads at most limit bytes from offset.
func (c *Client) ReadFileRange(ctx context.Context, path string, offset, limit uint64) (*executorv1.ReadFileResponse, error) {
	resp, err := c.rpc.ReadFile(ctx, connect.NewRequest(&executorv1.ReadFileRequest{Path: path, Offset: offset, Limit: limit}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// ReadLines reads lines first.. of a text file (at most max, each cut at
// lineBytes; zeros take the executor's defaults), counting all its lines.
func (c *Client) ReadLines(ctx context.Context, path string, first uint64, max, lineBytes uint32) (*executorv1.ReadLinesResponse, error) {
	resp, err := c.rpc.ReadLines(ctx, connect.NewRequest(&executorv1.ReadLinesRequest{Path: path, FirstLine: first, MaxLines: max, MaxLineBytes: lineBytes}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// WriteFile replaces a file atomically, making missing parent directories.
// mode 0 keeps the mode of the file replaced (0644 for a new one).
func (c *Client) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	_, err := c.rpc.WriteFile(ctx, connect.NewRequest(&executorv1.WriteFileRequest{Path: path, Data: data, Mode: mode, MakeParents: true}))
	return err
}

// EditFile replaces old with new in a file (old must occur exactly once
// unless replaceAll) and returns the number of replacements.
func (c *Client) EditFile(ctx context.Context, path, old, new string, replaceAll bool) (int, error) {
	resp, err := c.rpc.EditFile(ctx, connect.NewRequest(&executorv1.EditFileRequest{Path: path, Old: old, New: new, ReplaceAll: replaceAll}))
	if err != nil {
		return 0, err
	}
	return int(resp.Msg.Replacements), nil
}

// MakeDir makes a directory (and, with parents, those above it).
func (c *Client) MakeDir(ctx context.Context, path string, parents bool) error {
	_, err := c.rpc.MakeDir(ctx, connect.NewRequest(&executorv1.MakeDirRequest{Path: path, Parents: parents}))
	return err
}

// Remove removes a file or an empty directory; with recursive, a whole tree.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	_, err := c.rpc.Remove(ctx, connect.NewRequest(&executorv1.RemoveRequest{Path: path, Recursive: recursive}))
	return err
}

// Move renames src to dst (replacing dst only with overwrite).
func (c *Client) Move(ctx context.Context, src, dst string, overwrite bool) error {
	_, err := c.rpc.Move(ctx, connect.NewRequest(&executorv1.MoveRequest{Src: src, Dst: dst, Overwrite: overwrite}))
	return err
}

// Glob returns the paths matching pattern ("**" matches any number of
// directories); relative patterns start at dir (default: the workdir).
func (c *Client) Glob(ctx context.Context, pattern, dir string) (paths []string, truncated bool, err error) {
	resp, err := c.rpc.Glob(ctx, connect.NewRequest(&executorv1.GlobRequest{Pattern: pattern, Dir: dir}))
	if err != nil {
		return nil, false, err
	}
	return resp.Msg.Paths, resp.Msg.Truncated, nil
}

// Grep searches files for lines matching an RE2 expression.
func (c *Client) Grep(ctx context.Context, req *executorv1.GrepRequest) (*executorv1.GrepResponse, error) {
	resp, err := c.rpc.Grep(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

const chunkSize = 256 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// Upload sends the tar stream read from tarStream to be unpacked under dir
// (made if missing). It checks the executor's sha256 of what it received
// against what was sent.
func (c *Client) Upload(ctx context.Context, dir string, tarStream io.Reader) (*executorv1.UploadResponse, error) {
	ctx, wd, cancel := c.watch(ctx)
	defer cancel()
	stream := c.bulk.Upload(ctx)
	h := sha256.New()
	msg := &executorv1.UploadRequest{Msg: &executorv1.UploadRequest_Header{Header: &executorv1.UploadHeader{Dir: dir}}}
	err := stream.Send(msg)
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	data := &executorv1.UploadRequest_Data{}
	msg.Msg = data
	for err == nil {
		wd.stop() // reading our side may take its time
		n, rerr := tarStream.Read(*bp)
		if n > 0 {
			h.Write((*bp)[:n])
			data.Data = (*bp)[:n]
			wd.kick()
			err = stream.Send(msg) // marshals before returning: the buffer can be reused
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			stream.CloseAndReceive()
			return nil, fmt.Errorf("reading the tar stream to upload: %w", rerr)
		}
	}
	// A Send error (io.EOF) means the executor ended the call: its answer
	// says why.
	wd.kick()
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return nil, c.wrap(ctx, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); resp.Msg.Sha256 != sum {
		return nil, errdefs.WithMessage(errdefs.ErrInternal, fmt.Sprintf(
			"upload to %s corrupted: sent sha256 %s, the executor received %s", dir, sum, resp.Msg.Sha256))
	}
	return resp.Msg, nil
}

// Download writes a tar stream of the file or directory path to w and
// returns its sha256, checked against the executor's.
func (c *Client) Download(ctx context.Context, path string, w io.Writer) (string, error) {
	ctx, wd, cancel := c.watch(ctx)
	defer cancel()
	stream, err := c.bulk.Download(ctx, connect.NewRequest(&executorv1.DownloadRequest{Path: path}))
	if err != nil {
		return "", c.wrap(ctx, err)
	}
	defer stream.Close()
	h := sha256.New()
	var sum string
	for stream.Receive() {
		wd.stop() // writing our side may take its time
		msg := stream.Msg()
		if len(msg.Data) > 0 {
			h.Write(msg.Data)
			if _, err := w.Write(msg.Data); err != nil {
				return "", fmt.Errorf("writing the downloaded tar stream: %w", err)
			}
		}
		if msg.Sha256 != "" {
			sum = msg.Sha256
		}
		wd.kick()
	}
	if err := stream.Err(); err != nil {
		return "", c.wrap(ctx, err)
	}
	local := hex.EncodeToString(h.Sum(nil))
	switch {
	case sum == "":
		return "", errdefs.WithMessage(errdefs.ErrUnavailable, fmt.Sprintf("the download of %s ended before its checksum", path))
	case sum != local:
		return "", errdefs.WithMessage(errdefs.ErrInternal, fmt.Sprintf(
			"download of %s corrupted: the executor sent sha256 %s, received %s", path, sum, local))
	}
	return sum, nil
}

// CopyTo uploads the local file or directory src into the sandbox
// directory dir (as dir/<base of src>).
func (c *Client) CopyTo(ctx context.Context, src, dir string) (*executorv1.UploadResponse, error) {
	if resp, ok, err := c.stageIn(ctx, src, dir); ok {
		return resp, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.Write(pw, src)) }()
	resp, err := c.Upload(ctx, dir, pr)
	pr.CloseWithError(io.ErrClosedPipe) // stop the writer if the upload failed early
	return resp, err
}

// CopyFrom downloads the sandbox file or directory path into the local
// directory dst (as dst/<base of path>), safely (see package archive).
func (c *Client) CopyFrom(ctx context.Context, path, dst string) (files int, bytes int64, err error) {
	if r, ok, err := c.stageOut(ctx, path); err != nil {
		return 0, 0, err
	} else if ok {
		defer r.Close()
		return copyStaged(r, dst)
	}
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Download(ctx, path, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	files, bytes, err = archive.Extract(pr, dst)
	if err == nil {
		_, err = io.Copy(io.Discard, pr) // the padding, so that the checksum is checked
	}
	pr.CloseWithError(io.ErrClosedPipe)
	derr := <-errc
	if err == nil {
		err = derr
	}
	return files, bytes, err
}
