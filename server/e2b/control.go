package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// routeControl registers the control plane's routes (X-API-KEY). Each
// becomes calls of reins' API as the key's holder (decision
// 0048-e2b-mapping.md has the mapping); every other call is answered
// 501 naming it.
func (h *Handler) routeControl() {
	m := h.control
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	m.HandleFunc("POST /sandboxes", h.authed(h.create))
	m.HandleFunc("POST /v2/sandboxes", h.authed(h.create))
	m.HandleFunc("GET /sandboxes", h.authed(h.listV1))
	m.HandleFunc("GET /v2/sandboxes", h.authed(h.listV2))
	m.HandleFunc("GET /sandboxes/{sandboxID}", h.authed(h.get))
	m.HandleFunc("DELETE /sandboxes/{sandboxID}", h.authed(h.kill))
	m.HandleFunc("POST /sandboxes/{sandboxID}/timeout", h.authed(h.setTimeout))
	m.HandleFunc("POST /sandboxes/{sandboxID}/pause", h.authed(h.pause))
	m.HandleFunc("POST /sandboxes/{sandboxID}/resume", h.authed(h.resume))
	m.HandleFunc("POST /sandboxes/{sandboxID}/connect", h.authed(h.connect))
	m.HandleFunc("POST /v2/sandboxes/{sandboxID}/connect", h.authed(h.connect))
	m.HandleFunc("GET /sandboxes/{sandboxID}/metrics", h.authed(h.metrics))
	m.HandleFunc("PUT /sandboxes/{sandboxID}/network", h.authed(h.updateNetwork))
	m.HandleFunc("/", h.authed(func(w http.ResponseWriter, r *http.Request, _ *client.Client) error {
		return fmt.Errorf("reins does not implement the E2B call %s %.200s (docs/e2b.md lists what it does): %w", r.Method, r.URL.Path, errdefs.ErrUnimplemented)
	}))
}

// handler is a control-plane call: it writes its answer, or returns the
// error authed answers in E2B's shape.
type handler func(w http.ResponseWriter, r *http.Request, c *client.Client) error

// authed checks the request's API key with reins' API before the
// handler runs, so that a bad key is answered 401 whatever else is wrong
// with the request.
func (h *Handler) authed(next handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := apiKey(r)
		if key == "" {
			writeError(w, http.StatusUnauthorized, errNoKey.Error())
			return
		}
		c := h.cfg.Client(key)
		if _, err := c.Version(r.Context()); err != nil {
			if errdefs.Kind(err) == errdefs.ErrUnauthenticated {
				err = errBadKey
			}
			fail(w, err)
			return
		}
		if err := next(w, r, c); err != nil {
			fail(w, err)
		}
	}
}

var (
	errNoKey = errdefs.WithMessage(errdefs.ErrUnauthenticated,
		"missing API key: send X-API-KEY (E2B_API_KEY): a reins token, as it is or as e2b_ and its hex digits")
	errBadKey = errdefs.WithMessage(errdefs.ErrUnauthenticated,
		"wrong API key: E2B_API_KEY must be a reins token (reins tenant token NAME issues one), as it is or as e2b_ and its hex digits")
)

// maxBody bounds a control-plane request's JSON: a create with 64
// metadata entries and a large env fits many times over.
const maxBody = 1 << 20

// readJSON decodes r's body into v; an empty body leaves v as it is.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	err := json.NewDecoder(body).Decode(v)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return nil
	case errors.As(err, &tooBig):
		return fmt.Errorf("the request body is over %d KiB, the most reins reads: %w", maxBody>>10, errdefs.ErrTooLarge)
	}
	return fmt.Errorf("the request body is not the JSON E2B's API takes here: %v: %w", err, errdefs.ErrInvalidArgument)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// sandboxIn reads r's JSON body into body (nil: none read) and finds
// the caller's sandbox its path names.
func sandboxIn(w http.ResponseWriter, r *http.Request, c *client.Client, body any) (*reinsv1.Sandbox, error) {
	if body != nil {
		if err := readJSON(w, r, body); err != nil {
			return nil, err
		}
	}
	return lookup(r.Context(), c, r.PathValue("sandboxID"))
}

// lookup is the caller's sandbox named in the path, not stopped.
func lookup(ctx context.Context, c *client.Client, id string) (*reinsv1.Sandbox, error) {
	if !goodID(id) {
		return nil, errNoSandbox(id)
	}
	sb, err := c.Get(ctx, id)
	if errdefs.Kind(err) == errdefs.ErrNotFound {
		return nil, errNoSandbox(id) // one answer, whoever has it
	}
	if err != nil {
		return nil, err
	}
	if gone(sb) {
		return nil, errStopped(sb)
	}
	return sb, nil
}

// errStopped is the answer for a sandbox that stopped: not found, as E2B
// answers for a killed one, with reins' reason.
func errStopped(sb *reinsv1.Sandbox) error {
	why := strings.ToLower(strings.TrimPrefix(sb.Reason.String(), "SANDBOX_REASON_"))
	if sb.Message != "" {
		why += ": " + sb.Message
	}
	return errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("sandbox %s not found: it stopped (%s); create a new one", sb.Id, why))
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var body newSandbox
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	spec, err := h.specOf(r.Context(), c, &body)
	if err != nil {
		return err
	}
	sb, err := c.Create(r.Context(), spec, nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, h.reply(sb, apiKey(r)))
	return nil
}

// reply is the create, resume and connect reply for sb, with a new
// access token for the holder of token.
func (h *Handler) reply(sb *reinsv1.Sandbox, token string) sandboxReply {
	domain := h.cfg.Domain
	return sandboxReply{
		TemplateID: templateOf(sb), SandboxID: sb.Id, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: h.tokens.seal(sb.Id, token), Domain: &domain,
	}
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	sb, err := sandboxIn(w, r, c, nil)
	if err != nil {
		return err
	}
	domain := h.cfg.Domain
	writeJSON(w, http.StatusOK, sandboxDetail{
		listedSandbox: listed(sb), EnvdAccessToken: h.tokens.seal(sb.Id, apiKey(r)),
		AllowInternetAccess: allowsInternet(sb.GetSpec().GetNetwork()), Domain: &domain,
		Lifecycle: lifecycle{OnTimeout: onTimeout(sb)},
	})
	return nil
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	id := r.PathValue("sandboxID")
	if !goodID(id) {
		return errNoSandbox(id)
	}
	err := c.Delete(r.Context(), id)
	if errdefs.Kind(err) == errdefs.ErrNotFound {
		return errNoSandbox(id)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var body timeoutBody
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	ttl, err := timeoutOf(body.Timeout, false)
	if err != nil {
		return err
	}
	sb, err := sandboxIn(w, r, c, nil)
	if err != nil {
		return err
	}
	if _, err := c.Extend(r.Context(), sb.Id, ttl); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause keeps memory (reins' pause; a backend that cannot, suspends),
// or with memory false only the files (reins' suspend). A sandbox that
// is paused already is 409, as E2B answers.
func (h *Handler) pause(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var body pauseBody
	sb, err := sandboxIn(w, r, c, &body)
	if err != nil {
		return err
	}
	if !running(sb) {
		return fmt.Errorf("sandbox %s is paused already: %w", sb.Id, errdefs.ErrFailedPrecondition)
	}
	if body.Memory != nil && !*body.Memory {
		_, err = c.Suspend(r.Context(), sb.Id)
	} else {
		_, err = c.Pause(r.Context(), sb.Id, true)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resume is the deprecated resume: a running sandbox is 409.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var body timeoutBody
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	ttl, err := timeoutOf(body.Timeout, true)
	if err != nil {
		return err
	}
	sb, err := sandboxIn(w, r, c, nil)
	if err != nil {
		return err
	}
	if running(sb) {
		return fmt.Errorf("sandbox %s is running: there is nothing to resume: %w", sb.Id, errdefs.ErrFailedPrecondition)
	}
	if sb, err = c.Resume(r.Context(), sb.Id); err != nil {
		return err
	}
	if sb, err = c.Extend(r.Context(), sb.Id, ttl); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, h.reply(sb, apiKey(r)))
	return nil
}

// connect resumes a paused sandbox (201) or finds a running one (200),
// and moves its end to timeout from now if that is later: E2B's connect
// only extends.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var body timeoutBody
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	var ttl time.Duration
	if body.Timeout != nil {
		var err error
		if ttl, err = timeoutOf(body.Timeout, false); err != nil {
			return err
		}
	}
	sb, err := sandboxIn(w, r, c, nil)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if !running(sb) {
		if sb, err = c.Resume(r.Context(), sb.Id); err != nil {
			return err
		}
		code = http.StatusCreated
	}
	if ttl > 0 && (sb.ExpiresUnixNano == 0 || time.Now().Add(ttl).UnixNano() > sb.ExpiresUnixNano) {
		if sb, err = c.Extend(r.Context(), sb.Id, ttl); err != nil {
			return err
		}
	}
	writeJSON(w, code, h.reply(sb, apiKey(r)))
	return nil
}

// metrics is one sample, now, of what the sandbox uses: memory as the
// host counts it, the disk its files take and the CPU it used since the
// last sample (cpuSamples), as the executor measures them, and its
// limits. A sandbox that is not running has none; one whose executor does
// not answer soon has its memory and limits only.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	sb, err := sandboxIn(w, r, c, nil)
	if err != nil {
		return err
	}
	now := time.Now().Unix()
	inRange := true
	for name, start := range map[string]bool{"start": true, "end": false} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs < 0 {
			return fmt.Errorf("%s %.40q: give unix seconds: %w", name, v, errdefs.ErrInvalidArgument)
		}
		inRange = inRange && (start && now >= secs || !start && now <= secs)
	}
	out := []metric{}
	if running(sb) && inRange {
		spec := sb.GetSpec()
		m := metric{
			Timestamp: time.Unix(now, 0).UTC().Format(time.RFC3339), TimestampUnix: now,
			CPUCount: listed(sb).CPUCount, MemUsed: int64(sb.MemoryBytes), MemTotal: spec.GetMemoryBytes(),
			DiskTotal: spec.GetDiskBytes(),
		}
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		ex := c.Sandbox(sb.Id)
		u, err := client.Unary(ctx, ex, ex.RPC().Usage, &executorv1.UsageRequest{})
		if err == nil {
			pct, ok := h.cpu.percent(sb.Id, u.CpuSeconds, time.Now(), m.CPUCount)
			if !ok {
				// The first reading: another shortly after it.
				select {
				case <-time.After(firstCPUSample):
				case <-ctx.Done():
				}
				if u2, err := client.Unary(ctx, ex, ex.RPC().Usage, &executorv1.UsageRequest{}); err == nil {
					u = u2
					pct, _ = h.cpu.percent(sb.Id, u.CpuSeconds, time.Now(), m.CPUCount)
				}
			}
			m.CPUUsedPct = pct
			m.DiskUsed = int64(min(u.DiskUsedBytes, 1<<62))
			if m.DiskTotal == 0 {
				m.DiskTotal = int64(min(u.DiskTotalBytes, 1<<62))
			}
			if m.MemUsed == 0 {
				m.MemUsed = int64(min(u.MemoryBytes, 1<<62))
			}
		}
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// cpuSamples keeps each sandbox's last CPU reading, so that a sample's
// CPU use is over the time since the one before it, as E2B's is. A
// sandbox's first sample takes two readings firstCPUSample apart (the
// executor's count since its start would mean little); at most
// maxCPUSamples are kept, the oldest dropped.
type cpuSamples struct {
	mu sync.Mutex
	m  map[string]cpuSample
}

type cpuSample struct {
	seconds float64 // the executor's CPU time
	at      time.Time
	pct     float64 // the sample's answer
}

const (
	maxCPUSamples  = 4096
	firstCPUSample = 250 * time.Millisecond
)

// percent records a reading of sandbox's CPU time and answers its use
// since the last as a percent of its CPUs; ok is false when there was no
// reading before (or the executor's count went back: it restarted).
func (s *cpuSamples) percent(sandbox string, seconds float64, now time.Time, cpus int) (pct float64, ok bool) {
	if math.IsNaN(seconds) || math.IsInf(seconds, 0) || seconds < 0 {
		return 0, true // a lying executor's count: no reading
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, had := s.m[sandbox]
	if had && seconds >= prev.seconds && now.Sub(prev.at) < 100*time.Millisecond {
		return prev.pct, true // too close to the last to say more
	}
	if had && seconds >= prev.seconds {
		pct, ok = 100*(seconds-prev.seconds)/now.Sub(prev.at).Seconds()/float64(max(cpus, 1)), true
	}
	pct = math.Round(min(max(pct, 0), 100)*10) / 10
	if s.m == nil {
		s.m = map[string]cpuSample{}
	}
	if _, ok := s.m[sandbox]; !ok && len(s.m) >= maxCPUSamples {
		oldest := ""
		for id, c := range s.m {
			if oldest == "" || c.at.Before(s.m[oldest].at) {
				oldest = id
			}
		}
		delete(s.m, oldest)
	}
	s.m[sandbox] = cpuSample{seconds: seconds, at: now, pct: pct}
	return pct, ok
}

// networkUpdate is PUT /sandboxes/{id}/network's body
// (SandboxNetworkUpdateConfig): it replaces the rules, what it leaves out
// cleared.
type networkUpdate struct {
	networkConfig
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

// updateNetwork replaces a sandbox's network mode and allowed hosts and
// addresses (its secrets stay), mapped as at create.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	var body networkUpdate
	sb, err := sandboxIn(w, r, c, &body)
	if err != nil {
		return err
	}
	n, err := networkOf(body.AllowInternetAccess, &body.networkConfig)
	if err != nil {
		return err
	}
	_, err = c.UpdateNetwork(r.Context(), &reinsv1.UpdateNetworkRequest{
		Id: sb.Id, Mode: n.Mode,
		AllowHosts: &reinsv1.StringList{Items: n.AllowHosts}, DenyHosts: &reinsv1.StringList{},
		AllowCidrs: &reinsv1.StringList{Items: n.AllowCidrs},
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
