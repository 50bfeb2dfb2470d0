package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// agentTmp is TMPDIR of an agent program: on the sandbox's disk, not a
// tmpfs (RAM), so that a program spooling a large output to its temporary
// directory does not use the sandbox's memory.
const agentTmp = "/var/tmp"

// memoryCreator is a Sandboxes that makes a run's sandbox with a memory
// limit of its own (an agent run's Spec.Memory).
type memoryCreator interface {
	CreateWithMemory(ctx context.Context, runID, name, image string, memoryBytes int64) (string, error)
}

// programArgv is the program an agent run starts and the environment it
// adds (over the gateway's and the sandbox's own).
//
//	claude-code  claude -p --output-format stream-json --verbose
//	             --dangerously-skip-permissions [--model NAME] -- TASK
//	codex        codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox
//	             -c model_provider=reins -c model_providers.reins={…} [-m NAME] -- TASK
//	cmd:PROGRAM  sh -c PROGRAM, the task in REINS_TASK
//
// NAME is the run's model's when it is the program's own provider's
// (anthropic:NAME for Claude Code, openai:NAME for Codex); every call is
// sent to the run's model in any case (gateway.Target). Each runs under
// sh, which makes TMPDIR first.
func programArgv(spec runlog.Spec) (argv, env []string) {
	env = []string{"TMPDIR=" + agentTmp}
	provider, name, _ := strings.Cut(spec.Model, ":")
	switch {
	case spec.Agent == runlog.AgentClaudeCode:
		argv = []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"}
		if provider == "anthropic" && name != "" {
			argv = append(argv, "--model", name)
		}
		argv = append(argv, "--", spec.Task)
		// IS_SANDBOX: it runs as root, which it refuses to do with
		// --dangerously-skip-permissions elsewhere.
		env = append(env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "IS_SANDBOX=1", "DISABLE_AUTOUPDATER=1")
	case spec.Agent == runlog.AgentCodex:
		// OPENAI_BASE_URL alone is ignored by current versions: a
		// provider of its own, at the gateway.
		argv = []string{"codex", "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--color", "never",
			"-c", "model_provider=reins",
			"-c", `model_providers.reins={name="reins",base_url="http://` + gateway.Addr + `/v1",env_key="OPENAI_API_KEY",wire_api="responses"}`}
		if provider == "openai" && name != "" {
			argv = append(argv, "-m", name)
		}
		argv = append(argv, "--", spec.Task)
	default:
		argv = []string{"sh", "-c", strings.TrimSpace(strings.TrimPrefix(spec.Agent, runlog.AgentCmdPrefix))}
		env = append(env, "REINS_TASK="+spec.Task)
	}
	return append([]string{"sh", "-c", `mkdir -p "$TMPDIR" 2>/dev/null; exec "$@"`, "reins-agent"}, argv...), env
}

// envNames are the names of env's variables (what the log keeps).
func envNames(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		out = append(out, k)
	}
	return out
}

// workAgent drives an agent run: its program started (or found again
// after a restart) and followed to its end. A sandbox's record has no
// program: its worker has nothing to do.
func (e *Engine) workAgent(ctx context.Context, r *run) {
	a := e.keepAgent(r)
	if a.r.st.spec.Agent == runlog.AgentSandbox {
		return
	}
	defer func() {
		// Kept while the run goes on (the engine stopping): calls still
		// in flight end on this state.
		if a.isEnded() {
			e.dropAgent(a.r.id)
		}
	}()
	a.mu.Lock()
	finished := a.r.st.finished != nil
	a.mu.Unlock()
	if finished {
		return
	}
	p, err := e.programUp(ctx, a)
	if err != nil {
		e.programFailed(ctx, a, err)
		return
	}
	if strings.HasPrefix(a.r.st.spec.Sandboxes[runlog.DefaultSandbox], AttachPrefix) {
		// The user's sandbox outlives the run: its later calls go to
		// its own record. One the run made stays bound to the ended run
		// (its calls refused) until it is gone (unbindGone).
		defer e.unbind(p.sandbox, a.r.id)
	}
	e.followProgram(ctx, a, p)
}

// program is an agent run's running program.
type program struct {
	sandbox string
	ex      sandboxtool.Executor
	pid     int32
	oom     int // the sandbox's OOM kills before it started
}

// programFailed ends a run whose program could not be started or found.
func (e *Engine) programFailed(ctx context.Context, a *agentRun, err error) {
	status, reason := runlog.StatusFailed, err.Error()
	switch {
	case context.Cause(ctx) == errCancelled:
		status, reason = runlog.StatusCancelled, "cancelled by a user"
	case ctx.Err() != nil:
		return // the engine is stopping; the run continues on restart
	}
	bg := context.WithoutCancel(ctx)
	e.cfg.Sandboxes.Release(bg, a.r.id)
	a.mu.Lock()
	defer a.mu.Unlock()
	e.finishAgent(bg, a, status, "", reason)
}

// programUp makes the run's sandbox (or attaches to it), turns its model
// gateway on, logs the program's intent and starts it; after a restart it
// finds the program the log names again.
func (e *Engine) programUp(ctx context.Context, a *agentRun) (program, error) {
	a.mu.Lock()
	spec := a.r.st.spec
	sb, made := a.r.st.sandboxes[runlog.DefaultSandbox]
	prev, prevAt := a.r.st.program, a.r.st.programAt
	a.mu.Unlock()
	gw, ok := e.cfg.Sandboxes.(gatewayer)
	if !ok {
		return program{}, errors.New("this service's sandboxes have no model gateway, which agent runs need")
	}
	if !made {
		image := spec.Sandboxes[runlog.DefaultSandbox]
		var err error
		if sb, err = e.agentSandbox(ctx, a.r, image, spec.Memory); err != nil {
			return program{}, err
		}
		a.mu.Lock()
		err = e.appendAgent(ctx, a, "", typedEvent{runlog.EventSandboxCreated, runlog.SandboxEvent{Name: runlog.DefaultSandbox, ID: sb, Image: image}})
		a.mu.Unlock()
		if err != nil {
			return program{}, err
		}
	}
	if err := e.bind(sb, a.r.id); err != nil {
		return program{}, err
	}
	p := program{sandbox: sb}
	fail := func(err error) (program, error) {
		e.unbind(sb, a.r.id)
		return program{}, err
	}
	ex, err := e.cfg.Sandboxes.Executor(ctx, sb)
	if err != nil {
		if gone, why := e.cfg.Sandboxes.Gone(ctx, sb); gone {
			return fail(fmt.Errorf("the run's sandbox %s ended: %s", sb, why))
		}
		return fail(err)
	}
	p.ex = ex
	if prev != nil {
		// After a restart: the program runs on in its sandbox unless the
		// sandbox's executor (its init) started again since.
		p.oom = prev.OOMKills
		if started, err := e.cfg.Sandboxes.ExecutorStarted(ctx, sb); err != nil {
			return fail(err)
		} else if started.After(prevAt) {
			return fail(fmt.Errorf("the run's sandbox %s restarted while reins was down, and its program with it", sb))
		}
		if prev.Pid != 0 {
			p.pid = prev.Pid
			return p, nil
		}
	}
	env, err := gw.EnableGateway(ctx, sb)
	if err != nil {
		return fail(fmt.Errorf("turning on the model gateway of sandbox %s: %w", sb, err))
	}
	argv, extra := programArgv(spec)
	env = append(env, extra...)
	intent := runlog.AgentProgram{Sandbox: sb, Argv: argv, Env: envNames(env), Key: a.r.id + "/agent"}
	if prev == nil {
		if oc, ok := e.cfg.Sandboxes.(oomCounter); ok {
			if n, _, err := oc.OOMKills(ctx, sb); err == nil {
				intent.OOMKills, p.oom = n, n
			}
		}
		a.mu.Lock()
		err = e.appendAgent(ctx, a, "", typedEvent{runlog.EventAgentStarting, intent})
		a.mu.Unlock()
		if err != nil {
			return fail(err)
		}
	} else {
		intent = *prev
	}
	e.failpoint("before_agent_start")
	// The key makes a start repeated after a crash find the first.
	pid, err := sandboxtool.StartProgram(ctx, ex, intent.Argv, env, intent.Key, "reins "+a.r.id)
	if err != nil {
		return fail(fmt.Errorf("starting %s in sandbox %s: %w", spec.Agent, sb, err))
	}
	intent.Pid, p.pid = pid, pid
	a.mu.Lock()
	// Logged even when the run is being cancelled: its worker then stops
	// the program it names.
	err = e.appendAgent(context.WithoutCancel(ctx), a, "", typedEvent{runlog.EventAgentStarted, intent})
	a.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	e.log.Info("agent program started", "run", a.r.id, "sandbox", sb, "agent", spec.Agent, "pid", pid)
	return p, nil
}

// agentSandbox is the sandbox of an agent run: the one it attaches to, or
// a new one from image with the run's memory.
func (e *Engine) agentSandbox(ctx context.Context, r *run, image string, memory int64) (string, error) {
	if id, ok := strings.CutPrefix(image, AttachPrefix); ok {
		return id, nil
	}
	if err := e.checkImage(r.tenant, image); err != nil {
		return "", err
	}
	var id string
	var err error
	if mc, ok := e.cfg.Sandboxes.(memoryCreator); ok {
		id, err = mc.CreateWithMemory(ctx, r.id, runlog.DefaultSandbox, image, memory)
	} else {
		id, err = e.cfg.Sandboxes.Create(ctx, r.id, runlog.DefaultSandbox, image)
	}
	if err != nil {
		return "", fmt.Errorf("creating the run's sandbox (%s): %w", image, err)
	}
	return id, nil
}

// followProgram follows p to its exit and ends the run from it. A run
// ended meanwhile (a budget at Begin, its timeout) has its program
// stopped after the grace; a cancelled one at once.
func (e *Engine) followProgram(ctx context.Context, a *agentRun, p program) {
	a.mu.Lock()
	spec, created := a.r.st.spec, a.r.st.created
	a.mu.Unlock()
	if spec.Timeout > 0 {
		t := time.AfterFunc(time.Until(created.Add(time.Duration(spec.Timeout))), func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			e.finishAgent(context.Background(), a, runlog.StatusFailed, "", timeoutReason(spec))
		})
		defer t.Stop()
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-a.ended:
		case <-exited:
			return
		}
		select {
		case <-time.After(e.cfg.AgentGrace):
		case <-exited:
			return
		}
		e.signalProgram(p, syscall.SIGTERM)
		select {
		case <-time.After(3 * time.Second):
			e.signalProgram(p, syscall.SIGKILL)
		case <-exited:
		}
	}()
	out := newProgramOutput(spec.Agent)
	exit, err := e.follow(ctx, &p, out)
	close(exited)
	bg := context.WithoutCancel(ctx)
	if err != nil && context.Cause(ctx) == errCancelled {
		a.mu.Lock()
		e.finishAgent(bg, a, runlog.StatusCancelled, "", "cancelled by a user")
		a.mu.Unlock()
		e.stopProgram(bg, p)
		e.cfg.Sandboxes.Release(bg, a.r.id)
		return
	}
	if err != nil && ctx.Err() != nil {
		if a.isEnded() {
			// The run ended (a budget, its timeout) and its program was in
			// its grace: no restart follows an ended run, so the program
			// is stopped and its sandboxes released now.
			e.stopProgram(bg, p)
			e.cfg.Sandboxes.Release(bg, a.r.id)
		}
		return // the engine is stopping; the program runs on, found again on restart
	}
	status, text, reason := runlog.StatusSucceeded, out.text(), ""
	switch {
	case err != nil:
		status, text, reason = runlog.StatusFailed, "", err.Error()
	case exit.Code != 0:
		status, text, reason = runlog.StatusFailed, "", e.exitReason(bg, p, exit, out)
	}
	e.cfg.Sandboxes.Release(bg, a.r.id)
	a.mu.Lock()
	defer a.mu.Unlock()
	e.finishAgent(bg, a, status, text, reason)
}

// follow streams p's output to out until it exits, attaching again after
// a dropped connection; it fails once the sandbox is gone or restarted.
func (e *Engine) follow(ctx context.Context, p *program, out *programOutput) (sandboxtool.ProgramExit, error) {
	for tries := 0; ; tries++ {
		out.reset() // an attach replays what the executor still holds
		exit, err := sandboxtool.FollowProgram(ctx, p.ex, p.pid, out.sinks())
		if err == nil || ctx.Err() != nil {
			return exit, err
		}
		if gone, why := e.cfg.Sandboxes.Gone(ctx, p.sandbox); gone {
			return exit, fmt.Errorf("the run's sandbox ended while its program ran: %s", why)
		}
		if tries >= 10 {
			return exit, fmt.Errorf("following the program in sandbox %s: %w", p.sandbox, err)
		}
		e.log.Warn("following an agent program; attaching again", "sandbox", p.sandbox, "pid", p.pid, "err", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return exit, ctx.Err()
		}
		if ex, err := e.cfg.Sandboxes.Executor(ctx, p.sandbox); err == nil {
			p.ex = ex
		}
	}
}

// stopProgram ends p's process group: TERM, then KILL, and waits for its
// exit (boundedly).
func (e *Engine) stopProgram(ctx context.Context, p program) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		e.signalProgram(p, sig)
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := sandboxtool.FollowProgram(wctx, p.ex, p.pid, sandboxtool.ProgramOutput{})
		cancel()
		if err == nil {
			return
		}
	}
}

func (e *Engine) signalProgram(p program, sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sandboxtool.SignalProgram(ctx, p.ex, p.pid, sig); err != nil {
		e.log.Info("signalling an agent program", "sandbox", p.sandbox, "pid", p.pid, "signal", sig, "err", err)
	}
}

// exitReason says in words why a program failed: its exit code and the
// last lines of its stderr, or what killed it when that is known.
func (e *Engine) exitReason(ctx context.Context, p program, exit sandboxtool.ProgramExit, out *programOutput) string {
	tail := out.stderrTail()
	if tail == "" {
		// Claude Code in stream-json says what went wrong in its result
		// message, not on stderr.
		if tail = out.text(); len(tail) > maxStderrTail {
			tail = tail[:maxStderrTail] + "…"
		}
	}
	switch {
	case (exit.Code == 134 || exit.Signal == int(syscall.SIGABRT)) && strings.Contains(string(out.stderr), "JavaScript heap out of memory"):
		return "aborted: JavaScript heap out of memory (a Node program's V8 heap is about half the sandbox's memory: raise --memory)"
	case exit.Signal == int(syscall.SIGKILL) || exit.Code == 137:
		if oc, ok := e.cfg.Sandboxes.(oomCounter); ok {
			if n, limit, err := oc.OOMKills(ctx, p.sandbox); err == nil && n > p.oom {
				return fmt.Sprintf("killed by the sandbox's memory limit (%d MiB): raise --memory", limit>>20)
			}
		}
	}
	reason := fmt.Sprintf("exit code %d", exit.Code)
	if exit.Signal != 0 {
		reason += fmt.Sprintf(" (signal %d, %s)", exit.Signal, syscall.Signal(exit.Signal))
	}
	if tail != "" {
		reason += ": " + tail
	}
	return reason
}

// Bounds of what is kept of a program's output.
const (
	maxStderrKept = 8 << 10  // the tail of stderr
	maxStderrTail = 1 << 10  // of it, in a failure's reason
	maxStdoutKept = 16 << 10 // the tail of stdout (a final text)
	maxLine       = 1 << 20  // a stream-json line; longer ones are skipped
	maxFinalText  = 64 << 10 // a final text
	stderrLines   = 5
)

// programOutput keeps what the run needs of a program's output, bounded:
// the tail of its stderr and its final text (Claude Code's stream-json
// result message; else the tail of stdout, where Codex prints its last
// message).
type programOutput struct {
	streamJSON bool
	stderr     []byte
	stdout     []byte // the tail, or the line being read (stream-json)
	skipping   bool   // inside a line longer than maxLine
	result     string
	gotResult  bool
}

func newProgramOutput(agent string) *programOutput {
	return &programOutput{streamJSON: agent == runlog.AgentClaudeCode}
}

func (o *programOutput) reset() {
	*o = programOutput{streamJSON: o.streamJSON}
}

func (o *programOutput) sinks() sandboxtool.ProgramOutput {
	return sandboxtool.ProgramOutput{Stdout: o.writeStdout, Stderr: o.writeStderr, Lost: o.lost}
}

func (o *programOutput) writeStderr(b []byte) { o.stderr = keepTail(o.stderr, b, maxStderrKept) }

func (o *programOutput) lost() {
	if o.streamJSON {
		o.stdout, o.skipping = o.stdout[:0], true // the line in progress is broken
	}
}

func (o *programOutput) writeStdout(b []byte) {
	if !o.streamJSON {
		o.stdout = keepTail(o.stdout, b, maxStdoutKept)
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if !o.skipping {
			if len(o.stdout)+len(chunk) > maxLine {
				o.stdout, o.skipping = o.stdout[:0], true
			} else {
				o.stdout = append(o.stdout, chunk...)
			}
		}
		if i < 0 {
			return
		}
		if !o.skipping {
			o.line(o.stdout)
		}
		o.stdout, o.skipping = o.stdout[:0], false
		b = b[i+1:]
	}
}

// line reads one stream-json message: the result one is kept.
func (o *programOutput) line(l []byte) {
	var m struct {
		Type   string `json:"type"`
		Result string `json:"result"`
	}
	if json.Unmarshal(l, &m) != nil || m.Type != "result" {
		return
	}
	o.result, o.gotResult = truncateText(m.Result, maxFinalText), true
}

// text is the program's final text.
func (o *programOutput) text() string {
	if o.streamJSON {
		return strings.TrimSpace(o.result)
	}
	return strings.TrimSpace(string(o.stdout))
}

// stderrTail is the last lines of stderr, bounded.
func (o *programOutput) stderrTail() string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(o.stderr), "?"))
	lines := strings.Split(s, "\n")
	if len(lines) > stderrLines {
		lines = lines[len(lines)-stderrLines:]
	}
	s = strings.Join(lines, "\n")
	if len(s) > maxStderrTail {
		s = "…" + s[len(s)-maxStderrTail:]
	}
	return s
}

// keepTail appends b to buf, keeping its last max bytes.
func keepTail(buf, b []byte, max int) []byte {
	if len(b) >= max {
		return append(buf[:0], b[len(b)-max:]...)
	}
	if over := len(buf) + len(b) - max; over > 0 {
		buf = append(buf[:0], buf[over:]...)
	}
	return append(buf, b...)
}

func truncateText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max] + fmt.Sprintf("\n[reins: %d more bytes not kept]", len(s)-max)
}
