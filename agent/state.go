package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

// state is a run as its log says it is: everything the loop decides from.
// It is built by folding events, on start and after each append, so memory
// never holds anything the log does not.
type state struct {
	id       string
	spec     runlog.Spec
	lastSeq  int64
	created  time.Time
	steps    int
	usage    model.Usage
	cost     float64
	messages []model.Message

	// The last model response, its calls, and what became of them.
	last     *runlog.ModelResponse
	intents  map[string]runlog.ToolCall
	intentAt map[string]time.Time
	results  map[string]runlog.ToolResult
	// sandboxes maps a run's sandbox name to its current sandbox id.
	sandboxes map[string]string
	// egressSeq is, per sandbox id, the last entry of its egress log
	// the run's events record.
	egressSeq map[string]int64
	waiting   *runlog.Waiting
	answers   map[string]runlog.HumanAnswer
	finished  *runlog.Finished
	artifacts []runlog.Artifact

	// Steering.
	asked     map[string]runlog.ApprovalRequested
	approvals map[string]runlog.ApprovalDecided
	always    map[string]bool
	untrusted bool // a result of an untrusted tool is in the conversation
	paused    bool
	suspended bool // its sandboxes were released while it waited
	// Checkpoints, per sandbox name: the newest saved workspace the
	// current sandbox's files descend from (a replacement restores it),
	// the mutating calls made since it, and since the last try to take
	// one (a failed try waits for as many calls as a checkpoint does).
	base     map[string]restorePoint
	dirty    map[string]int
	sinceTry map[string]int
	// startFrom names, for a fork, the checkpoint each sandbox is first
	// made from.
	startFrom map[string]string
	// notes are told to the model with the next observation (a fork's).
	notes []string

	// An agent run's program, as its last agent_starting or
	// agent_started event names it, and when its intent was logged.
	program   *runlog.AgentProgram
	programAt time.Time
}

// awaitingApproval reports whether a call of the last response waits for a
// person.
func (s *state) awaitingApproval() bool { return len(s.pendingApprovals()) > 0 }

func newState(id string) *state {
	return &state{id: id, intents: map[string]runlog.ToolCall{}, intentAt: map[string]time.Time{}, results: map[string]runlog.ToolResult{},
		sandboxes: map[string]string{}, egressSeq: map[string]int64{}, answers: map[string]runlog.HumanAnswer{},
		asked: map[string]runlog.ApprovalRequested{}, approvals: map[string]runlog.ApprovalDecided{}, always: map[string]bool{},
		base: map[string]restorePoint{}, dirty: map[string]int{}, sinceTry: map[string]int{}, startFrom: map[string]string{}}
}

// restorePoint is a saved workspace and the seq after which it holds the
// files (a checkpoint's Seq).
type restorePoint struct {
	Digest string
	Seq    int64
}

// apply folds one event into the state.
func (s *state) apply(ev store.Event) error {
	s.lastSeq = ev.Seq
	bad := func(err error) error { return fmt.Errorf("run %s event %d (%s): %w", s.id, ev.Seq, ev.Type, err) }
	switch ev.Type {
	case runlog.EventRunCreated:
		var d runlog.RunCreated
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.spec, s.created = d.Spec, ev.Time
		s.messages = []model.Message{{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: d.Spec.Task + uploadsNote(d.Spec)}}}}
	case runlog.EventModelResponse:
		var d runlog.ModelResponse
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.modelResponse(d)
	case runlog.EventToolCall:
		var d runlog.ToolCall
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.intents[d.CallID] = d
		s.intentAt[d.CallID] = ev.Time
	case runlog.EventToolResult:
		var d runlog.ToolResult
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.results[d.CallID] = d
		s.untrusted = s.untrusted || d.Untrusted
		if intent, ok := s.intents[d.CallID]; ok && mutatingTools[intent.Name] {
			if name, err := sandboxName(s.spec, intent.Input); err == nil {
				s.dirty[name]++
				s.sinceTry[name]++
			}
		}
		if s.waiting != nil && s.waiting.CallID == d.CallID {
			s.waiting = nil
		}
	case runlog.EventSandboxCreated, runlog.EventSandboxReplaced:
		var d runlog.SandboxEvent
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.sandboxes[d.Name] = d.ID
		s.newBase(ev.Type, d, ev.Seq)
	case runlog.EventCheckpoint, runlog.EventCheckpointFailed:
		var d runlog.Checkpoint
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.sinceTry[d.Sandbox] = 0
		if ev.Type == runlog.EventCheckpoint {
			s.base[d.Sandbox] = restorePoint{Digest: d.Digest, Seq: d.Seq}
			s.dirty[d.Sandbox] = 0
		}
	case runlog.EventSandboxLost:
		var d runlog.SandboxEvent
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		delete(s.sandboxes, d.Name)
	case runlog.EventEgress:
		var d runlog.Egress
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.egressSeq[d.ID] = d.LastSeq
	case runlog.EventWaiting:
		var d runlog.Waiting
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.waiting = &d
	case runlog.EventHumanAnswer:
		var d runlog.HumanAnswer
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.answers[d.CallID] = d
	case runlog.EventArtifact:
		var d runlog.Artifact
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.artifacts = append(s.artifacts, d)
	case runlog.EventApprovalRequested:
		var d runlog.ApprovalRequested
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.asked[d.CallID] = d
	case runlog.EventApprovalDecided:
		var d runlog.ApprovalDecided
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.approvals[d.CallID] = d
		if d.Approved && d.Always {
			s.always[s.asked[d.CallID].Tool] = true
		}
	case runlog.EventForked:
		var d runlog.Forked
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		// A fork has sandboxes of its own, made on first use from the
		// checkpoints it names.
		s.sandboxes = map[string]string{}
		s.base, s.dirty, s.sinceTry = map[string]restorePoint{}, map[string]int{}, map[string]int{}
		s.startFrom = map[string]string{}
		for name, digest := range d.Snapshots {
			s.startFrom[name] = digest
		}
		s.notes = append(s.notes, d.Message)
	case runlog.EventAgentStarting, runlog.EventAgentStarted:
		var d runlog.AgentProgram
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		if ev.Type == runlog.EventAgentStarting {
			s.programAt = ev.Time
		}
		s.program = &d
	case runlog.EventSandboxSuspended:
		s.suspended = true
	case runlog.EventSandboxResumed:
		s.suspended = false
	case runlog.EventResumed:
		s.paused = false
	case runlog.EventPaused:
		s.paused = true
	case runlog.EventFinished:
		var d runlog.Finished
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return bad(err)
		}
		s.finished = &d
	}
	return nil
}

// applyValue folds event ev whose payload, before it was encoded, was v:
// a model response is folded from v, sparing a decode of its JSON (the
// largest event, on every model call); any other from ev.
func (s *state) applyValue(ev store.Event, v any) error {
	if d, ok := v.(runlog.ModelResponse); ok && ev.Type == runlog.EventModelResponse {
		s.lastSeq = ev.Seq
		s.modelResponse(d)
		return nil
	}
	return s.apply(ev)
}

func (s *state) modelResponse(d runlog.ModelResponse) {
	s.flushResults()
	s.notes = nil
	s.last = &d
	s.steps = d.Step
	s.usage = s.usage.Add(d.Usage)
	s.cost += d.CostUSD
	s.intents, s.results, s.answers = map[string]runlog.ToolCall{}, map[string]runlog.ToolResult{}, map[string]runlog.HumanAnswer{}
	s.asked, s.approvals = map[string]runlog.ApprovalRequested{}, map[string]runlog.ApprovalDecided{}
	s.messages = append(s.messages, model.Message{Role: model.RoleAssistant, Content: d.Content})
}

// calls are the tool calls of the last model response, in order.
func (s *state) calls() []model.Block {
	if s.last == nil {
		return nil
	}
	var out []model.Block
	for _, b := range s.last.Content {
		if b.Type == model.BlockToolUse {
			out = append(out, b)
		}
	}
	return out
}

// pending reports whether some call of the last response has no result.
func (s *state) pending() bool {
	for _, c := range s.calls() {
		if _, ok := s.results[c.ToolCallID]; !ok {
			return true
		}
	}
	return false
}

// flushResults turns the results of the last response's calls into the
// user message that answers it.
func (s *state) flushResults() {
	calls := s.calls()
	if len(calls) == 0 {
		return
	}
	msg := model.Message{Role: model.RoleUser}
	for _, c := range calls {
		r, ok := s.results[c.ToolCallID]
		if !ok {
			r = runlog.ToolResult{Text: "no result was recorded for this call", IsError: true}
		}
		b := model.Block{Type: model.BlockToolResult, ToolCallID: c.ToolCallID, ToolName: c.ToolName, Text: r.Text, IsError: r.IsError}
		for _, d := range r.Images {
			// By reference: the engine loads the newest few for a call.
			b.Content = append(b.Content, model.Block{Type: model.BlockImage, MediaType: "image/png", Digest: d,
				Text: fmt.Sprintf("step %d", r.Step)})
		}
		msg.Content = append(msg.Content, b)
	}
	s.messages = append(s.messages, msg)
}

// conversation returns the messages for the next model call: the log's
// conversation with old tool outputs elided (with a marker the model sees)
// so the context stays inside the window.
func (s *state) conversation(keepFull, maxChars int) []model.Message {
	msgs := make([]model.Message, len(s.messages))
	copy(msgs, s.messages)
	if s.last != nil && len(s.calls()) > 0 && !s.pending() {
		// Results of the last response are not flushed until the next
		// response; show them now.
		tmp := *s
		tmp.messages = msgs
		tmp.flushResults()
		msgs = tmp.messages
	}
	if len(s.notes) > 0 && len(msgs) > 0 && msgs[len(msgs)-1].Role == model.RoleUser {
		last := msgs[len(msgs)-1]
		blocks := append(append([]model.Block(nil), last.Content...), model.Block{Type: model.BlockText, Text: "[reins] " + strings.Join(s.notes, "\n[reins] ")})
		msgs[len(msgs)-1] = model.Message{Role: model.RoleUser, Content: blocks}
	}
	// Count tool results from the end; elide those beyond keepFull, and
	// more while the whole is too long.
	total := 0
	for _, m := range msgs {
		for _, b := range m.Content {
			total += len(b.Text) + len(b.Input)
		}
	}
	seen := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != model.RoleUser {
			continue
		}
		var blocks []model.Block
		changed := false
		for _, b := range m.Content {
			if b.Type == model.BlockToolResult {
				seen++
				if (seen > keepFull || total > maxChars) && len(b.Text) > 400 {
					total -= len(b.Text) - 400
					b.Text = b.Text[:300] + fmt.Sprintf("\n[… %d bytes of this old output elided to keep the context small; run the tool again if you need it]", len(b.Text)-300)
					changed = true
				}
			}
			blocks = append(blocks, b)
		}
		if changed {
			msgs[i] = model.Message{Role: m.Role, Content: blocks}
		}
	}
	return msgs
}

// finalText is the text of the last model response.
func (s *state) finalText() string {
	if s.last == nil {
		return ""
	}
	var parts []string
	for _, b := range s.last.Content {
		if b.Type == model.BlockText && strings.TrimSpace(b.Text) != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// call returns the tool call block with id in the last response.
func (s *state) call(id string) *model.Block {
	for _, c := range s.calls() {
		if c.ToolCallID == id {
			return &c
		}
	}
	return nil
}
