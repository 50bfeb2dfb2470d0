package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Exec and Attach are the two executor calls the service does not pass
// through as bytes (docs/decisions/0004-executor-proxy.md): it relays their
// events, so that
//
//   - a stream that breaks because the sandbox ended ends, in the same
//     call, with a Connect error that says why ("sandbox x ended while the
//     call ran: killed: out of memory (limit 1 GiB)", exit code 137 for a
//     memory kill), in whichever protocol the caller speaks;
//   - a foreground command's Exited says how many of the sandbox's
//     processes the memory limit killed while it ran (oom_kills), which
//     only the host sees on runc;
//   - backpressure holds end to end: each event is sent to the caller
//     before the next is read from the executor.
func (s *Server) handleExec(mux *http.ServeMux) {
	// No gzip, as the executor: compressing every chunk of output cost the
	// service three times the CPU of relaying it (measured), and command
	// output is often already compressed or random.
	opts := s.apiOptions(connect.WithCompression("gzip", nil, nil))
	mux.Handle(executorv1connect.ExecutorExecProcedure, s.withExecutor(
		connect.NewServerStreamHandler(executorv1connect.ExecutorExecProcedure, s.exec, opts...)))
	mux.Handle(executorv1connect.ExecutorAttachProcedure, s.withExecutor(
		connect.NewServerStreamHandler(executorv1connect.ExecutorAttachProcedure, s.attach, opts...)))
}

// withExecutor finds the sandbox the call names before anything else, as
// the proxy does: a sandbox that is not the caller's is answered the same
// way, whatever the call's protocol.
func (s *Server) withExecutor(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ex, ok := s.executorOf(w, r)
		if !ok {
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), executorKey{}, target{id, ex})))
	})
}

// executorOf finds the caller's sandbox named by SandboxHeader and its
// executor client, or answers the call with the error and reports false.
// Client also marks the sandbox active, for its idle timeout, unless the
// call only looks (lookOnly).
func (s *Server) executorOf(w http.ResponseWriter, r *http.Request) (string, Executor, bool) {
	id := r.Header.Get(SandboxHeader)
	if id == "" {
		s.writeError(w, r, fmt.Errorf("executor calls need the %s header naming a sandbox: %w", SandboxHeader, errdefs.ErrInvalidArgument))
		return "", nil, false
	}
	lookup := s.m.Executor
	if q, ok := s.m.(quietExecutors); ok && lookOnly[r.URL.Path] {
		lookup = q.QuietExecutor
	}
	ex, err := lookup(r.Context(), tenant(r.Context()), id)
	if err != nil {
		s.writeError(w, r, err)
		return "", nil, false
	}
	return id, ex, true
}

// lookOnly are the executor calls that only look at a sandbox: they do not
// count as its activity (`reins sandbox show` polled by its owner must not
// keep an idle sandbox alive).
var lookOnly = map[string]bool{
	executorv1connect.ExecutorUsageProcedure:  true,
	executorv1connect.ExecutorHelloProcedure:  true,
	executorv1connect.ExecutorHealthProcedure: true,
}

// quietExecutors is the optional part of Sandboxes with lookups that do
// not count as activity (Over's, for a Manager).
type quietExecutors interface {
	QuietExecutor(ctx context.Context, tenant, id string) (Executor, error)
}

type executorKey struct{}

type target struct {
	id string
	ex Executor
}

func (s *Server) exec(ctx context.Context, req *connect.Request[executorv1.ExecRequest], stream *connect.ServerStream[executorv1.ExecEvent]) error {
	id, ex := s.executor(ctx)
	var oom func() (uint32, int64)
	if !req.Msg.Background {
		oom = s.oomSince(ctx, id)
	}
	r := relay{stream: stream}
	ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	_, err := ex.Exec(ctx, req.Msg, func(ev *executorv1.ExecEvent) {
		if x := ev.GetExited(); x != nil && oom != nil {
			x.OomKills, x.MemoryLimitBytes = oom()
		}
		r.send(ev)
	})
	return r.end(s.callEnded(ctx, id, err))
}

func (s *Server) attach(ctx context.Context, req *connect.Request[executorv1.AttachRequest], stream *connect.ServerStream[executorv1.ExecEvent]) error {
	id, ex := s.executor(ctx)
	r := relay{stream: stream}
	ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	_, err := ex.Attach(ctx, req.Msg.Pid, req.Msg.Follow, r.send)
	return r.end(s.callEnded(ctx, id, err))
}

// oomSince reads sandbox id's OOM count now, while a command starts (off
// the round trip of every exec), and returns a function that says how
// many processes the memory limit killed since, and the limit (0, 0 when
// none or unknown). Call it once, as the command exits.
func (s *Server) oomSince(ctx context.Context, id string) func() (uint32, int64) {
	before := make(chan int, 1)
	go func() {
		n, _, err := s.m.OOMKills(ctx, tenant(ctx), id)
		if err != nil {
			n = -1
		}
		before <- n
	}()
	return func() (uint32, int64) {
		if b := <-before; b >= 0 {
			if n, limit, err := s.m.OOMKills(ctx, tenant(ctx), id); err == nil && n > b {
				return uint32(n - b), limit
			}
		}
		return 0, 0
	}
}

// executor returns the sandbox withExecutor found for the call.
func (s *Server) executor(ctx context.Context) (string, Executor) {
	t := ctx.Value(executorKey{}).(target)
	return t.id, t.ex
}

// relay sends a call's events to its caller; when the caller goes away it
// cancels the executor call.
type relay struct {
	stream *connect.ServerStream[executorv1.ExecEvent]
	cancel context.CancelFunc
	err    error
}

func (r *relay) send(ev *executorv1.ExecEvent) {
	if r.err != nil {
		return
	}
	if r.err = r.stream.Send(ev); r.err != nil {
		r.cancel()
	}
}

// end is the call's result: a failed send (the caller left) wins.
func (r *relay) end(err error) error {
	if r.err != nil {
		return r.err
	}
	return err
}

// callEnded explains an executor call that failed: when its sandbox ended
// (or is ending: the death is recorded a moment after the socket closes),
// the sandbox's fate; otherwise the executor's own error.
func (s *Server) callEnded(ctx context.Context, id string, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	switch errdefs.Kind(err) {
	case errdefs.ErrUnavailable, errdefs.ErrInternal, errdefs.ErrTimeout, errdefs.ErrCanceled, nil:
	default:
		return err // the executor answered: a command not found, a bad argument
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endedWaitMax)
	defer cancel()
	rec, ended := s.m.Ended(wctx, tenant(ctx), id)
	if !ended {
		return err
	}
	ee := fmt.Errorf("sandbox %s ended while the call ran: %s: %w", id, rec.EndedWhy(), errdefs.ErrFailedPrecondition)
	if rec.Reason == sandbox.ReasonOOMKilled {
		ee = errdefs.WithExitCode(ee, ExitOOM)
	}
	return ee
}

// endedWaitMax bounds how long a broken call waits for Ended, whatever the
// sandbox service's own wait.
const endedWaitMax = 15 * time.Second

// ExitOOM is the exit status of a command the memory limit killed, as a
// shell reports SIGKILL.
const ExitOOM = 137
