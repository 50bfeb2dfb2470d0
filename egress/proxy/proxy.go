// Package proxy is the egress proxy every sandbox's network traffic goes
// through (egress and open mode; see package egress for the decision it
// applies): an explicit HTTP proxy, a transparent listener for the
// connections the firewall redirects, the sandbox's DNS, and the place
// where secrets are put into requests.
//
//	p := proxy.New(proxy.Config{...})
//	go p.ServeHTTP(l)            // HTTP_PROXY / HTTPS_PROXY: absolute-form requests and CONNECT
//	go p.ServeTransparent(l2)    // redirected connections: Config.OriginalDst says where they were going
//	go p.ServeDNS(pc)            // the sandbox's resolver
//	p.Add(proxy.Sandbox{ID: id, Addr: src, Rules: rules, Secrets: secrets, CA: ca})
//
// A connection (or DNS query) is attributed to a sandbox by its source
// address; one from an unknown source is refused. The proxy decides by
// name:
//
//   - an HTTP request by its Host (the URL's host in absolute form), each
//     request of a kept-alive connection on its own;
//   - a TLS connection by its ClientHello's SNI; a CONNECT tunnel by the
//     CONNECT host, and the SNI inside must be that host;
//   - other bytes by the name the sandbox looked up (ServeDNS) when the
//     address it connected to is the synthetic one the DNS gave for it,
//     else as a bare address.
//
// The sandbox's DNS answers an allowed name with a synthetic address of
// its own in FakeRange (198.18.0.0/15), never the real one: the sandbox
// then learns nothing of the service side's addresses, an operator's name
// on 127.0.0.1 is not taken for the sandbox's own loopback, and two names
// behind one address stay apart.
//
// The proxy resolves the name itself (Config.Overrides first, trusted;
// then Config.Resolver) and connects to the addresses egress.Rules
// DecideAddr allows, never to a Config.Forbidden one nor to one of its own
// listeners. A name written as an address in any form (127.1, 0x7f000001,
// 2130706433, [::ffff:127.0.0.1]) is a bare address.
//
// Secrets: a request to a host a secret is bound to has the secret's
// placeholder replaced by its value in every header (inside Authorization
// Basic credentials too) and in the URL's path and query, never in the
// body, nor in a TRACE (the server echoes it back). HTTPS to such a host
// is terminated with the sandbox's CA (a leaf for the SNI, made on
// demand) and forwarded over TLS verified with
// Config.UpstreamRoots; HTTPS to any other host is tunneled blind after
// the SNI check. A placeholder seen going to a host it is not bound to is
// left as it is and noted in the log entry.
//
// Every connection, request and query is an egress.Entry given to
// Config.Log (from one goroutine, in order; if Log falls behind by more
// than a few thousand entries, entries are counted as lost and the count
// logged). No entry, log line or error carries a secret's value.
//
// Limits: the first bytes of a connection, a TLS handshake and each
// request's headers must arrive within Config.HandshakeTimeout (10 s); a
// request's headers are at most Config.MaxHeaderBytes (64 KiB); a sandbox
// has at most Config.MaxConns (1024) connections open. A redirected
// connection that sends nothing for 1 s while the server is expected to
// speak first (SMTP, databases) is let through as bytes when its address
// (by name or bare) is allowed.
//
// Update applies new rules at once: open connections the new rules deny
// are closed, with an entry noting "closed: the rules changed". Remove
// closes all of a sandbox's connections.
package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
)

// Config is what a Proxy needs from the service.
type Config struct {
	// Overrides are the operator's static names (serve --egress-resolve):
	// resolved without DNS and trusted (their addresses may be reserved).
	Overrides map[string][]netip.Addr
	// OverridePorts limits the trust of an Overrides name to these ports
	// (serve --egress-resolve NAME=IP:PORT): on any other port its
	// addresses are decided like any resolved address (a reserved one is
	// refused). A name with no ports here is trusted on every port.
	OverridePorts map[string][]int
	// Resolver resolves every other name; nil is net.DefaultResolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
	// Forbidden are never dialed, whatever the rules (the service's own
	// listeners). An unspecified address (0.0.0.0:7070, a listener on
	// every interface) forbids its port on this host's own addresses, not
	// on every host's.
	Forbidden []netip.AddrPort
	// OriginalDst says where a redirected connection was going (for
	// ServeTransparent).
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Dial connects upstream; nil is a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// UpstreamRoots verify upstream TLS after terminating; nil is the
	// system's roots.
	UpstreamRoots *x509.CertPool
	// Log receives every entry (see the package comment).
	Log    func(egress.Entry)
	Logger *slog.Logger

	HandshakeTimeout time.Duration // 0: 10 s
	IdleTimeout      time.Duration // a kept-alive connection with no request; 0: 2 min
	MaxHeaderBytes   int           // 0: 64 KiB
	MaxConns         int           // per sandbox; 0: 1024
}

const (
	defaultHandshake = 10 * time.Second
	defaultIdle      = 2 * time.Minute
	defaultHeader    = 64 << 10
	defaultMaxConns  = 1024
	serverFirstWait  = time.Second
	logQueue         = 4096
)

// Sandbox is one sandbox as the proxy knows it.
type Sandbox struct {
	ID      string
	Addr    netip.Addr // its source address
	Rules   egress.Rules
	Secrets []Secret
	CA      *CA // signs the leaves for terminated TLS; needed if Secrets has any
}

// Proxy is the egress proxy of one service; it serves any number of
// sandboxes and listeners.
type Proxy struct {
	cfg  Config
	log  *slog.Logger
	logq chan egress.Entry
	lost atomic.Int64
	wg   sync.WaitGroup // connections, queries, the log goroutine

	mu        sync.Mutex
	closed    bool
	byID      map[string]*sandboxState
	byAddr    map[netip.Addr]*sandboxState
	listeners map[any]func() error // open listeners and packet conns, to close
	own       []netip.AddrPort     // the addresses of our own listeners
	logDone   chan struct{}
}

// sandboxState is a sandbox's rules and open flows; rules and secrets are
// replaced whole under mu, flows read them once per decision.
type sandboxState struct {
	id   string
	addr netip.Addr
	ca   *CA

	mu      sync.Mutex
	rules   egress.Rules
	secrets []Secret
	flows   map[*flow]struct{}
	names   *nameCache // addresses it looked up -> names
	gone    bool

	dnsBusy atomic.Int32 // its DNS queries being answered
}

// ErrNoSandbox is returned for a source address no sandbox has.
var ErrNoSandbox = errors.New("no sandbox has this source address")

// New makes a proxy; it serves nothing until given listeners.
func New(cfg Config) *Proxy {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second}
		cfg.Dial = d.DialContext
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	orDefault(&cfg.HandshakeTimeout, defaultHandshake)
	orDefault(&cfg.IdleTimeout, defaultIdle)
	orDefault(&cfg.MaxHeaderBytes, defaultHeader)
	orDefault(&cfg.MaxConns, defaultMaxConns)
	ov := make(map[string][]netip.Addr, len(cfg.Overrides))
	for k, v := range cfg.Overrides {
		ov[egress.CanonicalName(k)] = v
	}
	cfg.Overrides = ov
	cfg.Forbidden = local(cfg.Forbidden)
	p := &Proxy{
		cfg: cfg, log: cfg.Logger, logq: make(chan egress.Entry, logQueue),
		byID: map[string]*sandboxState{}, byAddr: map[netip.Addr]*sandboxState{},
		listeners: map[any]func() error{}, logDone: make(chan struct{}),
	}
	go p.drainLog()
	return p
}

func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Add starts serving a sandbox. Its rules must be normalized.
func (p *Proxy) Add(sb Sandbox) error {
	if sb.ID == "" || !sb.Addr.IsValid() {
		return fmt.Errorf("egress proxy: a sandbox needs an id and a source address: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkSecrets(sb.Secrets, sb.CA); err != nil {
		return fmt.Errorf("egress proxy: sandbox %s: %w", sb.ID, err)
	}
	st := &sandboxState{id: sb.ID, addr: sb.Addr.Unmap(), ca: sb.CA, rules: sb.Rules,
		secrets: sb.Secrets, flows: map[*flow]struct{}{}, names: newNameCache(nameCacheSize)}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("egress proxy: closed: %w", errdefs.ErrUnavailable)
	}
	if _, ok := p.byID[sb.ID]; ok {
		return fmt.Errorf("egress proxy: sandbox %s is already served: %w", sb.ID, errdefs.ErrAlreadyExists)
	}
	if o, ok := p.byAddr[st.addr]; ok {
		return fmt.Errorf("egress proxy: sandbox %s: source address %s is sandbox %s's: %w", sb.ID, st.addr, o.id, errdefs.ErrAlreadyExists)
	}
	p.byID[sb.ID], p.byAddr[st.addr] = st, st
	return nil
}

// Update replaces a sandbox's rules and secrets. New connections see them
// at once; open ones the new rules deny are closed.
func (p *Proxy) Update(id string, rules egress.Rules, secrets []Secret) error {
	p.mu.Lock()
	st := p.byID[id]
	p.mu.Unlock()
	if st == nil {
		return fmt.Errorf("egress proxy: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err := checkSecrets(secrets, st.ca); err != nil {
		return fmt.Errorf("egress proxy: sandbox %s: %w", id, err)
	}
	st.mu.Lock()
	st.rules, st.secrets = rules, secrets
	flows := make([]*flow, 0, len(st.flows))
	for f := range st.flows {
		flows = append(flows, f)
	}
	st.mu.Unlock()
	for _, f := range flows {
		if !f.stillAllowed(p, rules) {
			f.kill("closed: the rules changed")
		}
	}
	return nil
}

// Remove stops serving a sandbox and closes its connections.
func (p *Proxy) Remove(id string) {
	p.mu.Lock()
	st := p.byID[id]
	if st != nil {
		delete(p.byID, id)
		delete(p.byAddr, st.addr)
	}
	p.mu.Unlock()
	if st != nil {
		st.closeAll("closed: the sandbox was removed")
	}
}

// Close stops every listener and connection and waits for them; Serve*
// then return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	closers := p.listeners
	p.listeners = nil
	sbs := p.byID
	p.byID, p.byAddr = map[string]*sandboxState{}, map[netip.Addr]*sandboxState{}
	p.mu.Unlock()
	for _, c := range closers {
		c()
	}
	for _, st := range sbs {
		st.closeAll("closed: the proxy stopped")
	}
	p.wg.Wait()
	close(p.logq)
	<-p.logDone
	return nil
}

func (st *sandboxState) closeAll(note string) {
	st.mu.Lock()
	st.gone = true
	flows := make([]*flow, 0, len(st.flows))
	for f := range st.flows {
		flows = append(flows, f)
	}
	st.mu.Unlock()
	for _, f := range flows {
		f.kill(note)
	}
}

// view is a sandbox's rules and secrets at one moment.
func (st *sandboxState) view() (egress.Rules, []Secret) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rules, st.secrets
}

// sandboxFor attributes a connection (or query) by its source address.
func (p *Proxy) sandboxFor(a net.Addr) (*sandboxState, error) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", a, ErrNoSandbox)
	}
	p.mu.Lock()
	st := p.byAddr[ap.Addr().Unmap()]
	p.mu.Unlock()
	if st == nil {
		return nil, fmt.Errorf("source %s: %w", ap.Addr(), ErrNoSandbox)
	}
	return st, nil
}

// local replaces each unspecified address in aps (a listener on every
// interface) by this host's own addresses on its port: loopback and
// each interface's.
func local(aps []netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ap := range aps {
		a := ap.Addr().Unmap()
		if !a.IsUnspecified() {
			out = append(out, netip.AddrPortFrom(a, ap.Port()))
			continue
		}
		out = append(out, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ap.Port()), netip.AddrPortFrom(netip.IPv6Loopback(), ap.Port()))
		addrs, _ := net.InterfaceAddrs()
		for _, ia := range addrs {
			if pfx, err := netip.ParsePrefix(ia.String()); err == nil {
				out = append(out, netip.AddrPortFrom(pfx.Addr().Unmap(), ap.Port()))
			}
		}
	}
	return out
}

// track registers a listener (its closer) so Close stops it; false if
// the proxy is closed.
func (p *Proxy) track(key any, addr net.Addr, closer func() error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.listeners[key] = closer
	if addr != nil {
		if ap, err := netip.ParseAddrPort(addr.String()); err == nil {
			p.own = append(p.own, local([]netip.AddrPort{ap})...)
		}
	}
	return true
}

func (p *Proxy) untrack(key any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.listeners, key)
}

// add counts a goroutine Close waits for; false once Close has begun.
func (p *Proxy) add() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// serve accepts connections on l and hands each to handle, in its own
// goroutine.
func (p *Proxy) serve(l net.Listener, handle func(net.Conn, *sandboxState)) error {
	if !p.track(l, l.Addr(), l.Close) {
		l.Close()
		return nil
	}
	defer p.untrack(l)
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				backoff = min(max(backoff*2, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("egress proxy: accept on %s: %w", l.Addr(), err)
		}
		backoff = 0
		st, err := p.sandboxFor(c.RemoteAddr())
		if err != nil {
			p.log.Warn("egress proxy: connection refused", "listener", l.Addr().String(), "err", err)
			c.Close()
			continue
		}
		if !p.add() {
			c.Close()
			return nil
		}
		go func() {
			defer p.wg.Done()
			handle(c, st)
		}()
	}
}

// emit queues an entry for Config.Log.
func (p *Proxy) emit(e egress.Entry) {
	if p.cfg.Log == nil {
		return
	}
	select {
	case p.logq <- e:
	default:
		if n := p.lost.Add(1); n == 1 || n%1000 == 0 {
			p.log.Error("egress proxy: the egress log falls behind; entries lost", "lost", n)
		}
	}
}

func (p *Proxy) drainLog() {
	defer close(p.logDone)
	for e := range p.logq {
		if p.cfg.Log != nil {
			p.cfg.Log(e)
		}
	}
}
