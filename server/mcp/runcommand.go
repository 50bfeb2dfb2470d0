package mcp

import (
	"context"
	"strings"
	"unicode/utf8"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
)

// runCommand runs rc through the streaming Exec, keeping at most
// rc.MaxOutputBytes of each output (until the service's RunCommand is
// merged; then this is sb.RunCommand).
func runCommand(ctx context.Context, sb *client.Sandbox, rc *reinsv1.RunCommandRequest) (*reinsv1.RunCommandResponse, error) {
	req := &executorv1.ExecRequest{Argv: []string{"/bin/sh", "-c", rc.Command}, Env: rc.Env, Cwd: rc.Cwd, TimeoutMs: rc.TimeoutMs}
	var out, errOut capped
	out.max, errOut.max = int(rc.MaxOutputBytes), int(rc.MaxOutputBytes)
	req.Stdin = true
	stdinDone := make(chan error, 1)
	x, err := sb.Exec(ctx, req, func(ev *executorv1.ExecEvent) {
		if st := ev.GetStarted(); st != nil {
			// Stdin is written once the process is there, then closed.
			go func() {
				_, err := client.Unary(ctx, sb, sb.RPC().WriteStdin, &executorv1.WriteStdinRequest{Pid: st.Pid, Data: rc.Stdin, Close: true})
				stdinDone <- err
			}()
		}
		out.write(ev.GetStdout())
		errOut.write(ev.GetStderr())
	})
	if err != nil {
		return nil, err
	}
	reason := x.GetReason()
	if x.GetOomKills() > 0 && reason == "signaled" {
		reason = "oom_killed"
	}
	return &reinsv1.RunCommandResponse{
		Stdout: out.String(), Stderr: errOut.String(), ExitCode: x.GetExitCode(), Reason: reason,
		Truncated: out.cut || errOut.cut, DurationMs: x.GetDurationMs(), OomKills: x.GetOomKills(),
	}, nil
}

// capped keeps the first max bytes written to it.
type capped struct {
	b   []byte
	max int
	cut bool
}

func (c *capped) write(p []byte) {
	if room := c.max - len(c.b); len(p) > room {
		p, c.cut = p[:max(room, 0)], true
	}
	c.b = append(c.b, p...)
}

func (c *capped) String() string { return strings.ToValidUTF8(string(c.b), string(utf8.RuneError)) }
