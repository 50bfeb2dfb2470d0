package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// Sandboxes is what the loop needs of the sandbox manager.
type Sandboxes interface {
	// Create makes run's sandbox called name from image and returns its
	// id. An image runlog.SnapshotImagePrefix+DIGEST is a checkpoint of
	// the run's tenant (a fork's first sandbox); another tenant's is not
	// found.
	Create(ctx context.Context, runID, name, image string) (string, error)
	// Executor reaches a running sandbox's executor, for the sandbox
	// tools. An error of kind not found, failed precondition or
	// unavailable may mean the sandbox is gone; Gone says for sure.
	Executor(ctx context.Context, id string) (sandboxtool.Executor, error)
	// ExecutorStarted is when the executor of a running sandbox started
	// (it remembers idempotency keys for its life only).
	ExecutorStarted(ctx context.Context, id string) (time.Time, error)
	// Gone reports whether sandbox id has ended, and why in words.
	Gone(ctx context.Context, id string) (bool, string)
	// Replace makes a new sandbox for run's name from image in place of
	// oldID: on oldID's writable layer when it survived, else on the
	// workspace of snapshot (the run's newest checkpoint, "" for none),
	// else on the bare image. The Replacement says which.
	Replace(ctx context.Context, runID, name, image, oldID, snapshot string) (Replacement, error)
	// Release deletes the sandboxes of a run that ended.
	Release(ctx context.Context, runID string)
	// Suspend releases a sandbox's compute and keeps its files (the
	// workspace it saved, when it saves one); Wake starts it again on
	// them, saying whether it was suspended.
	Suspend(ctx context.Context, id string) (Workspace, error)
	Wake(ctx context.Context, id string) (Woken, error)
	// Checkpoint saves running sandbox id's workspace as an unnamed
	// snapshot of run's tenant, durable when it returns.
	Checkpoint(ctx context.Context, runID, id string) (Workspace, error)
}

// Workspace is a saved workspace: its snapshot's digest and size.
type Workspace struct {
	Digest string // sha256:…
	Files  int64
	Bytes  int64
}

// Woken is what Wake did.
type Woken struct {
	Woke bool
	// Workspace is the digest of the saved workspace a fresh guest was
	// started on ("" when it kept its disk or memory).
	Workspace string
	// Reason is why it had been suspended ("ttl_expired",
	// "idle_timeout"; "" when asked to).
	Reason string
}

// Replacement is the sandbox Replace made.
type Replacement struct {
	ID string
	// From is where its files came from: runlog.FromDisk, FromSnapshot
	// (Snapshot), FromImage.
	From     string
	Snapshot string
	// Why says why a snapshot asked for was not used.
	Why string
}

// gatewayer is what an agent run (Spec.Agent) needs of a Sandboxes: the
// model gateway turned on in sandbox id (it may already be on) and the
// environment its program needs (gateway.Env); and, for a call that
// arrives from a sandbox no run is bound to, the sandbox's tenant and
// gateway model, so that the call is recorded in the sandbox's own run.
type gatewayer interface {
	EnableGateway(ctx context.Context, id string) (env []string, err error)
	GatewayOf(ctx context.Context, id string) (tenant, model, script string, err error)
}

// AttachPrefix in a spec's sandbox image ("sandbox:3f2a9c1b7d4e") names an
// existing sandbox for the run to work in instead of a new one. The run
// does not delete it when it ends.
const AttachPrefix = "sandbox:"

// oomCounter is what a Sandboxes can say about memory kills: how many
// processes of sandbox id the memory limit has killed so far, and the limit.
type oomCounter interface {
	OOMKills(ctx context.Context, id string) (int, int64, error)
}

// sandboxFor is what a sandbox tool gets for one call in sandbox id.
func (e *Engine) sandboxFor(cl sandboxtool.Executor, id, name, key string) sandboxtool.Sandbox {
	sb := sandboxtool.Sandbox{Exec: cl, Key: key, Name: name, Blobs: e.cfg.Blobs}
	if oc, ok := e.cfg.Sandboxes.(oomCounter); ok {
		sb.OOMKills = func(ctx context.Context) (int, int64, error) { return oc.OOMKills(ctx, id) }
	}
	return sb
}

// sandboxName picks the sandbox a call is for.
func sandboxName(spec runlog.Spec, input json.RawMessage) (string, error) {
	var in struct {
		Sandbox string `json:"sandbox"`
	}
	json.Unmarshal(input, &in)
	if in.Sandbox != "" {
		if _, ok := spec.Sandboxes[in.Sandbox]; !ok {
			return "", fmt.Errorf("no sandbox named %q: this run has %s", in.Sandbox, sandboxList(spec))
		}
		return in.Sandbox, nil
	}
	if len(spec.Sandboxes) == 1 {
		for n := range spec.Sandboxes {
			return n, nil
		}
	}
	return "", fmt.Errorf("name the sandbox with the \"sandbox\" argument: this run has %s", sandboxList(spec))
}

func sandboxList(spec runlog.Spec) string {
	var names []string
	for n := range spec.Sandboxes {
		names = append(names, fmt.Sprintf("%q", n))
	}
	sort.Strings(names)
	return fmt.Sprint(names)
}

// callSandbox runs a sandbox tool, creating the sandbox on first use and
// replacing it when it is found gone.
func (e *Engine) callSandbox(ctx context.Context, r *run, t sandboxtool.Tool, intent runlog.ToolCall, recovering bool) (tool.Result, error) {
	name, err := sandboxName(r.st.spec, intent.Input)
	if intent.Name == sandboxtool.ComputerName {
		// The run's one screen, whatever the arguments say.
		name, _, _ = screenSandbox(r.st.spec)
		err = nil
	}
	if err != nil {
		return tool.Result{IsError: true, Text: err.Error()}, nil
	}
	id, ok := r.st.sandboxes[name]
	if !ok {
		// No sandbox existed when the intent was logged, so the call
		// cannot have run: a recovering call is a first call.
		recovering = false
		if id, err = e.createSandbox(ctx, r, name); err != nil {
			return tool.Result{}, err
		}
	}
	if woke, err := e.cfg.Sandboxes.Wake(ctx, id); err != nil {
		// Removed (reins sandbox rm, an expiry) or dead: gone is gone,
		// whatever the cause, and the run gets a replacement.
		if gone, why := e.cfg.Sandboxes.Gone(ctx, id); gone && ctx.Err() == nil {
			return e.replaceSandbox(ctx, r, name, id, why, nil)
		}
		return tool.Result{}, err
	} else if woke.Woke {
		note := "started again on its files after the run waited"
		if woke.Workspace != "" {
			note = "resumed on a fresh guest from its saved workspace " + woke.Workspace
		}
		if woke.Reason != "" {
			note += " (it had been suspended: " + woke.Reason + ")"
		}
		if err := e.append(ctx, r, "", typedEvent{runlog.EventSandboxResumed, runlog.SandboxEvent{Name: name, ID: id,
			Snapshot: woke.Workspace, Reason: woke.Reason, Note: note}}); err != nil {
			return tool.Result{}, err
		}
	}
	cl, err := e.cfg.Sandboxes.Executor(ctx, id)
	if err == nil && recovering && intent.Name == "bash" {
		// The executor remembers idempotency keys for its life only: one
		// that started after the intent cannot know it, and asking it
		// would run the command a second time.
		if started, serr := e.cfg.Sandboxes.ExecutorStarted(ctx, id); serr != nil || started.After(r.st.intentTime(intent.CallID)) {
			return tool.Result{IsError: true, Text: "The service restarted while this command ran, and its sandbox has " +
				"restarted since, so whether it completed is unknown. It was not run again."}, nil
		}
	}
	if err == nil {
		var res tool.Result
		sb := e.sandboxFor(cl, id, name, intent.Key)
		sb.Screen = r.st.spec.Screens[name]
		res, err = t.Run(ctx, sb, intent.Input)
		// A stream cut by the sandbox's death is an internal error or,
		// cut inside a message, a protocol one (connect's "incomplete
		// envelope"), not only an unavailable executor: whatever ended a
		// command mid-call, Gone decides.
		var mid *sandboxtool.EndedMidCall
		if err == nil || !(errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, errdefs.ErrInternal) || errors.As(err, &mid)) || ctx.Err() != nil {
			return res, err
		}
	}
	gone, why := e.cfg.Sandboxes.Gone(ctx, id)
	if !gone {
		return tool.Result{}, err
	}
	var mid *sandboxtool.EndedMidCall
	errors.As(err, &mid)
	return e.replaceSandbox(ctx, r, name, id, why, mid)
}

// createSandbox makes run's sandbox called name on its first use (a
// fork's from the checkpoint its Forked event names) and records it.
func (e *Engine) createSandbox(ctx context.Context, r *run, name string) (string, error) {
	image := r.st.spec.Sandboxes[name]
	if existing, ok := strings.CutPrefix(image, AttachPrefix); ok {
		// A sandbox the user made (and filled) before the run.
		if err := e.putUploads(ctx, r, name, existing); err != nil {
			return "", err
		}
		return existing, e.append(ctx, r, "", typedEvent{runlog.EventSandboxCreated, runlog.SandboxEvent{Name: name, ID: existing, Image: image}})
	}
	if err := e.checkImage(r.tenant, image); err != nil {
		return "", err
	}
	ev := runlog.SandboxEvent{Name: name, Image: image, From: runlog.FromImage}
	if digest := r.st.startFrom[name]; digest != "" {
		id, err := e.cfg.Sandboxes.Create(ctx, r.id, name, runlog.SnapshotImagePrefix+digest)
		if err == nil {
			ev.ID, ev.From, ev.Snapshot = id, runlog.FromSnapshot, digest
			ev.Note = "its files are the checkpoint " + digest + " of the run this one was forked from"
			return id, e.append(ctx, r, "", typedEvent{runlog.EventSandboxCreated, ev})
		}
		if !errors.Is(err, errdefs.ErrNotFound) || ctx.Err() != nil {
			return "", fmt.Errorf("creating sandbox %q from checkpoint %s: %w", name, digest, err)
		}
		ev.Note = fmt.Sprintf("the checkpoint %s could not be restored (%v): it starts from the image %s", digest, errdefs.Public(err), image)
	}
	id, err := e.cfg.Sandboxes.Create(ctx, r.id, name, image)
	if err != nil {
		return "", fmt.Errorf("creating sandbox %q (%s): %w", name, image, err)
	}
	// Before it is recorded: a crash in between makes another sandbox
	// (the manager releases the run's unrecorded ones with the run).
	if err := e.putUploads(ctx, r, name, id); err != nil {
		return "", err
	}
	ev.ID = id
	return id, e.append(ctx, r, "", typedEvent{runlog.EventSandboxCreated, ev})
}

// replaceSandbox records a lost sandbox, provisions its replacement (on
// the lost one's disk, else on the newest checkpoint) and tells the model
// what happened.
func (e *Engine) replaceSandbox(ctx context.Context, r *run, name, oldID, why string, mid *sandboxtool.EndedMidCall) (tool.Result, error) {
	image := r.st.spec.Sandboxes[name]
	if strings.HasPrefix(image, AttachPrefix) {
		// The user's sandbox went; Replace copies its spec (and disk)
		// while its record lasts, and otherwise this image is used.
		image = runlog.DefaultImage
	}
	if err := e.checkImage(r.tenant, image); err != nil {
		return tool.Result{}, err
	}
	base := r.st.base[name]
	if err := e.append(ctx, r, "", typedEvent{runlog.EventSandboxLost, runlog.SandboxEvent{Name: name, ID: oldID, Reason: why}}); err != nil {
		return tool.Result{}, err
	}
	rep, err := e.cfg.Sandboxes.Replace(ctx, r.id, name, image, oldID, base.Digest)
	if err != nil {
		return tool.Result{}, fmt.Errorf("sandbox %q was lost (%s) and a replacement could not be made: %w", name, why, err)
	}
	var note string
	switch rep.From {
	case runlog.FromDisk:
		note = "its files were restored from the lost sandbox's disk"
	case runlog.FromSnapshot:
		note = fmt.Sprintf("its files were restored from the checkpoint %s, taken after event %d: changes made since then are lost", rep.Snapshot, base.Seq)
	default:
		rep.From = runlog.FromImage
		note = "its files could not be restored: it starts from the image " + image
		if rep.Why != "" {
			note += " (" + rep.Why + ")"
		}
		if err := e.putUploads(ctx, r, name, rep.ID); err != nil {
			note += "; the run's uploads could not be put into it: " + errdefs.Public(err)
		} else if len(r.st.spec.Uploads) > 0 && name == r.st.spec.FilesSandbox() {
			note += ", with the run's uploads"
		}
	}
	if err := e.append(ctx, r, "", typedEvent{runlog.EventSandboxReplaced, runlog.SandboxEvent{Name: name, ID: rep.ID, Previous: oldID,
		Image: image, Reason: why, Note: note, From: rep.From, Snapshot: rep.Snapshot}}); err != nil {
		return tool.Result{}, err
	}
	newID, restored := rep.ID, rep.From
	e.log.Warn("sandbox replaced", "run", r.id, "sandbox", name, "old", oldID, "new", newID, "from", restored)
	if mid != nil && !mid.Started && mid.Output == "" {
		return tool.Result{IsError: true, Text: fmt.Sprintf("[the sandbox %q ended during this call, before its command reported starting: %s. "+
			"The command may or may not have run (it may be what ended the sandbox); it was not run again. A replacement is running; %s.]",
			name, why, note)}, nil
	}
	if mid != nil {
		// The command ran and the sandbox ended under it (often because
		// of it): say so, with what it printed, rather than "not run".
		return tool.Result{IsError: true, Text: fmt.Sprintf("%s\n[the sandbox %q ended while this command ran: %s. "+
			"A replacement is running; %s. Processes that were running are gone; the command was not run again.]",
			mid.Output, name, why, note)}, nil
	}
	return tool.Result{IsError: true, Text: fmt.Sprintf("The sandbox %q was lost (%s). A replacement is running; %s. "+
		"Processes that were running are gone, and this call was not run: run it again if you still need it.", name, why, note)}, nil
}

// intentTime is when the intent for callID was logged.
func (s *state) intentTime(callID string) time.Time {
	if t, ok := s.intentAt[callID]; ok {
		return t
	}
	return time.Now()
}

// egressLog is what a Sandboxes can read of a sandbox's egress log: its
// entries after afterSeq, and the seq of the last one returned.
type egressLog interface {
	EgressSince(ctx context.Context, id string, afterSeq int64) (entries []egress.Entry, lastSeq int64, err error)
}

// maxEgressEntries is the most entries one egress event carries.
const maxEgressEntries = 100

// egressEvents are the events recording the connections the run's
// sandboxes made (or were refused) since the last ones recorded: appended
// after each call, so the log shows what a command reached out to. A log
// that cannot be read costs the record, never the run.
func (e *Engine) egressEvents(ctx context.Context, r *run) []any {
	el, ok := e.cfg.Sandboxes.(egressLog)
	if !ok {
		return nil
	}
	var out []any
	for _, name := range slices.Sorted(maps.Keys(r.st.sandboxes)) {
		id := r.st.sandboxes[name]
		after := r.st.egressSeq[id]
		entries, last, err := el.EgressSince(ctx, id, after)
		if err != nil {
			e.log.Warn("reading a sandbox's egress log", "run", r.id, "sandbox", id, "err", err)
			continue
		}
		if len(entries) == 0 {
			continue
		}
		ev := runlog.Egress{Sandbox: name, ID: id, AfterSeq: after, LastSeq: last}
		for _, en := range entries {
			if !en.Allowed {
				ev.Denied++
			}
		}
		if len(entries) > maxEgressEntries {
			ev.Omitted = len(entries) - maxEgressEntries
			entries = entries[:maxEgressEntries]
		}
		ev.Entries = entries
		out = append(out, ev)
	}
	return out
}
