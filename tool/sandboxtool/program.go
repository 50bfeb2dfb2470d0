package sandboxtool

import (
	"context"
	"errors"
	"syscall"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// A program is a long-running process an agent run starts in its sandbox
// (Claude Code, Codex, a user's own): started in the background in its own
// process group, followed by whoever runs the run (again after a restart
// of the service, by pid), killed as a group. These are the loop's words
// for it, so that the loop names no executor call itself.

// Attacher is an Executor that can follow a background process by pid
// (the executor client is one).
type Attacher interface {
	Attach(ctx context.Context, pid int32, follow bool, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error)
}

// ProgramExit is how a program ended.
type ProgramExit struct {
	Code   int    // 128+signal when a signal killed it
	Signal int    // 0 when it exited on its own
	Reason string // the executor's: "exited", "signaled", "killed", …
}

// ProgramOutput receives a program's output as it comes: stdout or
// stderr bytes, or lost (bytes the executor's bounded buffers dropped
// before what follows, so a line in progress is broken).
type ProgramOutput struct {
	Stdout, Stderr func([]byte)
	Lost           func()
}

// StartProgram starts argv in the background with env (K=V, over the
// sandbox's own) and returns its pid. key makes the start idempotent for
// the executor's life: starting again with it returns the same process.
func StartProgram(ctx context.Context, ex Executor, argv, env []string, key, tag string) (int32, error) {
	var pid int32
	_, err := ex.Exec(ctx, &executorv1.ExecRequest{Argv: argv, Env: env, Background: true, IdempotencyKey: key, Tag: tag},
		func(ev *executorv1.ExecEvent) {
			if s := ev.GetStarted(); s != nil {
				pid = s.Pid
			}
		})
	if err == nil && pid == 0 {
		err = errdefs.WithMessage(errdefs.ErrUnavailable, "the executor ended the stream without saying the program started")
	}
	return pid, err
}

// FollowProgram streams what program pid printed (what its executor still
// holds, then the rest as it comes) to out, and returns how it ended. It
// ends with an error when ctx does or the executor goes away.
func FollowProgram(ctx context.Context, ex Executor, pid int32, out ProgramOutput) (ProgramExit, error) {
	at, ok := ex.(Attacher)
	if !ok {
		return ProgramExit{}, errors.New("this sandbox's executor cannot follow a background program")
	}
	exit, err := at.Attach(ctx, pid, true, func(ev *executorv1.ExecEvent) {
		switch e := ev.Event.(type) {
		case *executorv1.ExecEvent_Stdout:
			if out.Stdout != nil {
				out.Stdout(e.Stdout)
			}
		case *executorv1.ExecEvent_Stderr:
			if out.Stderr != nil {
				out.Stderr(e.Stderr)
			}
		case *executorv1.ExecEvent_Dropped:
			if out.Lost != nil {
				out.Lost()
			}
		}
	})
	if err != nil {
		return ProgramExit{}, err
	}
	if exit == nil {
		return ProgramExit{}, errdefs.WithMessage(errdefs.ErrUnavailable, "the executor ended the stream before the program exited")
	}
	return ProgramExit{Code: int(exit.ExitCode), Signal: int(exit.Signal), Reason: exit.Reason}, nil
}

// SignalProgram sends sig to program pid's process group (everything it
// started).
func SignalProgram(ctx context.Context, ex Executor, pid int32, sig syscall.Signal) error {
	return ex.Signal(ctx, pid, sig)
}
