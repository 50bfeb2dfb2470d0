package executor

import (
	"context"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/process"
)

// Exec starts a process (or, with a known idempotency key, finds the one the
// key started) and streams its events. The stream ends after Started for a
// background process; otherwise after Exited. If the client goes away first,
// the process carries on.
func (s *Server) Exec(ctx context.Context, req *connect.Request[executorv1.ExecRequest], stream *connect.ServerStream[executorv1.ExecEvent]) error {
	m := req.Msg
	spec, err := s.spec(m)
	if err != nil {
		return err
	}
	spec.Foreground = !m.Background
	s.startDisplay(ctx)
	p, reattached, err := s.procs.Start(spec)
	if err != nil {
		return err
	}
	// A foreground exec applies backpressure end to end: the command
	// blocks when this stream does. The one that started the process was
	// its reader from the first byte; one that reattached (by key) is
	// exact from where it joined, and told of what was lost before.
	mode := process.Foreground
	if spec.Foreground && !reattached {
		mode = process.Owner
	}
	sink := newSink(stream)
	if err := sink.started(p.Pid(), reattached); err != nil {
		if mode == process.Owner {
			p.ReleaseHold()
		}
		return err
	}
	if m.Background {
		return nil
	}
	return streamError(p.Stream(ctx, mode, sink))
}

func (s *Server) spec(m *executorv1.ExecRequest) (process.Spec, error) {
	if m.TimeoutMs < 0 {
		return process.Spec{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, "timeout_ms is negative")
	}
	if m.Rows > 0xffff || m.Cols > 0xffff {
		return process.Spec{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, "rows and cols must fit in 16 bits")
	}
	env := *s.env.Load()
	dir := s.fs.Workdir()
	var cred *syscall.Credential
	if m.User != "" {
		a, err := lookupUser(s.fs, m.User)
		if err != nil {
			return process.Spec{}, err
		}
		if cred, err = a.credential(); err != nil {
			return process.Spec{}, err
		}
		env = mergeEnv(env, a.env(m.Env))
		if fi, err := s.fs.Stat(a.home); err == nil && fi.GetType() == executorv1.FileType_FILE_TYPE_DIR {
			dir = fi.GetPath()
		}
	}
	if m.Cwd != "" {
		var err error
		if dir, err = s.fs.Resolve(m.Cwd); err != nil {
			return process.Spec{}, err
		}
	}
	return process.Spec{
		Argv:       m.Argv,
		Env:        mergeEnv(env, m.Env),
		Dir:        s.fs.HostPath(dir),
		Credential: cred,
		Stdin:      m.Stdin,
		PTY:        m.Pty,
		Rows:       uint16(m.Rows),
		Cols:       uint16(m.Cols),
		Timeout:    time.Duration(m.TimeoutMs) * time.Millisecond,
		Key:        m.IdempotencyKey,
		Tag:        m.Tag,
		GivenEnv:   m.Env,
		Cwd:        dir,
	}, nil
}

// mergeEnv returns base with extra added; a key in extra replaces the same
// key in base. base is shared, never modified.
func mergeEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	env := make([]string, 0, len(base)+len(extra))
	override := make(map[string]bool, len(extra))
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		override[k] = true
	}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !override[k] {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Attach replays a process's output and, with follow, streams the rest.
func (s *Server) Attach(ctx context.Context, req *connect.Request[executorv1.AttachRequest], stream *connect.ServerStream[executorv1.ExecEvent]) error {
	p, err := s.procs.Get(int(req.Msg.Pid))
	if err != nil {
		return err
	}
	sink := newSink(stream)
	if err := sink.started(p.Pid(), true); err != nil {
		return err
	}
	mode := process.Replay
	if req.Msg.Follow {
		mode = process.Follow
	}
	return streamError(p.Stream(ctx, mode, sink))
}

// streamError: a client that went away is not an error worth reporting.
func streamError(err error) error {
	if err == nil || err == context.Canceled {
		return nil
	}
	return err
}

// sink sends a process's events on a stream, reusing one message of each
// kind: Send marshals before it returns.
type sink struct {
	stream  *connect.ServerStream[executorv1.ExecEvent]
	ev      executorv1.ExecEvent
	stdout  executorv1.ExecEvent_Stdout
	stderr  executorv1.ExecEvent_Stderr
	dropped executorv1.ExecEvent_Dropped
}

func newSink(stream *connect.ServerStream[executorv1.ExecEvent]) *sink {
	return &sink{stream: stream}
}

func (k *sink) started(pid int, reattached bool) error {
	k.ev.Event = &executorv1.ExecEvent_Started{Started: &executorv1.Started{Pid: int32(pid), Reattached: reattached}}
	return k.stream.Send(&k.ev)
}

func (k *sink) Output(stream int, data []byte) error {
	if stream == process.Stderr {
		k.stderr.Stderr = data
		k.ev.Event = &k.stderr
	} else {
		k.stdout.Stdout = data
		k.ev.Event = &k.stdout
	}
	return k.stream.Send(&k.ev)
}

func (k *sink) Dropped(stdout, stderr uint64) error {
	k.dropped.Dropped = &executorv1.Dropped{StdoutBytes: stdout, StderrBytes: stderr}
	k.ev.Event = &k.dropped
	return k.stream.Send(&k.ev)
}

func (k *sink) Exited(e process.Exit) error {
	k.ev.Event = &executorv1.ExecEvent_Exited{Exited: exitedMsg(&e)}
	return k.stream.Send(&k.ev)
}

func exitedMsg(e *process.Exit) *executorv1.Exited {
	if e == nil {
		return nil
	}
	return &executorv1.Exited{
		ExitCode:   int32(e.Code),
		Signal:     int32(e.Signal),
		Reason:     e.Reason,
		DurationMs: e.Duration.Milliseconds(),
	}
}

// WriteStdin writes to a process's stdin.
func (s *Server) WriteStdin(ctx context.Context, req *connect.Request[executorv1.WriteStdinRequest]) (*connect.Response[executorv1.WriteStdinResponse], error) {
	p, err := s.procs.Get(int(req.Msg.Pid))
	if err == nil {
		err = p.WriteStdin(ctx, req.Msg.Data, req.Msg.Close)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.WriteStdinResponse{}), nil
}

// ResizePTY resizes a process's terminal.
func (s *Server) ResizePTY(ctx context.Context, req *connect.Request[executorv1.ResizePTYRequest]) (*connect.Response[executorv1.ResizePTYResponse], error) {
	m := req.Msg
	if m.Rows == 0 || m.Cols == 0 || m.Rows > 0xffff || m.Cols > 0xffff {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "rows and cols must be between 1 and 65535")
	}
	p, err := s.procs.Get(int(m.Pid))
	if err == nil {
		err = p.Resize(uint16(m.Rows), uint16(m.Cols))
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.ResizePTYResponse{}), nil
}

// Signal sends a signal (default SIGKILL) to a process's process group.
func (s *Server) Signal(ctx context.Context, req *connect.Request[executorv1.SignalRequest]) (*connect.Response[executorv1.SignalResponse], error) {
	sig := syscall.Signal(req.Msg.Signal)
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	if sig < 0 || sig > 64 {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "signal must be between 1 and 64")
	}
	p, err := s.procs.Get(int(req.Msg.Pid))
	if err == nil {
		err = p.Signal(sig)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&executorv1.SignalResponse{}), nil
}

// ListProcesses lists the running and the remembered processes.
func (s *Server) ListProcesses(ctx context.Context, req *connect.Request[executorv1.ListProcessesRequest]) (*connect.Response[executorv1.ListProcessesResponse], error) {
	infos := s.procs.List()
	resp := &executorv1.ListProcessesResponse{Processes: make([]*executorv1.ProcessInfo, len(infos))}
	for i, in := range infos {
		resp.Processes[i] = &executorv1.ProcessInfo{
			Pid:             int32(in.Pid),
			Argv:            in.Argv,
			Tag:             in.Tag,
			Running:         in.Exit == nil,
			Exited:          exitedMsg(in.Exit),
			StartedUnixNano: in.Started.UnixNano(),
			Pty:             in.PTY,
			IdempotencyKey:  in.Key,
			Env:             in.Env,
			Cwd:             in.Cwd,
		}
	}
	return connect.NewResponse(resp), nil
}
