// Package policy decides, before each tool call, whether the call may run
// (allow), needs a person's approval (ask) or is refused (deny), and says
// which rule decided and why.
//
// # Format
//
// A policy is a YAML document; JSON is YAML, so a JSON object works too. The
// smallest policy is {"tools":{"bash":"ask"}}. Every key:
//
//	default: allow          # action for calls nothing below decides (allow if absent)
//	tools:                  # per-tool action, after the rules
//	  bash: allow
//	  send_email: ask
//	rules:                  # in order; the first rule that matches decides
//	  - name: no-rm-rf      # required, unique: letters, digits, - and _
//	    tool: bash          # which tools: tool (a name or a list), label, side;
//	                        # at least one, all must hold
//	    match:              # regex (RE2, unanchored) per argument; all must match
//	      command: 'rm\s+-rf\s+/'
//	    action: deny
//	  - name: sql-writes
//	    tool: sql_query
//	    when: sql_write     # named predicates (a name or a list; all must hold):
//	                        #   sql_write  the query argument is not read-only SQL
//	                        #   sql_read   the query argument is read-only SQL
//	                        #   untrusted  the run has read untrusted content
//	    action: ask
//	  - name: web-gets-no-files
//	    tool: [write_file, edit_file]
//	    match: {sandbox: '^web$'}  # a sandbox tool's "sandbox" argument: the run's
//	                        # name of the sandbox the call is for (runs with
//	                        # several sandboxes; with one, it is absent)
//	    action: deny
//	  - name: http-internal
//	    tool: http_request
//	    host: "*.internal.example.com"  # glob (or a list) on the host of the url argument
//	    action: deny
//	  - name: ask-destructive
//	    side: trusted       # sandbox or trusted
//	    label: destructive  # reads_untrusted, exfiltration_sink or destructive
//	    action: ask
//	trifecta:
//	  waive: [http_request] # exfiltration sinks the trifecta rule leaves alone
//
// Parse checks everything against the tools the run has: an unknown key,
// tool, label, side, action, argument (from the tool's input schema) or
// predicate, a bad regex or glob, a duplicate key or rule name is an error
// that names it and where, so a typo never silently allows.
//
// The policy knows no tool by name. It reads inside an argument's values
// (sql_read, sql_write, host) only as the tool's spec declares they read
// (tool.Spec.Args: http_request says how its url names a host, sql_query
// how a query is read-only), and refuses a rule whose tools do not declare
// it.
//
// # Deciding a call
//
//  1. The rules, in order: the first whose tools cover the call and whose
//     conditions hold decides (rule: its name).
//  2. Else the tool's entry under tools (rule: "tools.NAME").
//  3. Else the default action (rule: "default").
//  4. A deny is final: nothing below turns it into anything else.
//  5. The trifecta rule: once the run has read untrusted content (a result of
//     any sandbox tool, or of a tool labelled reads_untrusted; see
//     Untrusted), every call of a tool labelled exfiltration_sink is asked
//     (rule: "trifecta"), whatever steps 1-3 said, unless trifecta.waive
//     names the tool. A person's --always approval does not lift it: each
//     call's arguments may carry what an attacker wants sent, so each call is
//     shown to a person; to stop being asked, waive the tool.
//  6. An ask from steps 1-3 for a tool that a person approved with --always in
//     this run becomes allow (rule: "always").
//
// Conditions on arguments are read conservatively, so that an ambiguous call
// resolves to the stricter outcome. Arguments are the top-level keys of the
// call's JSON object; as Go's encoding/json (which the tools decode with)
// matches field names without regard to case, every key equal to the
// argument's name under case folding counts, and an array counts each of its
// elements. A string is matched as itself, anything else as its JSON text. A
// deny or ask rule's condition holds when any of these values satisfies it;
// an allow rule's only when there is at least one value and all of them
// satisfy it (so "allow send_email to @example.com" needs every recipient
// there). A missing argument satisfies nothing.
//
// # No policy
//
// Default (and a nil *Policy) allows every call, and the trifecta rule still
// applies. Sandbox tools are contained by their sandbox and trusted tools are
// fenced by their own configuration (a read-only database unless writes are
// enabled, allowed recipients, allowed hosts); the one harm no configuration
// sees is data sent out by a model steered by text it read, which is what the
// trifecta rule asks about.
//
// # Tenants
//
// WithTenant layers a tenant's default policy under a run's: the run's rules,
// then the tenant's rules, then the run's tools, then the tenant's tools,
// then the run's default if it sets one, else the tenant's. Waivers add up.
// The tenant's policy fills what the run's leaves open; it is not a floor
// (a tool a tenant must never use is kept out of its tool set instead).
// Decisions made by the tenant's part are named "tenant:RULE",
// "tenant:tools.NAME" and "tenant:default".
package policy

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/reinsdev/reins/tool"
)

// Action is what a policy says of a call.
type Action string

// The actions.
const (
	Allow Action = "allow" // run it
	Ask   Action = "ask"   // park the run until a person approves or denies it
	Deny  Action = "deny"  // refuse it; the model is told why
)

// Rule names of decisions that no rule of the policy's own made.
const (
	RuleDefault  = "default"  // the policy's default action
	RuleTrifecta = "trifecta" // an exfiltration sink after untrusted content
	RuleAlways   = "always"   // a person approved the tool with --always
)

// SandboxArg is the argument that names, in a run with several sandboxes,
// the sandbox a sandbox tool's call is for. Rules may match it on every
// sandbox tool though their schemas lack it (the run adds it).
const SandboxArg = "sandbox"

// Call is one tool call to decide.
type Call struct {
	Tool  tool.Spec
	Input json.RawMessage
}

// State is what a decision needs to know about the run so far.
type State struct {
	ReadUntrusted bool            // the run has seen a result for which Untrusted is true
	Always        map[string]bool // tools a person approved with --always in this run
}

// Decision is what the policy said of a call, which rule said it and why,
// in words for the log and for a person.
type Decision struct {
	Action Action `json:"action"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

func (d Decision) String() string { return fmt.Sprintf("%s (%s): %s", d.Action, d.Rule, d.Reason) }

// Policy is a parsed policy. It is immutable and safe for concurrent use.
type Policy struct {
	owner  string // "" for the run's own, "tenant" under WithTenant
	rules  []*rule
	tools  map[string]Action
	def    Action
	defSet bool
	waive  map[string]bool
	under  *Policy // the tenant's policy, consulted after this one
}

// Default is the policy of a run that names none: allow everything, with the
// trifecta rule (see the package comment for why that is enough).
func Default() *Policy { return &Policy{def: Allow} }

// Untrusted reports whether a result of the tool taints the run: text an
// attacker wrote may be in it. Every sandbox tool's result does (the
// sandbox's files and commands are untrusted), and so does any tool labelled
// reads_untrusted.
func Untrusted(spec tool.Spec) bool {
	return spec.Side == tool.SideSandbox || spec.HasLabel(tool.LabelReadsUntrusted)
}

// WithTenant returns a policy that consults p first and then tenant (see the
// package comment). Neither is changed; a tenant p already had is replaced,
// and tenant's own tenant is dropped. A nil tenant returns p; a nil p is
// taken as a policy with nothing in it, so that the tenant's decides.
func (p *Policy) WithTenant(tenant *Policy) *Policy {
	if p == nil {
		p = &Policy{def: Allow}
	}
	if tenant == nil {
		return p
	}
	t := *tenant
	t.owner, t.under = "tenant", nil
	q := *p
	q.under = &t
	return &q
}

// Decide says whether call may run now.
func (p *Policy) Decide(call Call, st State) Decision {
	if p == nil {
		p = Default()
	}
	name := call.Tool.Name
	d := p.base(call, st)
	if d.Action == Deny {
		return d
	}
	if st.ReadUntrusted && call.Tool.HasLabel(tool.LabelExfiltrationSink) && !p.waived(name) {
		return Decision{Action: Ask, Rule: RuleTrifecta, Reason: fmt.Sprintf(
			"%s can send data out, and this run has read untrusted content: every call needs a person's approval "+
				"(trifecta rule; --always does not lift it, a policy can waive %s under trifecta.waive)", name, name)}
	}
	if d.Action == Ask && st.Always[name] {
		return Decision{Action: Allow, Rule: RuleAlways, Reason: fmt.Sprintf(
			"a person approved %s with --always in this run; without that: %s", name, d.Reason)}
	}
	return d
}

// base is steps 1-3 of a decision: rules, tools, default.
func (p *Policy) base(call Call, st State) Decision {
	name := call.Tool.Name
	args := &arguments{input: call.Input}
	for l := p; l != nil; l = l.under {
		for _, r := range l.rules {
			if r.covers(call.Tool) && r.holds(call.Tool, args, st) {
				return Decision{Action: r.action, Rule: l.ruleName(r.name), Reason: l.ruleReason(r, name)}
			}
		}
	}
	for l := p; l != nil; l = l.under {
		if a, ok := l.tools[name]; ok {
			return Decision{Action: a, Rule: l.ruleName("tools." + name),
				Reason: fmt.Sprintf("the %s sets %s to %s", l.what(), name, a)}
		}
	}
	l := p
	for l != nil && !l.defSet {
		l = l.under
	}
	def := Allow
	if l != nil {
		def = l.def
	} else {
		l = p // no layer sets a default: allow, named as the run's
	}
	return Decision{Action: def, Rule: l.ruleName(RuleDefault),
		Reason: fmt.Sprintf("no rule or tools entry decides %s; the %s's default is %s", name, l.what(), def)}
}

func (p *Policy) waived(name string) bool {
	for l := p; l != nil; l = l.under {
		if l.waive[name] {
			return true
		}
	}
	return false
}

func (p *Policy) ruleName(n string) string {
	if p.owner == "" {
		return n
	}
	return p.owner + ":" + n
}

func (p *Policy) what() string {
	if p.owner == "" {
		return "policy"
	}
	return p.owner + " policy"
}

func (p *Policy) ruleReason(r *rule, toolName string) string {
	s := fmt.Sprintf("%s call matches %s rule %s", toolName, p.what(), r.name)
	if len(r.conds) == 0 {
		return s
	}
	descs := make([]string, len(r.conds))
	for i, c := range r.conds {
		descs[i] = c.desc
	}
	return s + ": " + strings.Join(descs, " and ")
}

// rule is one entry of rules.
type rule struct {
	name   string
	action Action
	tools  map[string]bool // nil: any tool
	label  string          // "": any
	side   tool.Side       // "": any
	conds  []cond
}

// cond is one condition of a rule: on the run's state, or on the values of
// one argument.
type cond struct {
	desc  string // in words, for the decision's reason
	state func(State) bool
	arg   string
	test  func(spec tool.Spec, value string) bool // spec is the called tool's
}

func (r *rule) covers(spec tool.Spec) bool {
	return (r.tools == nil || r.tools[spec.Name]) &&
		(r.label == "" || spec.HasLabel(r.label)) &&
		(r.side == "" || spec.Side == r.side)
}

// holds reports whether all of r's conditions hold, reading arguments
// conservatively (see the package comment).
func (r *rule) holds(spec tool.Spec, args *arguments, st State) bool {
	all := r.action == Allow
	for _, c := range r.conds {
		if c.state != nil {
			if !c.state(st) {
				return false
			}
			continue
		}
		vals := args.values(c.arg)
		if len(vals) == 0 {
			return false
		}
		n := 0
		for _, v := range vals {
			if c.test(spec, v) {
				n++
			}
		}
		if (all && n < len(vals)) || n == 0 {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
