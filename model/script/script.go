// Package script is a deterministic model.Model that plays a JSON script,
// for tests, demos and bug reports. The real loop, sandboxes and tools run
// under it; only the model's answers are fixed:
//
//	{"turns": [
//	  {"tool_calls": [{"name": "bash", "input": {"command": "ls"}}]},
//	  {"expect": "main.go", "text": "done"}
//	]}
//
// Turn i (counting from 0) is played at step i, where the step is the
// number of assistant messages already in the request, so a run that is
// resumed or replayed gets the same answers. A turn has text, tool calls
// (ids call_<step>_<i>), or both; "expect" names a substring the previous
// observation (the text of the last user message: the task or the tool
// results) must contain, else Generate fails saying what it saw. Turns in
// messages are counted from 1, as a person reading the file counts them.
package script

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
)

// Turn is one scripted answer.
type Turn struct {
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	Expect    string     `json:"expect,omitempty"`
}

// ToolCall is one scripted tool call.
type ToolCall struct {
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"` // an object; default {}
}

// Model plays a script.
type Model struct {
	path  string
	turns []Turn
}

var _ model.Model = (*Model)(nil)

// MaxBytes is the most of a script that is read or accepted: far more
// than any real script, little enough that reading it costs nothing.
const MaxBytes = 4 << 20

// Load reads and checks a script file where the person who names it runs
// (the CLI, a test). A malformed script is refused with the turn and field
// at fault named.
func Load(path string) (*Model, error) {
	data, err := ReadLocal(path)
	if err != nil {
		return nil, err
	}
	return FromJSON(path, data)
}

// ReadLocal reads a script file as cat would (it follows symlinks and
// reads a pipe), but no more than MaxBytes: for the CLI, which sends the
// script inline, and tests.
func ReadLocal(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("script %s: no such file", path))
	}
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, invalid("script %s: is a directory: name a JSON file", path)
	}
	return readCapped(f, path)
}

// LoadHost reads a script from the service's own disk, for a run of the
// admin (a tenant names no host path: see Open). Only a regular file is
// opened, without following a symlink and without blocking, so a FIFO or
// a device is refused before it is read; at most MaxBytes are read; and a
// malformed file is refused without quoting any of it.
func LoadHost(path string) (*Model, error) {
	data, err := readHostFile(path)
	if err != nil {
		return nil, err
	}
	turns, err := Parse(data)
	if err != nil {
		return nil, invalid("script %s: not a valid script; check it with `reins run --model script:FILE`, "+
			"which reads the file where the CLI runs, says what is wrong, and sends the script inline", path)
	}
	return &Model{path: path, turns: turns}, nil
}

// ErrHostPath is the one answer to a tenant whose run names a script file
// instead of sending it: the same whatever the path is (a file, a
// directory, a FIFO, a device, nothing), so it tells nothing of the host.
var ErrHostPath = errdefs.WithMessage(errdefs.ErrPermissionDenied,
	"a script: model names a file on the service's host, which only the operator may do: "+
		"run `reins run --model script:FILE` (the CLI reads FILE and sends the script inline), "+
		"or put the script's JSON in the run spec's script field")

// Open is a run's script model as the service opens it: the inline JSON
// when there is one (name only labels it), else the file name on the
// service's host, which only the admin's runs may read (mayReadHost).
func Open(name, inline string, mayReadHost bool) (*Model, error) {
	switch {
	case inline != "":
		return FromJSON(name, []byte(inline))
	case !mayReadHost:
		return nil, ErrHostPath
	}
	return LoadHost(name)
}

// FromJSON checks a script given as JSON; name labels it in errors.
func FromJSON(name string, data []byte) (*Model, error) {
	if len(data) > MaxBytes {
		return nil, tooLarge(name)
	}
	turns, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", name, err)
	}
	return &Model{path: name, turns: turns}, nil
}

func readHostFile(path string) ([]byte, error) {
	notRegular := func() error {
		return invalid("script %s: not a regular file: name a JSON file (not a directory, FIFO, device or symlink)", path)
	}
	// Lstat first, so that a device is not even opened (opening some has
	// effects); the open below checks again, on what it opened.
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("script %s: no such file", path))
	}
	if err != nil {
		return nil, invalid("script %s: cannot be read", path)
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular()
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, invalid("script %s: cannot be read", path)
	}
	defer f.Close()
	if got, err := f.Stat(); err != nil || !got.Mode().IsRegular() || !os.SameFile(fi, got) {
		return nil, notRegular()
	}
	return readCapped(f, path)
}

// readCapped reads r to its end, refusing more than MaxBytes.
func readCapped(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, invalid("script %s: cannot be read", name)
	}
	if len(data) > MaxBytes {
		return nil, tooLarge(name)
	}
	return data, nil
}

func tooLarge(name string) error {
	return errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf("script %s: larger than %d MiB: a script is a few turns of JSON", name, MaxBytes>>20))
}

// New returns a Model that plays turns, checked as Load checks them.
func New(turns []Turn) (*Model, error) {
	data, err := json.Marshal(struct {
		Turns []Turn `json:"turns"`
	}{turns})
	if err != nil {
		return nil, invalid("script: %v", err)
	}
	return FromJSON("(inline)", data)
}

// Parse checks a script's JSON and returns its turns.
func Parse(data []byte) ([]Turn, error) {
	var file struct {
		Turns []json.RawMessage `json:"turns"`
	}
	if err := strict(data, &file); err != nil {
		return nil, invalid("%s (a script is {\"turns\": [...]})", err)
	}
	if len(file.Turns) == 0 {
		return nil, invalid("no turns (a script is {\"turns\": [...]})")
	}
	turns := make([]Turn, len(file.Turns))
	for i, raw := range file.Turns {
		t, err := parseTurn(raw)
		if err != nil {
			return nil, invalid("turn %d: %s", i+1, err)
		}
		turns[i] = t
	}
	return turns, nil
}

func parseTurn(raw json.RawMessage) (Turn, error) {
	var t struct {
		Text      *string           `json:"text"`
		ToolCalls []json.RawMessage `json:"tool_calls"`
		Expect    *string           `json:"expect"`
	}
	if err := strict(raw, &t); err != nil {
		return Turn{}, fmt.Errorf("%s (a turn has text, tool_calls and expect)", err)
	}
	var turn Turn
	if t.Text != nil {
		turn.Text = *t.Text
	}
	if t.Expect != nil {
		turn.Expect = *t.Expect
	}
	for j, rawCall := range t.ToolCalls {
		c, err := parseCall(rawCall)
		if err != nil {
			return Turn{}, fmt.Errorf("tool call %d: %s", j+1, err)
		}
		turn.ToolCalls = append(turn.ToolCalls, c)
	}
	if turn.Text == "" && len(turn.ToolCalls) == 0 {
		return Turn{}, errors.New("neither text nor tool_calls: a turn must answer something")
	}
	return turn, nil
}

func parseCall(raw json.RawMessage) (ToolCall, error) {
	var c ToolCall
	if err := strict(raw, &c); err != nil {
		return ToolCall{}, fmt.Errorf("%s (a tool call has name and input)", err)
	}
	if c.Name == "" {
		return ToolCall{}, errors.New("no name")
	}
	if len(c.Input) == 0 || string(c.Input) == "null" {
		c.Input = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(c.Input, &obj) != nil {
		return ToolCall{}, fmt.Errorf("input is %s, not an object", truncate(string(c.Input), 60))
	}
	return c, nil
}

// strict decodes one JSON value, refusing unknown fields and trailing data,
// and says where a syntax error is.
func strict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			line := bytes.Count(data[:min(int(syn.Offset), len(data))], []byte("\n")) + 1
			return fmt.Errorf("invalid JSON at line %d: %v", line, syn)
		case errors.As(err, &typ) && typ.Field != "":
			return fmt.Errorf("field %q is %s, want %s", typ.Field, typ.Value, typeName(typ.Type.String()))
		case errors.As(err, &typ):
			return fmt.Errorf("is %s, want an object", typ.Value)
		case errors.Is(err, io.EOF):
			return errors.New("empty")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errors.New("invalid JSON: it ends too early")
		}
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func typeName(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "an array"
	case t == "string" || t == "*string":
		return "a string"
	}
	return "an object"
}

// invalid is an ErrInvalidArgument whose text is the message alone.
func invalid(format string, args ...any) error {
	return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Turns returns how many turns the script has.
func (m *Model) Turns() int { return len(m.turns) }

// Generate plays the turn of the request's step.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	step := 0
	for _, msg := range req.Messages {
		if msg.Role == model.RoleAssistant {
			step++
		}
	}
	if step >= len(m.turns) {
		return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"script %s: asked for turn %d, but the script has %s: add turns, or end the last one with text and no tool_calls",
			m.path, step+1, plural(len(m.turns), "turn")))
	}
	t := m.turns[step]
	if t.Expect != "" {
		seen := observation(req.Messages)
		if !strings.Contains(seen, t.Expect) {
			return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
				"script %s: turn %d expects %q in the last observation, which was: %q",
				m.path, step+1, t.Expect, truncate(seen, 300)))
		}
	}
	r := &model.Response{StopReason: model.StopEndTurn}
	if t.Text != "" {
		r.Content = append(r.Content, model.Block{Type: model.BlockText, Text: t.Text})
	}
	for i, c := range t.ToolCalls {
		r.Content = append(r.Content, model.Block{
			Type: model.BlockToolUse, ToolCallID: fmt.Sprintf("call_%d_%d", step, i),
			ToolName: c.Name, Input: c.Input,
		})
		r.StopReason = model.StopToolUse
	}
	r.Usage = model.Usage{InputTokens: tokens(requestSize(req)), OutputTokens: tokens(responseSize(r))}
	return r, nil
}

// observation is the text of the last user message: the task, or the tool
// results the previous turn's calls produced.
func observation(msgs []model.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == model.RoleUser {
			var b strings.Builder
			writeText(&b, msgs[i].Content)
			return b.String()
		}
	}
	return ""
}

func writeText(b *strings.Builder, blocks []model.Block) {
	for _, bl := range blocks {
		if bl.Text != "" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(bl.Text)
		}
		writeText(b, bl.Content)
	}
}

// truncate keeps the head and the tail of a long text, where test output
// says the most.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head := n / 3
	return strings.ToValidUTF8(s[:head], "") + " … " + strings.ToValidUTF8(s[len(s)-(n-head):], "")
}

func plural(n int, s string) string {
	if n == 1 {
		return "1 " + s
	}
	return fmt.Sprintf("%d %ss", n, s)
}

// tokens approximates a token count from a byte count, about four bytes a
// token, so that token budgets and costs work offline.
func tokens(bytes int) int64 {
	return int64((bytes + 3) / 4)
}

func requestSize(req *model.Request) int {
	n := len(req.System)
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	for _, m := range req.Messages {
		n += blocksSize(m.Content)
	}
	return n
}

func responseSize(r *model.Response) int { return blocksSize(r.Content) }

// imageSize is what an image counts for: about what providers charge for a
// screenshot, not the size of its base64.
const imageSize = 4000

func blocksSize(blocks []model.Block) int {
	n := 0
	for _, b := range blocks {
		n += len(b.Text) + len(b.ToolName) + len(b.Input) + blocksSize(b.Content)
		if b.Type == model.BlockImage {
			n += imageSize
		}
	}
	return n
}
