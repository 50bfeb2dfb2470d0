package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/egress/boundary"
	"github.com/reinsdev/reins/egress/egresslog"
	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/runc"
	"github.com/reinsdev/reins/sandbox/template"
	"github.com/reinsdev/reins/sandbox/workspace"
	"github.com/reinsdev/reins/secret"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/server/mcp"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/blob"
	"github.com/reinsdev/reins/store/sqlite"
)

// serveConfig is everything `reins serve` is told.
type serveConfig struct {
	DataDir        string
	Addr           string
	ExecutorPath   string
	RunscPath      string
	DefaultBackend string
	LogLevel       string
	Defaults       sandbox.Limits
	TenantMax      sandbox.Limits
	CheckInterval  time.Duration
	AnswerTimeout  time.Duration
	DefaultModel   string
	ConfigFile     string
	TenantQuota    store.Quota
	ReleaseAfter   time.Duration
	EgressResolve  []string // NAME=IP
	EgressDNS      string
	PortDomain     string
	// ExpiryWarning and SuspendedRetention: the lifecycle's defaults
	// (manager.Config).
	ExpiryWarning      time.Duration
	SuspendedRetention time.Duration
	Pool               []string // IMAGE=N
	// DiskPool: formatted disks kept ready (manager.Config.DiskPool).
	DiskPool int
	// E2BAddr and E2BDomain: the E2B-compatible endpoint (serve_e2b.go).
	E2BAddr, E2BDomain string
}

func serveCmd() *cobra.Command {
	var cfg serveConfig
	var mem, disk, maxMem, maxDisk sizeFlag
	maxMem.v, maxDisk.v = 8<<30, 64<<30
	var cpus cpuFlag
	maxCPUs := cpuFlag{float64(runtime.NumCPU())}
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the reins service (the API, sandboxes, runs)",
		Long: `Run the reins service. On first start it writes an admin token to
DATA_DIR/admin.token (mode 0600); clients send it as REINS_TOKEN, and the
key that seals stored secrets to DATA_DIR/secret.key (32 bytes, mode 0600:
back it up apart from the database; without it no secret can be opened).
Sandboxes outlive the service: a restarted service re-attaches to them.

--config FILE (JSON) configures trusted tools and prices; "env:NAME" values
are read from this process's environment:

  {"sql":   [{"name": "crm", "url": "sqlite:/srv/crm.db", "allow_writes": false}],
   "email": {"addr": "smtp.example.com:587", "from": "agent@example.com",
             "username": "agent", "password": "env:SMTP_PASSWORD",
             "allowed_recipients": ["*@example.com"]},
   "http":  {"allowed_hosts": ["api.example.com"],
             "secrets": {"api.example.com": {"Authorization": "env:API_AUTH"}}},
   "prices": {"anthropic:claude-sonnet-4-5": {"input": 3, "output": 15}}}`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			cfg.Defaults.MemoryBytes, cfg.Defaults.DiskBytes = mem.v, disk.v
			cfg.TenantMax.MemoryBytes, cfg.TenantMax.DiskBytes = maxMem.v, maxDisk.v
			cfg.Defaults.CPUs, cfg.TenantMax.CPUs = cpus.v, maxCPUs.v
			return serve(cfg)
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/reins", "where reins keeps its state, images and sandboxes")
	f.StringVar(&cfg.Addr, "addr", "127.0.0.1:7070", "HOST:PORT to serve the API on")
	f.StringVar(&cfg.ExecutorPath, "executor", "", "path of the static reins-executor binary (default: next to this binary)")
	f.StringVar(&cfg.RunscPath, "runsc", "", "path of gVisor's runsc (default: $REINS_RUNSC, else the pinned build `make deps` puts in "+gvisor.CacheDir+")")
	f.StringVar(&cfg.DefaultBackend, "default-backend", "gvisor", "backend for sandboxes that name none: gvisor or runc")
	f.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	f.Var(&cpus, "default-cpus", "CPUs of sandboxes that set none, e.g. 0.5 or 500m (default 1)")
	f.Var(&mem, "default-memory", "memory of sandboxes that set none (default 1G)")
	f.Var(&disk, "default-disk", "disk of sandboxes that set none (default 4G)")
	durationVar(f, &cfg.CheckInterval, "check-interval", time.Second, "how often sandboxes are checked for death, TTL and idleness")
	durationVar(f, &cfg.ReleaseAfter, "release-after", 2*time.Minute, "suspend the sandboxes of runs that wait (paused, for an approval) this long; their files are kept")
	f.StringVar(&cfg.ConfigFile, "config", "", "JSON file configuring trusted tools (sql, email, http) and model prices")
	f.StringVar(&cfg.DefaultModel, "default-model", "anthropic:claude-sonnet-4-5", "model of runs that name none")
	durationVar(f, &cfg.AnswerTimeout, "executor-timeout", 20*time.Second, "how long a call waits for a sandbox's executor to start answering")
	f.Var(&maxCPUs, "tenant-max-cpus", "most CPUs a tenant's sandbox may ask for (the default is this host's)")
	f.Var(&maxMem, "tenant-max-memory", "most memory a tenant's sandbox may ask for")
	f.Var(&maxDisk, "tenant-max-disk", "largest disk a tenant's sandbox may ask for (disks are sparse: the host's free space is not checked)")
	f.Int64Var(&cfg.TenantMax.Pids, "tenant-max-pids", 32768, "most processes a tenant's sandbox may ask for")
	f.IntVar(&cfg.TenantQuota.Sandboxes, "tenant-max-sandboxes", 10, "sandboxes (not stopped) a tenant may have at once, unless its own quota says otherwise; 0: no limit")
	f.StringArrayVar(&cfg.EgressResolve, "egress-resolve", nil, "NAME=IP[:PORT]: the egress proxy resolves NAME to IP without DNS and trusts it (the address may be private or loopback): on PORT only, or with no port on every port; repeat for more names, addresses or ports (split-horizon DNS, a mirror, tests)")
	f.StringVar(&cfg.EgressDNS, "egress-dns", "", "HOST:PORT of the DNS server the egress proxy asks for allowed names (default: this host's resolver)")
	f.IntVar(&cfg.TenantQuota.Runs, "tenant-max-runs", 10, "runs (not finished) a tenant may have at once, unless its own quota says otherwise; 0: no limit")
	f.StringArrayVar(&cfg.Pool, "pool", nil, "IMAGE=N: keep N sandboxes of IMAGE (an image, snapshot:NAME or template:NAME) ready, so that a create of it with the default limits and backend returns in milliseconds; repeat for more images")
	f.StringVar(&cfg.PortDomain, "port-domain", "localhost", "domain of the URLs that reach ports in sandboxes (PORT-ID.DOMAIN, on this service's port); its names must resolve to this service")
	durationVar(f, &cfg.ExpiryWarning, "expiry-warning", time.Minute, "how long before a sandbox's TTL runs out its expiring event fires, for sandboxes that set none")
	f.IntVar(&cfg.DiskPool, "disk-pool", 2, "formatted disks of the default size kept ready, so that mkfs is off the create path; a fork --count N takes N at once (N+2 keeps a burst of N off it); 0 keeps none")
	durationVar(f, &cfg.SuspendedRetention, "suspended-retention", 7*24*time.Hour, "how long a suspended sandbox is kept (from its suspend, or an extend) before it is deleted with its saved workspace")
	f.StringVar(&cfg.E2BAddr, "e2b-addr", "", "HOST:PORT to serve the E2B-compatible API on, for the unmodified e2b SDKs (E2B_API_URL and E2B_SANDBOX_URL=http://HOST:PORT, E2B_API_KEY a reins token; docs/e2b.md); empty: none")
	f.StringVar(&cfg.E2BDomain, "e2b-domain", "", "domain the E2B API's sandboxes answer with, so that the SDK's getHost(port) is PORT-ID.DOMAIN (default: --port-domain and --addr's port, which reach ports through the port URLs)")
	return c
}

func serve(cfg serveConfig) error {
	if cfg.ExpiryWarning < 0 || cfg.SuspendedRetention < 0 || cfg.DiskPool < 0 {
		return usageError{errors.New("--expiry-warning, --suspended-retention and --disk-pool must not be negative")}
	}
	diskPool := cfg.DiskPool
	if diskPool == 0 {
		diskPool = -1 // the manager's "none"
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return usageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", cfg.LogLevel)}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	fileCfg, err := loadConfig(cfg.ConfigFile)
	if err != nil {
		return err
	}
	trustedTools, closeTools, err := fileCfg.trustedTools()
	if err != nil {
		return err
	}
	defer closeTools()
	pool, err := parsePool(cfg.Pool)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("reins serve needs root: it mounts sandbox disks and runs runsc/runc; run it with sudo")
	}
	lock, err := openDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	token, err := adminToken(cfg.DataDir)
	if err != nil {
		return err
	}
	// Before anything recovers: a key that is not right stops the start.
	secretKey, err := secret.LoadKey(filepath.Join(cfg.DataDir, secret.KeyFile))
	if err != nil {
		return err
	}
	if cfg.ExecutorPath == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.ExecutorPath = filepath.Join(filepath.Dir(self), "reins-executor")
	}
	backends, err := openBackends(cfg.DataDir, cfg.RunscPath, shimPath())
	if err != nil {
		return err
	}
	images, err := image.NewStore(filepath.Join(cfg.DataDir, "images"), image.WithLogger(log), image.WithBuildCache(image.DefaultBuildCache))
	if err != nil {
		return err
	}
	st, err := sqlite.Open(filepath.Join(cfg.DataDir, "reins.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	secrets, err := secret.New(st, secretKey)
	if err != nil {
		return err
	}
	tenants := &server.Tenants{Store: st, Defaults: cfg.TenantQuota}
	// The API's listener first: the proxy must know the service's own
	// address to refuse it, and a taken port fails before anything runs.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (is another reins serve running? choose another --addr)", cfg.Addr, err)
	}
	defer ln.Close()
	front, err := listenE2B(cfg.E2BAddr)
	if err != nil {
		return err
	}
	overrides, overridePorts, err := parseResolve(cfg.EgressResolve)
	if err != nil {
		return err
	}
	egressLog := egresslog.New(st, log)
	defer egressLog.Close()
	bnd, err := boundary.New(boundary.Config{
		Dir: filepath.Join(cfg.DataDir, "net"), Overrides: overrides, OverridePorts: overridePorts, Resolver: resolverAt(cfg.EgressDNS),
		Forbidden: ownAddrs(ln.Addr()), Secrets: secrets, Log: egressLog.Add, Logger: log,
	})
	if err != nil {
		return err
	}
	defer bnd.Close()
	// The engine, made after the manager, ends the record run of a
	// sandbox that is removed, and is the gateway's ledger; the gateway
	// answers 503 until it is made (a sandbox's program may call while
	// the manager recovers).
	var engineRef atomic.Pointer[agent.Engine]
	var m *manager.Manager
	var gwRef atomic.Pointer[gateway.Gateway]
	gw := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g := gwRef.Load(); g != nil {
			g.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "reins serve is starting: retry", http.StatusServiceUnavailable)
	})
	workspaces, err := workspace.Open(filepath.Join(cfg.DataDir, "workspaces"))
	if err != nil {
		return err
	}
	m, err = manager.New(manager.Config{
		Dir:                filepath.Join(cfg.DataDir, "sandboxes"),
		ExecutorPath:       cfg.ExecutorPath,
		Backends:           backends,
		DefaultBackend:     cfg.DefaultBackend,
		Images:             manager.ImageStore(images),
		Defaults:           cfg.Defaults,
		TenantMax:          cfg.TenantMax,
		CheckInterval:      cfg.CheckInterval,
		AnswerTimeout:      cfg.AnswerTimeout,
		MaxSandboxes:       tenants.MaxSandboxes,
		Network:            bnd,
		Gateway:            gw,
		Workspaces:         manager.WorkspaceStore(workspaces),
		ExpiryWarning:      cfg.ExpiryWarning,
		SuspendedRetention: cfg.SuspendedRetention,
		OnEvent:            noteRunSandbox(&engineRef),
		DiskPool:           diskPool,
		Removed: func(id string) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			egressLog.Delete(ctx, id)
			if eng := engineRef.Load(); eng != nil {
				eng.SandboxGone(ctx, id, "it was removed")
			}
		},
		Pool:   pool,
		Logger: log,
	})
	if err != nil {
		return err
	}
	templates, err := template.NewStore(filepath.Join(cfg.DataDir, "templates"))
	if err != nil {
		return err
	}
	// template:NAME images, the snapshots templates stand on, and the
	// sandboxes a template's removal must wait for.
	m.UseTemplates(templates)
	m.AddSnapshotUsers(templates)
	templates.UseBy(m.TemplateUsers)
	ctx, cancel := cmdContext()
	defer cancel()
	if err := m.Recover(ctx); err != nil {
		return fmt.Errorf("recovering sandboxes: %w", err)
	}
	go m.Run(ctx)
	// Waited for at shutdown: a refill cut short cleans up after itself
	// before the process exits (no half-made disk or mount is left).
	poolDone := make(chan struct{})
	go func() { m.RunPool(ctx); close(poolDone) }()

	blobs, err := blob.Open(filepath.Join(cfg.DataDir, "blobs"))
	if err != nil {
		return err
	}
	engine, err := agent.New(agent.Config{
		Store: st, Blobs: blobs, Models: openModel, Logger: log,
		Trusted: trustedTools, Prices: prices(fileCfg.Prices), ReleaseAfter: cfg.ReleaseAfter,
		CheckImage: server.CheckImage,
		TenantPolicy: func(ctx context.Context, tenant string) (string, error) {
			tn, err := st.GetTenant(ctx, tenant)
			return tn.Policy, err
		},
		Sandboxes: manager.Runs{M: m, TenantOf: func(ctx context.Context, runID string) (string, error) {
			run, err := st.GetRun(ctx, "", runID)
			return run.Tenant, err
		}, NetworkOf: func(ctx context.Context, runID string) (egress.Rules, error) {
			run, err := st.GetRun(ctx, "", runID)
			if err != nil {
				return egress.Rules{}, err
			}
			var spec runlog.Spec
			if err := json.Unmarshal(run.Spec, &spec); err != nil {
				return egress.Rules{}, fmt.Errorf("run %s: its spec does not read: %w", runID, err)
			}
			return spec.Network, nil
		}, Egress: egressLog.Since},
	})
	if err != nil {
		return err
	}
	engineRef.Store(engine)
	g, err := gateway.New(gateway.Config{
		Ledger:    engine,
		Authorize: m.AuthorizeGateway,
		Anthropic: gateway.Upstream{BaseURL: cmp.Or(os.Getenv("ANTHROPIC_BASE_URL"), "https://api.anthropic.com"), Key: os.Getenv("ANTHROPIC_API_KEY")},
		OpenAI:    gateway.Upstream{BaseURL: cmp.Or(os.Getenv("OPENAI_BASE_URL"), "https://api.openai.com/v1"), Key: os.Getenv("OPENAI_API_KEY")},
		Open: func(t gateway.Target) (model.Model, string, error) {
			return openModel(agent.ModelSpec{Model: t.Model, Script: t.Script, Tenant: t.Tenant})
		},
	})
	if err != nil {
		return err
	}
	gwRef.Store(g)
	tenants.CheckPolicy = engine.CheckPolicy
	if err := engine.Recover(ctx); err != nil {
		return fmt.Errorf("recovering runs: %w", err)
	}
	go engine.Janitor(ctx)
	defer engine.Close()

	ports, err := portConfig(cfg, ln.Addr())
	if err != nil {
		return err
	}
	self := newInProcess()
	srv := &http.Server{
		Handler: server.New(server.Over(m), token, log).WithVersion(version).WithTenants(tenants).WithSecrets(secrets).
			WithNetworks(m).WithExpiries(m).WithSuspender(m).WithSnapshots(m).WithPausers(m).WithHolds(m).WithImages(m).
			WithTemplates(&template.Builder{Store: templates, Sandboxes: manager.TemplateBuilds{M: m}}).WithEgressLogs(egressLog).WithRuns(&server.Runs{
			Engine: engine, Store: st, DefaultModel: cfg.DefaultModel,
		}).WithPorts(ports).WithHandler("/mcp", mcpHandler(self, log)).Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	self.serve(srv.Handler)
	if front != nil {
		if err := front.serve(self, cfg.DataDir, e2bDomain(cfg.E2BDomain, ports), log); err != nil {
			return err
		}
	}
	log.Info("reins serving", "addr", ln.Addr().String(), "data_dir", cfg.DataDir, "token_file", filepath.Join(cfg.DataDir, "admin.token"))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Sandboxes keep running; a later reins serve re-attaches to them.
	log.Info("shutting down; sandboxes keep running")
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	if front != nil {
		front.shutdown(sctx)
	}
	self.shutdown(sctx)
	<-poolDone
	m.Close()
	return nil
}

// shimPath is the small shim binary beside this one (make build puts
// bin/reins-shim there), or "" to re-execute this binary as the shim: a
// 6 MB program that runs only the shim starts in about a millisecond on
// the host, against about 10 for this one, and one starts on every create.
func shimPath() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(self), "reins-shim")
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return ""
	}
	return p
}

// openBackends sets up every backend this machine can run; the explicit
// list is the registry (no self-registration).
func openBackends(dataDir, runsc, shim string) (map[string]sandbox.Backend, error) {
	out := map[string]sandbox.Backend{}
	var problems []string
	var opts []gvisor.Option
	var ropts []runc.Option
	if runsc != "" {
		opts = append(opts, gvisor.WithBinary(runsc))
	}
	if shim != "" {
		opts = append(opts, gvisor.WithShim(shim))
		ropts = append(ropts, runc.WithShim(shim))
	}
	if b, err := gvisor.New(filepath.Join(dataDir, "runtime", "gvisor"), opts...); err == nil {
		out[b.Name()] = b
	} else {
		problems = append(problems, err.Error())
	}
	if b, err := runc.New(filepath.Join(dataDir, "runtime", "runc"), ropts...); err == nil {
		out[b.Name()] = b
	} else {
		problems = append(problems, err.Error())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no sandbox backend can run here: %s", strings.Join(problems, "; "))
	}
	for _, p := range problems {
		slog.Warn("backend unavailable", "err", p)
	}
	for name, b := range out {
		if v, ok := b.(sandbox.Versioner); ok {
			slog.Info("backend", "name", name, "runtime", v.Version())
		}
	}
	return out, nil
}

// adminToken reads DIR/admin.token, writing a new one on first start.
func adminToken(dir string) (string, error) {
	p := filepath.Join(dir, "admin.token")
	data, err := os.ReadFile(p)
	if err == nil {
		if t := strings.TrimSpace(string(data)); t != "" {
			return t, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	b := make([]byte, 24)
	rand.Read(b)
	t := "reins_" + hex.EncodeToString(b)
	if err := os.WriteFile(p, []byte(t+"\n"), 0o600); err != nil {
		return "", err
	}
	return t, nil
}

// portConfig is the port URLs' configuration: the domain, the port the
// service listens on, and the links' key, DIR/port.key (0600, made on
// first start).
func portConfig(cfg serveConfig, addr net.Addr) (*server.Ports, error) {
	domain := strings.Trim(strings.ToLower(cfg.PortDomain), ".")
	if domain == "" || strings.ContainsAny(domain, "/:@ ") {
		return nil, usageError{fmt.Errorf("--port-domain %q: give a domain name, such as localhost or ports.example.com", cfg.PortDomain)}
	}
	key, err := secretFile(filepath.Join(cfg.DataDir, "port.key"), 32)
	if err != nil {
		return nil, err
	}
	p := &server.Ports{Domain: domain, Key: key}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.Port != 80 {
		p.ServicePort = strconv.Itoa(ta.Port)
	}
	return p, nil
}

// secretFile reads the key at p, or on first start writes n random bytes
// there (0600).
func secretFile(p string, n int) ([]byte, error) {
	data, err := os.ReadFile(p)
	if err == nil && len(data) >= n {
		return data, nil
	}
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the key %s is unreadable or too short (%v): remove it to make a new one (links made with it stop working)", p, err)
	}
	key := make([]byte, n)
	rand.Read(key)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, err
	}
	return key, f.Close()
}

// prices are the default price table with the config's entries over it.
func prices(over agent.Prices) agent.Prices {
	p := agent.DefaultPrices()
	for k, v := range over {
		p[k] = v
	}
	return p
}

// parsePool reads --pool IMAGE=N flags: the operator's, so an image may
// name a host path (a tenant's create is still refused one, before the
// pool is looked at).
func parsePool(flags []string) ([]manager.PoolSize, error) {
	var out []manager.PoolSize
	seen := map[string]bool{}
	for _, f := range flags {
		i := strings.LastIndexByte(f, '=')
		if i <= 0 {
			return nil, usageError{fmt.Errorf("--pool %q: want IMAGE=N, e.g. --pool busybox=2", f)}
		}
		img, n := f[:i], f[i+1:]
		size, err := strconv.Atoi(n)
		if err != nil || size < 1 || size > manager.MaxPoolSize {
			return nil, usageError{fmt.Errorf("--pool %q: N must be a whole number from 1 to %d", f, manager.MaxPoolSize)}
		}
		if strings.TrimSpace(img) != img || strings.ContainsAny(img, " \t\n") {
			return nil, usageError{fmt.Errorf("--pool %q: the image must have no spaces", f)}
		}
		if seen[img] {
			return nil, usageError{fmt.Errorf("--pool %q: %s is given twice; give each image once", f, img)}
		}
		seen[img] = true
		out = append(out, manager.PoolSize{Image: img, Size: size})
	}
	return out, nil
}

// noteRunSandbox tells the run engine (once it is made) of the lifecycle
// events that befall runs' sandboxes apart from the runs: an expiry
// warning, a suspend for a TTL or idle timeout, a pause. The runs' own
// suspends, resumes, snapshots and the rest they record themselves.
func noteRunSandbox(eng *atomic.Pointer[agent.Engine]) func(manager.LifecycleEvent) {
	return func(ev manager.LifecycleEvent) {
		switch {
		case ev.Kind == sandbox.EventExpiring, ev.Kind == sandbox.EventPaused,
			ev.Kind == sandbox.EventSuspended && ev.Reason != "":
		default:
			return
		}
		if e := eng.Load(); e != nil {
			e.NoteSandbox(agent.SandboxNote{Sandbox: ev.Sandbox, Kind: ev.Kind, Reason: string(ev.Reason), Snapshot: ev.Snapshot, Message: ev.Message})
		}
	}
}

// mcpHandler serves MCP's streamable HTTP transport at /mcp: each session's
// tools call this service's own API through self, with the session's
// token, so the API's checks hold for them as for any client.
func mcpHandler(self *inProcess, log *slog.Logger) http.Handler {
	return mcp.NewHTTP(mcp.HTTPConfig{
		Client:  self.client,
		Tenant:  server.RequestTenant,
		Options: mcp.Options{Version: version},
		Logger:  log.With("component", "mcp"),
	})
}
