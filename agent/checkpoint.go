package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// mutatingTools are the sandbox tools whose calls change a sandbox's
// files, which checkpoints count (docs/decisions/0038-runs-checkpoints.md):
// those labelled destructive (bash, write_file, edit_file). The readers
// (read_file, list_files, glob, grep, save_artifact) change nothing, and
// the trusted tools run in the service.
var mutatingTools = func() map[string]bool {
	out := map[string]bool{}
	for _, t := range sandboxTools {
		// computer changes a screen, not the workspace a checkpoint
		// saves (a download it makes is saved with the next checkpoint
		// another call brings).
		if s := t.Spec(); s.Side == tool.SideSandbox && s.HasLabel(tool.LabelDestructive) && s.Name != sandboxtool.ComputerName {
			out[s.Name] = true
		}
	}
	return out
}()

// Reasons of checkpoints (runlog.Checkpoint.Reason).
const (
	reasonEvery = "every %d mutating calls"
	reasonEach  = "after each mutating call"
	reasonPark  = "before the run parks"
)

// newBase folds a created or replaced sandbox into the checkpoint state:
// one made from a snapshot descends from it, one made from the image from
// nothing, one on the lost sandbox's disk continues its files.
func (s *state) newBase(typ string, d runlog.SandboxEvent, seq int64) {
	delete(s.startFrom, d.Name)
	switch {
	case d.From == runlog.FromDisk:
		return
	case d.From == runlog.FromSnapshot && d.Snapshot == s.base[d.Name].Digest:
		// The newest checkpoint, restored: the work since is lost.
	case d.From == runlog.FromSnapshot:
		s.base[d.Name] = restorePoint{Digest: d.Snapshot, Seq: seq}
	case d.From == "" && typ == runlog.EventSandboxReplaced:
		return // a log from before From: it reused the disk when it could
	default:
		delete(s.base, d.Name)
	}
	s.dirty[d.Name], s.sinceTry[d.Name] = 0, 0
}

// checkpoints takes the checkpoints the run owes: of each sandbox that
// made its spec's number of mutating calls since its last (with park, of
// each that made any). A snapshot that fails is recorded and the run goes
// on; only an append that fails is an error.
func (e *Engine) checkpoints(ctx context.Context, r *run, park bool) error {
	every := r.st.spec.Checkpoints()
	if every <= 0 || r.st.spec.Agent != "" {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(r.st.sandboxes)) {
		due := r.st.sinceTry[name] >= every
		if park {
			due = r.st.dirty[name] > 0 && r.st.sinceTry[name] > 0
		}
		if !due {
			continue
		}
		reason := fmt.Sprintf(reasonEvery, every)
		if every == 1 {
			reason = reasonEach
		}
		if park {
			reason = reasonPark
		}
		if err := e.checkpoint(ctx, r, name, reason); err != nil {
			return err
		}
	}
	return nil
}

// checkpoint saves sandbox name's workspace and records it, after the
// snapshot is durable.
func (e *Engine) checkpoint(ctx context.Context, r *run, name, reason string) error {
	id := r.st.sandboxes[name]
	cp := runlog.Checkpoint{Sandbox: name, ID: id, Seq: r.st.lastSeq, Reason: reason}
	ws, err := e.cfg.Sandboxes.Checkpoint(ctx, r.id, id)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil {
		e.log.Warn("checkpoint failed", "run", r.id, "sandbox", id, "err", err)
		cp.Error = errdefs.Public(err) // the tenant reads it: no host path
		return e.append(ctx, r, "", typedEvent{runlog.EventCheckpointFailed, cp})
	}
	cp.Digest, cp.Files, cp.Bytes = ws.Digest, ws.Files, ws.Bytes
	return e.append(ctx, r, "", typedEvent{runlog.EventCheckpoint, cp})
}

// forkSnapshots picks, for each sandbox of run evs (its whole log), the
// saved workspace that holds its files as they were after event atSeq:
// the newest checkpoint taken at or before atSeq, unless the sandbox was
// made again since (from its image, or from another snapshot). A sandbox
// whose files then were its image's is not named.
func forkSnapshots(evs []store.Event, atSeq int64) map[string]string {
	type point struct {
		digest string
		seq    int64
	}
	newest := map[string]point{}
	set := func(name, digest string, seq int64) {
		if p, ok := newest[name]; !ok || seq >= p.seq {
			newest[name] = point{digest, seq}
		}
	}
	for _, ev := range evs {
		switch ev.Type {
		case runlog.EventCheckpoint:
			var d runlog.Checkpoint
			if json.Unmarshal(ev.Data, &d) == nil && d.Seq <= atSeq && d.Digest != "" {
				set(d.Sandbox, d.Digest, d.Seq)
			}
		case runlog.EventSandboxCreated, runlog.EventSandboxReplaced:
			var d runlog.SandboxEvent
			if ev.Seq > atSeq || json.Unmarshal(ev.Data, &d) != nil || d.From == runlog.FromDisk {
				continue
			}
			if d.From == "" && ev.Type == runlog.EventSandboxReplaced {
				continue
			}
			if strings.HasPrefix(d.Image, AttachPrefix) {
				continue // the user's sandbox: its files are not the run's to know
			}
			set(d.Name, d.Snapshot, ev.Seq)
		case runlog.EventForked:
			var d runlog.Forked
			if ev.Seq > atSeq || json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			// A fork's sandboxes start again: from what it names, or
			// their images.
			for name := range newest {
				set(name, "", ev.Seq)
			}
			for name, digest := range d.Snapshots {
				set(name, digest, ev.Seq)
			}
		}
	}
	out := map[string]string{}
	for name, p := range newest {
		if p.digest != "" {
			out[name] = p.digest
		}
	}
	return out
}

// SandboxNote is a lifecycle event of a sandbox that its run did not
// cause and would not otherwise record: an expiry warning, a suspend for
// its TTL or idle timeout, a pause by a person.
type SandboxNote struct {
	Sandbox  string // the sandbox's id
	Kind     string // expiring, suspended, paused
	Reason   string
	Snapshot string
	Message  string
}

// Bounds of the notes kept for the next step of the runs they concern.
const (
	maxNotedSandboxes = 1024
	maxNotesPerBox    = 16
)

// NoteSandbox is told of a lifecycle event of sandbox id (the manager's
// event hook): one of a run's sandboxes gets a sandbox_lifecycle event in
// that run's log with the run's next tool result. Notes wait in memory
// (a restart loses them, as it does the manager's events) and are
// bounded. It takes no lock but the engine's and never blocks.
func (e *Engine) NoteSandbox(n SandboxNote) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.notes == nil {
		e.notes = map[string][]SandboxNote{}
	}
	if _, ok := e.notes[n.Sandbox]; !ok && len(e.notes) >= maxNotedSandboxes {
		for id := range e.notes {
			delete(e.notes, id)
			break
		}
	}
	l := append(e.notes[n.Sandbox], n)
	if len(l) > maxNotesPerBox {
		l = l[len(l)-maxNotesPerBox:]
	}
	e.notes[n.Sandbox] = l
}

// noteEvents takes the notes of r's sandboxes as events for its log.
func (e *Engine) noteEvents(r *run) []any {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []any
	for _, name := range slices.Sorted(maps.Keys(r.st.sandboxes)) {
		id := r.st.sandboxes[name]
		for _, n := range e.notes[id] {
			reason := n.Kind
			if n.Reason != "" {
				reason += ": " + n.Reason
			}
			out = append(out, typedEvent{runlog.EventSandboxLifecycle, runlog.SandboxEvent{Name: name, ID: id, Reason: reason,
				Snapshot: n.Snapshot, Note: n.Message}})
		}
		delete(e.notes, id)
	}
	return out
}
