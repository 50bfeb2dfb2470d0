// Package gateway is the model gateway: how an agent program that runs
// inside a sandbox (Claude Code, Codex, the Claude Agent SDK, a user's own
// program) calls models without ever holding a key, while every call is
// recorded and budgeted as a call of reins' own loop is.
//
//	sandbox                                     reins serve
//	┌──────────────────────────────┐            ┌─────────────────────────────────┐
//	│ claude -p …                  │            │ Gateway (http.Handler)          │
//	│  ANTHROPIC_BASE_URL=         │            │  token ⇄ sandbox (Authorize)    │
//	│   http://127.0.0.1:47070     │            │  Ledger.Begin: pause, budgets,  │
//	│  ANTHROPIC_API_KEY=rgw_…     │  executor  │   cancel; the call's target     │
//	│        │                     │  socket    │  forward with the real key, or  │
//	│        ▼                     │ ─────────▶ │   translate for any model.Model │
//	│ executor listens on loopback │ (accepted  │   (script: too)                 │
//	│ 127.0.0.1:47070              │  conns)    │  Entry.End: the record          │
//	└──────────────────────────────┘            └─────────────────────────────────┘
//
// The executor listens on the sandbox's own loopback (Addr) and hands each
// connection to the service over the executor's socket, which the service
// already reaches; so the gateway works under every network mode, `none`
// included, and opens no provider host to the sandbox. The service serves
// the connections it is handed with Handler, with the sandbox they came
// from in the request's context (WithSandbox): a connection never names
// its own sandbox.
//
// A sandbox with a gateway has Env in its environment: both providers'
// base URLs and a per-sandbox placeholder token. The token is not a key:
// it is good only on connections from its own sandbox and dies with it.
//
// Wire formats spoken (Wire): Anthropic Messages (POST /v1/messages,
// streaming passed through unbuffered; /v1/messages/count_tokens; HEAD /)
// and OpenAI (/v1/chat/completions, /v1/responses, streaming). Anything
// else the program sends (telemetry, update checks) is answered here and
// never forwarded.
package gateway

import (
	"context"
	"time"

	"github.com/reinsdev/reins/model"
)

// Port is the TCP port the executor listens on, on the sandbox's loopback
// (127.0.0.1 only), for a sandbox with a gateway.
const Port = 47070

// Addr is the gateway's address as a program in the sandbox dials it.
const Addr = "127.0.0.1:47070"

// TokenPrefix starts every placeholder token, so that one found in a log
// or a paste is known for what it is.
const TokenPrefix = "rgw_"

// Env is the environment a sandbox with a gateway gets: both providers'
// base URLs at the gateway and token as every key variable the programs
// read.
func Env(token string) []string {
	return []string{
		"ANTHROPIC_BASE_URL=http://" + Addr,
		"ANTHROPIC_AUTH_TOKEN=" + token,
		"ANTHROPIC_API_KEY=" + token,
		"OPENAI_BASE_URL=http://" + Addr + "/v1",
		"OPENAI_API_KEY=" + token,
	}
}

// Wire is a provider's wire format, as a call arrived in it.
type Wire string

const (
	WireAnthropic       Wire = "anthropic"        // POST /v1/messages
	WireOpenAIChat      Wire = "openai_chat"      // POST /v1/chat/completions
	WireOpenAIResponses Wire = "openai_responses" // POST /v1/responses
)

type ctxKey struct{}

// WithSandbox is ctx for a request that arrived on a connection from
// sandbox id; the service sets it for each connection it is handed.
func WithSandbox(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// SandboxFrom is the sandbox a request came from ("" when none: such a
// request is refused).
func SandboxFrom(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// Call is what the gateway knows of a model call before it is made.
type Call struct {
	Sandbox string
	Wire    Wire
	// Model is the model the program asked for ("claude-sonnet-4-5").
	Model  string
	Stream bool
	// Request is the call's conversation in reins' vocabulary, as far as
	// it translates (System, Messages, Tools, MaxTokens), for the record.
	Request *model.Request
}

// Target is where a call goes. Model is a model spec
// ("anthropic:claude-sonnet-4-5", "openai:gpt-4.1", "script:NAME") or ""
// to send the call, as it is, to the provider of its wire with the model
// it asked for. Script is a script: model's inline JSON.
type Target struct {
	Model  string
	Script string
	Tenant string
}

// Admission is a call let through: where it goes and how it is recorded.
type Admission struct {
	Target Target
	Entry  Entry
}

// Ledger decides and records model calls. The service's implementation
// binds each sandbox to a run (an agent run working in it, or the
// sandbox's own record).
type Ledger interface {
	// Begin admits one call: it blocks while the call's run is paused
	// (until resumed or ctx ends) and refuses it with a *Refusal when the
	// run is cancelled, finished or over a budget.
	Begin(ctx context.Context, call Call) (Admission, error)
}

// Entry records one admitted call. End is called exactly once, when the
// answer has been sent to the program whole, or failed.
type Entry interface {
	End(ctx context.Context, r Result)
}

// Ender is an Entry whose run can end while the call is in flight
// (cancelled, over a budget, timed out): Ended is closed then, and the
// gateway cuts the call, its stream too.
type Ender interface {
	Ended() <-chan struct{}
}

// Result is what a call came to.
type Result struct {
	Response *model.Response // content, stop reason and usage, as far as known
	// Status is the HTTP status the program got.
	Status    int
	Error     string // what went wrong, in words, when Status is not 2xx
	FirstByte time.Duration
	Duration  time.Duration
	// Upstream is the model that answered ("anthropic:claude-sonnet-4-5").
	Upstream string
}

// Refusal is a call the gateway will not make, answered to the program in
// its wire's error format with Status and Message.
type Refusal struct {
	Status  int    // 4xx
	Type    string // the provider's error type: "permission_error", "rate_limit_error", …
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// Upstream is a provider the gateway forwards calls to as they are: its
// base URL ("https://api.anthropic.com", "https://api.openai.com/v1") and
// the real key, which only the service holds.
type Upstream struct {
	BaseURL string
	Key     string
}

// Config is how a Gateway is set up (cmd wires it).
type Config struct {
	Ledger Ledger
	// Authorize reports whether token is the placeholder token of sandbox
	// (compared in constant time); any other token, or one of a sandbox
	// that is gone, is refused with the wire's 401.
	Authorize func(ctx context.Context, sandbox, token string) bool
	// Anthropic and OpenAI are where a call whose Target.Model is empty,
	// or names the provider of the call's own wire, is forwarded with the
	// real key. A provider with no key refuses such calls, saying the
	// operator has none.
	Anthropic, OpenAI Upstream
	// Open opens any other target (another provider than the wire's,
	// script:): the call is translated to reins' vocabulary, answered by
	// the model, and written back in the call's wire, streamed too.
	Open func(Target) (m model.Model, name string, err error)
}
