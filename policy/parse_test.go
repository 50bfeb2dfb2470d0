package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
)

func TestParseGood(t *testing.T) {
	for _, src := range []string{
		`{"tools":{"bash":"ask"}}`,
		"{}",
		"{\n\t\"tools\": {\n\t\t\"bash\": \"ask\"\n\t}\n}\n", // JSON indented with tabs
		"# only a comment\ndefault: deny\n",
		"tools:\nrules:\ntrifecta:\n", // empty sections
		"trifecta: {waive: }",
		examplePolicy,
		`rules: [{name: a, tool: [grep, glob], match: {pattern: x}, action: ask}]`,
		`rules: [{name: A_b-9, label: exfiltration_sink, action: ask}]`,
		`rules: [{name: a, side: sandbox, when: [untrusted], action: deny}]`,
		`rules: [{name: a, tool: http_request, host: ["*.x.org", "10.*", "[::1]", "X.ORG."], action: deny}]`,
		`rules: [{name: a, tool: sql_query, when: [sql_read, untrusted], match: {query: "(?i)^select"}, action: allow}]`,
		`rules: [{name: a, label: exfiltration_sink, side: trusted, tool: send_email, match: {to: x}, action: allow}]`,
		`rules: [{name: a, tool: bash, match: {timeout_s: "^[0-9]{4}$"}, action: ask}]`,
		"rules:\n  - name: anchored\n    tool: &t bash\n    action: ask\n", // an anchor without an alias
	} {
		if _, err := Parse([]byte(src), testTools()); err != nil {
			t.Errorf("Parse(%s): %v", src, err)
		}
	}
}

func TestParseBad(t *testing.T) {
	tests := []struct {
		src, want string
	}{
		{"", `policy: empty; {} is the policy that allows every call`},
		{"  \n# nothing\n", `policy: empty; {} is the policy that allows every call`},
		{`{"tools":`, `policy: line 1: did not find expected node content`},
		{"tools: {bash: ask}\n---\ntools: {bash: allow}\n", `policy: more than one YAML document (---); a policy is one`},
		{`[1, 2]`, `policy: want a mapping (an object) at the top, such as {"tools":{"bash":"ask"}}, not a list`},
		{`null`, `policy: want a mapping (an object) at the top, such as {"tools":{"bash":"ask"}}, not null`},
		{`{"tool":{"bash":"ask"}}`, `policy: unknown key "tool" (known: default, tools, rules, trifecta)`},
		{`{"tools":{"bash":"ask"},"tools":{"bash":"allow"}}`, `policy: duplicate key "tools"`},
		{`{"tools":{"bash":"deny","bash":"allow"}}`, `policy: tools: duplicate key "bash"`},
		{`{"tools":{"bsah":"ask"}}`, `policy: tools: unknown tool "bsah" (known: ask_human, bash, db_admin, edit_file, glob, grep, http_request, list_files, read_file, save_artifact, send_email, sql_query, write_file)`},
		{`{"tools":{"bash":"maybe"}}`, `policy: tools.bash: unknown action "maybe" (want allow, ask or deny)`},
		{`{"tools":{"bash":"Allow"}}`, `policy: tools.bash: unknown action "Allow" (want allow, ask or deny)`},
		{`{"tools":{"bash":["ask"]}}`, `policy: tools.bash: want a string, not a list`},
		{`{"tools":{"bash":null}}`, `policy: tools.bash: want a string, not null`},
		{`{"tools":["bash"]}`, `policy: tools: want a mapping (an object), not a list`},
		{`{"default":"yes"}`, `policy: default: unknown action "yes" (want allow, ask or deny)`},
		{`{"rules":{"name":"a"}}`, `policy: rules: want a list, not a mapping`},
		{`{"rules":["a"]}`, `policy: rules[0]: want a mapping (an object), not "a"`},
		{`{"rules":[{"tool":"bash","action":"deny"}]}`, `policy: rules[0]: name is required (letters, digits, - and _); the log names the rule that decided`},
		{`{"rules":[{"name":"no rm","tool":"bash","action":"deny"}]}`, `policy: rules[0]: name "no rm": use 1 to 64 letters, digits, - and _`},
		{`{"rules":[{"name":"Trifecta","tool":"bash","action":"deny"}]}`, `policy: rules[0]: name "Trifecta" is reserved for decisions no rule makes (default, trifecta, always)`},
		{`{"rules":[{"name":"a","tool":"bash","action":"deny"},{"name":"a","tool":"grep","action":"deny"}]}`,
			`policy: rules[1]: name "a" is already used by rules[0]`},
		{`{"rules":[{"name":"a","tools":"bash","action":"deny"}]}`,
			`policy: rules[0] ("a"): unknown key "tools" (known: name, tool, label, side, match, host, when, action)`},
		{`{"rules":[{"name":"a","tool":"bash","action":"deny","action":"allow"}]}`, `policy: rules[0]: duplicate key "action"`},
		{`{"rules":[{"name":"a","tool":"bash"}]}`, `policy: rules[0] ("a"): action is required (allow, ask or deny)`},
		{`{"rules":[{"name":"a","tool":"bash","action":"block"}]}`, `policy: rules[0] ("a"): action: unknown action "block" (want allow, ask or deny)`},
		{`{"rules":[{"name":"a","action":"deny"}]}`, `policy: rules[0] ("a"): say which tools the rule covers, with tool (a name or a list), label or side`},
		{`{"rules":[{"name":"a","tool":"bsah","action":"deny"}]}`, `policy: rules[0] ("a"): unknown tool "bsah" (known: ask_human, bash, db_admin, edit_file, glob, grep, http_request, list_files, read_file, save_artifact, send_email, sql_query, write_file)`},
		{`{"rules":[{"name":"a","tool":[],"action":"deny"}]}`, `policy: rules[0] ("a"): tool: empty list`},
		{`{"rules":[{"name":"a","tool":{"bash":1},"action":"deny"}]}`, `policy: rules[0] ("a"): tool: want a string or a list of strings, not a mapping`},
		{`{"rules":[{"name":"a","label":"dangerous","action":"deny"}]}`, `policy: rules[0] ("a"): unknown label "dangerous" (known: destructive, exfiltration_sink, reads_untrusted)`},
		{`{"rules":[{"name":"a","side":"host","action":"deny"}]}`, `policy: rules[0] ("a"): unknown side "host" (known: sandbox, trusted)`},
		{`{"rules":[{"name":"no-rm-rf","tool":"bash","match":{"command":"rm\\s+("},"action":"deny"}]}`,
			`policy: rules[0] ("no-rm-rf"): match.command: bad regex "rm\\s+(": missing closing )`},
		{`{"rules":[{"name":"a","tool":"bash","match":{"command":"a**"},"action":"deny"}]}`,
			`policy: rules[0] ("a"): match.command: bad regex "a**": invalid nested repetition operator`},
		{`{"rules":[{"name":"a","tool":"bash","match":{"cmd":"rm"},"action":"deny"}]}`,
			`policy: rules[0] ("a"): match: bash has no argument "cmd" (its arguments: command, sandbox, timeout_s)`},
		{`{"rules":[{"name":"a","tool":["bash","grep"],"match":{"pattern":"x"},"action":"deny"}]}`,
			`policy: rules[0] ("a"): match: bash has no argument "pattern" (its arguments: command, sandbox, timeout_s)`},
		{`{"rules":[{"name":"a","tool":"bash","match":{},"action":"deny"}]}`,
			`policy: rules[0] ("a"): match is empty; give a regex for at least one argument, or leave match out`},
		{`{"rules":[{"name":"a","tool":"bash","match":"rm","action":"deny"}]}`,
			`policy: rules[0] ("a"): match: want a mapping (an object), not "rm"`},
		{`{"rules":[{"name":"a","tool":"bash","match":{"command":["rm"]},"action":"deny"}]}`,
			`policy: rules[0] ("a"): match.command: want a string, not a list`},
		{`{"rules":[{"name":"a","label":"exfiltration_sink","match":{"url":"x"},"action":"deny"}]}`,
			`policy: rules[0] ("a"): match: send_email has no argument "url" (its arguments: body, cc, subject, to)`},
		{`{"rules":[{"name":"a","label":"destructive","side":"trusted","tool":"bash","match":{"command":"x"},"action":"deny"}]}`,
			`policy: rules[0] ("a"): match: the rule covers no configured tool, so argument "command" cannot be checked; name the tool`},
		{`{"rules":[{"name":"a","tool":"http_request","host":"[a","action":"deny"}]}`,
			`policy: rules[0] ("a"): bad host glob "[a": syntax error in pattern`},
		{`{"rules":[{"name":"a","tool":"http_request","host":"https://x.org/","action":"deny"}]}`,
			`policy: rules[0] ("a"): bad host glob "https://x.org/": want a host name pattern such as *.example.com`},
		{`{"rules":[{"name":"a","tool":"http_request","host":"x.org:443","action":"deny"}]}`,
			`policy: rules[0] ("a"): bad host glob "x.org:443": hosts are matched without their port`},
		{`{"rules":[{"name":"a","tool":"http_request","host":"","action":"deny"}]}`,
			`policy: rules[0] ("a"): bad host glob "": want a host name pattern such as *.example.com`},
		{`{"rules":[{"name":"a","tool":"send_email","host":"x.org","action":"deny"}]}`,
			`policy: rules[0] ("a"): host: send_email has no argument "url" (its arguments: body, cc, subject, to)`},
		{`{"rules":[{"name":"a","tool":"sql_query","when":"sql_writes","action":"ask"}]}`,
			`policy: rules[0] ("a"): unknown when "sql_writes" (known: sql_read, sql_write, untrusted)`},
		{`{"rules":[{"name":"a","tool":"bash","when":"sql_write","action":"ask"}]}`,
			`policy: rules[0] ("a"): when sql_write: bash has no argument "query" (its arguments: command, sandbox, timeout_s)`},
		// db_admin has a query argument but does not say it is SQL: the
		// policy cannot tell a read from a write there, so it refuses.
		{`{"rules":[{"name":"a","tool":"db_admin","when":"sql_read","action":"allow"}]}`,
			`policy: rules[0] ("a"): when sql_read: db_admin does not declare its argument "query" as SQL, so the rule cannot be checked on it; name tools that do`},
		{`{"rules":[{"name":"a","side":"trusted","label":"reads_untrusted","when":"sql_write","action":"ask"}]}`,
			`policy: rules[0] ("a"): when sql_write: http_request has no argument "query" (its arguments: body, headers, method, url)`},
		{`{"trifecta":{"waive":["bash"]}}`,
			`policy: trifecta.waive: bash is not an exfiltration sink, and only those can be waived (here: http_request, send_email)`},
		{`{"trifecta":{"waive":["htp_request"]}}`,
			`policy: trifecta.waive: unknown tool "htp_request" (known: ask_human, bash, db_admin, edit_file, glob, grep, http_request, list_files, read_file, save_artifact, send_email, sql_query, write_file)`},
		{`{"trifecta":{"off":true}}`, `policy: trifecta: unknown key "off" (known: waive)`},
		{`{"trifecta":{"waive":[["send_email"]]}}`, `policy: trifecta.waive[0]: want a string, not a list`},
		{"t: &x {bash: ask}\ntools: *x\n", `policy: unknown key "t" (known: default, tools, rules, trifecta)`},
		{"tools: {bash: ask}\ndefault: *x\n", `policy: unknown anchor 'x' referenced`},
		{"rules:\n  - &r {name: a, tool: bash, action: ask}\n  - *r\n", `policy: rules[1]: aliases (*r) are not supported; write the value out`},
		{"tools: {<<: {bash: ask}}", `policy: tools: merge keys (<<) are not supported; write the entries out`},
		{"tools: {bash: !!binary YXNr}", `policy: tools.bash: want a string, not "YXNr"`},
		{"tools:\nbash: ask\n", `policy: unknown key "bash" (known: default, tools, rules, trifecta)`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.src), testTools())
		if err == nil {
			t.Errorf("Parse(%s) = nil error, want %s", tt.src, tt.want)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("Parse(%s):\n got %s\nwant %s", tt.src, err, tt.want)
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Parse(%s): %v is not ErrInvalidArgument", tt.src, err)
		}
	}
}

func TestParseTooLarge(t *testing.T) {
	data := []byte("{}" + strings.Repeat(" ", MaxSize))
	_, err := Parse(data, testTools())
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("Parse(%d bytes) = %v, want ErrTooLarge", len(data), err)
	}
}

func TestParseNoTools(t *testing.T) {
	if _, err := Parse([]byte(`{"default":"ask","rules":[{"name":"a","side":"trusted","action":"deny"}]}`), nil); err != nil {
		t.Errorf("Parse without tools: %v", err)
	}
	_, err := Parse([]byte(`{"tools":{"bash":"ask"}}`), nil)
	if want := `policy: tools: unknown tool "bash" (known: none)`; err == nil || err.Error() != want {
		t.Errorf("Parse without tools = %v, want %s", err, want)
	}
}
