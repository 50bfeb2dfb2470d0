package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Exit codes of exec besides the command's own, as GNU timeout and shells
// use them.
const (
	exitTimeout = 124
	exitKilled  = 137
)

func execCmd() *cobra.Command {
	var (
		detach, tty, interactive bool
		timeout                  time.Duration
		env                      kvFlag
		workdir, tag, user       string
	)
	c := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARG...]",
		Short: "Run a command in a sandbox; exits with the command's exit code",
		Long: `Run a command in a sandbox, streaming its output as it comes, and exit
with its exit code. The command runs directly (no shell): use sh -c '...'
for pipes and globs.

A command killed by the memory limit exits 137 and says so; one that ran
past --timeout is killed with its whole process group and exits 124, after
printing what it wrote.`,
		Args: usageArgs(cobra.MinimumNArgs(2)),
		RunE: func(c *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageError{errors.New("--timeout must not be negative")}
			}
			// As docker does: a terminal for the command needs one here,
			// or the pipe's end would never reach it (a terminal takes
			// end-of-file only at the start of a line) and exec would hang.
			if tty && !detach && !term.IsTerminal(int(os.Stdin.Fd())) {
				return usageError{errors.New("the input device is not a TTY: drop -t (use -i to send piped input to the command)")}
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			req := &executorv1.ExecRequest{
				Argv: args[1:], Env: env.v, Cwd: workdir, TimeoutMs: timeout.Milliseconds(),
				Background: detach, Tag: tag, Pty: tty, Stdin: interactive || tty, User: user,
			}
			sb := cl.Sandbox(args[0])
			if detach {
				return execDetached(ctx, c, sb, req)
			}
			// Ctrl-C goes to the command (see relaySignals), not to
			// this client's context.
			return execAttached(context.Background(), c, cl, sb, req)
		},
	}
	f := c.Flags()
	f.BoolVarP(&detach, "detach", "d", false, "run in the background and print the PID (see ps, logs, kill)")
	f.BoolVarP(&tty, "tty", "t", false, "give the command a terminal (implies -i)")
	f.BoolVarP(&interactive, "interactive", "i", false, "send this terminal's standard input to the command")
	f.DurationVar(&timeout, "timeout", 0, "kill the command's process group after this long, e.g. 30s")
	f.Var(&env, "env", "environment variable K=V (repeatable)")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory (default the sandbox's)")
	f.StringVar(&tag, "tag", "", "a name shown by ps")
	f.StringVarP(&user, "user", "u", "", "run as this account of the sandbox's /etc/passwd, e.g. user (default the executor's, root)")
	return c
}

func execDetached(ctx context.Context, c *cobra.Command, sb *client.Sandbox, req *executorv1.ExecRequest) error {
	req.Stdin = false
	var pid int32
	_, err := sb.Exec(ctx, req, func(ev *executorv1.ExecEvent) {
		if s := ev.GetStarted(); s != nil {
			pid = s.Pid
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(c.OutOrStdout(), pid)
	return nil
}

func execAttached(ctx context.Context, c *cobra.Command, cl *client.Client, sb *client.Sandbox, req *executorv1.ExecRequest) error {
	start := time.Now()
	stdout, stderr := c.OutOrStdout(), c.ErrOrStderr()
	var restore func()
	if req.Pty {
		if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
			if w, h, err := term.GetSize(fd); err == nil {
				req.Cols, req.Rows = uint32(w), uint32(h)
			}
			if st, err := term.MakeRaw(fd); err == nil {
				restore = func() { term.Restore(fd, st) }
				defer restore()
			}
		}
	}
	// Stdin, resizes and the first Ctrl-C go to the process once it runs.
	started := make(chan int32, 1)
	pids := make(chan int32, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go relaySignals(ctx, cancel, sb, pids, stderr)
	go forwardInput(ctx, sb, req, started)
	var lost output
	exited, err := sb.Exec(ctx, req, func(ev *executorv1.ExecEvent) {
		switch e := ev.Event.(type) {
		case *executorv1.ExecEvent_Started:
			started <- e.Started.Pid
			pids <- e.Started.Pid
		case *executorv1.ExecEvent_Stdout:
			lost.write(stdout, e.Stdout)
		case *executorv1.ExecEvent_Stderr:
			lost.write(stderr, e.Stderr)
		case *executorv1.ExecEvent_Dropped:
			lost.dropped(stderr, e.Dropped)
		}
	})
	if restore != nil {
		restore()
	}
	if ctx.Err() != nil {
		return exitError{130}
	}
	if err != nil || exited == nil {
		return execBroken(cl, sb.ID, err)
	}
	if exited.OomKills > 0 && exited.Signal != int32(syscall.SIGKILL) {
		what := "a process of this command was"
		if exited.OomKills > 1 {
			what = fmt.Sprintf("%d processes of this command were", exited.OomKills)
		}
		fmt.Fprintf(stderr, "reins: %s killed: out of memory (limit %s)\n", what, sandbox.FormatBytes(exited.MemoryLimitBytes))
	}
	code := int(exited.ExitCode)
	switch {
	case exited.Reason == "timeout":
		fmt.Fprintf(stderr, "reins: killed: timed out after %s\n", time.Duration(req.TimeoutMs)*time.Millisecond)
		code = exitTimeout
	case exited.Signal == int32(syscall.SIGKILL):
		if why := oomReason(cl, sb.ID, start, exited); why != "" {
			fmt.Fprintf(stderr, "reins: killed: %s\n", why)
			code = exitKilled
		}
	}
	if err := lost.err(); err != nil {
		fmt.Fprintln(stderr, "reins:", err)
		if code == 0 {
			code = 1
		}
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

// output writes a stream's output, and counts what the sandbox reported
// lost (Dropped): exec and logs then exit non-zero, since what was printed
// is not all the command wrote.
type output struct {
	lost uint64
	werr error
}

func (o *output) write(w io.Writer, b []byte) {
	if _, err := w.Write(b); err != nil && o.werr == nil {
		o.werr = err
	}
}

func (o *output) dropped(stderr io.Writer, d *executorv1.Dropped) {
	n := d.StdoutBytes + d.StderrBytes
	o.lost += n
	fmt.Fprintf(stderr, "\nreins: %d bytes of output lost here (the sandbox keeps a bounded buffer of what no client reads)\n", n)
}

func (o *output) err() error {
	switch {
	case o.werr != nil:
		return fmt.Errorf("writing the output: %w", o.werr)
	case o.lost > 0:
		return fmt.Errorf("%d bytes of the output were lost (it came faster than it was read while no client held it back); the rest is shown", o.lost)
	}
	return nil
}

// forwardInput sends stdin, terminal resizes and interrupts to the process.
func forwardInput(ctx context.Context, sb *client.Sandbox, req *executorv1.ExecRequest, started <-chan int32) {
	var pid int32
	select {
	case pid = <-started:
	case <-ctx.Done():
		return
	}
	rpc := sb.RPC()
	if req.Pty {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		go func() {
			defer signal.Stop(winch)
			for {
				select {
				case <-ctx.Done():
					return
				case <-winch:
					if w, h, err := term.GetSize(int(os.Stdin.Fd())); err == nil {
						client.Unary(ctx, sb, rpc.ResizePTY, &executorv1.ResizePTYRequest{Pid: pid, Cols: uint32(w), Rows: uint32(h)})
					}
				}
			}
		}()
	}
	if !req.Stdin {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if _, werr := client.Unary(ctx, sb, rpc.WriteStdin, &executorv1.WriteStdinRequest{Pid: pid, Data: buf[:n]}); werr != nil {
				return
			}
		}
		if err == io.EOF {
			client.Unary(ctx, sb, rpc.WriteStdin, &executorv1.WriteStdinRequest{Pid: pid, Close: true})
			return
		}
		if err != nil {
			return
		}
	}
}

// oomReason says, in words, whether the memory limit killed something in the
// sandbox since start.
func oomReason(cl *client.Client, id string, start time.Time, exited *executorv1.Exited) string {
	if exited.OomKills > 0 {
		return fmt.Sprintf("out of memory (limit %s)", sandbox.FormatBytes(exited.MemoryLimitBytes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sb, err := cl.Get(ctx, id)
	if err != nil || sb.LastOomUnixNano == 0 || time.Unix(0, sb.LastOomUnixNano).Before(start) {
		return ""
	}
	return fmt.Sprintf("out of memory (limit %s)", sandbox.FormatBytes(sb.Spec.MemoryBytes))
}

// execBroken explains an exec whose stream ended without an exit: most often
// the sandbox itself ended.
func execBroken(cl *client.Client, id string, err error) error {
	// The service's error says it all: a command not found (127), a
	// sandbox that ended while the command ran, and why (137 for memory).
	if _, ok := errdefs.ExitCode(err); ok || errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) ||
		errors.Is(err, errdefs.ErrPermissionDenied) || errors.Is(err, errdefs.ErrFailedPrecondition) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if sb, gerr := cl.Get(ctx, id); gerr == nil && sb.State == reinsv1.SandboxState_SANDBOX_STATE_STOPPED {
		fmt.Fprintf(os.Stderr, "reins: sandbox %s stopped: %s: %s\n", id, sandboxReasonName(sb.Reason), sb.Message)
		if sb.Reason == reinsv1.SandboxReason_SANDBOX_REASON_OOM_KILLED {
			fmt.Fprintf(os.Stderr, "reins: killed: out of memory (limit %s)\n", sandbox.FormatBytes(sb.Spec.MemoryBytes))
			return exitError{exitKilled}
		}
		return exitError{1}
	}
	if err == nil {
		err = errors.New("the command's output stream ended without an exit status")
	}
	return err
}

// relaySignals passes Ctrl-C and SIGTERM on to the command's process group,
// as a local shell would: the first as itself, the second as SIGKILL; a
// third leaves the command running and returns.
func relaySignals(ctx context.Context, cancel context.CancelFunc, sb *client.Sandbox, pids <-chan int32, stderr io.Writer) {
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var pid int32
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case pid = <-pids:
			n--
			continue
		case sig := <-sigs:
			num := sig.(syscall.Signal)
			switch {
			case pid == 0 || n >= 2:
				fmt.Fprintln(stderr, "reins: detached; the command may still run (reins sandbox ps)")
				cancel()
				return
			case n == 1:
				num = syscall.SIGKILL
			}
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			client.Unary(sctx, sb, sb.RPC().Signal, &executorv1.SignalRequest{Pid: pid, Signal: int32(num)})
			scancel()
		}
	}
}
