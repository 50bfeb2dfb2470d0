package e2b

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// Config is what the E2B front end needs of the service.
type Config struct {
	// Client makes a client of reins' own API, in process, that calls
	// as the holder of token (a reins token: the E2B API key).
	Client func(token string) *client.Client
	// Domain is the create reply's domain: the SDK's getHost(port) is
	// PORT-ID.Domain, which must reach the port through reins' port
	// proxy (reins serve gives its --port-domain and its API's port).
	Domain string
	// Key seals the envd access tokens the create and connect replies
	// carry (docs/decisions/0047-e2b-tokens.md): at least 32 bytes,
	// kept across restarts so that a reconnecting SDK's token still
	// opens. Empty: a random key of this process, whose tokens die with
	// it.
	Key []byte
}

// EnvdVersion is the envd version reins' endpoint answers with. The SDKs
// gate features on it (docs/e2b.md): 0.5.7 turns on closeStdin (0.5.2)
// and octet-stream uploads (0.5.7), and leaves the user to envd (0.4.0:
// the SDK sends no user unless asked), but not file metadata (0.6.2) nor
// watch entry info (0.6.3), which reins does not serve.
const EnvdVersion = "0.5.7"

// Handler serves E2B's control plane and envd's data plane on one
// listener: a request naming a sandbox in E2b-Sandbox-Id is the data
// plane, any other the control plane.
type Handler struct {
	cfg      Config
	tokens   envdTokens
	control  *http.ServeMux // control.go registers its routes here
	data     *http.ServeMux // envd's routes: process, filesystem, /files, /health
	watchers watchers       // the polled watchers (watchers.go)
	cpu      cpuSamples     // each sandbox's last CPU reading (metrics)
}

// New makes the handler.
func New(cfg Config) *Handler {
	key := cfg.Key
	if len(key) < 32 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	h := &Handler{cfg: cfg, tokens: newEnvdTokens(key), control: http.NewServeMux(), data: http.NewServeMux()}
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

// sandboxClient authenticates a data-plane request (X-Access-Token, the
// create reply's envdAccessToken, or X-API-KEY, the caller's key) and
// answers a client of the sandbox the request names (E2b-Sandbox-Id), as
// its tenant. Its error has a kind (errdefs) and words fit to answer
// with (fail): unauthenticated for a bad or missing credential,
// not_found for a sandbox the caller does not have (another tenant's is
// answered as a missing one), failed_precondition for one that is not
// running. caller names the credential's holder (the token's hash) for
// the bounds kept per tenant.
func (h *Handler) sandboxClient(r *http.Request) (c *client.Client, sb *client.Sandbox, caller string, err error) {
	id := r.Header.Get(SandboxIDHeader)
	if !goodID(id) {
		return nil, nil, "", errNoSandbox(id)
	}
	var token string
	if t := r.Header.Get(AccessTokenHeader); t != "" {
		sb, tok, ok := h.tokens.open(t)
		if !ok {
			return nil, nil, "", errBadAccessToken
		}
		if sb != id {
			// The token is for another sandbox: the caller has no such
			// one, whoever owns it.
			return nil, nil, "", errNoSandbox(id)
		}
		token = tok
	} else if k := apiKey(r); k != "" {
		token = k
	} else {
		return nil, nil, "", errBadAccessToken
	}
	c = h.cfg.Client(token)
	got, err := lookup(r.Context(), c, id)
	if err != nil {
		return nil, nil, "", err
	}
	if !running(got) {
		return nil, nil, "", fmt.Errorf("sandbox %s is %s: connect to it (Sandbox.connect) to resume it: %w", id, state(got), errdefs.ErrFailedPrecondition)
	}
	sum := sha256.Sum256([]byte(token))
	return c, c.Sandbox(id), hex.EncodeToString(sum[:8]), nil
}

var errBadAccessToken = errdefs.WithMessage(errdefs.ErrUnauthenticated,
	"missing or wrong access token: send the envdAccessToken of the sandbox's create or connect reply as X-Access-Token (the SDKs do), or the API key as X-API-KEY")

// writeError answers in E2B's error shape: {"code": N, "message": "..."}.
func writeError(w http.ResponseWriter, code int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, message})
}

// fail answers err in E2B's shape, its status chosen by its kind.
func fail(w http.ResponseWriter, err error) {
	writeError(w, Status(err), err.Error())
}

// Status is the HTTP status E2B answers an error of err's kind with.
func Status(err error) int {
	switch errdefs.Kind(err) {
	case errdefs.ErrUnauthenticated:
		return http.StatusUnauthorized
	case errdefs.ErrPermissionDenied:
		return http.StatusForbidden
	case errdefs.ErrNotFound:
		return http.StatusNotFound
	case errdefs.ErrInvalidArgument:
		return http.StatusBadRequest
	case errdefs.ErrAlreadyExists, errdefs.ErrFailedPrecondition:
		return http.StatusConflict
	case errdefs.ErrTooLarge:
		return http.StatusRequestEntityTooLarge
	case errdefs.ErrResourceExhausted:
		return http.StatusTooManyRequests
	case errdefs.ErrNoSpace:
		return http.StatusInsufficientStorage
	case errdefs.ErrUnavailable:
		return http.StatusServiceUnavailable
	case errdefs.ErrTimeout:
		return http.StatusGatewayTimeout
	case errdefs.ErrUnimplemented:
		return http.StatusNotImplemented
	case errdefs.ErrCanceled:
		return 499 // the client went away; nobody reads it
	}
	return http.StatusInternalServerError
}

// errNoSandbox is the answer for a sandbox the caller does not have,
// whether it is missing or another tenant's.
func errNoSandbox(id string) error {
	if !goodID(id) {
		id = fmt.Sprintf("%.64q", id)
	}
	return errdefs.WithMessage(errdefs.ErrNotFound, "sandbox "+id+" not found: list yours with Sandbox.list (GET /v2/sandboxes)")
}

// goodID reports whether id can be a sandbox id at all; any other is
// answered as a missing sandbox without asking.
func goodID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
