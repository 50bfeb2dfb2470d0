package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
)

const realKey = "sk-real-key-never-in-a-sandbox"

func token(sandbox string) string { return TokenPrefix + "tok-" + sandbox }

// ledger is a hand-written Ledger: it admits every call to target (or
// refuses with refuse), optionally holding calls until hold is closed,
// and keeps what it was told.
type ledger struct {
	mu     sync.Mutex
	target Target
	refuse error
	hold   chan struct{}
	calls  []Call
	ends   []Result
	ended  chan Result
}

func newLedger() *ledger { return &ledger{ended: make(chan Result, 100)} }

func (l *ledger) numCalls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// set changes what the ledger does, under its lock.
func (l *ledger) set(f func(*ledger)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

func (l *ledger) Begin(ctx context.Context, c Call) (Admission, error) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	t, refuse, hold := l.target, l.refuse, l.hold
	l.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return Admission{}, ctx.Err()
		}
	}
	if refuse != nil {
		return Admission{}, refuse
	}
	return Admission{Target: t, Entry: &entry{l: l}}, nil
}

type entry struct {
	l    *ledger
	once sync.Once
}

func (e *entry) End(_ context.Context, r Result) {
	ended := false
	e.once.Do(func() { ended = true })
	if !ended {
		panic("End called twice")
	}
	e.l.mu.Lock()
	e.l.ends = append(e.l.ends, r)
	e.l.mu.Unlock()
	e.l.ended <- r
}

// waitEnd is the next Result the ledger gets.
func (l *ledger) waitEnd(t *testing.T) Result {
	t.Helper()
	select {
	case r := <-l.ended:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no Entry.End within 10s")
		return Result{}
	}
}

func (l *ledger) lastCall(t *testing.T) Call {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) == 0 {
		t.Fatal("the ledger saw no call")
	}
	return l.calls[len(l.calls)-1]
}

// upstream is an httptest provider that counts its requests and checks
// the key.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
	hits int
}

func newUpstream(t *testing.T, key string, h http.HandlerFunc) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits++
		u.reqs = append(u.reqs, r.Clone(context.Background()))
		u.mu.Unlock()
		got := r.Header.Get("X-Api-Key")
		if got == "" {
			got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		if got != key {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`))
			return
		}
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits
}

func (u *upstream) last(t *testing.T) *http.Request {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("upstream got no request")
	}
	return u.reqs[len(u.reqs)-1]
}

// env is a gateway served on loopback for sandbox, with its upstreams.
type env struct {
	g                 *Gateway
	l                 *ledger
	url               string
	anthropic, openai *upstream
}

type envOpts struct {
	anthropic, openai http.HandlerFunc
	noKey             bool
	open              func(Target) (model.Model, string, error)
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	e := &env{l: newLedger()}
	if o.anthropic == nil {
		o.anthropic = func(w http.ResponseWriter, r *http.Request) { t.Errorf("anthropic upstream hit: %s", r.URL) }
	}
	if o.openai == nil {
		o.openai = func(w http.ResponseWriter, r *http.Request) { t.Errorf("openai upstream hit: %s", r.URL) }
	}
	e.anthropic = newUpstream(t, realKey, o.anthropic)
	e.openai = newUpstream(t, realKey, o.openai)
	cfg := Config{
		Ledger:    e.l,
		Authorize: func(_ context.Context, sandbox, tok string) bool { return tok == token(sandbox) },
		Anthropic: Upstream{BaseURL: e.anthropic.URL, Key: realKey},
		OpenAI:    Upstream{BaseURL: e.openai.URL + "/v1", Key: realKey},
		Open:      o.open,
	}
	if o.noKey {
		cfg.Anthropic.Key, cfg.OpenAI.Key = "", ""
	}
	if cfg.Open == nil {
		cfg.Open = func(Target) (model.Model, string, error) { return nil, "", errors.New("no models in this test") }
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.g = g
	e.url = serve(t, g, "sb1")
	return e
}

// serve serves h on a loopback listener as the tunnel does: each
// connection's requests carry sandbox in their context.
func serve(t *testing.T, h http.Handler, sandbox string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: h,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			if sandbox == "" {
				return ctx
			}
			return WithSandbox(ctx, sandbox)
		},
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// scripted opens every target as the script turns.
func scripted(t *testing.T, turns ...script.Turn) func(Target) (model.Model, string, error) {
	t.Helper()
	m, err := script.New(turns)
	if err != nil {
		t.Fatal(err)
	}
	return func(tg Target) (model.Model, string, error) { return m, tg.Model, nil }
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
