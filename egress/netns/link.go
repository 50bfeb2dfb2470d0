package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/reinsdev/reins/errdefs"
)

// Link is one sandbox's network: the namespace to run it in (give NetNS
// to runc or runsc as the OCI spec's network namespace path) and its
// addresses. The sandbox's end is eth0 with Addr/Prefix and a default
// route via Gateway, the router's end.
type Link struct {
	ID      string
	NetNS   string
	Addr    netip.Addr
	Gateway netip.Addr
	Prefix  int
}

// linkBits is the size of each link's subnet: a /30, whose .1 is the
// gateway and .2 the sandbox (the firewall's anti-spoofing rule counts on
// it).
const linkBits = 30

// ids are sandbox ids (sandbox/oci.ValidID): a file name here and a veth
// alias.
var ids = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func validID(id string) error {
	if !ids.MatchString(id) {
		return fmt.Errorf("sandbox id %q: want 1-64 of [A-Za-z0-9_.-], not starting with . _ or -: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// vethName is a new name for a router end: random, because a detached
// link's veth may linger under its old name until its sandbox ends (see
// remove). What a veth is is in its alias and address, not its name.
func vethName() string { return fmt.Sprintf("r%08x", rand.Uint32()) }

// Attach makes the network namespace of sandbox id, with a veth whose
// other end is on the router, and returns its link. For an id already
// attached (by this Router or one before a restart) it returns that link.
// It changes no firewall rule.
func (r *Router) Attach(id string) (Link, error) {
	if err := validID(id); err != nil {
		return Link{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Link{}, fmt.Errorf("network router: %w", net.ErrClosed)
	}
	if l, ok := r.links[id]; ok {
		return l, nil
	}
	gw, ok := r.free()
	if !ok {
		return Link{}, fmt.Errorf("sandbox %s: no free address left in the sandbox network %s: remove sandboxes or configure a larger subnet: %w", id, r.cfg.Subnet, errdefs.ErrResourceExhausted)
	}
	l := Link{ID: id, NetNS: r.nsPath(id), Gateway: gw, Addr: gw.Next(), Prefix: linkBits}
	veth := vethName()
	if err := r.attach(l, veth); err != nil {
		r.remove(l, veth)
		return Link{}, fmt.Errorf("sandbox %s: making its network: %w", id, err)
	}
	r.links[id], r.used[gw], r.veths[id] = l, true, veth
	return l, nil
}

func (r *Router) nsPath(id string) string { return filepath.Join(r.cfg.Dir, "ns", id) }

// free returns the lowest gateway address no link uses.
func (r *Router) free() (netip.Addr, bool) {
	a := r.cfg.Subnet.Addr()
	for r.cfg.Subnet.Contains(a) {
		gw := a.Next()
		if !r.used[gw] {
			return gw, true
		}
		for range 4 {
			a = a.Next()
		}
	}
	return netip.Addr{}, false
}

func (r *Router) attach(l Link, name string) error {
	if err := newNS(l.NetNS, setupSandbox); err != nil {
		return err
	}
	sb, _, err := openNS(l.NetNS)
	if err != nil {
		return err
	}
	defer sb.Close()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: name, MTU: r.cfg.MTU},
		PeerName:  "eth0", PeerMTU: uint32(r.cfg.MTU), PeerNamespace: netlink.NsFd(int(sb.Fd())),
	}
	if err := r.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding veth %s: %w", veth.Name, err)
	}
	// The alias is how a restarted service knows whose link this is
	// (LinkAdd does not set it).
	if err := r.nl.LinkSetAlias(veth, l.ID); err != nil {
		return fmt.Errorf("naming veth %s: %w", veth.Name, err)
	}
	if err := configure(r.nl, veth.Name, l.Gateway, l.Prefix, netip.Addr{}); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(vnetns.NsHandle(sb.Fd()))
	if err != nil {
		return err
	}
	defer h.Close()
	return configure(h, "eth0", l.Addr, l.Prefix, l.Gateway)
}

// configure gives link name its address, brings it up and, with a valid
// gw, routes everything through gw.
func configure(h *netlink.Handle, name string, addr netip.Addr, bits int, gw netip.Addr) error {
	link, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding %s: %w", name, err)
	}
	ipnet := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(bits, 32)}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("address %s on %s: %w", ipnet, name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up: %w", name, err)
	}
	if !gw.IsValid() {
		return nil
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}

// setupSandbox runs inside a new sandbox namespace, before its veth
// arrives: no IPv6 (the default applies to the eth0 to come), loopback up.
func setupSandbox() error {
	if err := sysctls(noIPv6); err != nil {
		return err
	}
	return loopbackUp()
}

// Isolated is the namespace for a sandbox with no network (mode none):
// it returns "", which makes the backend give the sandbox a new namespace
// of its own with only loopback. That is as closed as one made here: a
// namespace with no interface to another has no way out whoever owns it
// (runc's is owned by the sandbox's user namespace, so root inside may
// add dummy or veth devices, but only within it; it cannot move one into
// a namespace it does not own), and gVisor's netstack, with no
// interface in its namespace, has loopback only.
func (r *Router) Isolated(id string) (string, error) {
	return "", validID(id)
}

// Link returns the link of sandbox id, if it has one.
func (r *Router) Link(id string) (Link, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.links[id]
	return l, ok
}

// Links returns every link, by id: after Open, those that survived a
// restart of the service.
func (r *Router) Links() []Link {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Link, 0, len(r.links))
	for _, l := range r.links {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Link) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Detach removes sandbox id's veth, namespace and mount. An id with no
// link is not an error. A sandbox still running in the namespace keeps
// it (without its veth, so without network) until it ends.
func (r *Router) Detach(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("network router: %w", net.ErrClosed)
	}
	l, ok := r.links[id]
	if !ok {
		l = Link{ID: id, NetNS: r.nsPath(id)}
	}
	if err := r.remove(l, r.veths[id]); err != nil {
		return fmt.Errorf("sandbox %s: removing its network: %w", id, err)
	}
	delete(r.links, id)
	delete(r.used, l.Gateway)
	delete(r.veths, id)
	return nil
}

// remove cuts the router's end of the veth off (its address and alias
// go, so nothing the sandbox sends is routed back out of it and the
// firewall's reverse-path rule drops it) and then removes the namespace:
// the order Open's recovery expects. It does not delete the veth: that
// waits for an RCU grace period (30 ms here, against 1 ms for the rest),
// and the kernel deletes both ends anyway when the namespace ends, which
// is as soon as the sandbox in it has, or at once if none is.
func (r *Router) remove(l Link, veth string) error {
	if veth != "" {
		link, err := r.nl.LinkByName(veth)
		if err == nil {
			err = r.retire(link)
		}
		if err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) {
			return fmt.Errorf("detaching veth %s: %w", veth, err)
		}
	}
	return removeNS(l.NetNS)
}

func (r *Router) retire(link netlink.Link) error {
	addrs, err := r.nl.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := r.nl.AddrDel(link, &a); err != nil {
			return err
		}
	}
	return r.nl.LinkSetAlias(link, "")
}

// recover reads the links a previous Router left (router veths, by their
// alias) and removes what an interrupted Attach or Detach left half made:
// a veth without its namespace file, a namespace file without its veth.
func (r *Router) recover() error {
	all, err := r.nl.LinkList()
	if err != nil {
		return err
	}
	for _, link := range all {
		a := link.Attrs()
		if link.Type() != "veth" || a.Alias == "" { // lo, or retired by remove
			continue
		}
		l, ok := r.linkOf(link)
		if !ok {
			r.cfg.Logger.Warn("removing a half-made sandbox link", "veth", a.Name, "sandbox", a.Alias)
			if err := r.nl.LinkDel(link); err != nil {
				return err
			}
			continue
		}
		r.links[l.ID], r.used[l.Gateway], r.veths[l.ID] = l, true, a.Name
	}
	ents, err := os.ReadDir(filepath.Join(r.cfg.Dir, "ns"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if _, ok := r.links[e.Name()]; ok {
			continue
		}
		r.cfg.Logger.Warn("removing a sandbox network namespace with no link", "sandbox", e.Name())
		if err := removeNS(filepath.Join(r.cfg.Dir, "ns", e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// linkOf reads a router veth back into a Link; ok is false when it is not
// a whole one.
func (r *Router) linkOf(link netlink.Link) (Link, bool) {
	id := link.Attrs().Alias
	if validID(id) != nil {
		return Link{}, false
	}
	addrs, err := r.nl.AddrList(link, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 {
		return Link{}, false
	}
	gw, ok := netip.AddrFromSlice(addrs[0].IP.To4())
	if bits, _ := addrs[0].Mask.Size(); !ok || bits != linkBits {
		return Link{}, false
	}
	l := Link{ID: id, NetNS: r.nsPath(id), Gateway: gw, Addr: gw.Next(), Prefix: linkBits}
	f, ok, err := openNS(l.NetNS)
	if err != nil || !ok {
		return Link{}, false
	}
	f.Close()
	return l, true
}
