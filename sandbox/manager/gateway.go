package manager

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/sandbox"
)

// The model gateway of a sandbox (package gateway). A sandbox with one has
// a placeholder token, kept in its Record (written before the token is
// handed out), and while it runs the manager serves Config.Gateway on the
// connections its programs open to gateway.Addr, which its executor hands
// over (client.GatewayListener), each request's context saying which
// sandbox it came from (gateway.WithSandbox). Serving stops when the
// sandbox's compute is released (stop, rm, suspend) and with Close, and
// comes back at wake and at Recover; connections made in between wait in
// the executor.

// Serving bounds, per sandbox: accepts kept waiting in its executor, and
// connections open at once (those accepts included); a client that sends
// no request head within gatewayHeaderTimeout, or sits idle between
// requests longer than gatewayIdleTimeout, is closed.
const (
	gatewayWaiting     = 4
	gatewayMaxConns    = 64
	gatewayIdleTimeout = 2 * time.Minute
	gatewayMaxHeader   = 64 << 10
)

// gatewayHeaderTimeout is a var for the test that waits it out.
var gatewayHeaderTimeout = 10 * time.Second

// gatewayServer serves one sandbox's gateway connections.
type gatewayServer struct {
	srv  *http.Server
	done chan struct{} // closed when Serve has returned
}

func newGatewayToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return gateway.TokenPrefix + hex.EncodeToString(b)
}

// checkGateway refuses a gateway this manager cannot serve; the model spec
// itself is the API's to check.
func (m *Manager) checkGateway(spec sandbox.Spec) error {
	if spec.Gateway != nil && m.cfg.Gateway == nil {
		return fmt.Errorf("this service has no model gateway: create the sandbox without --model-gateway: %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

// gatewayEnv is the environment b's gateway gives its programs; nil
// without one. b.mu is held.
func gatewayEnv(b *box) []string {
	if b.rec.GatewayToken == "" {
		return nil
	}
	return gateway.Env(b.rec.GatewayToken)
}

// serveGateway starts serving b's gateway, if it has one and it is not
// served yet; b.mu is held and b.client set.
func (m *Manager) serveGateway(b *box) {
	if m.cfg.Gateway == nil || b.rec.GatewayToken == "" || b.client == nil || b.gateway != nil {
		return
	}
	id := b.rec.ID
	log := m.log.With("sandbox", id)
	l := b.client.GatewayListener(gatewayWaiting, gatewayMaxConns, func(err error) {
		log.Debug("gateway accept failed", "err", err)
	})
	srv := &http.Server{
		Handler:           m.cfg.Gateway,
		ConnContext:       func(ctx context.Context, _ net.Conn) context.Context { return gateway.WithSandbox(ctx, id) },
		ReadHeaderTimeout: gatewayHeaderTimeout,
		IdleTimeout:       gatewayIdleTimeout,
		MaxHeaderBytes:    gatewayMaxHeader,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	gs := &gatewayServer{srv: srv, done: make(chan struct{})}
	go func() {
		defer close(gs.done)
		srv.Serve(l)
	}()
	b.gateway = gs
}

// stopGateway stops serving b's gateway and waits for its accepts to end;
// b.mu is held. Connections being served are closed.
func (m *Manager) stopGateway(b *box) {
	if b.gateway == nil {
		return
	}
	b.gateway.srv.Close()
	<-b.gateway.done
	b.gateway = nil
}

// EnableGateway turns the model gateway on in running sandbox id (it may
// be on already) and returns the environment a program started there needs
// to use it (gateway.Env). The sandbox's own environment does not change:
// the caller passes this to the exec it starts. A sandbox where a process
// took the gateway's port first is refused in words.
func (m *Manager) EnableGateway(ctx context.Context, id string) ([]string, error) {
	b, err := m.lookup("", id)
	if err != nil {
		return nil, err
	}
	if m.cfg.Gateway == nil {
		return nil, fmt.Errorf("this service has no model gateway: %w", errdefs.ErrFailedPrecondition)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.State != sandbox.StateRunning || b.client == nil {
		return nil, fmt.Errorf("sandbox %s is %s%s: the model gateway needs it running: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
	if err := b.client.StartGateway(ctx); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if b.rec.GatewayToken == "" {
		// The spec's Gateway stays as it was: a sandbox made without one
		// gets the token for the agent run's program, not a gateway of
		// its own (GatewayOf refuses it), so that what the program leaves
		// running has no unbudgeted gateway once the run is over.
		b.rec.GatewayToken = newGatewayToken()
		if err := writeRecord(b.dir, &b.rec); err != nil {
			b.rec.GatewayToken = ""
			return nil, err
		}
		m.log.Info("model gateway on", "sandbox", id)
	}
	m.serveGateway(b)
	return gatewayEnv(b), nil
}

// AuthorizeGateway reports whether token is the gateway token of sandbox
// id, compared in constant time; false for a sandbox that is gone,
// stopped or has no gateway.
func (m *Manager) AuthorizeGateway(ctx context.Context, id, token string) bool {
	b, err := m.lookup("", id)
	if err != nil {
		return false
	}
	b.mu.Lock()
	want, stopped := b.rec.GatewayToken, b.rec.State == sandbox.StateStopped
	b.mu.Unlock()
	if want == "" || stopped {
		return false
	}
	// Hashing first makes the comparison constant-time in the length too.
	w, g := sha256.Sum256([]byte(want)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(w[:], g[:]) == 1
}

// GatewayOf is the tenant of sandbox id and where its gateway's calls go
// (sandbox.GatewaySpec); a sandbox without a gateway is
// errdefs.ErrFailedPrecondition.
func (m *Manager) GatewayOf(ctx context.Context, id string) (tenant, model, script string, err error) {
	b, err := m.lookup("", id)
	if err != nil {
		return "", "", "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.GatewayToken == "" || b.rec.Spec.Gateway == nil {
		return "", "", "", fmt.Errorf("sandbox %s has no model gateway: %w", id, errdefs.ErrFailedPrecondition)
	}
	return b.rec.Tenant, b.rec.Spec.Gateway.Model, b.rec.Spec.Gateway.Script, nil
}
