// Package netns gives each sandbox its own network namespace and keeps the
// firewall that forces every packet a sandbox sends to the service's
// egress proxy. It uses netlink and nftables (vishvananda/netlink,
// google/nftables) and never runs ip or nft.
//
// One *router* namespace per service holds the host end of every
// sandbox's veth and the proxy's listening sockets (Router.Listen,
// Router.ListenPacket). It has no interface to the host, so with no rule
// at all a sandbox still reaches neither the host, nor the service's API
// port, nor the internet: the proxy accepts in the router namespace and
// dials out from the service's own namespace.
//
//	host namespace (service, proxy dials out)
//	  └ router namespace  (DIR/router)       lo · r3f09a1c2 10.203.0.1/30 · r77d0e5b1 10.203.0.5/30 · …
//	      ├ sandbox a     (DIR/ns/a)         lo · eth0 10.203.0.2/30, default via 10.203.0.1
//	      └ sandbox b     (DIR/ns/b)         lo · eth0 10.203.0.6/30, default via 10.203.0.5
//
// The router's firewall is one static nftables ruleset (installFirewall),
// installed at Open, with nothing per sandbox: TCP to the gateway's
// Ports.Proxy is accepted, every other TCP connection is redirected to
// Ports.Transparent (the proxy reads where it was going with
// OriginalDst), UDP to port 53 of any address goes to Ports.DNS, and
// everything else (other UDP, ICMP, IPv6, forwarding between sandboxes,
// a source address other than the sandbox's own) is dropped. The rules
// sit on the router's side of the veth, which sees every packet whatever
// the sandbox's stack is: gVisor's netstack writes frames to the veth
// through a packet socket, past any hook in the sandbox's own namespace.
// IPv6 is off in every namespace made here.
//
// A sandbox's namespace belongs to the host's user namespace, so a runc
// sandbox, root only in its own user namespace, has no CAP_NET_ADMIN
// over it: it cannot change its address, routes or interfaces.
//
// Everything lives in the kernel and under Config.Dir: the namespaces are
// bind-mounted files, and a link's sandbox id is its router-side veth's
// alias. A restarted service calls Open on the same Dir and finds the
// router and every link (Links); Close leaves them, since sandboxes
// outlive the service. An interrupted Attach or Detach is finished or
// undone by the next Open. Dir is flock'd by the Router that has it open.
//
// Note for gVisor: runsc (--network=sandbox) moves the address off the
// namespace's eth0 into its netstack when the sandbox starts, so a
// namespace serves one runsc start; a sandbox started again (resume)
// needs a Detach and a fresh Attach.
package netns

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// DefaultSubnet is where sandbox links get their /30s: 16384 of them.
var DefaultSubnet = netip.MustParsePrefix("10.203.0.0/16")

// DefaultMTU is the MTU of both ends of every veth: as large as a veth
// takes, less lo's headroom. No packet is forwarded (each ends at the
// router, where the proxy's sockets are), so no path MTU beyond the veth
// matters; gVisor's netstack moved 12-27% more with it than with 1500,
// runc the same (docs/decisions/0019-router-namespace.md).
const DefaultMTU = 65520

// Config says where a Router keeps its namespaces and what the firewall
// lets through.
type Config struct {
	Dir    string       // host directory owned by the service (e.g. DATA/net); made if missing
	Subnet netip.Prefix // IPv4, at most /29; DefaultSubnet if zero
	MTU    int          // DefaultMTU if zero
	Ports  Ports
	Logger *slog.Logger
}

// Ports are where the service's proxy listens inside the router
// namespace (on any address, or the gateway's). A zero port is closed.
type Ports struct {
	Proxy       int // TCP: a sandbox's HTTP(S)_PROXY, gateway:Proxy
	Transparent int // TCP: every other TCP connection, redirected
	DNS         int // UDP: every query to port 53, redirected
}

// Router is a service's router namespace and the sandbox links on it.
type Router struct {
	cfg  Config
	lock *os.File // flock'd Dir/lock
	ns   *os.File // the router namespace
	nl   *netlink.Handle

	mu        sync.Mutex
	links     map[string]Link
	used      map[netip.Addr]bool // gateways in use
	veths     map[string]string   // sandbox id → its router end's name
	listeners []io.Closer
	closed    bool
}

// Open makes the router namespace under cfg.Dir, or re-attaches to the one
// a previous run of the service left, and (re)installs its firewall.
func Open(cfg Config) (*Router, error) {
	if cfg.Subnet == (netip.Prefix{}) {
		cfg.Subnet = DefaultSubnet
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() > 29 {
		return nil, fmt.Errorf("network subnet %s: want an IPv4 prefix of /29 or wider: %w", cfg.Subnet, errdefs.ErrInvalidArgument)
	}
	if cfg.MTU < 1280 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("network MTU %d: want 1280-65535: %w", cfg.MTU, errdefs.ErrInvalidArgument)
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "ns"), 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("network directory %s is in use by another reins service (%v): stop it first: %w", cfg.Dir, err, errdefs.ErrFailedPrecondition)
	}
	r := &Router{cfg: cfg, lock: lock, links: map[string]Link{}, used: map[netip.Addr]bool{}, veths: map[string]string{}}
	if err := r.open(); err != nil {
		r.release()
		return nil, err
	}
	return r, nil
}

func (r *Router) open() error {
	path := filepath.Join(r.cfg.Dir, "router")
	ns, ok, err := openNS(path)
	switch {
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	case err == nil && !ok: // a file left by a reboot
		if err := removeNS(path); err != nil {
			return err
		}
	}
	if !ok {
		if err := newNS(path, setupRouter); err != nil {
			return fmt.Errorf("making the router network namespace: %w", err)
		}
		if ns, _, err = openNS(path); err != nil {
			return err
		}
	}
	r.ns = ns
	if r.nl, err = netlink.NewHandleAt(vnetns.NsHandle(ns.Fd())); err != nil {
		return fmt.Errorf("netlink in the router namespace: %w", err)
	}
	// Again on a re-attach: a restarted service may have new ports, and
	// its sysctls are cheap to reassert.
	if err := inNS(ns, setupRouter); err != nil {
		return err
	}
	if err := installFirewall(ns, r.cfg.Ports); err != nil {
		return err
	}
	return r.recover()
}

// setupRouter runs inside the router namespace: loopback up (the proxy may
// listen there), no IPv6, no forwarding, strict reverse-path filtering as
// a second guard beside the firewall's.
func setupRouter() error {
	if err := sysctls(noIPv6); err != nil {
		return err
	}
	if err := sysctls(map[string]string{
		"ipv4/ip_forward":             "0",
		"ipv4/conf/all/rp_filter":     "1",
		"ipv4/conf/default/rp_filter": "1",
		"ipv4/conf/all/forwarding":    "0",
	}); err != nil {
		return err
	}
	return loopbackUp()
}

func loopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

// Listen is net.Listen inside the router namespace: how the proxy accepts
// connections from sandboxes. Close closes it too.
func (r *Router) Listen(network, addr string) (net.Listener, error) {
	return listenIn(r, func() (net.Listener, error) { return net.Listen(network, addr) })
}

// ListenPacket is net.ListenPacket inside the router namespace (the DNS
// server's socket). Close closes it too.
func (r *Router) ListenPacket(network, addr string) (net.PacketConn, error) {
	return listenIn(r, func() (net.PacketConn, error) { return net.ListenPacket(network, addr) })
}

func listenIn[T io.Closer](r *Router, open func() (T, error)) (T, error) {
	var c T
	err := r.listen(func() (err error) { c, err = open(); return err })
	if err != nil {
		return c, err
	}
	return c, r.keep(c)
}

func (r *Router) listen(f func() error) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return fmt.Errorf("network router: %w", net.ErrClosed)
	}
	// A socket stays in the namespace it was made in; the thread goes back.
	return inNS(r.ns, f)
}

func (r *Router) keep(c io.Closer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return fmt.Errorf("network router: %w", net.ErrClosed)
	}
	r.listeners = append(r.listeners, c)
	return nil
}

// Close closes the listeners made by Listen and ListenPacket and lets go
// of Dir. The namespaces stay: sandboxes outlive the service.
func (r *Router) Close() error {
	if r.shut() {
		return nil
	}
	r.release()
	return nil
}

// shut marks the router closed and closes its listeners; it reports
// whether it was closed already.
func (r *Router) shut() (already bool) {
	r.mu.Lock()
	already, r.closed = r.closed, true
	ls := r.listeners
	r.listeners = nil
	r.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	return already
}

func (r *Router) release() {
	if r.nl != nil {
		r.nl.Close()
	}
	if r.ns != nil {
		r.ns.Close()
	}
	r.lock.Close()
}

// Destroy closes the router and, when no link remains, removes its
// namespace and what it kept in Dir: the service's shutdown when no
// sandbox lives, and tests. With links left it only closes, and says so.
func (r *Router) Destroy() error {
	r.mu.Lock()
	n := len(r.links)
	r.mu.Unlock()
	if n > 0 {
		r.Close()
		return fmt.Errorf("network router: %d sandbox links remain, so its namespace is kept: %w", n, errdefs.ErrFailedPrecondition)
	}
	if r.shut() {
		return fmt.Errorf("network router: %w", net.ErrClosed)
	}
	// Dir's lock is held until what is under it is gone.
	err := errors.Join(removeNS(filepath.Join(r.cfg.Dir, "router")), os.Remove(filepath.Join(r.cfg.Dir, "ns")))
	os.Remove(filepath.Join(r.cfg.Dir, "lock"))
	r.release()
	return err
}
