package e2b

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/api/e2b/envd/process"
	"github.com/reinsdev/reins/api/e2b/envd/process/processconnect"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// processService is envd's process.Process, mapped onto the executor's
// processes: Start is a foreground Exec (a client that goes away leaves
// the process running, as envd does), Connect an Attach, SendInput
// WriteStdin, SendSignal Signal, Update ResizePTY, List ListProcesses.
type processService struct{ h *Handler }

var _ processconnect.ProcessHandler = (*processService)(nil)

// keepaliveMax bounds the interval between keepalives on a process
// stream; the SDK asks for one (Keepalive-Ping-Interval, seconds) that
// may be longer than what proxies between it and reins let idle.
const keepaliveMax = 15 * time.Second

func keepaliveInterval(hdr http.Header) time.Duration {
	// n is bounded before it is multiplied: seconds past a Duration's
	// range wrap around, to nanoseconds or a negative interval (a panic).
	if n, err := strconv.Atoi(hdr.Get("Keepalive-Ping-Interval")); err == nil && n > 0 && n < int(keepaliveMax/time.Second) {
		return time.Duration(n) * time.Second
	}
	return keepaliveMax
}

// eventSender serialises a stream's sends: events from the executor and
// the keepalive ticker.
type eventSender struct {
	mu   sync.Mutex
	send func(*process.ProcessEvent) error
	err  error
}

func (s *eventSender) event(ev *process.ProcessEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = s.send(ev)
	}
}

// every calls f every d until stop is called; stop returns once f is
// not running, so nothing is sent on a stream after its handler returns.
func every(d time.Duration, f func()) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(done); <-exited }
}

// relay streams a process's executor events as envd's, with keepalives,
// by run (an Exec or an Attach).
func relay(ctx context.Context, hdr http.Header, pty bool, send func(*process.ProcessEvent) error,
	run func(func(*executorv1.ExecEvent)) (*executorv1.Exited, error)) error {
	s := &eventSender{send: send}
	ka := &process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}
	defer every(keepaliveInterval(hdr), func() { s.event(ka) })()
	exited, err := run(func(ev *executorv1.ExecEvent) {
		if out := dataEvent(ev, pty); out != nil {
			s.event(out)
		}
	})
	if err != nil {
		return err
	}
	if exited != nil {
		s.event(endEvent(exited))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// dataEvent is envd's event for an executor event other than the exit.
func dataEvent(ev *executorv1.ExecEvent, pty bool) *process.ProcessEvent {
	var data process.ProcessEvent_DataEvent
	switch e := ev.Event.(type) {
	case *executorv1.ExecEvent_Started:
		return &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(e.Started.Pid)}}}
	case *executorv1.ExecEvent_Stdout:
		if pty {
			data.Output = &process.ProcessEvent_DataEvent_Pty{Pty: e.Stdout}
		} else {
			data.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: e.Stdout}
		}
	case *executorv1.ExecEvent_Stderr:
		data.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: e.Stderr}
	default:
		return nil // Dropped has no envd event; Exited is endEvent's
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: &data}}
}

// endEvent is envd's end: as Go's os.ProcessState says it (exit code -1
// and "signal: killed" for a process a signal ended).
func endEvent(x *executorv1.Exited) *process.ProcessEvent {
	end := &process.ProcessEvent_EndEvent{ExitCode: x.ExitCode, Exited: x.Signal == 0,
		Status: "exit status " + strconv.Itoa(int(x.ExitCode))}
	if x.Signal != 0 {
		end.ExitCode = -1
		end.Status = "signal: " + syscall.Signal(x.Signal).String()
	}
	if x.Reason == "timeout" {
		msg := "the command ran out of time and was killed"
		end.Error = &msg
	}
	if x.OomKills > 0 {
		msg := fmt.Sprintf("the sandbox ran out of memory: %d of its processes were killed", x.OomKills)
		end.Error = &msg
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}
}

func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	cl := callOf(ctx)
	acct, err := accountOf(req.Header())
	if err != nil {
		return err
	}
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "process.cmd is empty: name the program to run")
	}
	er := &executorv1.ExecRequest{
		Argv:  append([]string{cfg.Cmd}, cfg.Args...),
		Env:   envList(cfg.Envs),
		Cwd:   acct.abs(cfg.GetCwd()),
		Stdin: m.Stdin == nil || *m.Stdin, // envd's default for older SDKs
		Tag:   m.GetTag(),
		User:  acct.name,
	}
	if m.Pty != nil {
		er.Pty, er.Rows, er.Cols = true, m.Pty.GetSize().GetRows(), m.Pty.GetSize().GetCols()
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) }
	return relay(ctx, req.Header(), er.Pty, send, func(on func(*executorv1.ExecEvent)) (*executorv1.Exited, error) {
		return cl.sb.Exec(ctx, er, on)
	})
}

// envList is envs as K=V, in a stable order.
func envList(envs map[string]string) []string {
	out := make([]string, 0, len(envs))
	for k, v := range envs {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	cl := callOf(ctx)
	info, err := findProcess(ctx, cl.sb, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.ConnectResponse{Event: ev}) }
	return relay(ctx, req.Header(), info.Pty, send, func(on func(*executorv1.ExecEvent)) (*executorv1.Exited, error) {
		return cl.sb.Attach(ctx, info.Pid, true, on)
	})
}

// findProcess returns the sandbox's process the selector names: by pid,
// or the running process with the tag.
func findProcess(ctx context.Context, sb *client.Sandbox, sel *process.ProcessSelector) (*executorv1.ProcessInfo, error) {
	resp, err := client.Unary(ctx, sb, sb.RPC().ListProcesses, &executorv1.ListProcessesRequest{})
	if err != nil {
		return nil, err
	}
	switch s := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		for _, pi := range resp.Processes {
			if pi.Pid == int32(s.Pid) && s.Pid <= 1<<31-1 {
				return pi, nil
			}
		}
		return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("process with pid %d not found: list the sandbox's processes (commands.list)", s.Pid))
	case *process.ProcessSelector_Tag:
		for _, pi := range resp.Processes {
			if pi.Running && pi.Tag == s.Tag {
				return pi, nil
			}
		}
		return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("no running process has the tag %q", s.Tag))
	}
	return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the process selector names neither a pid nor a tag")
}

func (p *processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	sb := callOf(ctx).sb
	resp, err := client.Unary(ctx, sb, sb.RPC().ListProcesses, &executorv1.ListProcessesRequest{})
	if err != nil {
		return nil, err
	}
	out := &process.ListResponse{}
	for _, pi := range resp.Processes {
		if !pi.Running || len(pi.Argv) == 0 {
			continue // envd lists the running ones
		}
		info := &process.ProcessInfo{Pid: uint32(pi.Pid), Config: &process.ProcessConfig{
			Cmd: pi.Argv[0], Args: pi.Argv[1:], Envs: envMap(pi.Env), Cwd: optional(pi.Cwd),
		}, Tag: optional(pi.Tag)}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

// envMap is K=V variables as a map.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	sb := callOf(ctx).sb
	info, err := findProcess(ctx, sb, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if _, err := client.Unary(ctx, sb, sb.RPC().ResizePTY, &executorv1.ResizePTYRequest{Pid: info.Pid, Rows: size.Rows, Cols: size.Cols}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	sb := callOf(ctx).sb
	info, err := findProcess(ctx, sb, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := writeInput(ctx, sb, info.Pid, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

// writeInput writes stdin or pty input: both are the process's input.
func writeInput(ctx context.Context, sb *client.Sandbox, pid int32, in *process.ProcessInput) error {
	data := in.GetStdin()
	if data == nil {
		data = in.GetPty()
	}
	_, err := client.Unary(ctx, sb, sb.RPC().WriteStdin, &executorv1.WriteStdinRequest{Pid: pid, Data: data})
	return err
}

// StreamInput writes each data message to the process the first message
// names, in order.
func (p *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	sb := callOf(ctx).sb
	var pid int32
	for stream.Receive() {
		switch e := stream.Msg().Event.(type) {
		case *process.StreamInputRequest_Start:
			info, err := findProcess(ctx, sb, e.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			pid = info.Pid
		case *process.StreamInputRequest_Data:
			if pid == 0 {
				return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "StreamInput's first message must be start, naming the process")
			}
			if err := writeInput(ctx, sb, pid, e.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	sb := callOf(ctx).sb
	info, err := findProcess(ctx, sb, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := client.Unary(ctx, sb, sb.RPC().WriteStdin, &executorv1.WriteStdinRequest{Pid: info.Pid, Close: true}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	sb := callOf(ctx).sb
	var sig syscall.Signal
	switch req.Msg.Signal {
	case process.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case process.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
	}
	// Only the executor's own processes can be named: a pid it did not
	// start is not found, whatever else runs in the sandbox.
	info, err := findProcess(ctx, sb, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := client.Unary(ctx, sb, sb.RPC().Signal, &executorv1.SignalRequest{Pid: info.Pid, Signal: int32(sig)}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}
