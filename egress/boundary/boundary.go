// Package boundary is a sandbox's network boundary as the service runs
// it: it joins the namespaces and firewall (egress/netns), the proxy and
// its DNS (egress/proxy) and the secret store, and gives the sandbox
// manager what each sandbox needs (manager.Network): a namespace, the
// proxy variables, the placeholders of its secrets, its resolv.conf and
// hosts, and its CA.
//
// What a sandbox sees of it (egress and open mode):
//
//	eth0        an address of its own; the gateway is the router namespace
//	HTTP_PROXY, HTTPS_PROXY  http://GATEWAY:3128, upper case only (and
//	            every other TCP connection is redirected to the proxy anyway)
//	/etc/resolv.conf  nameserver GATEWAY (every UDP query to port 53 goes
//	            there anyway)
//	NAME=reins-secret-…  for each --secret NAME=HOST: the proxy swaps it for
//	            the value in requests to HOST
//	/.reins/net/ca.pem  the sandbox's CA, when it has secrets (its key stays
//	            in the sandbox's host directory), added to the trust store
//	            by the executor
//
// Files it keeps per sandbox, in the sandbox's host directory (the
// service's alone): ca.key (0600), and net/ (resolv.conf, hosts, ca.pem),
// mounted read-only in the sandbox.
package boundary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/egress/netns"
	"github.com/reinsdev/reins/egress/proxy"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Ports the proxy listens on in the router namespace (its own: no clash
// with anything on the host). The DNS port is not 53: the firewall
// accepts only queries it redirected (to port 53 of any address), and a
// redirect that changes nothing (a query to the gateway's own port 53)
// marks no NAT, so it would be dropped.
const (
	ProxyPort       = 3128
	TransparentPort = 15001
	DNSPort         = 10053
)

// Paths inside a sandbox.
const (
	NetTarget = "/.reins/net"
	CATarget  = NetTarget + "/ca.pem"
)

// Secrets reads secret values, on the trusted side (package secret).
type Secrets interface {
	Get(ctx context.Context, tenant, name string) ([]byte, error)
	// Has says whether tenant has a secret called name, without opening it.
	Has(ctx context.Context, tenant, name string) (bool, error)
}

// Config is how a Boundary is set up.
type Config struct {
	Dir string // the service's directory for the router namespace (DATA/net)
	// Overrides are the operator's static names (serve --egress-resolve).
	Overrides map[string][]netip.Addr
	// OverridePorts limits an override's trust to these ports (none:
	// every port).
	OverridePorts map[string][]int
	// Resolver resolves allowed names that Overrides do not (nil: this
	// host's resolver).
	Resolver *net.Resolver
	// Forbidden are the service's own listeners: never dialed.
	Forbidden []netip.AddrPort
	Secrets   Secrets
	// Log receives every entry of every sandbox's egress log, with the
	// sandbox's tenant; it must not block for long.
	Log    func(tenant string, e egress.Entry)
	Logger *slog.Logger
}

// Boundary gives sandboxes their network. Its methods are safe for
// concurrent use.
type Boundary struct {
	cfg    Config
	log    *slog.Logger
	router *netns.Router
	proxy  *proxy.Proxy
	lns    []net.Listener
	pc     net.PacketConn
	wg     sync.WaitGroup

	mu      sync.Mutex
	tenants map[string]string // sandbox id → tenant, for the log
}

// New opens the router namespace (re-attaching the links of sandboxes
// that outlived a restart) and starts the proxy in it. A proxy that cannot
// start is an error: the service must not make sandboxes whose network it
// cannot hold.
func New(cfg Config) (*Boundary, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Boundary{cfg: cfg, log: cfg.Logger, tenants: map[string]string{}}
	r, err := netns.Open(netns.Config{Dir: cfg.Dir, Logger: cfg.Logger,
		Ports: netns.Ports{Proxy: ProxyPort, Transparent: TransparentPort, DNS: DNSPort}})
	if err != nil {
		return nil, fmt.Errorf("the network boundary: %w", err)
	}
	b.router = r
	b.proxy = proxy.New(proxy.Config{
		Overrides: cfg.Overrides, OverridePorts: cfg.OverridePorts, Forbidden: cfg.Forbidden, Resolver: resolver(cfg.Resolver),
		OriginalDst: netns.OriginalDst, Log: b.entry, Logger: cfg.Logger,
	})
	explicit, err := r.Listen("tcp", ":"+strconv.Itoa(ProxyPort))
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("the egress proxy: %w", err)
	}
	b.lns = append(b.lns, explicit)
	transparent, err := r.Listen("tcp", ":"+strconv.Itoa(TransparentPort))
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("the egress proxy: %w", err)
	}
	b.lns = append(b.lns, transparent)
	b.pc, err = r.ListenPacket("udp", ":"+strconv.Itoa(DNSPort))
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("the sandboxes' DNS: %w", err)
	}
	b.serve(func() error { return b.proxy.ServeHTTP(explicit) })
	b.serve(func() error { return b.proxy.ServeTransparent(transparent) })
	b.serve(func() error { return b.proxy.ServeDNS(b.pc) })
	return b, nil
}

func (b *Boundary) serve(f func() error) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := f(); err != nil && !errors.Is(err, net.ErrClosed) {
			b.log.Error("egress proxy stopped", "err", err)
		}
	}()
}

func (b *Boundary) entry(e egress.Entry) {
	b.mu.Lock()
	tenant := b.tenants[e.Sandbox]
	b.mu.Unlock()
	if b.cfg.Log != nil {
		b.cfg.Log(tenant, e)
	}
}

// Attach gives sandbox req.ID its network (again, for one that survived a
// restart of the service: the same namespace and placeholders).
func (b *Boundary) Attach(ctx context.Context, req sandbox.NetworkRequest) (sandbox.NetworkConfig, error) {
	if req.Rules.Mode == egress.ModeNone {
		ns, err := b.router.Isolated(req.ID)
		if err != nil {
			return sandbox.NetworkConfig{}, err
		}
		return sandbox.NetworkConfig{NetNS: ns}, nil
	}
	secrets, placeholders, err := b.secrets(ctx, req)
	if err != nil {
		return sandbox.NetworkConfig{}, err
	}
	// A CA only for a sandbox with secrets: the proxy terminates TLS to
	// put a secret in, and for nothing else (secrets are bound at
	// create, so a sandbox without them never needs one).
	var ca *proxy.CA
	var execArgs []string
	if len(secrets) > 0 {
		if ca, err = loadCA(req.Dir, req.ID); err != nil {
			return sandbox.NetworkConfig{}, err
		}
		execArgs = []string{"--ca-cert", CATarget}
	}
	link, err := b.router.Attach(req.ID)
	if err != nil {
		return sandbox.NetworkConfig{}, err
	}
	fail := func(err error) (sandbox.NetworkConfig, error) {
		b.proxy.Remove(req.ID)
		b.router.Detach(req.ID)
		return sandbox.NetworkConfig{}, err
	}
	if err := writeFiles(req, link); err != nil {
		return fail(err)
	}
	b.mu.Lock()
	b.tenants[req.ID] = req.Tenant
	b.mu.Unlock()
	b.proxy.Remove(req.ID) // a re-attach after a restart replaces nothing; a repeated one replaces itself
	if err := b.proxy.Add(proxy.Sandbox{ID: req.ID, Addr: link.Addr, Rules: req.Rules, Secrets: secrets, CA: ca}); err != nil {
		return fail(err)
	}
	gw := link.Gateway.String()
	proxyURL := "http://" + gw + ":" + strconv.Itoa(ProxyPort)
	noProxy := "localhost,127.0.0.1,::1"
	// Only the upper-case proxy variables: busybox wget reads only the
	// lower-case ones and has no no_proxy, so it would send even
	// http://localhost:3000 to the proxy. Programs that read neither go
	// through the firewall's redirect to the same proxy.
	env := []string{"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "NO_PROXY=" + noProxy, "no_proxy=" + noProxy}
	for _, s := range secrets {
		env = append(env, s.Name+"="+s.Placeholder)
	}
	netDir := filepath.Join(req.Dir, "net")
	return sandbox.NetworkConfig{
		NetNS: link.NetNS,
		Env:   env,
		Mounts: []sandbox.Mount{
			{Source: netDir, Target: NetTarget, ReadOnly: true},
			{Source: filepath.Join(netDir, "resolv.conf"), Target: "/etc/resolv.conf", ReadOnly: true},
			{Source: filepath.Join(netDir, "hosts"), Target: "/etc/hosts", ReadOnly: true},
		},
		ExecutorArgs: execArgs,
		Placeholders: placeholders,
		Addr:         link.Addr.String(),
	}, nil
}

// Check refuses rules whose secrets tenant does not have, before a
// sandbox is made.
func (b *Boundary) Check(ctx context.Context, tenant string, rules egress.Rules) error {
	for _, ref := range rules.Secrets {
		if b.cfg.Secrets == nil {
			return fmt.Errorf("this service keeps no secrets: %w", errdefs.ErrFailedPrecondition)
		}
		ok, err := b.cfg.Secrets.Has(ctx, tenant, ref.Name)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("secret %s not found: set it with \"reins secret set %s\": %w", ref.Name, ref.Name, errdefs.ErrNotFound)
		}
	}
	return nil
}

// secrets resolves the sandbox's secrets: a placeholder for each (the one
// it had, or a new one) and the value. An unknown secret is an error.
func (b *Boundary) secrets(ctx context.Context, req sandbox.NetworkRequest) ([]proxy.Secret, map[string]string, error) {
	var out []proxy.Secret
	placeholders := map[string]string{}
	for _, ref := range req.Rules.Secrets {
		if b.cfg.Secrets == nil {
			return nil, nil, fmt.Errorf("this service keeps no secrets: %w", errdefs.ErrFailedPrecondition)
		}
		v, err := b.cfg.Secrets.Get(ctx, req.Tenant, ref.Name)
		if err != nil {
			return nil, nil, err
		}
		ph := req.Placeholders[ref.Name]
		if ph == "" {
			ph = proxy.NewPlaceholder()
		}
		placeholders[ref.Name] = ph
		out = append(out, proxy.Secret{Name: ref.Name, Placeholder: ph, Value: v, Hosts: ref.Hosts})
	}
	return out, placeholders, nil
}

// Update gives a running sandbox new rules (its secrets' values read
// again) and, for one handed out of the warm pool, its tenant; open
// connections the rules deny are closed.
func (b *Boundary) Update(ctx context.Context, req sandbox.NetworkRequest) error {
	if _, ok := b.router.Link(req.ID); !ok {
		if req.Rules.Mode == egress.ModeNone {
			return nil
		}
		return fmt.Errorf("sandbox %s has no network interface: %w", req.ID, errdefs.ErrFailedPrecondition)
	}
	secrets, _, err := b.secrets(ctx, req)
	if err != nil {
		return err
	}
	if err := b.proxy.Update(req.ID, req.Rules, secrets); err != nil {
		return err
	}
	// A warm pool's sandbox changes hands: its egress is logged as its
	// new tenant's from now on.
	b.mu.Lock()
	b.tenants[req.ID] = req.Tenant
	b.mu.Unlock()
	return nil
}

// Detach removes a sandbox's network: its connections close.
func (b *Boundary) Detach(ctx context.Context, id string) error {
	b.proxy.Remove(id)
	b.mu.Lock()
	delete(b.tenants, id)
	b.mu.Unlock()
	return b.router.Detach(id)
}

// Close stops the proxy; the sandboxes' namespaces stay (they outlive the
// service, which re-attaches them). With no sandbox left, the router
// namespace goes too.
func (b *Boundary) Close() error {
	for _, l := range b.lns {
		l.Close()
	}
	if b.pc != nil {
		b.pc.Close()
	}
	if b.proxy != nil {
		b.proxy.Close()
	}
	b.wg.Wait()
	if b.router == nil {
		return nil
	}
	if len(b.router.Links()) == 0 {
		return b.router.Destroy()
	}
	return b.router.Close()
}

// loadCA reads the sandbox's CA from its host directory, or makes one.
func loadCA(dir, id string) (*proxy.CA, error) {
	keyPath, certPath := filepath.Join(dir, "ca.key"), filepath.Join(dir, "net", "ca.pem")
	key, kerr := os.ReadFile(keyPath)
	cert, cerr := os.ReadFile(certPath)
	if kerr == nil && cerr == nil {
		return proxy.ParseCA(cert, key)
	}
	ca, err := proxy.NewCA(id)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
		return nil, err
	}
	if err := writeFile(keyPath, ca.KeyPEM(), 0o600); err != nil {
		return nil, err
	}
	if err := writeFile(certPath, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// writeFiles writes the sandbox's resolv.conf and hosts.
func writeFiles(req sandbox.NetworkRequest, link netns.Link) error {
	dir := filepath.Join(req.Dir, "net")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	resolv := "# reins: the sandbox's DNS is the service's; it answers allowed names only\n" +
		"nameserver " + link.Gateway.String() + "\noptions attempts:2 timeout:2\n"
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		link.Addr.String() + "\t" + req.Hostname + "\n"
	if err := writeFile(filepath.Join(dir, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "hosts"), []byte(hosts), 0o644)
}

// writeFile replaces path atomically. The directory is the service's
// (the sandbox sees it read-only), so no symlink of the sandbox's is in
// the way.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// resolver is r as the proxy's interface, nil staying nil.
func resolver(r *net.Resolver) interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
} {
	if r == nil {
		return nil
	}
	return r
}
