package e2b

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// listQuery is what GET /v2/sandboxes filters and pages by.
type listQuery struct {
	metadata     map[string]string
	states       []string // running, paused
	template     string
	startedAfter time.Time
	asc          bool
	limit        int
	after        cursor // the last entry of the page before
}

// cursor is a position in the list's order: nextToken, opaque to
// callers.
type cursor struct {
	created int64
	id      string
}

func (c cursor) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + strconv.FormatInt(c.created, 10) + ":" + c.id))
}

func parseCursor(s string) (cursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, false
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != "v1" || !goodID(parts[2]) {
		return cursor{}, false
	}
	n, err := strconv.ParseInt(parts[1], 10, 64)
	return cursor{n, parts[2]}, err == nil
}

const maxLimit = 100

// parseMetadata reads the metadata filter, "k=v&k2=v2" with each key and
// value URL-encoded (as the SDKs send it).
func parseMetadata(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > 16<<10 {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "metadata: the filter is over 16 KiB")
	}
	q, err := url.ParseQuery(s)
	if err != nil {
		return nil, fmt.Errorf("metadata %.60q: want key=value pairs joined by &, each URL-encoded: %w", s, errdefs.ErrInvalidArgument)
	}
	md := map[string]string{}
	for k, vs := range q {
		ku, err1 := url.PathUnescape(k)
		vu, err2 := url.PathUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("metadata %.60q: a key or value is not URL-encoded: %w", s, errdefs.ErrInvalidArgument)
		}
		md[ku] = vu
	}
	return md, nil
}

func parseListQuery(q url.Values, v2 bool) (listQuery, error) {
	lq := listQuery{limit: maxLimit, states: []string{"running", "paused"}}
	md, err := parseMetadata(q.Get("metadata"))
	if err != nil {
		return lq, err
	}
	lq.metadata = md
	if !v2 {
		lq.states, lq.limit = []string{"running"}, 0
		return lq, nil
	}
	if s := q["state"]; len(s) > 0 {
		lq.states = nil
		for _, v := range s {
			for _, st := range strings.Split(v, ",") {
				if st != "running" && st != "paused" {
					return lq, fmt.Errorf("state %.40q: choose running or paused: %w", st, errdefs.ErrInvalidArgument)
				}
				lq.states = append(lq.states, st)
			}
		}
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.asc = true
	default:
		return lq, fmt.Errorf("order %.40q: choose asc or desc: %w", o, errdefs.ErrInvalidArgument)
	}
	if s := q.Get("startedAfter"); s != "" {
		if lq.startedAfter, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return lq, fmt.Errorf("startedAfter %.40q: give an RFC 3339 time: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	lq.template = q.Get("template")
	if s := q.Get("limit"); s != "" {
		if lq.limit, err = strconv.Atoi(s); err != nil || lq.limit < 1 || lq.limit > maxLimit {
			return lq, fmt.Errorf("limit %.40q: give 1 to %d: %w", s, maxLimit, errdefs.ErrInvalidArgument)
		}
	}
	if s := q.Get("nextToken"); s != "" {
		var ok bool
		if lq.after, ok = parseCursor(s); !ok {
			return lq, fmt.Errorf("nextToken %.40q is not one this service gave: start again without it: %w", s, errdefs.ErrInvalidArgument)
		}
	}
	return lq, nil
}

func (h *Handler) listV1(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	return h.list(w, r, c, false)
}

func (h *Handler) listV2(w http.ResponseWriter, r *http.Request, c *client.Client) error {
	return h.list(w, r, c, true)
}

// list answers the caller's sandboxes that have not stopped, newest
// first unless asked, a page at a time (X-Next-Token) for v2.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, c *client.Client, v2 bool) error {
	lq, err := parseListQuery(r.URL.Query(), v2)
	if err != nil {
		return err
	}
	all, err := c.List(r.Context(), lq.metadata)
	if err != nil {
		return err
	}
	var sbs []*reinsv1.Sandbox
	running := 0
	for _, sb := range all {
		if gone(sb) || pooled(sb) || !slices.Contains(lq.states, state(sb)) ||
			lq.template != "" && templateOf(sb) != lq.template ||
			!lq.startedAfter.IsZero() && sb.CreatedUnixNano < lq.startedAfter.UnixNano() {
			continue
		}
		if state(sb) == "running" {
			running++
		}
		sbs = append(sbs, sb)
	}
	slices.SortFunc(sbs, func(a, b *reinsv1.Sandbox) int {
		d := cmpCursor(cursor{a.CreatedUnixNano, a.Id}, cursor{b.CreatedUnixNano, b.Id})
		if !lq.asc {
			d = -d
		}
		return d
	})
	if lq.after != (cursor{}) {
		i := slices.IndexFunc(sbs, func(sb *reinsv1.Sandbox) bool {
			d := cmpCursor(cursor{sb.CreatedUnixNano, sb.Id}, lq.after)
			return lq.asc && d > 0 || !lq.asc && d < 0
		})
		if i < 0 {
			i = len(sbs)
		}
		sbs = sbs[i:]
	}
	if lq.limit > 0 && len(sbs) > lq.limit {
		last := sbs[lq.limit-1]
		w.Header().Set("X-Next-Token", cursor{last.CreatedUnixNano, last.Id}.token())
		sbs = sbs[:lq.limit]
	}
	if v2 && slices.Contains(lq.states, "running") {
		w.Header().Set("X-Total-Running", strconv.Itoa(running))
	}
	out := make([]listedSandbox, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, listed(sb))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func cmpCursor(a, b cursor) int {
	switch {
	case a.created < b.created:
		return -1
	case a.created > b.created:
		return 1
	}
	return strings.Compare(a.id, b.id)
}

// pooled reports a sandbox of the service's warm pool, which no caller
// made.
func pooled(sb *reinsv1.Sandbox) bool {
	_, ok := sb.GetSpec().GetLabels()[sandbox.LabelPool]
	return ok
}
