package policy

import (
	"encoding/json"
	"testing"
)

// FuzzParse checks that Parse never panics, and that a policy it accepts
// decides any call without panicking.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"tools":{"bash":"ask"}}`,
		examplePolicy,
		"rules:\n  - &r {name: a, tool: bash, action: ask}\n  - *r\n",
		`{"rules":[{"name":"a","tool":"http_request","host":"[a","action":"deny"}]}`,
		"tools: {bash: !!binary YXNr}",
		"a: [[[[[[[[",
		"---\n---\n",
	} {
		f.Add([]byte(s), []byte(`{"command":"rm -rf /","url":"http://x.internal.example.com","query":"DROP TABLE t","to":["a@example.com"]}`))
	}
	tools := testTools()
	f.Fuzz(func(t *testing.T, data, input []byte) {
		p, err := Parse(data, tools)
		if err != nil {
			return
		}
		for _, spec := range tools {
			for _, st := range []State{{}, {ReadUntrusted: true, Always: map[string]bool{spec.Name: true}}} {
				d := p.Decide(Call{Tool: spec, Input: json.RawMessage(input)}, st)
				switch d.Action {
				case Allow, Ask, Deny:
				default:
					t.Fatalf("Decide = %v", d)
				}
			}
		}
	})
}
