package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinsdev/reins/client"
)

// HTTP's defaults: sessions open at once per tenant, and how long a
// session may sit unused before it is closed.
const (
	DefaultMaxSessions = 16
	DefaultIdleTimeout = 10 * time.Minute
)

// maxSessionless bounds a message sent outside a session (an initialize).
const maxSessionless = 1 << 20

// sessionHeader is streamable HTTP's session id header.
const sessionHeader = "Mcp-Session-Id"

// HTTPConfig configures the streamable HTTP transport.
type HTTPConfig struct {
	// Client makes a client of reins' API that calls as the holder of
	// token (the request's bearer token), so every check of the API holds
	// for every tool call. Each session has its own, closed with it.
	Client func(token string) *client.Client
	// Tenant names the tenant a request was authenticated as (the API's
	// auth middleware runs before this handler): sessions are counted per
	// tenant, and a session is only served to its own tenant.
	Tenant func(*http.Request) string
	// MaxSessions and IdleTimeout replace DefaultMaxSessions and
	// DefaultIdleTimeout when positive.
	MaxSessions int
	IdleTimeout time.Duration
	Options     Options
	Logger      *slog.Logger
}

// HTTP serves MCP's streamable HTTP transport: one MCP server per session,
// made with the session's tenant's client.
type HTTP struct {
	cfg   HTTPConfig
	inner *sdk.StreamableHTTPHandler
	// bare answers the SDK's questions about protocol versions for
	// requests of an existing session; it has no tools.
	bare *sdk.Server

	mu       sync.Mutex
	sessions map[string]string // session id -> tenant
	open     map[string]int    // tenant -> sessions open or being opened
}

// NewHTTP makes the handler. It expects authenticated requests.
func NewHTTP(cfg HTTPConfig) *HTTP {
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Options.Local = false
	h := &HTTP{cfg: cfg, sessions: map[string]string{}, open: map[string]int{},
		bare: sdk.NewServer(&sdk.Implementation{Name: "reins", Version: cfg.Options.Version}, nil)}
	// A request's body holds at most one inline file, base64, and its
	// envelope.
	maxBody := cfg.Options.maxInline()*4/3 + 1<<20
	h.inner = sdk.NewStreamableHTTPHandler(h.server, &sdk.StreamableHTTPOptions{
		SessionTimeout:      cfg.IdleTimeout,
		MaxRequestBodyBytes: maxBody,
		Logger:              cfg.Logger,
	})
	return h
}

// opening is a new session's state while its first request is served.
type opening struct {
	tenant, token string
	srv           *sdk.Server
	cl            *client.Client
	id            string
}

type openingKey struct{}

func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant := h.cfg.Tenant(r)
	if id := r.Header.Get(sessionHeader); id != "" {
		h.mu.Lock()
		owner, ok := h.sessions[id]
		h.mu.Unlock()
		// Another tenant's session is answered as a missing one.
		if !ok || owner != tenant {
			writeRPCError(w, http.StatusNotFound, nil, "MCP session not found (it ended or was never made): initialize a new session")
			return
		}
		h.inner.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodPost {
		h.inner.ServeHTTP(w, r) // the SDK explains what is missing
		return
	}
	// Only an initialize opens a session and takes a slot; any other
	// message outside a session is answered by a throwaway one (the SDK
	// closes a session that was never initialized).
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSessionless+1))
	if err != nil {
		return
	}
	if len(body) > maxSessionless {
		writeRPCError(w, http.StatusRequestEntityTooLarge, nil, "a message outside a session is at most 1 MiB: initialize a session first")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "initialize" {
		h.inner.ServeHTTP(w, r)
		return
	}
	if !h.reserve(tenant) {
		writeRPCError(w, http.StatusTooManyRequests, msg.ID, fmt.Sprintf(
			"too many MCP sessions open for this tenant (at most %d): end one (DELETE /mcp with its Mcp-Session-Id) or wait until an unused one closes after %s",
			h.cfg.MaxSessions, h.cfg.IdleTimeout))
		return
	}
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	o := &opening{tenant: tenant, token: token}
	h.inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), openingKey{}, o)))
	h.opened(o)
}

// server is the SDK's getServer: a new server for a new session, the bare
// one for any other request.
func (h *HTTP) server(r *http.Request) *sdk.Server {
	o, _ := r.Context().Value(openingKey{}).(*opening)
	if o == nil {
		return h.bare
	}
	if o.srv == nil {
		o.cl = h.cfg.Client(o.token)
		o.srv = New(o.cl, h.cfg.Options, &sdk.ServerOptions{GetSessionID: func() string {
			b := make([]byte, 16)
			rand.Read(b)
			o.id = hex.EncodeToString(b)
			h.mu.Lock()
			h.sessions[o.id] = o.tenant
			h.mu.Unlock()
			return o.id
		}})
	}
	return o.srv
}

// reserve takes one of tenant's session slots.
func (h *HTTP) reserve(tenant string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open[tenant] >= h.cfg.MaxSessions {
		return false
	}
	h.open[tenant]++
	return true
}

// opened follows a new session to its end, or gives its slot back at once
// when none was made (a failed initialize).
func (h *HTTP) opened(o *opening) {
	var ss *sdk.ServerSession
	if o.srv != nil {
		for s := range o.srv.Sessions() {
			ss = s
		}
	}
	if ss == nil || o.id == "" {
		h.release(o)
		return
	}
	go func() {
		ss.Wait()
		h.release(o)
	}()
}

func (h *HTTP) release(o *opening) {
	h.mu.Lock()
	if o.id != "" {
		delete(h.sessions, o.id)
	}
	if h.open[o.tenant]--; h.open[o.tenant] <= 0 {
		delete(h.open, o.tenant)
	}
	h.mu.Unlock()
	if o.cl != nil {
		o.cl.Close()
	}
}

// Sessions reports the sessions open for tenant.
func (h *HTTP) Sessions(tenant string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open[tenant]
}

// writeRPCError answers a JSON-RPC error (to the request id, when known),
// which MCP clients show as the reason a call or a connect failed.
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": -32600, "message": msg},
	})
}
