package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/sandboxtool"
	"github.com/reinsdev/reins/tool/trusted"
)

var askHumanName = trusted.AskHumanSpec().Name

// askHumanSpec is ask_human's spec; the engine parks the run on it rather
// than calling it.
var askHumanSpec = trusted.AskHumanSpec()

// sandboxTools are the tools that work in a run's sandboxes.
var sandboxTools = func() []tool.Tool {
	var out []tool.Tool
	for _, t := range sandboxtool.Tools() {
		out = append(out, t)
	}
	return out
}()

// tools lists every tool the engine offers, sandbox tools first.
func (e *Engine) tools() []tool.Tool {
	return append(slices.Clip(sandboxTools), e.cfg.Trusted...)
}

func (e *Engine) findTool(name string) tool.Tool {
	for _, t := range e.tools() {
		if t.Spec().Name == name {
			return t
		}
	}
	return nil
}

// allowed reports whether the run may call tool name: the tools its spec
// names (all when it names none), computer only when it has a screen.
func allowed(spec runlog.Spec, name string) bool {
	if name == sandboxtool.ComputerName && len(spec.Screens) == 0 {
		return false
	}
	return len(spec.Tools) == 0 || slices.Contains(spec.Tools, name)
}

func (e *Engine) toolNames(spec runlog.Spec) []string {
	var names []string
	for _, t := range e.tools() {
		if allowed(spec, t.Spec().Name) {
			names = append(names, t.Spec().Name)
		}
	}
	if allowed(spec, askHumanName) {
		names = append(names, askHumanName)
	}
	return names
}

// toolSpecs describes the run's tools to the model. With several
// sandboxes, each sandbox tool takes a "sandbox" argument naming one.
func (e *Engine) toolSpecs(spec runlog.Spec) []model.ToolSpec {
	var names []string
	for n := range spec.Sandboxes {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []model.ToolSpec
	for _, t := range e.tools() {
		s := t.Spec()
		if !allowed(spec, s.Name) {
			continue
		}
		if s.Name == sandboxtool.ComputerName {
			// The native tool takes no sandbox argument: its calls go
			// to the run's one screen.
			out = append(out, computerSpec(spec, s))
			continue
		}
		schema := s.InputSchema
		if s.Side == tool.SideSandbox && len(names) > 1 {
			schema = withSandboxArg(schema, names)
		}
		out = append(out, model.ToolSpec{Name: s.Name, Description: s.Description, InputSchema: schema})
	}
	if allowed(spec, askHumanName) {
		out = append(out, model.ToolSpec{Name: askHumanName, Description: askHumanSpec.Description, InputSchema: askHumanSpec.InputSchema})
	}
	return out
}

func withSandboxArg(schema json.RawMessage, names []string) json.RawMessage {
	var s map[string]any
	if json.Unmarshal(schema, &s) != nil {
		return schema
	}
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props["sandbox"] = map[string]any{"type": "string", "enum": names,
		"description": "Which sandbox to use: " + strings.Join(names, ", ") + "."}
	s["properties"] = props
	req, _ := s["required"].([]any)
	s["required"] = append(req, "sandbox")
	out, _ := json.Marshal(s)
	return out
}

func (e *Engine) systemPrompt(spec runlog.Spec) string {
	var b strings.Builder
	if spec.System != "" {
		b.WriteString(spec.System)
		b.WriteString("\n\n")
	}
	network := "the sandbox has no network access"
	if len(spec.Screens) > 0 {
		// A browsing run is given hosts to reach.
		network = "a sandbox reaches only the hosts its egress rules allow"
	}
	b.WriteString("You work in isolated Linux sandboxes through tools. Commands run as root in the sandbox; " +
		network + ". Work step by step, check your work by running it, and finish " +
		"with a short answer that says what you did and what you found.")
	if len(spec.Sandboxes) > 1 {
		var names []string
		for n, img := range spec.Sandboxes {
			names = append(names, fmt.Sprintf("%s (%s)", n, img))
		}
		sort.Strings(names)
		b.WriteString(" Sandboxes: " + strings.Join(names, ", ") + "; name one in each sandbox tool call.")
	}
	b.WriteString(screenPrompt(spec))
	return b.String()
}

// settleSafe reports whether a call logged before a crash may be asked
// again: sandbox tools are (bash by its idempotency key; the others read or
// write the same bytes again), except edit_file, which could apply twice,
// and computer, whose clicks and keys the executor does not remember.
func settleSafe(s tool.Spec) bool {
	return s.Side == tool.SideSandbox && s.Name != "edit_file" && s.Name != sandboxtool.ComputerName
}

// validateInput checks arguments against the simple JSON Schemas tools use:
// an object, required properties, and property types.
func validateInput(schema, input json.RawMessage) error {
	var in map[string]any
	if err := json.Unmarshal(input, &in); err != nil || in == nil {
		return fmt.Errorf("the arguments are not a JSON object")
	}
	var s struct {
		Properties map[string]struct {
			Type string `json:"type"`
			Enum []any  `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil
	}
	for _, r := range s.Required {
		if _, ok := in[r]; !ok {
			return fmt.Errorf("missing required argument %q", r)
		}
	}
	for k, v := range in {
		p, ok := s.Properties[k]
		if !ok || p.Type == "" {
			continue
		}
		if !typeMatches(p.Type, v) {
			return fmt.Errorf("argument %q must be of type %s", k, p.Type)
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
			return fmt.Errorf("argument %q must be one of %v", k, p.Enum)
		}
	}
	return nil
}

func typeMatches(t string, v any) bool {
	switch t {
	case "string":
		_, ok := v.(string)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	case "number":
		_, ok := v.(float64)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	}
	return true
}
