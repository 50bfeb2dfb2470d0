package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/tool"
)

// MaxSize is the largest policy Parse reads, in bytes.
const MaxSize = 1 << 20

var (
	topKeys      = []string{"default", "tools", "rules", "trifecta"}
	ruleKeys     = []string{"name", "tool", "label", "side", "match", "host", "when", "action"}
	trifectaKeys = []string{"waive"}
	labels       = []string{tool.LabelDestructive, tool.LabelExfiltrationSink, tool.LabelReadsUntrusted}
	sides        = []string{string(tool.SideSandbox), string(tool.SideTrusted)}
	predicates   = []string{"sql_read", "sql_write", "untrusted"}
	reserved     = []string{RuleDefault, RuleTrifecta, RuleAlways}
	ruleNameRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// Parse reads a policy (YAML or JSON; see the package comment) and checks
// it against tools, the run's tools by name. Every error wraps
// errdefs.ErrInvalidArgument (errdefs.ErrTooLarge past MaxSize) and says
// what is wrong and where.
func Parse(data []byte, tools map[string]tool.Spec) (*Policy, error) {
	if len(data) > MaxSize {
		return nil, errdefs.WithMessage(errdefs.ErrTooLarge,
			fmt.Sprintf("policy: %d bytes, over the limit of %d", len(data), MaxSize))
	}
	root, err := document(data)
	if err != nil {
		return nil, err
	}
	ps := &parser{tools: tools, args: map[string]map[string]bool{}}
	return ps.policy(root)
}

func errf(where, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if where != "" {
		msg = where + ": " + msg
	}
	return errdefs.WithMessage(errdefs.ErrInvalidArgument, "policy: "+msg)
}

// document returns the root node of data's one YAML document.
func document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errf("", `empty; {} is the policy that allows every call`)
		}
		return nil, errf("", "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, errf("", "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil, errf("", "more than one YAML document (---); a policy is one")
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return &doc, nil
}

type parser struct {
	tools map[string]tool.Spec
	args  map[string]map[string]bool // tool name → its arguments, from the schema
}

func (ps *parser) policy(root *yaml.Node) (*Policy, error) {
	if root.Kind != yaml.MappingNode {
		return nil, errf("", `want a mapping (an object) at the top, such as {"tools":{"bash":"ask"}}, not %s`, describe(root))
	}
	entries, err := mapping(root, "", topKeys)
	if err != nil {
		return nil, err
	}
	p := &Policy{def: Allow}
	for _, e := range entries {
		switch e.key {
		case "default":
			p.def, err = action(e.val, "default")
			p.defSet = true
		case "tools":
			p.tools, err = ps.toolActions(e.val)
		case "rules":
			p.rules, err = ps.rules(e.val)
		case "trifecta":
			p.waive, err = ps.trifecta(e.val)
		}
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (ps *parser) toolActions(n *yaml.Node) (map[string]Action, error) {
	if isNull(n) {
		return nil, nil
	}
	entries, err := mapping(n, "tools", nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Action, len(entries))
	for _, e := range entries {
		if err := ps.knownTool(e.key, "tools"); err != nil {
			return nil, err
		}
		if out[e.key], err = action(e.val, "tools."+e.key); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (ps *parser) rules(n *yaml.Node) ([]*rule, error) {
	if isNull(n) {
		return nil, nil
	}
	if err := plain(n, "rules"); err != nil {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, errf("rules", "want a list, not %s", describe(n))
	}
	names := map[string]int{}
	out := make([]*rule, 0, len(n.Content))
	for i, rn := range n.Content {
		r, err := ps.rule(rn, i, names)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (ps *parser) rule(n *yaml.Node, i int, names map[string]int) (*rule, error) {
	where := fmt.Sprintf("rules[%d]", i)
	entries, err := mapping(n, where, nil)
	if err != nil {
		return nil, err
	}
	f := map[string]*yaml.Node{}
	for _, e := range entries {
		f[e.key] = e.val
	}
	r := &rule{}
	if f["name"] == nil {
		return nil, errf(where, "name is required (letters, digits, - and _); the log names the rule that decided")
	}
	if r.name, err = scalar(f["name"], where+".name"); err != nil {
		return nil, err
	}
	if !ruleNameRE.MatchString(r.name) {
		return nil, errf(where, "name %q: use 1 to 64 letters, digits, - and _", r.name)
	}
	if slices.ContainsFunc(reserved, func(s string) bool { return strings.EqualFold(s, r.name) }) {
		return nil, errf(where, "name %q is reserved for decisions no rule makes (%s)", r.name, strings.Join(reserved, ", "))
	}
	if j, ok := names[r.name]; ok {
		return nil, errf(where, "name %q is already used by rules[%d]", r.name, j)
	}
	names[r.name] = i
	where = fmt.Sprintf("rules[%d] (%q)", i, r.name)
	if err := checkKeys(entries, where, ruleKeys); err != nil {
		return nil, err
	}
	if f["action"] == nil {
		return nil, errf(where, "action is required (allow, ask or deny)")
	}
	if r.action, err = action(f["action"], where+": action"); err != nil {
		return nil, err
	}
	if err := ps.selectors(r, f, where); err != nil {
		return nil, err
	}
	if err := ps.when(r, f["when"], where); err != nil {
		return nil, err
	}
	if err := ps.match(r, f["match"], where); err != nil {
		return nil, err
	}
	if err := ps.host(r, f["host"], where); err != nil {
		return nil, err
	}
	return r, nil
}

// selectors reads which tools a rule covers.
func (ps *parser) selectors(r *rule, f map[string]*yaml.Node, where string) error {
	if f["tool"] == nil && f["label"] == nil && f["side"] == nil {
		return errf(where, "say which tools the rule covers, with tool (a name or a list), label or side")
	}
	if n := f["tool"]; n != nil {
		names, err := stringList(n, where+": tool")
		if err != nil {
			return err
		}
		r.tools = map[string]bool{}
		for _, name := range names {
			if err := ps.knownTool(name, where); err != nil {
				return err
			}
			r.tools[name] = true
		}
	}
	if n := f["label"]; n != nil {
		l, err := scalar(n, where+": label")
		if err != nil {
			return err
		}
		if !slices.Contains(labels, l) {
			return errf(where, "unknown label %q (known: %s)", l, strings.Join(labels, ", "))
		}
		r.label = l
	}
	if n := f["side"]; n != nil {
		s, err := scalar(n, where+": side")
		if err != nil {
			return err
		}
		if !slices.Contains(sides, s) {
			return errf(where, "unknown side %q (known: %s)", s, strings.Join(sides, ", "))
		}
		r.side = tool.Side(s)
	}
	return nil
}

func (ps *parser) when(r *rule, n *yaml.Node, where string) error {
	if n == nil {
		return nil
	}
	preds, err := stringList(n, where+": when")
	if err != nil {
		return err
	}
	for _, pred := range preds {
		switch pred {
		case "untrusted":
			r.conds = append(r.conds, cond{desc: "the run has read untrusted content",
				state: func(st State) bool { return st.ReadUntrusted }})
		case "sql_write", "sql_read":
			if err := ps.needArg(r, "query", where, "when "+pred); err != nil {
				return err
			}
			if err := ps.needClass(r, "query", where, "when "+pred, "SQL",
				func(c tool.ArgClass) bool { return c.ReadOnlySQL != nil }); err != nil {
				return err
			}
			write := pred == "sql_write"
			c := cond{desc: "query is read-only SQL", arg: "query",
				test: func(spec tool.Spec, q string) bool {
					// A tool the policy was not parsed with may not say:
					// then nothing is read-only.
					ro := spec.Args["query"].ReadOnlySQL
					return (ro != nil && ro(q)) != write
				}}
			if write {
				c.desc = "query is not read-only SQL"
			}
			r.conds = append(r.conds, c)
		default:
			return errf(where, "unknown when %q (known: %s)", pred, strings.Join(predicates, ", "))
		}
	}
	return nil
}

func (ps *parser) match(r *rule, n *yaml.Node, where string) error {
	if n == nil {
		return nil
	}
	entries, err := mapping(n, where+": match", nil)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return errf(where, "match is empty; give a regex for at least one argument, or leave match out")
	}
	for _, e := range entries {
		if err := ps.needArg(r, e.key, where, "match"); err != nil {
			return err
		}
		src, err := scalar(e.val, where+": match."+e.key)
		if err != nil {
			return err
		}
		re, err := regexp.Compile(src)
		if err != nil {
			msg := err.Error()
			var se *syntax.Error
			if errors.As(err, &se) {
				msg = se.Code.String()
			}
			return errf(where, "match.%s: bad regex %q: %s", e.key, src, msg)
		}
		r.conds = append(r.conds, cond{desc: fmt.Sprintf("%s matches %s", e.key, src), arg: e.key,
			test: func(_ tool.Spec, v string) bool { return re.MatchString(v) }})
	}
	return nil
}

func (ps *parser) host(r *rule, n *yaml.Node, where string) error {
	if n == nil {
		return nil
	}
	raw, err := stringList(n, where+": host")
	if err != nil {
		return err
	}
	if err := ps.needArg(r, "url", where, "host"); err != nil {
		return err
	}
	if err := ps.needClass(r, "url", where, "host", "a URL",
		func(c tool.ArgClass) bool { return c.Host != nil }); err != nil {
		return err
	}
	globs := make([]string, len(raw))
	for i, s := range raw {
		if globs[i], err = hostGlob(s); err != nil {
			return errf(where, "bad host glob %q: %v", s, err)
		}
	}
	r.conds = append(r.conds, cond{
		desc: "the host of url matches " + strings.Join(globs, " or "),
		arg:  "url",
		test: func(spec tool.Spec, u string) bool {
			h := spec.Args["url"].Host
			if h == nil {
				return false // a tool the policy was not parsed with names no host
			}
			host, ok := h(u)
			if !ok {
				return false
			}
			for _, g := range globs {
				if ok, _ := path.Match(g, host); ok {
					return true
				}
			}
			return false
		},
	})
	return nil
}

// hostGlob checks and normalizes a host pattern to the form
// tool.ArgClass.Host returns hosts in.
func hostGlob(s string) (string, error) {
	g := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	if strings.HasPrefix(g, "[") && strings.HasSuffix(g, "]") && strings.Contains(g, ":") {
		g = g[1 : len(g)-1] // a bracketed IPv6 address, not a character class
	}
	switch {
	case g == "" || strings.ContainsAny(g, "/@ \t\r\n"):
		return "", errors.New("want a host name pattern such as *.example.com")
	case strings.Count(g, ":") == 1:
		return "", errors.New("hosts are matched without their port")
	}
	if _, err := path.Match(g, ""); err != nil {
		return "", err
	}
	return g, nil
}

func (ps *parser) trifecta(n *yaml.Node) (map[string]bool, error) {
	if isNull(n) {
		return nil, nil
	}
	entries, err := mapping(n, "trifecta", trifectaKeys)
	if err != nil {
		return nil, err
	}
	waive := map[string]bool{}
	for _, e := range entries { // only waive
		if isNull(e.val) {
			continue
		}
		names, err := stringList(e.val, "trifecta.waive")
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if err := ps.knownTool(name, "trifecta.waive"); err != nil {
				return nil, err
			}
			if !ps.tools[name].HasLabel(tool.LabelExfiltrationSink) {
				var sinks []string
				for _, t := range sortedKeys(ps.tools) {
					if ps.tools[t].HasLabel(tool.LabelExfiltrationSink) {
						sinks = append(sinks, t)
					}
				}
				return nil, errf("trifecta.waive", "%s is not an exfiltration sink, and only those can be waived (here: %s)",
					name, listOrNone(sinks))
			}
			waive[name] = true
		}
	}
	return waive, nil
}

func (ps *parser) knownTool(name, where string) error {
	if _, ok := ps.tools[name]; ok {
		return nil
	}
	return errf(where, "unknown tool %q (known: %s)", name, listOrNone(sortedKeys(ps.tools)))
}

// needArg checks that every configured tool r covers takes argument arg.
func (ps *parser) needArg(r *rule, arg, where, what string) error {
	var covered []string
	for _, name := range sortedKeys(ps.tools) {
		s := ps.tools[name]
		s.Name = name
		if r.covers(s) {
			covered = append(covered, name)
		}
	}
	if len(covered) == 0 {
		return errf(where, "%s: the rule covers no configured tool, so argument %q cannot be checked; name the tool", what, arg)
	}
	for _, name := range covered {
		args := ps.argsOf(name)
		if !args[arg] {
			return errf(where, "%s: %s has no argument %q (its arguments: %s)", what, name, arg, listOrNone(sortedKeys(args)))
		}
	}
	return nil
}

// needClass checks that every configured tool r covers declares, on its
// spec, how to read argument arg as kind (has says whether a class does):
// the policy knows no tool, so it reads values only as a tool says they
// read.
func (ps *parser) needClass(r *rule, arg, where, what, kind string, has func(tool.ArgClass) bool) error {
	for _, name := range sortedKeys(ps.tools) {
		s := ps.tools[name]
		s.Name = name
		if r.covers(s) && !has(s.Args[arg]) {
			return errf(where, "%s: %s does not declare its argument %q as %s, so the rule cannot be checked on it; name tools that do",
				what, name, arg, kind)
		}
	}
	return nil
}

// argsOf returns the argument names in a tool's input schema, and
// SandboxArg for a sandbox tool.
func (ps *parser) argsOf(name string) map[string]bool {
	if a, ok := ps.args[name]; ok {
		return a
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	json.Unmarshal(ps.tools[name].InputSchema, &schema) // no schema: no arguments
	a := map[string]bool{}
	for k := range schema.Properties {
		a[k] = true
	}
	if ps.tools[name].Side == tool.SideSandbox {
		// A run with several sandboxes adds it to every sandbox tool (the
		// sandbox the call is for), so rules can keep sandboxes apart.
		a[SandboxArg] = true
	}
	ps.args[name] = a
	return a
}

func action(n *yaml.Node, where string) (Action, error) {
	s, err := scalar(n, where)
	if err != nil {
		return "", err
	}
	switch a := Action(s); a {
	case Allow, Ask, Deny:
		return a, nil
	}
	return "", errf(where, "unknown action %q (want allow, ask or deny)", s)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
