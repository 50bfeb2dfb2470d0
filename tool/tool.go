// Package tool is the vocabulary of tools: what the model may call, on which
// side it runs, and the labels the policy reads.
package tool

import (
	"context"
	"encoding/json"
)

// Side is where a tool runs.
type Side string

const (
	// SideSandbox tools are forwarded to a sandbox's executor.
	SideSandbox Side = "sandbox"
	// SideTrusted tools run in the service, never in a sandbox.
	SideTrusted Side = "trusted"
)

// Labels the policy reads.
const (
	LabelReadsUntrusted   = "reads_untrusted"   // its result may carry text an attacker wrote
	LabelExfiltrationSink = "exfiltration_sink" // it can send data out of the system
	LabelDestructive      = "destructive"       // it can change or delete things
)

// Spec describes a tool.
type Spec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"` // written for a model: short, exact, with limits
	InputSchema json.RawMessage `json:"input_schema"`
	Side        Side            `json:"side"`
	Labels      []string        `json:"labels,omitempty"`
	// Args says, by argument name, what some arguments hold, for the
	// policy's predicates that look inside values (when: sql_read and
	// sql_write on "query", host: on "url"). The policy knows no tool: a
	// predicate on an argument the tool does not declare here is refused
	// when the policy is parsed.
	Args map[string]ArgClass `json:"-"`
}

// ArgClass is how the values of one argument read, for the policy. A
// field left nil says the argument is not of that kind.
type ArgClass struct {
	// ReadOnlySQL says the argument is SQL, and whether one value of it
	// only reads. It answers false for anything it cannot tell, so a
	// rule on writes errs on the side of catching.
	ReadOnlySQL func(query string) bool
	// Host says the argument is a URL, and returns the host one value
	// names: lower case, without port or trailing dot, an IPv6 address
	// without brackets ("api.example.com", "127.0.0.1", "::1"); false
	// when it names none the tool would call.
	Host func(url string) (string, bool)
}

// HasLabel reports whether s carries label.
func (s Spec) HasLabel(label string) bool {
	for _, l := range s.Labels {
		if l == label {
			return true
		}
	}
	return false
}

// Result is what a tool returns to the model.
type Result struct {
	Text    string `json:"text"`
	IsError bool   `json:"is_error,omitempty"`
	// Images (screenshots): PNG bytes, each at most MaxImageBytes and
	// checked by CheckPNG. The loop stores them and shows the model the
	// last few.
	Images [][]byte `json:"images,omitempty"`
	// Artifacts are files the call saved for the person who started the
	// run (not for the model); the loop records them in the run's log.
	Artifacts []Artifact `json:"artifacts,omitempty"`
}

// Artifact is one file a call saved. Either the tool stored it already
// (Digest and Size, from the blob store it was given) or Data holds it and
// the loop stores it.
type Artifact struct {
	Name   string `json:"name"`
	Digest string `json:"digest,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Data   []byte `json:"-"`
	// Source says where it came from, for a person ("main:/out/report.pdf").
	Source string `json:"source,omitempty"`
}

// Tool is one callable tool. Call gets the model's arguments as given (the
// caller has checked them against InputSchema) and an idempotency key
// (run/step/call) that it passes on to anything with side effects. An error
// means the tool could not run (the loop reports it to the model as a tool
// error); a tool that ran and failed returns a Result with IsError.
type Tool interface {
	Spec() Spec
	Call(ctx context.Context, key string, input json.RawMessage) (Result, error)
}
