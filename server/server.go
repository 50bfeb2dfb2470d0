// Package server is reins serve's API: the Connect handlers, the token
// check, and the proxy that forwards executor calls to a sandbox.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server/wire"
)

// SandboxHeader names the sandbox an executor call is for.
const SandboxHeader = "Reins-Sandbox"

// Server serves the API.
type Server struct {
	m     Sandboxes
	token string
	log   *slog.Logger
	errw  *connect.ErrorWriter
	errs  *errdefs.Interceptor // the one translation of errors for the wire (errors.go)
	runs  *Runs
	// tenants, when set, accepts tenants' tokens besides the admin's and
	// serves the tenant API.
	tenants *Tenants
	// secrets, when set, serves the secret API (secrets.go).
	secrets *secretAPI
	version string
	// downloads bounds the downloads served at once per sandbox.
	downloads downloadSlots
	// networks and egress, when set, serve UpdateNetwork and EgressLog
	// (network.go).
	networks Networks
	// expiries, when set, serves Extend; suspender Suspend, Resume and
	// Events; snapshots Snapshot, Fork, ListSnapshots and DeleteSnapshot.
	expiries  Expiries
	suspender Suspender
	snapshots Snapshots
	// pausers, when set, serves Pause (pause.go).
	pausers Pausers
	// images, when set, serves BuildImage (images.go).
	images Images
	egress EgressLogs
	// templates, when set, serves the template calls (templates.go).
	templates Templates
	// ports, when set, serves port URLs (ports.go) through portProxy,
	// at most PortConnsPerSandbox at once per sandbox.
	ports     *Ports
	portProxy *httputil.ReverseProxy
	portSlots portSlots
	// holds, when set, serves TakeOver and the view's take-over
	// (view.go); viewSlots bounds the view streams per sandbox.
	holds          Holds
	viewSlots      viewSlots
	viewFramesSent atomic.Int64
	// viewInterval and viewWriteTimeout, when set, replace
	// ViewFrameInterval and viewWriteTimeout (tests).
	viewInterval, viewWriteTimeout time.Duration
}

// WithVersion names the service's build in Version's answer.
func (s *Server) WithVersion(v string) *Server {
	s.version = v
	return s
}

// WithRuns serves the run API too.
func (s *Server) WithRuns(r *Runs) *Server {
	s.runs = r
	r.server = s
	return s
}

// WithTenants accepts tenants' tokens and serves the tenant API.
func (s *Server) WithTenants(t *Tenants) *Server {
	s.tenants = t
	return s
}

// New returns a Server that accepts the admin token on every call, and
// with WithTenants a tenant's token on calls about that tenant's things.
func New(m Sandboxes, token string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{m: m, token: token, log: log, errw: connect.NewErrorWriter()}
	s.errs = &errdefs.Interceptor{Prepare: s.prepareError}
	return s
}

var _ reinsv1connect.SandboxServiceHandler = (*Server)(nil)

// Handler returns the HTTP handler for the whole API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	path, h := reinsv1connect.NewSandboxServiceHandler(s, s.apiOptions()...)
	mux.Handle(path, h)
	if s.runs != nil {
		path, h := reinsv1connect.NewRunServiceHandler(s.runs, s.apiOptions()...)
		mux.Handle(path, h)
	}
	if s.tenants != nil {
		path, h := reinsv1connect.NewTenantServiceHandler(s.tenants, s.apiOptions()...)
		mux.Handle(path, h)
	}
	if s.secrets != nil {
		path, h := reinsv1connect.NewSecretServiceHandler(s.secrets, s.handlerOptions(
			connect.WithCodec(wire.JSONCodec{Codec: "json", Opaque: true}),
			connect.WithCodec(wire.JSONCodec{Codec: "json; charset=utf-8", Opaque: true}))...)
		mux.Handle(path, h)
	}
	s.handleExec(mux)
	s.handleDownload(mux)
	s.handleRawFiles(mux)
	jsonCalls := s.executorJSON()
	mux.Handle("/"+executorv1connect.ExecutorName+"/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := jsonCalls[r.URL.Path]; ok && isJSON(r) {
			h.ServeHTTP(w, r)
			return
		}
		s.proxy(w, r)
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	api := s.auth(mux)
	// The live view authenticates itself: its page loads without a token
	// (a link's secret or the URL fragment's token is then turned into a
	// cookie).
	api = s.withView(api)
	if s.ports == nil {
		return api
	}
	// Port hosts first: no API call is served under them.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.servePorts(w, r) {
			api.ServeHTTP(w, r)
		}
	})
}

func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		name, err := s.authenticate(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(withTenant(r.Context(), name)))
	})
}

// proxy forwards an executor call to the sandbox named by SandboxHeader,
// swapping the user's token for the executor's.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	id, ex, ok := s.executorOf(w, r)
	if !ok {
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(executorURL)
			pr.Out.Header.Set("Authorization", "Bearer "+ex.Token())
			pr.Out.Header.Del(SandboxHeader)
		},
		Transport:     ex.Transport(r.URL.Path),
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeError(w, r, s.executorDown(id, err))
		},
	}
	rp.ServeHTTP(w, r)
}

// executorURL is where proxied calls go; the unix-socket transport ignores
// the host.
var executorURL = &url.URL{Scheme: "http", Host: "executor"}

// executorDown explains a failed executor call: the sandbox's fate if it
// ended, or the transport error.
func (s *Server) executorDown(id string, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rec, gerr := s.m.Get(ctx, "", id); gerr == nil && rec.State == sandbox.StateStopped {
		return fmt.Errorf("sandbox %s stopped (%s: %s): %w", id, rec.Reason, rec.Message, errdefs.ErrFailedPrecondition)
	}
	// err stays in the chain, so the socket's host path is found and left
	// out of the caller's message.
	return fmt.Errorf("sandbox %s: its executor did not answer (%w): %w", id, err, errdefs.ErrUnavailable)
}

func (s *Server) Create(ctx context.Context, req *connect.Request[reinsv1.CreateSandboxRequest], stream *connect.ServerStream[reinsv1.CreateSandboxResponse]) error {
	spec, err := SpecFromProto(req.Msg.Spec)
	if err != nil {
		return err
	}
	if spec.Network, err = normalizeNetwork(ctx, spec.Network); err != nil {
		return err
	}
	if err := checkGateway(tenant(ctx), spec.Gateway); err != nil {
		return err
	}
	if err := CheckImage(tenant(ctx), spec.Image); err != nil {
		return err
	}
	ps := newProgressSender(func(p *reinsv1.Progress) {
		stream.Send(&reinsv1.CreateSandboxResponse{Msg: &reinsv1.CreateSandboxResponse_Progress{Progress: p}})
	})
	rec, err := s.m.Create(ctx, tenant(ctx), spec, ps.report)
	if err != nil {
		return err
	}
	return ps.last(func() error {
		return stream.Send(&reinsv1.CreateSandboxResponse{Msg: &reinsv1.CreateSandboxResponse_Sandbox{Sandbox: RecordToProto(rec)}})
	})
}

func (s *Server) Get(ctx context.Context, req *connect.Request[reinsv1.GetSandboxRequest]) (*connect.Response[reinsv1.GetSandboxResponse], error) {
	rec, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.GetSandboxResponse{Sandbox: RecordToProto(rec)}), nil
}

func (s *Server) List(ctx context.Context, req *connect.Request[reinsv1.ListSandboxesRequest]) (*connect.Response[reinsv1.ListSandboxesResponse], error) {
	resp := &reinsv1.ListSandboxesResponse{}
	for _, rec := range s.m.List(ctx, tenant(ctx), req.Msg.Labels) {
		resp.Sandboxes = append(resp.Sandboxes, RecordToProto(rec))
	}
	return connect.NewResponse(resp), nil
}

func (s *Server) Delete(ctx context.Context, req *connect.Request[reinsv1.DeleteSandboxRequest]) (*connect.Response[reinsv1.DeleteSandboxResponse], error) {
	if err := s.m.Delete(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.DeleteSandboxResponse{}), nil
}

// SpecFromProto converts and checks a wire spec. Its network rules are
// parsed, not normalized (normalizeNetwork, which knows the caller).
func SpecFromProto(p *reinsv1.SandboxSpec) (sandbox.Spec, error) {
	if p == nil {
		p = &reinsv1.SandboxSpec{}
	}
	if p.Cpus < 0 || p.MemoryBytes < 0 || p.Pids < 0 || p.DiskBytes < 0 || p.TtlMs < 0 || p.IdleTimeoutMs < 0 {
		return sandbox.Spec{}, fmt.Errorf("limits, ttl and idle timeout must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	network, err := wire.NetworkFromProto(p.Network)
	if err != nil {
		return sandbox.Spec{}, err
	}
	for k := range p.Labels {
		if strings.HasPrefix(k, sandbox.LabelPool) {
			return sandbox.Spec{}, fmt.Errorf("label %.80q: labels that begin with %s mark the service's warm pool sandboxes: choose another: %w", k, sandbox.LabelPool, errdefs.ErrInvalidArgument)
		}
	}
	if p.ExpiryWarningMs < 0 {
		return sandbox.Spec{}, fmt.Errorf("expiry warning must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	var onExpire sandbox.ExpireAction
	switch p.OnExpire {
	case reinsv1.ExpireAction_EXPIRE_ACTION_UNSPECIFIED:
	case reinsv1.ExpireAction_EXPIRE_ACTION_SUSPEND:
		onExpire = sandbox.ExpireSuspend
	case reinsv1.ExpireAction_EXPIRE_ACTION_DELETE:
		onExpire = sandbox.ExpireDelete
	default:
		return sandbox.Spec{}, fmt.Errorf("on_expire %d: choose suspend or delete: %w", p.OnExpire, errdefs.ErrInvalidArgument)
	}
	return sandbox.Spec{
		Image:   p.Image,
		Backend: p.Backend,
		Limits: sandbox.Limits{
			CPUs: p.Cpus, MemoryBytes: p.MemoryBytes, Pids: p.Pids, DiskBytes: p.DiskBytes,
		},
		TTL:           time.Duration(p.TtlMs) * time.Millisecond,
		IdleTimeout:   time.Duration(p.IdleTimeoutMs) * time.Millisecond,
		Env:           p.Env,
		Labels:        p.Labels,
		Workdir:       p.Workdir,
		Network:       network,
		Gateway:       gatewayFromProto(p.Gateway),
		OnExpire:      onExpire,
		ExpiryWarning: time.Duration(p.ExpiryWarningMs) * time.Millisecond,
		Screen:        p.Screen,
	}, nil
}

func expireToProto(a sandbox.ExpireAction) reinsv1.ExpireAction {
	switch a {
	case sandbox.ExpireSuspend:
		return reinsv1.ExpireAction_EXPIRE_ACTION_SUSPEND
	case sandbox.ExpireDelete:
		return reinsv1.ExpireAction_EXPIRE_ACTION_DELETE
	}
	return reinsv1.ExpireAction_EXPIRE_ACTION_UNSPECIFIED
}

func gatewayFromProto(p *reinsv1.ModelGateway) *sandbox.GatewaySpec {
	if !p.GetOn() {
		return nil
	}
	return &sandbox.GatewaySpec{Model: p.Model, Script: p.Script}
}

// checkGateway refuses a gateway model that is not a model spec, and a
// tenant's script: model that is not inline (it would name a file on the
// service's host).
func checkGateway(tenant string, g *sandbox.GatewaySpec) error {
	if g == nil || g.Model == "" && g.Script == "" {
		return nil
	}
	provider, _, err := model.Parse(g.Model)
	if err != nil {
		return fmt.Errorf("--model of the model gateway: %w", err)
	}
	switch {
	case provider != "script" && g.Script != "":
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "the model gateway's script is for a script: model only, not "+provider+":")
	case provider == "script" && g.Script == "" && tenant != "":
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "a script: model of the model gateway must be sent inline (reins sandbox create --model script:FILE reads the file and sends it)")
	case g.Script != "":
		if _, err := script.FromJSON("gateway", []byte(g.Script)); err != nil {
			return fmt.Errorf("the model gateway's script: %w", err)
		}
	}
	return nil
}

// gatewayToProto shows a sandbox's gateway: on, and its model; never its
// token nor its script.
func gatewayToProto(g *sandbox.GatewaySpec) *reinsv1.ModelGateway {
	if g == nil {
		return nil
	}
	return &reinsv1.ModelGateway{On: true, Model: g.Model}
}

// Version names the service's build and each backend's runtime; any
// caller with a token may ask.
func (s *Server) Version(ctx context.Context, req *connect.Request[reinsv1.VersionRequest]) (*connect.Response[reinsv1.VersionResponse], error) {
	resp := &reinsv1.VersionResponse{Version: s.version}
	for _, b := range s.m.Backends() {
		resp.Backends = append(resp.Backends, &reinsv1.Backend{Name: b.Name, Runtime: b.Runtime})
	}
	return connect.NewResponse(resp), nil
}

// apiOptions are the handler options of the reins.v1 services: the
// errors' translation and the API's one JSON form (wire.JSON).
func (s *Server) apiOptions() []connect.HandlerOption {
	return s.handlerOptions(connect.WithCodec(wire.JSONCodec{Codec: "json"}), connect.WithCodec(wire.JSONCodec{Codec: "json; charset=utf-8"}))
}

// nano is t for the wire: 0 for none.
func nano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// RecordToProto converts a sandbox for the wire.
func RecordToProto(r sandbox.Info) *reinsv1.Sandbox {
	return &reinsv1.Sandbox{
		Id: r.ID,
		Spec: &reinsv1.SandboxSpec{
			Image: r.Spec.Image, Backend: r.Spec.Backend,
			Cpus: r.Spec.Limits.CPUs, MemoryBytes: r.Spec.Limits.MemoryBytes,
			Pids: r.Spec.Limits.Pids, DiskBytes: r.Spec.Limits.DiskBytes,
			TtlMs: r.Spec.TTL.Milliseconds(), IdleTimeoutMs: r.Spec.IdleTimeout.Milliseconds(),
			Env: r.Spec.Env, Labels: r.Spec.Labels, Workdir: r.Spec.Workdir,
			Network:         wire.Network(r.Spec.Network),
			Gateway:         gatewayToProto(r.Spec.Gateway),
			OnExpire:        expireToProto(r.Spec.OnExpire),
			ExpiryWarningMs: r.Spec.ExpiryWarning.Milliseconds(),
			Screen:          r.Spec.Screen,
		},
		Screen:          r.Screen,
		HeldBy:          r.HeldBy,
		Origin:          r.Origin,
		Workspace:       r.Workspace,
		SuspendedReason: wire.SandboxReason(r.SuspendedReason),
		State:           wire.SandboxState(r.State),
		Reason:          wire.SandboxReason(r.Reason),
		Message:         r.Message,
		ImageDigest:     r.ImageDigest,
		CreatedUnixNano: nano(r.CreatedAt),
		StoppedUnixNano: nano(r.StoppedAt),
		ExpiresUnixNano: nano(r.ExpiresAt),
		OomKills:        int32(r.OOMKills),
		LastOomUnixNano: nano(r.LastOOM),
		Runtime:         r.Runtime,
		MemoryBytes:     r.MemoryBytes,
		PeakMemoryBytes: r.PeakMemoryBytes,
	}
}
