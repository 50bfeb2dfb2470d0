package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
)

const (
	// RunCommandTimeout is a RunCommand's timeout when it names none;
	// MaxRunCommandTimeout the longest it may name (a longer command is
	// for Exec, which streams).
	RunCommandTimeout    = 60 * time.Second
	MaxRunCommandTimeout = time.Hour
	// RunCommandOutput is how much of each stream RunCommand answers when
	// not told; MaxRunCommandOutput the most it may be told. The rest is
	// read and dropped, and the answer says truncated.
	RunCommandOutput    = 1 << 20
	MaxRunCommandOutput = 16 << 20
	// runCommandGrace is how long past its timeout the service waits for
	// the executor to report the killed command, before it gives up.
	runCommandGrace = 30 * time.Second
	// stdinChunk is the most of RunCommand's stdin sent per WriteStdin.
	stdinChunk = 1 << 20
)

// RunCommand runs one command to completion and answers its bounded
// output (the unary call for callers without a streaming client). The
// command is the executor's Exec, relayed: its output is kept up to the
// cap per stream, the rest drained so the command runs to its end; the
// OOM accounting and a sandbox that ends during the call are Exec's
// (exec.go).
func (s *Server) RunCommand(ctx context.Context, req *connect.Request[reinsv1.RunCommandRequest]) (*connect.Response[reinsv1.RunCommandResponse], error) {
	m := req.Msg
	// The sandbox is found first, so another tenant's is answered as a
	// missing one whatever else the request says.
	ex, err := s.m.Executor(ctx, tenant(ctx), m.SandboxId)
	if err != nil {
		return nil, err
	}
	ereq, timeout, limit, err := runCommandExec(m)
	if err != nil {
		return nil, err
	}
	oom := s.oomSince(ctx, m.SandboxId)
	cctx, cancel := context.WithTimeout(ctx, timeout+runCommandGrace)
	defer cancel()
	stdout, stderr := capped{max: limit}, capped{max: limit}
	var stdin sync.WaitGroup
	defer stdin.Wait()
	defer cancel() // first: a stdin write still waiting stops
	exited, err := ex.Exec(cctx, ereq, func(ev *executorv1.ExecEvent) {
		switch e := ev.Event.(type) {
		case *executorv1.ExecEvent_Started:
			if ereq.Stdin {
				stdin.Add(1)
				go func() {
					defer stdin.Done()
					writeStdin(cctx, ex, e.Started.Pid, m.Stdin)
				}()
			}
		case *executorv1.ExecEvent_Stdout:
			stdout.write(e.Stdout)
		case *executorv1.ExecEvent_Stderr:
			stderr.write(e.Stderr)
		}
	})
	if err == nil && exited == nil {
		err = errdefs.WithMessage(errdefs.ErrUnavailable, "the executor ended the command's stream before it exited")
	}
	if err != nil {
		if ctx.Err() == nil && cctx.Err() != nil {
			return nil, errdefs.WithMessage(errdefs.ErrTimeout, fmt.Sprintf(
				"the command did not end within %s of its timeout (%s); its sandbox may be stuck", runCommandGrace, timeout))
		}
		return nil, s.callEnded(ctx, m.SandboxId, err)
	}
	resp := &reinsv1.RunCommandResponse{
		Stdout:     strings.ToValidUTF8(string(stdout.b), "\uFFFD"),
		Stderr:     strings.ToValidUTF8(string(stderr.b), "\uFFFD"),
		ExitCode:   exited.ExitCode,
		Reason:     exited.Reason,
		Truncated:  stdout.cut || stderr.cut,
		DurationMs: exited.DurationMs,
	}
	resp.OomKills, _ = oom()
	// The memory limit's victim (runc: the kernel picks a process inside
	// the sandbox; gVisor ends the whole sandbox, an error above).
	if resp.OomKills > 0 && exited.Signal == int32(syscall.SIGKILL) && exited.Reason != "timeout" {
		resp.Reason = "oom_killed"
	}
	return connect.NewResponse(resp), nil
}

// runCommandExec checks a RunCommand and turns it into the executor's
// Exec, with its timeout and per-stream output cap.
func runCommandExec(m *reinsv1.RunCommandRequest) (*executorv1.ExecRequest, time.Duration, int, error) {
	var argv []string
	switch {
	case m.Command != "" && len(m.Argv) > 0:
		return nil, 0, 0, errdefs.WithMessage(errdefs.ErrInvalidArgument, "give command (run by /bin/sh -c) or argv, not both")
	case m.Command != "":
		argv = []string{"/bin/sh", "-c", m.Command}
	case len(m.Argv) > 0 && m.Argv[0] != "":
		argv = m.Argv
	default:
		return nil, 0, 0, errdefs.WithMessage(errdefs.ErrInvalidArgument, "give command (run by /bin/sh -c) or argv (argv[0] not empty)")
	}
	timeout := time.Duration(m.TimeoutMs) * time.Millisecond
	switch {
	case m.TimeoutMs < 0 || m.TimeoutMs > MaxRunCommandTimeout.Milliseconds():
		return nil, 0, 0, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"timeout_ms %d: give 0 (for %s) up to %d (%s); for longer commands use Exec, which streams",
			m.TimeoutMs, RunCommandTimeout, MaxRunCommandTimeout.Milliseconds(), MaxRunCommandTimeout))
	case timeout == 0:
		timeout = RunCommandTimeout
	}
	limit := int(m.MaxOutputBytes)
	switch {
	case m.MaxOutputBytes < 0 || m.MaxOutputBytes > MaxRunCommandOutput:
		return nil, 0, 0, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"max_output_bytes %d: give 0 (for 1 MiB) up to %d (16 MiB); for more output use Exec, which streams", m.MaxOutputBytes, MaxRunCommandOutput))
	case limit == 0:
		limit = RunCommandOutput
	}
	return &executorv1.ExecRequest{
		Argv: argv, Env: m.Env, Cwd: m.Cwd, TimeoutMs: timeout.Milliseconds(), Stdin: len(m.Stdin) > 0,
	}, timeout, limit, nil
}

// writeStdin sends data to the process's stdin and closes it. A process
// that exits (or closes its stdin) before reading it all ends the write:
// that is the command's business, not an error of the call.
func writeStdin(ctx context.Context, ex Executor, pid int32, data []byte) {
	for {
		n := min(len(data), stdinChunk)
		if err := ex.WriteStdin(ctx, pid, data[:n], n == len(data)); err != nil {
			return
		}
		if data = data[n:]; len(data) == 0 {
			return
		}
	}
}

// capped keeps the first max bytes written to it and counts the rest as
// cut: a command that writes forever costs the service max bytes.
type capped struct {
	b   []byte
	max int
	cut bool
}

func (c *capped) write(p []byte) {
	if room := c.max - len(c.b); len(p) > room {
		p, c.cut = p[:room], true
	}
	c.b = append(c.b, p...)
}
