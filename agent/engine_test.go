package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/blob"
	"github.com/reinsdev/reins/store/sqlite"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// These tests run the real loop over a real SQLite log and real executors
// (in-process, on unix sockets, confined to a temp dir: the "sandbox" is a
// directory, which is all the loop can tell). The script model plays the
// agent. Commands run on this host, so scripts use relative paths.
func TestMain(m *testing.M) {
	// The executor reaps orphans like an init does.
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	// Every goroutine the engine starts (workers, the janitor, executor
	// connections) must end with its test. net/http lingers 500ms before
	// closing a connection whose request body went unread: a sleep, not a
	// leak.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

// hostSandboxes are agent.Sandboxes backed by in-process executors.
type hostSandboxes struct {
	t         *testing.T
	dir       string
	mu        sync.Mutex
	n         int
	live      map[string]*hostBox
	lost      map[string]bool
	suspended []string
	// Snapshots: digest → a copy of a root; the digests taken, in order;
	// each suspended sandbox's saved workspace; the snapshot each
	// Replace was asked for; and whether checkpoints fail.
	snapshots       map[string]string
	checkpoints     []string
	saved           map[string]string
	replacedFrom    []string
	failCheckpoints bool
	checkpointErr   error // when set, what a checkpoint fails with
	createErr       error // when set, what a create fails with
	roots           map[string]string
}

type hostBox struct {
	root   string
	srv    *executor.Server
	client *client.Client
	done   chan error
}

func newHostSandboxes(t *testing.T) *hostSandboxes {
	h := &hostSandboxes{t: t, dir: t.TempDir(), live: map[string]*hostBox{}, lost: map[string]bool{},
		snapshots: map[string]string{}, saved: map[string]string{}, roots: map[string]string{}}
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for id := range h.live {
			h.stopLocked(id)
		}
	})
	return h
}

func (h *hostSandboxes) start(id, root string) error {
	srv, err := executor.New(executor.Config{Root: root, Workdir: "/", Token: "tok-" + id,
		BaseEnv: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"}})
	if err != nil {
		return err
	}
	sock := filepath.Join(h.dir, id+".sock")
	l, err := executor.Listen(sock)
	if err != nil {
		return err
	}
	b := &hostBox{root: root, srv: srv, done: make(chan error, 1)}
	go func() { b.done <- srv.Serve(l) }()
	if b.client, err = client.Dial(context.Background(), sock, "tok-"+id, client.WithCallTimeout(10*time.Second)); err != nil {
		return err
	}
	h.live[id] = b
	h.roots[id] = root
	return nil
}

func (h *hostSandboxes) stopLocked(id string) {
	b := h.live[id]
	b.client.Close()
	b.srv.Close()
	<-b.done
	delete(h.live, id)
}

func (h *hostSandboxes) Create(ctx context.Context, runID, name, image string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.createErr != nil {
		return "", h.createErr
	}
	h.n++
	id := fmt.Sprintf("sb%d", h.n)
	root := filepath.Join(h.dir, id)
	if digest, ok := strings.CutPrefix(image, runlog.SnapshotImagePrefix); ok {
		snap, ok := h.snapshots[digest]
		if !ok {
			return "", fmt.Errorf("no snapshot %s: %w", digest, errdefs.ErrNotFound)
		}
		if err := os.CopyFS(root, os.DirFS(snap)); err != nil {
			return "", err
		}
	}
	os.MkdirAll(root, 0o755)
	return id, h.start(id, root)
}

func (h *hostSandboxes) client(id string) (*client.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.live[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return b.client, nil
}

func (h *hostSandboxes) Executor(ctx context.Context, id string) (sandboxtool.Executor, error) {
	c, err := h.client(id)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (h *hostSandboxes) ExecutorStarted(ctx context.Context, id string) (time.Time, error) {
	c, err := h.client(id)
	if err != nil {
		return time.Time{}, err
	}
	hello, err := c.Hello(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, hello.StartedUnixNano), nil
}

func (h *hostSandboxes) Gone(ctx context.Context, id string) (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost[id] {
		return true, "lost: the test killed it"
	}
	_, ok := h.live[id]
	return !ok, "it no longer exists"
}

// kill makes a sandbox vanish the way a crashed one does.
func (h *hostSandboxes) kill(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopLocked(id)
	h.lost[id] = true
}

func (h *hostSandboxes) Replace(ctx context.Context, runID, name, image, oldID, snapshot string) (agent.Replacement, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	id := fmt.Sprintf("sb%d", h.n)
	h.replacedFrom = append(h.replacedFrom, snapshot)
	if _, err := os.Stat(h.rootLocked(oldID)); err == nil {
		// The old root (its "disk") survived: reuse it.
		return agent.Replacement{ID: id, From: runlog.FromDisk}, h.start(id, h.rootLocked(oldID))
	}
	root := h.rootLocked(id)
	rep := agent.Replacement{ID: id, From: runlog.FromImage}
	if snap, ok := h.snapshots[snapshot]; ok {
		if err := os.CopyFS(root, os.DirFS(snap)); err != nil {
			return rep, err
		}
		rep.From, rep.Snapshot = runlog.FromSnapshot, snapshot
	}
	os.MkdirAll(root, 0o755)
	return rep, h.start(id, root)
}

// loseDisk makes a sandbox vanish with its disk.
func (h *hostSandboxes) loseDisk(id string) {
	h.kill(id)
	os.RemoveAll(h.root(id))
}

func (h *hostSandboxes) Release(ctx context.Context, runID string) {}

func (h *hostSandboxes) Suspend(ctx context.Context, id string) (agent.Workspace, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.live[id]; !ok {
		return agent.Workspace{}, nil
	}
	ws, err := h.snapshotLocked(id)
	if err != nil {
		return ws, err
	}
	h.stopLocked(id)
	h.suspended = append(h.suspended, id)
	h.saved[id] = ws.Digest
	return ws, nil
}

func (h *hostSandboxes) Wake(ctx context.Context, id string) (agent.Woken, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range h.suspended {
		if s == id {
			h.suspended = append(h.suspended[:i], h.suspended[i+1:]...)
			return agent.Woken{Woke: true, Workspace: h.saved[id]}, h.start(id, h.rootLocked(id))
		}
	}
	return agent.Woken{}, nil
}

func (h *hostSandboxes) Checkpoint(ctx context.Context, runID, id string) (agent.Workspace, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.checkpointErr != nil {
		return agent.Workspace{}, h.checkpointErr
	}
	if h.failCheckpoints {
		return agent.Workspace{}, fmt.Errorf("no space left on the snapshot store: %w", errdefs.ErrResourceExhausted)
	}
	if _, ok := h.live[id]; !ok {
		return agent.Workspace{}, fmt.Errorf("sandbox %s is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	return h.snapshotLocked(id)
}

// snapshotLocked copies sandbox id's root aside, named by a digest of its
// paths and contents.
func (h *hostSandboxes) snapshotLocked(id string) (agent.Workspace, error) {
	var ws agent.Workspace
	sum := sha256.New()
	root := h.rootLocked(id)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(sum, "%s\x00%d\x00", rel, len(data))
		sum.Write(data)
		ws.Files++
		ws.Bytes += int64(len(data))
		return nil
	})
	if err != nil {
		return ws, err
	}
	ws.Digest = fmt.Sprintf("sha256:%x", sum.Sum(nil))
	if _, ok := h.snapshots[ws.Digest]; !ok {
		dst := filepath.Join(h.dir, "snap-"+ws.Digest[7:19])
		if err := os.CopyFS(dst, os.DirFS(root)); err != nil {
			return ws, err
		}
		h.snapshots[ws.Digest] = dst
	}
	h.checkpoints = append(h.checkpoints, ws.Digest)
	return ws, nil
}

// root is sandbox id's root: its own directory, or the one it took over.
func (h *hostSandboxes) root(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rootLocked(id)
}

func (h *hostSandboxes) rootLocked(id string) string {
	if r, ok := h.roots[id]; ok {
		return r
	}
	return filepath.Join(h.dir, id)
}

type env struct {
	t     *testing.T
	st    *sqlite.Store
	blobs *blob.Store
	sbs   *hostSandboxes
	dir   string
	fail  func(string)
}

func newEnv(t *testing.T) *env {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "reins.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, st: st, blobs: blobs, sbs: newHostSandboxes(t), dir: dir}
}

// engineModels opens the script models the tests write.
func (e *env) engineModels() agent.ModelOpener {
	return func(spec agent.ModelSpec) (model.Model, string, error) {
		p := strings.TrimPrefix(spec.Model, "script:")
		m, err := script.Load(p)
		return m, p, err
	}
}

func (e *env) engine() *agent.Engine { return e.engineWith(func(*agent.Config) {}) }

// engineWith is engine with its config changed by set.
func (e *env) engineWith(set func(*agent.Config)) *agent.Engine {
	cfg := agent.Config{
		Store: e.st, Blobs: e.blobs, Sandboxes: e.sbs,
		Models: e.engineModels(),
		Failpoint: func(name string) {
			if e.fail != nil {
				e.fail(name)
			}
		},
	}
	set(&cfg)
	eng, err := agent.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(eng.Close)
	return eng
}

// script writes a script model's turns and returns its model spec.
func (e *env) script(turns ...map[string]any) string {
	p := filepath.Join(e.dir, fmt.Sprintf("script%d.json", time.Now().UnixNano()))
	data, _ := json.Marshal(map[string]any{"turns": turns})
	if err := os.WriteFile(p, data, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return "script:" + p
}

func call(name string, input map[string]any) map[string]any {
	return map[string]any{"name": name, "input": input}
}

func turn(text string, calls ...map[string]any) map[string]any {
	t := map[string]any{"text": text}
	if len(calls) > 0 {
		t["tool_calls"] = calls
	}
	return t
}

// finish waits for the run to stop and returns its row and events.
func (e *env) finish(eng *agent.Engine, id string) (store.Run, []store.Event) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := eng.Wait(ctx, id); err != nil {
		e.t.Fatal(err)
	}
	row, err := e.st.GetRun(ctx, "", id)
	if err != nil {
		e.t.Fatal(err)
	}
	evs, err := e.st.Events(ctx, id, 0, 10000)
	if err != nil {
		e.t.Fatal(err)
	}
	return row, evs
}

func summary(t *testing.T, row store.Run) runlog.Summary {
	var s runlog.Summary
	if err := json.Unmarshal(row.Summary, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func types(evs []store.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

func TestRunWithTools(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("writing", call("write_file", map[string]any{"path": "notes/a.txt", "content": "one\ntwo\n"})),
		map[string]any{"expect": "wrote 8 bytes", "tool_calls": []any{call("bash", map[string]any{"command": "cat notes/a.txt | wc -l"})}},
		map[string]any{"expect": "2", "tool_calls": []any{call("read_file", map[string]any{"path": "notes/a.txt", "offset": 2})}},
		map[string]any{"expect": "two", "text": "all done"},
	)
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "take notes", Model: model})
	if err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng, id)
	sum := summary(t, row)
	if row.Status != "succeeded" || sum.Text != "all done" || sum.Steps != 4 {
		t.Fatalf("run %s: %s %+v\nevents %v", id, row.Status, sum, types(evs))
	}
	// Usage is counted; a script: model charges nothing (TestBudgets
	// prices one to check that cost is recorded).
	if sum.Usage.InputTokens == 0 || sum.Cost != 0 {
		t.Errorf("usage not recorded, or an offline model charged: %+v", sum)
	}
	// Every result follows its intent; seqs have no gaps.
	intents := map[string]bool{}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
		var d struct {
			CallID string `json:"call_id"`
		}
		json.Unmarshal(ev.Data, &d)
		switch ev.Type {
		case runlog.EventToolCall:
			intents[d.CallID] = true
		case runlog.EventToolResult:
			if !intents[d.CallID] {
				t.Errorf("result of %s logged before its intent", d.CallID)
			}
		}
	}
	if got, _ := os.ReadFile(filepath.Join(e.sbs.root("sb1"), "notes/a.txt")); string(got) != "one\ntwo\n" {
		t.Errorf("file in sandbox: %q", got)
	}
}

func TestBadToolCallsAreToldToTheModel(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("bash", map[string]any{"cmd": "ls"})),
		map[string]any{"expect": `missing required argument "command"`, "tool_calls": []any{call("no_such_tool", map[string]any{})}},
		map[string]any{"expect": `unknown tool "no_such_tool"`, "tool_calls": []any{call("read_file", map[string]any{"path": "missing.txt"})}},
		map[string]any{"expect": "missing.txt", "text": "ok"},
	)
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	if err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s; events %v", row.Status, summary(t, row).Reason, types(evs))
	}
}

func TestBadSpecsFailBeforeAnything(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	for _, spec := range []runlog.Spec{
		{Task: "", Model: e.script(turn("x"))},
		{Task: "x", Model: "script:/no/such/script.json"},
		{Task: "x", Model: e.script(turn("x")), Tools: []string{"teleport"}},
		{Task: "x", Model: e.script(turn("x")), Sandboxes: map[string]string{"a b": "busybox"}},
	} {
		if _, err := eng.Start(context.Background(), "", spec); err == nil {
			t.Errorf("Start(%+v) succeeded", spec)
		}
	}
	if runs, _ := e.st.ListRuns(context.Background(), store.RunFilter{}); len(runs) != 0 {
		t.Errorf("bad specs made %d runs", len(runs))
	}
	if e.sbs.n != 0 {
		t.Errorf("bad specs made %d sandboxes", e.sbs.n)
	}
}

func TestBudgets(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	loop := map[string]any{"tool_calls": []any{call("bash", map[string]any{"command": "true"})}}
	model := e.script(loop, loop, loop, loop, loop)
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, MaxSteps: 3})
	row, _ := e.finish(eng, id)
	if sum := summary(t, row); row.Status != "failed" || !strings.Contains(sum.Reason, "3 steps") {
		t.Errorf("max steps: %s %q", row.Status, sum.Reason)
	}
	// A script costs nothing unless the config prices it.
	priced := e.engineWith(func(c *agent.Config) { c.Prices = agent.Prices{"script:*": {Input: 3, Output: 15}} })
	id, _ = priced.Start(context.Background(), "", runlog.Spec{Task: strings.Repeat("long task ", 2000), Model: model, MaxCost: 0.001})
	row, _ = e.finish(priced, id)
	if sum := summary(t, row); row.Status != "failed" || !strings.Contains(sum.Reason, "over its limit") {
		t.Errorf("max cost: %s %q", row.Status, sum.Reason)
	}
}

func TestLargeOutputBecomesAnArtifact(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("bash", map[string]any{"command": "seq 1 20000"})),
		map[string]any{"expect": "saved as artifact", "text": "ok"},
	)
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	row, _ := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s", row.Status, summary(t, row).Reason)
	}
	arts, err := eng.Artifacts(context.Background(), "", id)
	if err != nil || len(arts) != 1 {
		t.Fatalf("artifacts: %v %v", arts, err)
	}
	rc, _, err := eng.OpenArtifact(context.Background(), "", id, arts[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if !strings.HasPrefix(b.String(), "1\n2\n") || !strings.Contains(b.String(), "\n20000\n") {
		t.Errorf("artifact holds %d bytes, not the whole output", b.Len())
	}
}

func TestAskHumanParksTheRun(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("ask_human", map[string]any{"question": "which color?"})),
		map[string]any{"expect": "blue", "text": "blue it is"},
	)
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	row, _ := e.finish(eng, id)
	if row.Status != "waiting_approval" {
		t.Fatalf("status %s", row.Status)
	}
	// A parked run holds no goroutine; a new engine (a restart) answers it.
	eng.Close()
	eng2 := e.engine()
	if err := eng2.Answer(context.Background(), "", id, "tester", "blue"); err != nil {
		t.Fatal(err)
	}
	row, _ = e.finish(eng2, id)
	if row.Status != "succeeded" || summary(t, row).Text != "blue it is" {
		t.Errorf("after answer: %s %+v", row.Status, summary(t, row))
	}
	if err := eng2.Answer(context.Background(), "", id, "tester", "again"); err == nil {
		t.Error("answering a finished run succeeded")
	}
}

func TestCancelKillsTheRunningTool(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(turn("", call("bash", map[string]any{"command": "echo started > marker; sleep 30; echo done > marker"})))
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(e.sbs.root("sb1"), "marker")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	if err := eng.Cancel(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
	row, _ := e.finish(eng, id)
	if row.Status != "cancelled" || time.Since(t0) > 5*time.Second {
		t.Fatalf("cancel: %s after %s", row.Status, time.Since(t0))
	}
	// The kill is sent before Cancel returns; the executor sees the
	// process end when it reaps it, a moment later on a loaded machine.
	var running []string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		procs, err := e.sbs.live["sb1"].client.ListProcesses(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		running = running[:0]
		for _, p := range procs {
			if p.Running {
				running = append(running, fmt.Sprintf("%d %v", p.Pid, p.Argv))
			}
		}
		if len(running) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(running) > 0 {
		t.Errorf("processes still run 5s after cancel: %v", running)
	}
}

func TestLostSandboxIsReplaced(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("write_file", map[string]any{"path": "keep.txt", "content": "kept"})),
		turn("", call("bash", map[string]any{"command": "cat keep.txt"})),
		map[string]any{"expect": "was lost", "tool_calls": []any{call("bash", map[string]any{"command": "cat keep.txt"})}},
		map[string]any{"expect": "kept", "text": "recovered"},
	)
	e.fail = func(name string) {
		// Kill the sandbox after the first result is in.
		if name == "after_result" && e.sbs.live["sb1"] != nil {
			e.sbs.kill("sb1")
		}
	}
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s; %v", row.Status, summary(t, row).Reason, types(evs))
	}
	got := strings.Join(types(evs), " ")
	if !strings.Contains(got, "sandbox_lost sandbox_replaced") {
		t.Errorf("events: %s", got)
	}
}

// TestCrashAtEveryPoint stops the engine abruptly at each failpoint of each
// step (as kill -9 would: the worker dies mid-step and nothing more is
// written), starts a new engine on the same log, and checks the run
// finishes with every call run exactly once or reported as unknown.
func TestCrashAtEveryPoint(t *testing.T) {
	points := []string{"before_model", "after_model", "after_intent", "after_result"}
	for step := 1; step <= 3; step++ {
		for _, point := range points {
			t.Run(fmt.Sprintf("step%d-%s", step, point), func(t *testing.T) {
				e := newEnv(t)
				model := e.script(
					turn("", call("bash", map[string]any{"command": "echo x >> counter"})),
					turn("", call("bash", map[string]any{"command": "echo y >> counter"})),
					turn("", call("edit_file", map[string]any{"path": "counter", "old": "x", "new": "z"})),
					turn("done"),
				)
				var mu sync.Mutex
				seen := map[string]int{}
				crashed := false
				e.fail = func(name string) {
					mu.Lock()
					seen[name]++
					hit := !crashed && name == point && seen[name] == step
					if hit {
						crashed = true
					}
					mu.Unlock()
					if hit {
						runtime.Goexit() // the worker dies here, mid-step
					}
				}
				eng := e.engine()
				id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "count", Model: model})
				if err != nil {
					t.Fatal(err)
				}
				e.finish(eng, id)
				eng.Close()
				eng2 := e.engine()
				if err := eng2.Recover(context.Background()); err != nil {
					t.Fatal(err)
				}
				row, evs := e.finish(eng2, id)
				if row.Status != "succeeded" {
					t.Fatalf("after crash: %s %q; events %v", row.Status, summary(t, row).Reason, types(evs))
				}
				// Each call has exactly one result.
				results := map[string]int{}
				unknown := 0
				for _, ev := range evs {
					if ev.Type == runlog.EventToolResult {
						var r runlog.ToolResult
						json.Unmarshal(ev.Data, &r)
						results[r.CallID]++
						if r.Unknown {
							unknown++
						}
					}
				}
				for c, n := range results {
					if n != 1 {
						t.Errorf("call %s has %d results", c, n)
					}
				}
				if len(results) != 3 {
					t.Errorf("%d calls have results, want 3", len(results))
				}
				// No command ran twice.
				data, _ := os.ReadFile(filepath.Join(e.sbs.root("sb1"), "counter"))
				if c := strings.Count(string(data), "y"); c != 1 {
					t.Errorf("echo y ran %d times: %q", c, data)
				}
				if c := strings.Count(string(data), "x") + strings.Count(string(data), "z"); c != 1 {
					t.Errorf("echo x ran %d times: %q", c, data)
				}
				if point == "after_intent" && step == 3 && unknown != 1 {
					t.Errorf("an edit interrupted after its intent should be reported unknown; %d unknown", unknown)
				}
			})
		}
	}
}

// malformedModel answers once with a tool call whose arguments were not
// JSON (as an OpenAI-compatible server can send), then with text.
type malformedModel struct{ seen string }

func (m *malformedModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if len(req.Messages) == 1 {
		return &model.Response{StopReason: model.StopToolUse, Content: []model.Block{{
			Type: model.BlockToolUse, ToolCallID: "c1", ToolName: "bash",
			Input: json.RawMessage(`"{command: ls"`), InputError: "unexpected end of JSON input",
		}}}, nil
	}
	last := req.Messages[len(req.Messages)-1]
	m.seen = last.Content[0].Text
	return &model.Response{StopReason: model.StopEndTurn, Content: []model.Block{{Type: model.BlockText, Text: "ok"}}}, nil
}

func TestMalformedToolCallGetsTheSchema(t *testing.T) {
	e := newEnv(t)
	m := &malformedModel{}
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: e.sbs,
		Models: func(agent.ModelSpec) (model.Model, string, error) { return m, "fake", nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: "fake:x"})
	if err != nil {
		t.Fatal(err)
	}
	row, _ := e.finish(eng, id)
	if row.Status != "succeeded" || !strings.Contains(m.seen, "not valid JSON") || !strings.Contains(m.seen, `"command"`) {
		t.Errorf("status %s; the model saw %q", row.Status, m.seen)
	}
	if e.sbs.n != 0 {
		t.Errorf("a malformed call made a sandbox")
	}
}

// TestWaitingRunReleasesItsSandbox: a run parked for approval longer than
// ReleaseAfter has its sandbox suspended; the approval wakes it on the same
// files.
func TestWaitingRunReleasesItsSandbox(t *testing.T) {
	e := newEnv(t)
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: e.sbs, ReleaseAfter: 200 * time.Millisecond,
		Models: func(spec agent.ModelSpec) (model.Model, string, error) {
			m, err := script.Load(strings.TrimPrefix(spec.Model, "script:"))
			return m, spec.Model, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go eng.Janitor(ctx)
	model := e.script(
		turn("", call("write_file", map[string]any{"path": "kept.txt", "content": "still here"})),
		turn("", call("bash", map[string]any{"command": "cat kept.txt"})),
		map[string]any{"expect": "still here", "text": "ok"},
	)
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, Policy: "tools:\n  bash: ask\n"})
	if err != nil {
		t.Fatal(err)
	}
	suspended := func() int {
		e.sbs.mu.Lock()
		defer e.sbs.mu.Unlock()
		return len(e.sbs.suspended)
	}
	deadline := time.Now().Add(10 * time.Second)
	for suspended() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if suspended() != 1 {
		t.Fatalf("the waiting run's sandbox was not suspended")
	}
	if err := eng.Decide(context.Background(), "", id, runlog.ApprovalDecided{Approved: true, Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng, id)
	got := strings.Join(types(evs), " ")
	if row.Status != "succeeded" || !strings.Contains(got, "sandbox_suspended") || !strings.Contains(got, "sandbox_resumed") {
		t.Errorf("%s: %s", row.Status, got)
	}
	// It checkpointed as it parked; the suspend's saved workspace is
	// named, and the resume names the one it resumed on.
	cps, _ := payloadsOf[runlog.Checkpoint](t, evs, runlog.EventCheckpoint)
	sus, seqs := payloadsOf[runlog.SandboxEvent](t, evs, runlog.EventSandboxSuspended)
	res, _ := payloadsOf[runlog.SandboxEvent](t, evs, runlog.EventSandboxResumed)
	if len(sus) != 1 || sus[0].Snapshot == "" || !strings.Contains(sus[0].Note, sus[0].Snapshot) {
		t.Fatalf("suspended %+v; want once, the saved workspace named", sus)
	}
	if len(cps) == 0 || cps[0].Reason != "before the run parks" || cps[0].Seq >= seqs[0] {
		t.Errorf("checkpoints %+v; want the first taken as the run parked, before the suspend", cps)
	}
	if len(res) != 1 || res[0].Snapshot != sus[0].Snapshot || !strings.Contains(res[0].Note, sus[0].Snapshot) {
		t.Errorf("resumed %+v; want it on workspace %s, named", res, sus[0].Snapshot)
	}
}

// TestTenantDefaultPolicy: a tenant's default policy applies under a run's
// own, and a bad one is refused when the run starts.
func TestTenantDefaultPolicy(t *testing.T) {
	e := newEnv(t)
	tenantPolicy := "tools:\n  bash: deny\n"
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: e.sbs,
		TenantPolicy: func(ctx context.Context, tenant string) (string, error) { return tenantPolicy, nil },
		Models: func(spec agent.ModelSpec) (model.Model, string, error) {
			m, err := script.Load(strings.TrimPrefix(spec.Model, "script:"))
			return m, spec.Model, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	model := e.script(turn("", call("bash", map[string]any{"command": "true"})),
		map[string]any{"expect": "denied by policy", "text": "ok"})
	id, err := eng.Start(context.Background(), "acme", runlog.Spec{Task: "x", Model: model})
	if err != nil {
		t.Fatal(err)
	}
	row, _ := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("the tenant's deny was not applied: %s %s", row.Status, summary(t, row).Reason)
	}
	// The run's own policy comes first.
	id, _ = eng.Start(context.Background(), "acme", runlog.Spec{Task: "x", Model: e.script(
		turn("", call("bash", map[string]any{"command": "echo allowed"})), map[string]any{"expect": "allowed", "text": "ok"}),
		Policy: "tools:\n  bash: allow\n"})
	if row, _ := e.finish(eng, id); row.Status != "succeeded" {
		t.Errorf("the run's allow did not win: %s", summary(t, row).Reason)
	}
	tenantPolicy = "tools:\n  bash: sometimes\n"
	if _, err := eng.Start(context.Background(), "acme", runlog.Spec{Task: "x", Model: model}); err == nil || !strings.Contains(err.Error(), "acme") {
		t.Errorf("a bad tenant policy: %v", err)
	}
}

// TestInvalidCallNeverReachesThePolicy: a call whose arguments do not fit
// its tool's schema gets the schema error, and no rule or person is asked
// about it — even a policy that asks about every call.
func TestInvalidCallNeverReachesThePolicy(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(turn("", call("bash", map[string]any{"cmd": "rm -rf /"})),
		map[string]any{"expect": "invalid arguments for bash", "text": "ok"})
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, Policy: "tools:\n  bash: ask\n"})
	if err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng, id)
	for _, ev := range evs {
		if ev.Type == runlog.EventPolicyDecision || ev.Type == runlog.EventApprovalRequested {
			t.Fatalf("the policy saw an invalid call: %s %s", ev.Type, ev.Data)
		}
	}
	if row.Status != "succeeded" {
		t.Fatalf("status %s (%s), want succeeded: the model was to be told its arguments were invalid; events %v",
			row.Status, summary(t, row).Reason, types(evs))
	}
	if e.sbs.n != 0 {
		t.Errorf("an invalid call made a sandbox")
	}
}

// TestSaveArtifact: a file is streamed into the blob store whole, across
// several ranges; one over the artifact limit is refused, with nothing
// stored, and the run goes on.
func TestSaveArtifact(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("bash", map[string]any{"command": "head -c 9437184 /dev/urandom > big.bin && truncate -s 300M huge.bin"})),
		turn("", call("save_artifact", map[string]any{"path": "big.bin"})),
		map[string]any{"expect": "saved big.bin (9437184 bytes)", "tool_calls": []any{call("save_artifact", map[string]any{"path": "huge.bin"})}},
		map[string]any{"expect": "over the 256 MiB artifact limit", "text": "ok"},
	)
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	row, _ := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s", row.Status, summary(t, row).Reason)
	}
	arts, err := eng.Artifacts(context.Background(), "", id)
	if err != nil || len(arts) != 1 || arts[0].Size != 9437184 {
		t.Fatalf("artifacts: %+v %v", arts, err)
	}
	rc, _, err := eng.OpenArtifact(context.Background(), "", id, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, _ := io.ReadAll(rc)
	want, _ := os.ReadFile(filepath.Join(e.sbs.root("sb1"), "big.bin"))
	if !bytes.Equal(got, want) {
		t.Errorf("the artifact differs from the file (%d bytes, want %d)", len(got), len(want))
	}
}

// reportTool is a trusted tool that hands its artifact over as bytes.
type reportTool struct{}

func (reportTool) Spec() tool.Spec {
	return tool.Spec{Name: "report", Description: "makes a report", Side: tool.SideTrusted,
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
}
func (reportTool) Call(context.Context, string, json.RawMessage) (tool.Result, error) {
	return tool.Result{Text: "made it", Artifacts: []tool.Artifact{{Name: "report.txt", Data: []byte("the report"), Source: "report"}}}, nil
}

// TestToolArtifactsAreRecorded: the artifacts a tool returns (save_artifact's
// stored ones, or bytes from any tool) are recorded with the call's result,
// in one append, and can be opened.
func TestToolArtifactsAreRecorded(t *testing.T) {
	e := newEnv(t)
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: e.sbs, Models: e.engineModels(),
		Trusted: []tool.Tool{reportTool{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	model := e.script(
		turn("", call("report", map[string]any{})),
		turn("", call("write_file", map[string]any{"path": "out.txt", "content": "from the sandbox"})),
		turn("", call("save_artifact", map[string]any{"path": "out.txt"})),
		turn("done"),
	)
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s", row.Status, summary(t, row).Reason)
	}
	got := strings.Join(types(evs), " ")
	if n := strings.Count(got, "artifact tool_result"); n != 2 {
		t.Errorf("want each artifact just before its call's result: %s", got)
	}
	for name, want := range map[string]string{"report.txt": "the report", "out.txt": "from the sandbox"} {
		rc, a, err := eng.OpenArtifact(context.Background(), "", id, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		if string(data) != want || a.Size != int64(len(want)) {
			t.Errorf("%s = %q (%+v), want %q", name, data, a, want)
		}
	}
}
