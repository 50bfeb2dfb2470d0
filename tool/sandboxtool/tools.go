// Package sandboxtool holds the tools that work in a sandbox (bash,
// read_file, write_file, edit_file, list_files, glob, grep, save_artifact,
// and computer for a sandbox with a display)
// over a small interface of its executor. A tool gets one sandbox for one
// call and returns what the model reads, and the artifacts it saved; it
// appends nothing to a run's log. Picking the sandbox, making it, and
// replacing a lost one are the loop's (agent.Engine).
package sandboxtool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/tool"
)

// Executor is what the tools ask of a sandbox's executor; the executor's
// client (executor/client) is one.
type Executor interface {
	Exec(ctx context.Context, req *executorv1.ExecRequest, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error)
	Signal(ctx context.Context, pid int32, sig syscall.Signal) error
	ReadLines(ctx context.Context, path string, first uint64, max, lineBytes uint32) (*executorv1.ReadLinesResponse, error)
	ReadFileRange(ctx context.Context, path string, offset, limit uint64) (*executorv1.ReadFileResponse, error)
	WriteFile(ctx context.Context, path string, data []byte, mode uint32) error
	EditFile(ctx context.Context, path, old, new string, replaceAll bool) (int, error)
	ListDir(ctx context.Context, path string, depth, limit uint32) (*executorv1.ListDirResponse, error)
	Glob(ctx context.Context, pattern, dir string) (paths []string, truncated bool, err error)
	Grep(ctx context.Context, req *executorv1.GrepRequest) (*executorv1.GrepResponse, error)
}

// Blobs is where save_artifact streams a file: a content-addressed store
// (store.Blobs is one) that returns once the blob is durable.
type Blobs interface {
	Put(ctx context.Context, r io.Reader) (digest string, size int64, err error)
}

// Sandbox is one sandbox, for one call.
type Sandbox struct {
	Exec Executor
	// Key is the call's idempotency key, which bash passes to the
	// executor so that asking again never runs a command twice.
	Key string
	// Name is the run's name for the sandbox; artifacts name it as
	// their source (NAME:/path).
	Name string
	// Blobs keeps what save_artifact saves.
	Blobs Blobs
	// OOMKills, when set, says how many processes of the sandbox its
	// memory limit has killed so far, and the limit (bytes); bash tells
	// the model when one of its processes was.
	OOMKills func(ctx context.Context) (kills int, limit int64, err error)
	// Screen is the size of the sandbox's display ("1280x800"), for the
	// computer tool, which scales a bigger one to what a model should
	// see (ModelScreen); "" leaves screenshots at the executor's size.
	Screen string
}

// Tool is a sandbox tool. Call (tool.Tool's) refuses: the loop runs a
// sandbox tool with Run, on the sandbox it picked for the call.
type Tool interface {
	tool.Tool
	Run(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error)
}

// Tools returns the sandbox tools. Descriptions are written for a model:
// short, exact, with their limits.
func Tools() []Tool {
	return []Tool{
		&sbTool{spec("bash", "Run a shell command in the sandbox (/bin/sh -c; call bash explicitly if the image has it). "+
			"Returns stdout and stderr interleaved, then the exit code. Default timeout 120 s, at most 3600 s; "+
			"on timeout the whole process group is killed and the output so far is returned. "+
			"Long outputs are cut in the middle (the whole output is saved as an artifact). No network.",
			`{"type":"object","properties":{"command":{"type":"string","description":"The command line."},"timeout_s":{"type":"integer","description":"Seconds before the command is killed (default 120, max 3600)."}},"required":["command"]}`,
			tool.LabelReadsUntrusted, tool.LabelDestructive), runBash},
		&sbTool{spec("read_file", "Read a text file, with line numbers. offset is the first line (1-based, default 1), "+
			"limit the number of lines (default 2000). Files over 16 MiB cannot be read whole: use offset/limit or bash.",
			`{"type":"object","properties":{"path":{"type":"string"},"offset":{"type":"integer"},"limit":{"type":"integer"}},"required":["path"]}`,
			tool.LabelReadsUntrusted), runReadFile},
		&sbTool{spec("write_file", "Create or replace a file with content (atomically; parent directories are made). At most 16 MiB.",
			`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`,
			tool.LabelDestructive), runWriteFile},
		&sbTool{spec("edit_file", "Replace the text old with new in a file. old must occur exactly once, "+
			"unless replace_all is true; include enough surrounding lines to make it unique.",
			`{"type":"object","properties":{"path":{"type":"string"},"old":{"type":"string"},"new":{"type":"string"},"replace_all":{"type":"boolean"}},"required":["path","old","new"]}`,
			tool.LabelDestructive), runEditFile},
		&sbTool{spec("list_files", "List a directory (default the working directory). depth 1 (default) lists direct entries; up to 5. At most 1000 entries.",
			`{"type":"object","properties":{"path":{"type":"string"},"depth":{"type":"integer"}}}`,
			tool.LabelReadsUntrusted), runListFiles},
		&sbTool{spec("glob", "Find files by pattern, e.g. \"**/*.go\" or \"src/*.py\", relative to the working directory or absolute. At most 1000 paths.",
			`{"type":"object","properties":{"pattern":{"type":"string"}},"required":["pattern"]}`,
			tool.LabelReadsUntrusted), runGlob},
		&sbTool{spec("grep", "Search file contents with a regular expression (RE2 syntax) under path (a file or directory, default the working directory). Returns path:line: text, at most 500 matches.",
			`{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"]}`,
			tool.LabelReadsUntrusted), runGrep},
		&sbTool{spec("save_artifact", "Save a file from the sandbox as an artifact of this run, so the person who started it can download it (reins runs artifacts). At most 256 MiB.",
			`{"type":"object","properties":{"path":{"type":"string"},"name":{"type":"string","description":"Artifact name (default the file's name)."}},"required":["path"]}`,
		), runSaveArtifact},
		computerTool(),
	}
}

func spec(name, desc, schema string, labels ...string) tool.Spec {
	return tool.Spec{Name: name, Description: desc, InputSchema: json.RawMessage(schema), Side: tool.SideSandbox, Labels: labels}
}

// sbTool is one sandbox tool: its spec and what it does.
type sbTool struct {
	s  tool.Spec
	fn func(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error)
}

var _ Tool = (*sbTool)(nil)

func (t *sbTool) Spec() tool.Spec { return t.s }
func (t *sbTool) Call(context.Context, string, json.RawMessage) (tool.Result, error) {
	return tool.Result{}, fmt.Errorf("%s runs in a sandbox: the loop calls it with Run", t.s.Name)
}
func (t *sbTool) Run(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	if sb.Exec == nil {
		return tool.Result{}, fmt.Errorf("%s: no sandbox for the call", t.s.Name)
	}
	return t.fn(ctx, sb, input)
}

// boundedOutput keeps the head and tail of a stream, so a command that
// prints gigabytes costs bounded memory.
type boundedOutput struct {
	head, tail []byte
	max        int
	dropped    int
}

func (b *boundedOutput) Write(p []byte) {
	if room := b.max - len(b.head); room > 0 {
		n := min(room, len(p))
		b.head = append(b.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - b.max; over > 0 {
		b.dropped += over
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
}

func (b *boundedOutput) String() string {
	if b.dropped == 0 {
		return string(b.head) + string(b.tail)
	}
	return fmt.Sprintf("%s\n[… %d bytes of output dropped …]\n%s", b.head, b.dropped, b.tail)
}

func runBash(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	var in struct {
		Command  string `json:"command"`
		TimeoutS int    `json:"timeout_s"`
	}
	json.Unmarshal(input, &in)
	if in.TimeoutS <= 0 {
		in.TimeoutS = 120
	}
	in.TimeoutS = min(in.TimeoutS, 3600)
	out := &boundedOutput{max: 512 << 10}
	var pid atomic.Int32 // read by the goroutine below
	done := make(chan struct{})
	defer close(done)
	go func() {
		// Cancelling the run kills the command's whole process group.
		select {
		case <-ctx.Done():
			if pid := pid.Load(); pid != 0 {
				kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				sb.Exec.Signal(kctx, pid, syscall.SIGKILL)
				cancel()
			}
		case <-done:
		}
	}()
	oomBefore, _, oomErr := sb.oomKills(ctx)
	var lost uint64
	exited, err := sb.Exec.Exec(ctx, &executorv1.ExecRequest{
		Argv: []string{"/bin/sh", "-c", in.Command}, TimeoutMs: int64(in.TimeoutS) * 1000,
		IdempotencyKey: sb.Key, Tag: "agent",
	}, func(ev *executorv1.ExecEvent) {
		switch e := ev.Event.(type) {
		case *executorv1.ExecEvent_Started:
			pid.Store(e.Started.Pid)
		case *executorv1.ExecEvent_Stdout:
			out.Write(e.Stdout)
		case *executorv1.ExecEvent_Stderr:
			out.Write(e.Stderr)
		case *executorv1.ExecEvent_Dropped:
			// Only a call that reattached after the service restarted can
			// be told this: a first call holds the command back instead.
			lost += e.Dropped.StdoutBytes + e.Dropped.StderrBytes
		}
	})
	text := out.String()
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	if lost > 0 {
		text += fmt.Sprintf("[%d bytes of output were lost while the service restarted; the rest is shown]\n", lost)
	}
	if err != nil {
		// The request went out: the command may have run (a sandbox
		// killed by what it started can die before the executor says it
		// started). The engine tells the model so if the sandbox is gone.
		return tool.Result{}, &EndedMidCall{Output: text, Err: err, Started: pid.Load() != 0}
	}
	oomKills, limit := 0, int64(0)
	if oomErr == nil {
		if n, l, err := sb.oomKills(ctx); err == nil && n > oomBefore {
			oomKills, limit = n-oomBefore, l
		}
	}
	switch {
	case exited.Reason == "timeout":
		text += fmt.Sprintf("[killed: timed out after %d s]", in.TimeoutS)
	case exited.Signal == int32(syscall.SIGKILL) && oomKills > 0:
		text += fmt.Sprintf("[killed: out of memory (limit %s); exit code %d]", sandbox.FormatBytes(limit), exited.ExitCode)
	case exited.Signal != 0:
		text += fmt.Sprintf("[killed by signal %d (exit code %d)]", exited.Signal, exited.ExitCode)
	default:
		if oomKills > 0 {
			text += fmt.Sprintf("[a process of this command was killed: out of memory (limit %s)]\n", sandbox.FormatBytes(limit))
		}
		text += fmt.Sprintf("[exit code %d]", exited.ExitCode)
	}
	return tool.Result{Text: text, IsError: exited.ExitCode != 0 || oomKills > 0 || lost > 0}, nil
}

func (sb Sandbox) oomKills(ctx context.Context) (int, int64, error) {
	if sb.OOMKills == nil {
		return 0, 0, errors.ErrUnsupported
	}
	return sb.OOMKills(ctx)
}

// EndedMidCall is a tool's error when the call had started (a command was
// sent) and then the executor went away; Output is what the call had
// gathered by then. The loop tells the model so if the sandbox is gone.
type EndedMidCall struct {
	Output  string
	Err     error
	Started bool // the executor said the command started
}

func (e *EndedMidCall) Error() string { return e.Err.Error() }
func (e *EndedMidCall) Unwrap() error { return e.Err }

func runReadFile(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	var in struct {
		Path          string `json:"path"`
		Offset, Limit int
	}
	json.Unmarshal(input, &in)
	if in.Offset <= 0 {
		in.Offset = 1
	}
	if in.Limit <= 0 {
		in.Limit = 2000
	}
	// The executor picks the lines out: only they cross the socket.
	resp, err := sb.Exec.ReadLines(ctx, in.Path, uint64(in.Offset), uint32(min(in.Limit, 100000)), 2000)
	if errors.Is(err, errdefs.ErrUnimplemented) {
		return readFileWhole(ctx, sb, in.Path, in.Offset, in.Limit) // an executor older than ReadLines
	}
	if err != nil {
		return errResult(err)
	}
	if resp.Binary {
		return tool.Result{IsError: true, Text: fmt.Sprintf("%s is a binary file (%d bytes); inspect it with bash (e.g. xxd, file)", in.Path, resp.Size)}, nil
	}
	var b strings.Builder
	for i, l := range resp.Lines {
		cut := ""
		if l.Cut {
			cut = " [… line cut]"
		}
		fmt.Fprintf(&b, "%6d\t%s%s\n", in.Offset+i, l.Text, cut)
	}
	total, end := int(resp.TotalLines), in.Offset-1+len(resp.Lines)
	switch {
	case in.Offset > total:
		fmt.Fprintf(&b, "[the file has %d lines; offset %d is past its end]", total, in.Offset)
	case end < total:
		fmt.Fprintf(&b, "[lines %d-%d of %d; read on with offset %d]", in.Offset, end, total, end+1)
	}
	return tool.Result{Text: b.String()}, nil
}

// readFileWhole is read_file over ReadFile, for executors without
// ReadLines: the first 16 MiB cross the socket and are cut here.
func readFileWhole(ctx context.Context, sb Sandbox, path string, offset, limit int) (tool.Result, error) {
	resp, err := sb.Exec.ReadFileRange(ctx, path, 0, 16<<20)
	if err != nil {
		return errResult(err)
	}
	if bytes.IndexByte(resp.Data[:min(len(resp.Data), 8000)], 0) >= 0 {
		return tool.Result{IsError: true, Text: fmt.Sprintf("%s is a binary file (%d bytes); inspect it with bash (e.g. xxd, file)", path, resp.Size)}, nil
	}
	lines := strings.SplitAfter(string(resp.Data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var b strings.Builder
	end := min(offset-1+limit, len(lines))
	for i := offset - 1; i < end; i++ {
		line := strings.TrimSuffix(lines[i], "\n")
		if len(line) > 2000 {
			line = line[:2000] + " [… line cut]"
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, line)
	}
	switch {
	case offset > len(lines):
		fmt.Fprintf(&b, "[the file has %d lines; offset %d is past its end]", len(lines), offset)
	case end < len(lines):
		fmt.Fprintf(&b, "[lines %d-%d of %d; read on with offset %d]", offset, end, len(lines), end+1)
	}
	if !resp.Eof {
		fmt.Fprintf(&b, "\n[only the first 16 MiB of %d bytes were read]", resp.Size)
	}
	return tool.Result{Text: b.String()}, nil
}

func runWriteFile(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	var in struct{ Path, Content string }
	json.Unmarshal(input, &in)
	if err := sb.Exec.WriteFile(ctx, in.Path, []byte(in.Content), 0); err != nil {
		return errResult(err)
	}
	return tool.Result{Text: fmt.Sprintf("wrote %d bytes to %s", len(in.Content), in.Path)}, nil
}

func runEditFile(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	var in struct {
		Path, Old, New string
		ReplaceAll     bool `json:"replace_all"`
	}
	json.Unmarshal(input, &in)
	n, err := sb.Exec.EditFile(ctx, in.Path, in.Old, in.New, in.ReplaceAll)
	if err != nil {
		return errResult(err)
	}
	return tool.Result{Text: fmt.Sprintf("replaced %d occurrence(s) in %s", n, in.Path)}, nil
}

func runListFiles(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	var in struct {
		Path  string
		Depth int
	}
	json.Unmarshal(input, &in)
	if in.Path == "" {
		in.Path = "."
	}
	in.Depth = min(max(in.Depth, 1), 5)
	resp, err := sb.Exec.ListDir(ctx, in.Path, uint32(in.Depth), 1000)
	if err != nil {
		return errResult(err)
	}
	var b strings.Builder
	for _, f := range resp.Entries {
		kind := ""
		switch f.Type {
		case executorv1.FileType_FILE_TYPE_DIR:
			kind = "/"
		case executorv1.FileType_FILE_TYPE_SYMLINK:
			kind = " -> " + f.SymlinkTarget
		}
		fmt.Fprintf(&b, "%s%s\t%d\n", f.Path, kind, f.Size)
	}
	if resp.Truncated {
		b.WriteString("[listing cut at 1000 entries]\n")
	}
	if b.Len() == 0 {
		b.WriteString("(empty directory)")
	}
	return tool.Result{Text: b.String()}, nil
}

func runGlob(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	var in struct{ Pattern string }
	json.Unmarshal(input, &in)
	paths, truncated, err := sb.Exec.Glob(ctx, in.Pattern, "")
	if err != nil {
		return errResult(err)
	}
	text := strings.Join(paths, "\n")
	if truncated {
		text += "\n[cut at 1000 paths]"
	}
	if text == "" {
		text = "no files match " + in.Pattern
	}
	return tool.Result{Text: text}, nil
}

func runGrep(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	var in struct{ Pattern, Path string }
	json.Unmarshal(input, &in)
	resp, err := sb.Exec.Grep(ctx, &executorv1.GrepRequest{Pattern: in.Pattern, Path: in.Path, Limit: 500})
	if err != nil {
		return errResult(err)
	}
	var b strings.Builder
	for _, m := range resp.Matches {
		fmt.Fprintf(&b, "%s:%d: %s\n", m.Path, m.Line, m.Text)
	}
	if resp.Truncated {
		b.WriteString("[cut at 500 matches]\n")
	}
	if b.Len() == 0 {
		b.WriteString("no matches")
	}
	return tool.Result{Text: b.String()}, nil
}

// maxArtifact is the largest file save_artifact keeps.
const maxArtifact = 256 << 20

func runSaveArtifact(ctx context.Context, sb Sandbox, input json.RawMessage) (tool.Result, error) {
	var in struct{ Path, Name string }
	json.Unmarshal(input, &in)
	if in.Name == "" {
		in.Name = path.Base(in.Path)
	}
	if sb.Blobs == nil {
		return tool.Result{}, errors.New("save_artifact: no blob store for artifacts")
	}
	a, err := SaveFile(ctx, sb, in.Path, in.Name)
	var se *sandboxError
	switch {
	case errors.Is(err, errArtifactTooBig):
		return tool.Result{IsError: true, Text: fmt.Sprintf("%s is over the %d MiB artifact limit", in.Path, maxArtifact>>20)}, nil
	case errors.As(err, &se):
		return errResult(se.err)
	case err != nil:
		return tool.Result{}, err
	}
	return tool.Result{Text: fmt.Sprintf("saved %s (%d bytes) as artifact %q", in.Path, a.Size, in.Name),
		Artifacts: []tool.Artifact{a}}, nil
}

// SaveFile streams the sandbox file p into sb.Blobs as the artifact
// name, a range at a time through the executor, counting what arrives
// (not what the executor says the size is): the service holds one range,
// whatever the sandbox sends, and at most 256 MiB in all. A file over
// that is an error of kind too large; a failure of the executor's is
// returned as it came.
func SaveFile(ctx context.Context, sb Sandbox, p, name string) (tool.Artifact, error) {
	src := &fileRanges{ctx: ctx, sb: sb, path: p}
	digest, size, err := sb.Blobs.Put(ctx, src)
	switch {
	case errors.Is(err, errArtifactTooBig):
		return tool.Artifact{}, errArtifactTooBig // not the blob store's wrapping
	case src.err != nil:
		return tool.Artifact{}, &sandboxError{src.err}
	case err != nil:
		return tool.Artifact{}, err
	}
	return tool.Artifact{Name: name, Digest: digest, Size: size, Source: sb.Name + ":" + p}, nil
}

var errArtifactTooBig = errdefs.WithMessage(errdefs.ErrTooLarge,
	fmt.Sprintf("the file is over the %d MiB an artifact may be: not saved", maxArtifact>>20))

// sandboxError is a failure of the executor's while a file was read.
type sandboxError struct{ err error }

func (e *sandboxError) Error() string { return e.err.Error() }
func (e *sandboxError) Unwrap() error { return e.err }

// fileRanges reads a sandbox file through ReadFile ranges, as an
// io.Reader of at most maxArtifact bytes. err keeps a failure of the
// executor's, for the model.
type fileRanges struct {
	ctx    context.Context
	sb     Sandbox
	path   string
	offset uint64
	buf    []byte
	eof    bool
	err    error
}

func (r *fileRanges) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.eof {
			return 0, io.EOF
		}
		resp, err := r.sb.Exec.ReadFileRange(r.ctx, r.path, r.offset, 4<<20)
		if err != nil {
			r.err = err
			return 0, err
		}
		if resp.Size > maxArtifact || r.offset+uint64(len(resp.Data)) > maxArtifact {
			return 0, errArtifactTooBig
		}
		r.buf = resp.Data
		r.offset += uint64(len(resp.Data))
		r.eof = resp.Eof || len(resp.Data) == 0
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// errResult turns a file error into a result the model reads (not found,
// permission, …). An unavailable executor goes back to the engine, which
// checks whether the sandbox is gone.
func errResult(err error) (tool.Result, error) {
	if errors.Is(err, errdefs.ErrUnavailable) {
		return tool.Result{}, err
	}
	return tool.Result{IsError: true, Text: err.Error()}, nil
}
