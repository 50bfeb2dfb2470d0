package e2b

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/reinsdev/reins/client"
)

// Config is what the E2B front end needs of the service.
type Config struct {
	// Client makes a client of reins' own API, in process, that calls
	// as the holder of token (a reins token: the E2B API key).
	Client func(token string) *client.Client
	// Domain is the create reply's domain: the SDK's getHost(port) is
	// PORT-ID.Domain, which must reach the port through reins' port
	// proxy.
	Domain string
}

// Handler serves E2B's control plane and envd's data plane on one
// listener: a request naming a sandbox in E2b-Sandbox-Id is the data
// plane, any other the control plane.
type Handler struct {
	cfg     Config
	control *http.ServeMux // control.go registers its routes here
	data    *http.ServeMux // envd's routes: process, filesystem, /files, /health
	// sandboxFor, when set, stands in for sandboxClient (tests of the
	// data plane built before its authentication).
	sandboxFor func(r *http.Request) (*client.Client, *client.Sandbox, error)
	homes      sync.Map // sandbox id and home made (envd.go's home)
	watchers   watchers // filesystem.go's CreateWatcher
}

// New makes the handler.
func New(cfg Config) *Handler {
	h := &Handler{cfg: cfg, control: http.NewServeMux(), data: http.NewServeMux()}
	h.routeControl()
	h.routeData()
	return h
}

// SandboxIDHeader, PortHeader and AccessTokenHeader are the data plane's
// headers when the SDK talks to one URL (E2B_SANDBOX_URL).
const (
	SandboxIDHeader   = "E2b-Sandbox-Id"
	PortHeader        = "E2b-Sandbox-Port"
	AccessTokenHeader = "X-Access-Token"
	APIKeyHeader      = "X-API-KEY"
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(SandboxIDHeader) != "" {
		h.data.ServeHTTP(w, r)
		return
	}
	h.control.ServeHTTP(w, r)
}

// errSandboxClientTODO is returned until the data plane's authentication
// is built (control.go owns it).
var errSandboxClientTODO = errors.New("the data plane's authentication is not built yet")

// sandboxClient authenticates a data-plane request (X-Access-Token, the
// create reply's envdAccessToken) and answers a client of the sandbox the
// request names, as its tenant. Its error is already the answer's text.
func (h *Handler) sandboxClient(r *http.Request) (*client.Client, *client.Sandbox, error) {
	return nil, nil, errSandboxClientTODO
}

// writeError answers in E2B's error shape: {"code": N, "message": "..."}.
func writeError(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, message})
}
