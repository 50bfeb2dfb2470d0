package mcp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// Exec's bounds: a command runs at most MaxExecTimeout; each of its
// outputs is answered up to the output cap.
const (
	DefaultExecTimeoutSeconds = 60
	MaxExecTimeoutSeconds     = 3600
	defaultOutputBytes        = 1 << 20
)

type execArgs struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Command        string            `json:"command" jsonschema:"the command line, run by /bin/sh -c"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"the working directory (default: the sandbox's workdir)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables added for this command"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds (default 60, at most 3600)"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text written to the command's standard input, which is then closed"`
}

func (t *tools) addExecTool(s *sdk.Server) {
	sdk.AddTool(s, &sdk.Tool{
		Name: "exec",
		Description: "Run a shell command in the sandbox to completion and answer its stdout, stderr, exit code and reason " +
			"(exited, timeout, oom_killed, killed); each output is cut at 1 MiB (truncated says so).",
		Annotations: &sdk.ToolAnnotations{Title: "Run a command", DestructiveHint: boolp(true), OpenWorldHint: boolp(true)},
	}, t.exec)
}

func (t *tools) exec(ctx context.Context, req *sdk.CallToolRequest, a execArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if strings.TrimSpace(a.Command) == "" {
		return nil, nil, argError("command", "is empty: give a shell command line, such as \"ls -la\"")
	}
	if a.TimeoutSeconds < 0 || a.TimeoutSeconds > MaxExecTimeoutSeconds {
		return nil, nil, argError("timeout_seconds", "%d is outside 0-%d", a.TimeoutSeconds, MaxExecTimeoutSeconds)
	}
	timeout := a.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultExecTimeoutSeconds
	}
	rc := &reinsv1.RunCommandRequest{
		Command: a.Command, Cwd: a.Cwd, TimeoutMs: int64(timeout) * 1000,
		Stdin: []byte(a.Stdin), MaxOutputBytes: defaultOutputBytes,
	}
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, nil, argError("env", "the name %q is not a variable name", k)
		}
		rc.Env = append(rc.Env, k+"="+a.Env[k])
	}
	resp, err := sb.RunCommand(ctx, rc)
	if err != nil {
		return nil, nil, err
	}
	js, err := protoJSON(resp)
	if err != nil {
		return nil, nil, err
	}
	return result(execText(resp), js), nil, nil
}

// execText is what the model reads of a command's end: its outputs, then
// how it ended.
func execText(r *reinsv1.RunCommandResponse) string {
	var b strings.Builder
	if r.GetStdout() != "" {
		b.WriteString(r.GetStdout())
		if !strings.HasSuffix(r.GetStdout(), "\n") {
			b.WriteByte('\n')
		}
	}
	if r.GetStderr() != "" {
		b.WriteString("[stderr]\n")
		b.WriteString(r.GetStderr())
		if !strings.HasSuffix(r.GetStderr(), "\n") {
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "[exit code %d", r.GetExitCode())
	if reason := r.GetReason(); reason != "" && reason != "exited" {
		fmt.Fprintf(&b, ", %s", reason)
	}
	if r.GetOomKills() > 0 {
		fmt.Fprintf(&b, ", %d processes killed by the memory limit", r.GetOomKills())
	}
	if r.GetTruncated() {
		b.WriteString(", output truncated")
	}
	b.WriteString("]")
	return b.String()
}
