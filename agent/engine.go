package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/policy"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/tool"
)

// ModelOpener turns a run's model into a Model and the name the provider
// knows it by. It fails before any sandbox exists for an unknown provider
// or a missing key, and refuses a tenant's model that names a host path.
type ModelOpener func(ModelSpec) (model.Model, string, error)

// ModelSpec is what a run's model is opened from.
type ModelSpec struct {
	// Model is provider:name ("anthropic:claude-sonnet-4-5", "script:x.json").
	Model string
	// Script is a script: model's JSON, sent inline; without it the name
	// of a script: model is a file on the service's host.
	Script string
	// Tenant is whose run it is; "" is the admin. A tenant's model names
	// no host path (a script: model without Script is refused).
	Tenant string
}

// Config is how an Engine is set up.
type Config struct {
	Store     store.Store
	Blobs     store.Blobs
	Models    ModelOpener
	Sandboxes Sandboxes
	// Trusted are the tools that run in the service (sql_query, …).
	Trusted []tool.Tool
	Prices  Prices
	Logger  *slog.Logger
	// Failpoint, when set, is called at named points of a step; tests use
	// it to kill the service at every point that matters.
	Failpoint func(name string)
	// MaxContextChars bounds the conversation sent to a model (default
	// 400k characters, about 100k tokens).
	MaxContextChars int
	// TenantPolicy returns a tenant's default policy document ("" for
	// none); it applies under each run's own policy.
	TenantPolicy func(ctx context.Context, tenant string) (string, error)
	// ReleaseAfter is how long a paused or waiting run keeps its
	// sandboxes running before their compute is released (suspended,
	// files kept). Default 2 minutes; negative never releases.
	ReleaseAfter time.Duration
	// CheckImage, when set, refuses an image a tenant ("" is the admin)
	// may not name (one from a path on the host). It is asked when a run
	// starts and again before each sandbox is made, for a log written by
	// an older version.
	CheckImage func(tenant, image string) error
	// AgentGrace is how long an agent program whose run ended (a budget,
	// its timeout) has to exit on its own before its process group is
	// killed (default 5s).
	AgentGrace time.Duration
}

// Engine runs agent runs: one worker goroutine per running run, none for a
// run that waits (a waiting run is a row, not a goroutine).
type Engine struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	workers map[string]*worker
	// steer serializes, per run, the appends made from outside its worker
	// (decisions, answers, pause, resume, cancel, the janitor), which all
	// read the log, decide, then append.
	steer   sync.Map // run id → *sync.Mutex
	changed map[string]chan struct{}
	// parked keeps the folded state of runs without a worker (waiting,
	// paused), so that steering one or reading what it waits on reads
	// none of its log; see loadParked.
	parked map[string]*run
	wg     sync.WaitGroup
	closed bool

	// Agent runs (Spec.Agent, inbox.go): their live states, the agent
	// run each sandbox's model calls belong to, and the sandboxes' own
	// record runs.
	agents   map[string]*agentRun
	bound    map[string]string // sandbox id → run id
	records  map[string]string // sandbox id → run id
	recordMu sync.Mutex
	// notes are lifecycle events of sandboxes, by id, for the next step
	// of their runs (NoteSandbox).
	notes map[string][]SandboxNote
}

type worker struct {
	cancel  context.CancelCauseFunc
	done    chan struct{}
	pausing atomic.Bool
}

// errCancelled is the cause given when a user cancels a run.
var errCancelled = errors.New("cancelled by a user")

// New returns an Engine. Call Recover to continue unfinished runs.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil || cfg.Blobs == nil || cfg.Models == nil || cfg.Sandboxes == nil {
		return nil, errors.New("agent: store, blobs, models and sandboxes are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Prices == nil {
		cfg.Prices = DefaultPrices()
	}
	if cfg.MaxContextChars == 0 {
		cfg.MaxContextChars = 400_000
	}
	if cfg.ReleaseAfter == 0 {
		cfg.ReleaseAfter = 2 * time.Minute
	}
	if cfg.AgentGrace <= 0 {
		cfg.AgentGrace = 5 * time.Second
	}
	return &Engine{cfg: cfg, log: cfg.Logger, workers: map[string]*worker{}, changed: map[string]chan struct{}{},
		parked: map[string]*run{}, agents: map[string]*agentRun{}, bound: map[string]string{}, records: map[string]string{}}, nil
}

func newRunID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "run_" + hex.EncodeToString(b)
}

// Start checks spec, records a new run and starts it. Its model may not
// be an internal one (replay:).
func (e *Engine) Start(ctx context.Context, tenant string, spec runlog.Spec) (string, error) {
	if err := CheckModelName(spec.Model); err != nil {
		return "", err
	}
	if strings.TrimSpace(spec.Agent) == runlog.AgentSandbox {
		return "", fmt.Errorf("agent %q is reins' own record of a sandbox's model calls: choose claude-code, codex or cmd:\"PROGRAM ARGS\": %w",
			runlog.AgentSandbox, errdefs.ErrInvalidArgument)
	}
	// Which sandbox has a display is the engine's to find out, not the
	// caller's to say.
	spec.Screens = nil
	return e.start(ctx, tenant, spec)
}

func (e *Engine) start(ctx context.Context, tenant string, spec runlog.Spec) (string, error) {
	if err := spec.Normalize(); err != nil {
		return "", err
	}
	// Fail on a bad model or image before anything exists.
	if spec.Agent != "" {
		if _, ok := e.cfg.Sandboxes.(gatewayer); !ok {
			return "", fmt.Errorf("this service has no model gateway, which agent runs (--agent) need: %w", errdefs.ErrFailedPrecondition)
		}
	}
	if spec.Model != "" || spec.Agent == "" {
		if _, _, err := e.openModel(ctx, tenant, spec); err != nil {
			return "", err
		}
	}
	for _, img := range spec.Sandboxes {
		if err := e.checkImage(tenant, img); err != nil {
			return "", err
		}
	}
	if err := e.checkTools(spec.Tools); err != nil {
		return "", err
	}
	if spec.Screens == nil { // a verification run keeps its original's
		screens, err := e.screens(ctx, tenant, spec)
		if err != nil {
			return "", err
		}
		spec.Screens = screens
	}
	if _, err := e.policyFor(ctx, tenant, spec); err != nil {
		return "", err
	}
	id, err := e.create(ctx, tenant, spec)
	if err != nil {
		return "", err
	}
	e.launch(id, nil)
	return id, nil
}

// create records a new run of a normalized spec, with more events after
// its first (a sandbox's record names its sandbox), and returns its id.
func (e *Engine) create(ctx context.Context, tenant string, spec runlog.Spec, more ...any) (string, error) {
	id := newRunID()
	specJSON, _ := json.Marshal(spec)
	now := time.Now()
	sum := runlog.Summary{Model: spec.Model, Task: spec.Task, Started: now}
	ev, _ := json.Marshal(runlog.RunCreated{Spec: spec})
	evs := []store.Event{{Type: runlog.EventRunCreated, Time: now, Data: ev}}
	for _, m := range more {
		typ, data, err := encodeEvent(m)
		if err != nil {
			return "", err
		}
		evs = append(evs, store.Event{Type: typ, Time: now, Data: data})
		if se, ok := m.(typedEvent); ok && typ == runlog.EventSandboxCreated {
			d := se.data.(runlog.SandboxEvent)
			sum.Sandbox = map[string]string{d.Name: d.ID}
		}
	}
	sumJSON, _ := json.Marshal(sum)
	// The run and its first events in one write: a crash leaves no run
	// without a log.
	if err := e.cfg.Store.CreateRun(ctx, store.Run{ID: id, Tenant: tenant, Status: string(runlog.StatusRunning),
		Spec: specJSON, Summary: sumJSON, CreatedAt: now, UpdatedAt: now}, evs...); err != nil {
		return "", err
	}
	return id, nil
}

func (e *Engine) checkTools(names []string) error {
	known := map[string]bool{}
	for _, t := range e.tools() {
		known[t.Spec().Name] = true
	}
	known[askHumanName] = true
	for _, n := range names {
		if !known[n] {
			return fmt.Errorf("unknown tool %q: %w", n, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// launch starts a worker for run id unless one runs. r, when not nil, is
// the run's state as its log now is (a steering call's), which the worker
// takes over instead of folding the log again.
func (e *Engine) launch(id string, r *run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.workers[id] != nil {
		return
	}
	delete(e.parked, id) // the worker's now
	if r != nil && r.id != id {
		r = nil
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	w := &worker{cancel: cancel, done: make(chan struct{})}
	e.workers[id] = w
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(w.done)
		defer func() {
			e.mu.Lock()
			delete(e.workers, id)
			e.mu.Unlock()
		}()
		e.work(ctx, id, r, w)
	}()
}

// work drives one run until it finishes, parks or the engine stops. r is
// the run's state, or nil to fold it from the log.
func (e *Engine) work(ctx context.Context, id string, r *run, w *worker) {
	log := e.log.With("run", id)
	if r == nil {
		var err error
		if r, err = e.load(ctx, id); err != nil {
			log.Error("loading run", "err", err)
			return
		}
	}
	if r.st.spec.Agent != "" {
		e.workAgent(ctx, r)
		return
	}
	// Whatever stopped it (parked, finished, the engine stopping), the
	// state is the log's as far as r.st.lastSeq; the next steering call
	// checks that before it trusts it.
	defer e.park(r)
	for {
		more, err := e.step(ctx, r)
		if err == nil && more && w.pausing.Load() {
			// A safe point: the last model or tool call is in the log.
			if err := e.checkpoints(ctx, r, true); err != nil {
				log.Error("checkpointing before a pause", "err", err)
			}
			if err := e.append(ctx, r, runlog.StatusPaused, typedEvent{runlog.EventPaused, runlog.Note{Message: "paused by a user"}}); err != nil {
				log.Error("pausing", "err", err)
			}
			return
		}
		if err == nil && more {
			continue
		}
		if err != nil {
			if context.Cause(ctx) == errCancelled {
				e.finish(context.Background(), r, runlog.StatusCancelled, "", "cancelled by a user")
				return
			}
			if ctx.Err() != nil {
				return // the engine is stopping; the run continues on restart
			}
			log.Error("run failed", "err", err)
			e.finish(context.Background(), r, runlog.StatusFailed, "", errdefs.Public(err)) // the tenant reads the reason
		}
		return
	}
}

// run is a run being worked on: its state and its tenant.
type run struct {
	id     string
	tenant string
	st     *state
	models model.Model
	name   string
	policy *policy.Policy
}

func (e *Engine) load(ctx context.Context, id string) (*run, error) {
	row, err := e.cfg.Store.GetRun(ctx, "", id)
	if err != nil {
		return nil, err
	}
	st := newState(id)
	var after int64
	for {
		evs, err := e.cfg.Store.Events(ctx, id, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			if err := st.apply(ev); err != nil {
				return nil, err
			}
		}
		if len(evs) < 1000 {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	return &run{id: id, tenant: row.Tenant, st: st}, nil
}

// maxParked bounds the parked states kept; past it one is dropped, and
// folded from the log again when next steered.
const maxParked = 1024

// loadParked returns the state of row's run, which is parked (waiting or
// paused): the one kept when its worker stopped or at the last steering
// call, if it is still the log's (its last seq is the row's), else folded
// from the log and kept. Call it holding the run's steering lock; it waits
// for a worker on its way out (one that has just parked the run).
func (e *Engine) loadParked(ctx context.Context, row store.Run) (*run, error) {
	e.mu.Lock()
	w := e.workers[row.ID]
	e.mu.Unlock()
	if w != nil {
		select {
		case <-w.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// The worker may have appended since row was read.
		var err error
		if row, err = e.cfg.Store.GetRun(ctx, "", row.ID); err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	r := e.parked[row.ID]
	e.mu.Unlock()
	if r != nil && r.st.lastSeq == row.LastSeq {
		return r, nil
	}
	r, err := e.load(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	e.park(r)
	return r, nil
}

// park keeps r's state for steering calls; a finished run's is dropped.
func (e *Engine) park(r *run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.st.finished != nil {
		delete(e.parked, r.id)
		return
	}
	if _, ok := e.parked[r.id]; !ok && len(e.parked) >= maxParked {
		for id := range e.parked {
			delete(e.parked, id)
			break
		}
	}
	e.parked[r.id] = r
}

// append writes events to the run's log (and its summary row), then folds
// them into the state. Status "" leaves the status as it is.
func (e *Engine) append(ctx context.Context, r *run, status runlog.Status, events ...any) error {
	var evs []store.Event
	now := time.Now()
	for _, ev := range events {
		typ, data, err := encodeEvent(ev)
		if err != nil {
			return err
		}
		evs = append(evs, store.Event{Type: typ, Time: now, Data: data})
	}
	upd := store.RunUpdate{Status: string(status)}
	upd.Summary = e.summary(r, events)
	last, err := e.cfg.Store.Append(ctx, r.id, r.st.lastSeq, evs, upd)
	if err != nil {
		return err
	}
	first := last - int64(len(evs)) + 1
	for i := range evs {
		evs[i].RunID, evs[i].Seq = r.id, first+int64(i)
		if err := r.st.applyValue(evs[i], events[i]); err != nil {
			return err
		}
	}
	e.notify(r.id)
	return nil
}

// Changed returns a channel closed at the next append to run id's log.
func (e *Engine) Changed(id string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.changed[id]
	if !ok {
		ch = make(chan struct{})
		e.changed[id] = ch
	}
	return ch
}

func (e *Engine) notify(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch, ok := e.changed[id]; ok {
		close(ch)
		delete(e.changed, id)
	}
}

// summary is the run's row after events (the values append is given, not
// decoded again from their JSON): folded on a copy, so the row and the log
// change in one transaction.
func (e *Engine) summary(r *run, events []any) json.RawMessage {
	st := *r.st
	st.sandboxes = map[string]string{}
	for k, v := range r.st.sandboxes {
		st.sandboxes[k] = v
	}
	for _, ev := range events {
		// Only counters and the final text matter here.
		switch d := ev.(type) {
		case runlog.ModelResponse:
			st.steps, st.usage, st.cost = d.Step, st.usage.Add(d.Usage), st.cost+d.CostUSD
		case typedEvent:
			if sb, ok := d.data.(runlog.SandboxEvent); ok && (d.typ == runlog.EventSandboxCreated || d.typ == runlog.EventSandboxReplaced) {
				st.sandboxes[sb.Name] = sb.ID
			}
		case runlog.Finished:
			st.finished = &d
		}
	}
	sum := runlog.Summary{Model: st.spec.Model, Task: st.spec.Task, Steps: st.steps, Usage: st.usage,
		Cost: st.cost, Sandbox: st.sandboxes, Started: st.created}
	if st.finished != nil {
		sum.Text, sum.Reason = st.finished.Text, st.finished.Reason
	}
	data, _ := json.Marshal(sum)
	return data
}

func encodeEvent(ev any) (string, json.RawMessage, error) {
	var typ string
	switch ev.(type) {
	case runlog.ModelResponse:
		typ = runlog.EventModelResponse
	case runlog.ToolCall:
		typ = runlog.EventToolCall
	case runlog.ToolResult:
		typ = runlog.EventToolResult
	case runlog.Waiting:
		typ = runlog.EventWaiting
	case runlog.HumanAnswer:
		typ = runlog.EventHumanAnswer
	case runlog.Finished:
		typ = runlog.EventFinished
	case runlog.Artifact:
		typ = runlog.EventArtifact
	case runlog.Egress:
		typ = runlog.EventEgress
	case typedEvent:
		t := ev.(typedEvent)
		data, err := json.Marshal(t.data)
		return t.typ, data, err
	default:
		return "", nil, fmt.Errorf("agent: no event type for %T", ev)
	}
	data, err := json.Marshal(ev)
	return typ, data, err
}

// typedEvent carries payloads shared by several event types.
type typedEvent struct {
	typ  string
	data any
}

func (e *Engine) finish(ctx context.Context, r *run, status runlog.Status, text, reason string) {
	if r.st.finished != nil {
		return
	}
	// The downloads, however the run ended, before its sandboxes go.
	e.saveDownloads(ctx, r)
	if status != runlog.StatusCancelled {
		// The files as the run leaves them, for a fork at its end.
		if err := e.checkpoints(ctx, r, true); err != nil {
			e.log.Warn("checkpointing at the end of a run", "run", r.id, "err", err)
		}
	}
	// The sandboxes go first, so that a finished run never leaves any
	// (a crash in between finishes the run again on restart).
	e.cfg.Sandboxes.Release(ctx, r.id)
	f := runlog.Finished{Status: status, Text: text, Reason: reason, Usage: r.st.usage, Cost: r.st.cost, Steps: r.st.steps}
	if err := e.append(ctx, r, status, f); err != nil {
		e.log.Error("recording the end of a run", "run", r.id, "err", err)
		return
	}
	e.log.Info("run finished", "run", r.id, "status", status, "reason", reason, "steps", r.st.steps)
}

// Recover continues every run that was running when the service stopped.
func (e *Engine) Recover(ctx context.Context) error {
	runs, err := e.cfg.Store.ListRuns(ctx, store.RunFilter{Statuses: []string{string(runlog.StatusQueued), string(runlog.StatusRunning)}, Limit: 100000})
	if err != nil {
		return err
	}
	for _, r := range runs {
		e.log.Info("continuing run after restart", "run", r.ID)
		e.launch(r.ID, nil)
	}
	// A paused agent run's program runs on: it is followed again too.
	paused, err := e.cfg.Store.ListRuns(ctx, store.RunFilter{Statuses: []string{string(runlog.StatusPaused)}, Limit: 100000})
	if err != nil {
		return err
	}
	for _, r := range paused {
		if a := specOf(r).Agent; a != "" && a != runlog.AgentSandbox {
			e.log.Info("following a paused agent run's program after restart", "run", r.ID)
			e.launch(r.ID, nil)
		}
	}
	return nil
}

// Cancel stops a run now: the running tool's process group is killed and
// the run ends cancelled.
func (e *Engine) Cancel(ctx context.Context, tenant, id string) error {
	defer e.lockRun(id)()
	row, err := e.cfg.Store.GetRun(ctx, tenant, id)
	if err != nil {
		return err
	}
	if runlog.Status(row.Status).Terminal() {
		return fmt.Errorf("run %s already ended (%s): %w", id, row.Status, errdefs.ErrFailedPrecondition)
	}
	e.mu.Lock()
	w := e.workers[id]
	e.mu.Unlock()
	if w != nil {
		w.cancel(errCancelled)
		<-w.done
		return nil
	}
	if specOf(row).Agent != "" {
		return e.cancelAgent(ctx, id)
	}
	// Parked: no worker to stop; end it here.
	r, err := e.loadParked(ctx, row)
	if err != nil {
		return err
	}
	e.finish(ctx, r, runlog.StatusCancelled, "", "cancelled by a user")
	e.park(r)
	return nil
}

// Answer gives a parked run (ask_human) its answer and continues it.
func (e *Engine) Answer(ctx context.Context, tenant, id, actor, text string) error {
	defer e.lockRun(id)()
	row, err := e.cfg.Store.GetRun(ctx, tenant, id)
	if err != nil {
		return err
	}
	if runlog.Status(row.Status) != runlog.StatusWaitingApproval {
		return fmt.Errorf("run %s is %s, not waiting for an answer: %w", id, row.Status, errdefs.ErrFailedPrecondition)
	}
	r, err := e.loadParked(ctx, row)
	if err != nil {
		return err
	}
	if r.st.waiting == nil {
		return fmt.Errorf("run %s waits for no answer: %w", id, errdefs.ErrFailedPrecondition)
	}
	w := *r.st.waiting
	call := r.st.intents[w.CallID]
	if err := e.append(ctx, r, runlog.StatusRunning,
		runlog.HumanAnswer{CallID: w.CallID, Text: text, Actor: actor},
		runlog.ToolResult{Step: call.Step, CallID: w.CallID, Name: askHumanName, Text: text}); err != nil {
		return err
	}
	e.launch(id, r)
	return nil
}

// Close stops the workers (runs stay running in the log and continue on the
// next Recover) and waits for them.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	for _, w := range e.workers {
		w.cancel(errors.New("the service is stopping"))
	}
	e.mu.Unlock()
	e.wg.Wait()
}

// Wait blocks until run id has no worker (it finished or parked).
func (e *Engine) Wait(ctx context.Context, id string) error {
	e.mu.Lock()
	w := e.workers[id]
	e.mu.Unlock()
	if w == nil {
		return nil
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) failpoint(name string) {
	if e.cfg.Failpoint != nil {
		e.cfg.Failpoint(name)
	}
}

// Artifacts lists what a run saved (save_artifact) and the whole outputs it
// cut for the model.
func (e *Engine) Artifacts(ctx context.Context, tenant, id string) ([]runlog.Artifact, error) {
	if _, err := e.cfg.Store.GetRun(ctx, tenant, id); err != nil {
		return nil, err
	}
	evs, err := e.cfg.Store.Events(ctx, id, 0, 0)
	if err != nil {
		return nil, err
	}
	var out []runlog.Artifact
	for _, ev := range evs {
		switch ev.Type {
		case runlog.EventArtifact:
			var a runlog.Artifact
			json.Unmarshal(ev.Data, &a)
			out = append(out, a)
			continue
		case runlog.EventToolResult:
		default:
			continue
		}
		var res runlog.ToolResult
		json.Unmarshal(ev.Data, &res)
		if res.Artifact != "" {
			out = append(out, runlog.Artifact{Name: fmt.Sprintf("output-step%d-%s.txt", res.Step, res.Name), Digest: res.Artifact, Size: int64(res.FullBytes)})
		}
		for i, img := range res.Images {
			a := runlog.Artifact{Name: fmt.Sprintf("image-step%d-%d.png", res.Step, i), Digest: img}
			if i < len(res.ImageBytes) {
				a.Size = res.ImageBytes[i]
			}
			out = append(out, a)
		}
	}
	return out, nil
}

// OpenArtifact opens an artifact of run id by name or digest. Only blobs
// the run references can be opened, so one tenant never reads another's.
func (e *Engine) OpenArtifact(ctx context.Context, tenant, id, nameOrDigest string) (io.ReadCloser, runlog.Artifact, error) {
	arts, err := e.Artifacts(ctx, tenant, id)
	if err != nil {
		return nil, runlog.Artifact{}, err
	}
	for _, a := range arts {
		if a.Digest == "" {
			continue // a download that was not saved: its error is in the list
		}
		if a.Name == nameOrDigest || a.Digest == nameOrDigest {
			rc, err := e.cfg.Blobs.Open(ctx, a.Digest)
			return rc, a, err
		}
	}
	return nil, runlog.Artifact{}, fmt.Errorf("run %s has no artifact %q (see reins runs artifacts %s): %w", id, nameOrDigest, id, errdefs.ErrNotFound)
}

// openModel opens the model of tenant's run: a provider's, or the recorded
// responses of a run being verified ("replay:RUN", the tenant's own).
func (e *Engine) openModel(ctx context.Context, tenant string, spec runlog.Spec) (model.Model, string, error) {
	if id, ok := strings.CutPrefix(spec.Model, replayPrefix); ok {
		m, err := e.openReplay(ctx, tenant, id)
		return m, spec.Model, err
	}
	return e.cfg.Models(ModelSpec{Model: spec.Model, Script: spec.Script, Tenant: tenant})
}

// errInternalModel is the one answer to a user naming an internal model,
// whatever run it names (so it tells no run ids).
var errInternalModel = errdefs.WithMessage(errdefs.ErrInvalidArgument,
	"replay: is reins's own model for `reins runs replay --verify RUN` and cannot be named: "+
		"choose anthropic:MODEL, openai:MODEL or script:FILE")

// CheckModelName refuses a model a user may not name: the internal
// replay:. The API refuses it for everyone, the admin too.
func CheckModelName(model string) error {
	if strings.HasPrefix(strings.TrimSpace(model), replayPrefix) {
		return errInternalModel
	}
	return nil
}

func (e *Engine) checkImage(tenant, image string) error {
	if e.cfg.CheckImage == nil || strings.HasPrefix(image, AttachPrefix) {
		return nil
	}
	return e.cfg.CheckImage(tenant, image)
}

// Janitor releases the sandboxes of runs that have waited (paused, for an
// approval or an answer) longer than ReleaseAfter, until ctx ends.
// It also ends the record runs of sandboxes that are gone.
func (e *Engine) Janitor(ctx context.Context) {
	every := 30 * time.Second
	if e.cfg.ReleaseAfter >= 0 {
		every = min(max(e.cfg.ReleaseAfter/4, 100*time.Millisecond), every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if e.cfg.ReleaseAfter >= 0 {
				e.releaseWaiting(ctx)
			}
			e.endRecords(ctx)
		}
	}
}

func (e *Engine) releaseWaiting(ctx context.Context) {
	runs, err := e.cfg.Store.ListRuns(ctx, store.RunFilter{Statuses: []string{string(runlog.StatusPaused), string(runlog.StatusWaitingApproval)}, Limit: 10000})
	if err != nil {
		return
	}
	for _, row := range runs {
		if time.Since(row.UpdatedAt) < e.cfg.ReleaseAfter {
			continue
		}
		e.releaseRun(ctx, row.ID)
	}
}

// releaseRun suspends the sandboxes of one waiting run, under its lock.
func (e *Engine) releaseRun(ctx context.Context, id string) {
	defer e.lockRun(id)()
	row, err := e.cfg.Store.GetRun(ctx, "", id)
	if err != nil || (runlog.Status(row.Status) != runlog.StatusPaused && runlog.Status(row.Status) != runlog.StatusWaitingApproval) {
		return // decided meanwhile
	}
	if specOf(row).Agent != "" {
		return // an agent program runs on while its run is paused
	}
	e.mu.Lock()
	busy := e.workers[id] != nil
	e.mu.Unlock()
	if busy {
		return
	}
	r, err := e.loadParked(ctx, row)
	if err != nil || len(r.st.sandboxes) == 0 || r.st.suspended {
		return
	}
	var evs []any
	for _, name := range slices.Sorted(maps.Keys(r.st.sandboxes)) {
		sb := r.st.sandboxes[name]
		ws, err := e.cfg.Sandboxes.Suspend(ctx, sb)
		if err != nil {
			e.log.Warn("releasing a waiting run's sandbox", "run", id, "sandbox", sb, "err", err)
			continue
		}
		note := fmt.Sprintf("compute released after the run waited %s; its files are kept", e.cfg.ReleaseAfter)
		if ws.Digest != "" {
			note = fmt.Sprintf("compute released after the run waited %s; its workspace is saved as %s", e.cfg.ReleaseAfter, ws.Digest)
		}
		// The suspend's save is the sandbox's own, to resume on; the
		// checkpoint taken as the run parked is the run's.
		evs = append(evs, typedEvent{runlog.EventSandboxSuspended, runlog.SandboxEvent{Name: name, ID: sb, Snapshot: ws.Digest, Note: note}})
	}
	if len(evs) > 0 {
		if err := e.append(ctx, r, "", evs...); err != nil {
			e.log.Warn("recording released sandboxes", "run", id, "err", err)
		}
	}
}

// lockRun holds run id's steering lock until the returned func is called.
func (e *Engine) lockRun(id string) func() {
	m, _ := e.steer.LoadOrStore(id, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}
