package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
)

// Ports configures the URLs that reach ports inside sandboxes
// (docs/decisions/0023-ports-host-routed.md): a request whose host is
// PORT-ID.Domain is proxied to PORT on sandbox ID's loopback, through its
// executor.
type Ports struct {
	// Domain is the name under which port hosts sit ("localhost": browsers
	// and curl resolve every *.localhost to loopback).
	Domain string
	// ServicePort is the port the service listens on, which the URLs name
	// ("" for none: a front end on 80).
	ServicePort string
	// Key signs public links (HMAC-SHA256); at least 32 bytes.
	Key []byte
}

// Public links last an hour unless asked otherwise, and a week at most.
const (
	DefaultLinkTTL = time.Hour
	MaxLinkTTL     = 7 * 24 * time.Hour
)

// host is the host name of port on sandbox id.
func (p *Ports) host(id string, port int) string {
	h := strconv.Itoa(port) + "-" + id + "." + p.Domain
	if p.ServicePort != "" {
		h = net.JoinHostPort(h, p.ServicePort)
	}
	return h
}

// URL is the URL of port on sandbox id; a public link when expires is set.
func (p *Ports) URL(id string, port int, expires time.Time) string {
	u := "http://" + p.host(id, port) + "/"
	if !expires.IsZero() {
		u += "?" + linkParam + "=" + p.sign(id, port, expires)
	}
	return u
}

// linkParam is the query parameter of a public link; linkCookie the cookie
// the first visit turns it into; tokenCookie carries a reins token.
const (
	linkParam   = "reins_link"
	linkCookie  = "reins_link"
	tokenCookie = "reins_token"
)

// sign is a link's value: its expiry (unix seconds) and the HMAC of the
// sandbox, the port and the expiry.
func (p *Ports) sign(id string, port int, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + base64.RawURLEncoding.EncodeToString(p.mac(id, port, exp))
}

func (p *Ports) mac(id string, port int, exp string) []byte {
	m := hmac.New(sha256.New, p.Key)
	fmt.Fprintf(m, "reins port link\x00%s\x00%d\x00%s", id, port, exp)
	return m.Sum(nil)
}

// verify reports whether link is a good, unexpired link to port on id, and
// when it expires.
func (p *Ports) verify(link, id string, port int, now time.Time) (time.Time, bool) {
	exp, sig, ok := strings.Cut(link, ".")
	if !ok {
		return time.Time{}, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, p.mac(id, port, exp)) {
		return time.Time{}, false
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	expires := time.Unix(secs, 0)
	return expires, now.Before(expires)
}

// parseHost finds the sandbox and port a request's host names: PORT-ID
// directly under p.Domain (any port after it ignored). ok is false for any
// other host, under the domain or not.
func (p *Ports) parseHost(host string) (id string, port int, under, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, found := strings.CutSuffix(host, "."+p.Domain)
	if !found {
		return "", 0, false, false
	}
	ps, id, found := strings.Cut(label, "-")
	if !found || !validID(id) {
		return "", 0, true, false
	}
	port, err := executor.ParsePort(ps)
	if err != nil {
		return "", 0, true, false
	}
	return id, port, true, true
}

// validID: a sandbox id fits a DNS label of lower-case letters and digits.
func validID(id string) bool {
	if id == "" || len(id) > 63 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// checkPortRequest checks what PortURL is asked for and returns the link's
// expiry (zero for a link that needs a token).
func checkPortRequest(port int32, public bool, ttl time.Duration, now time.Time) (time.Time, error) {
	if port < 1 || port > 65535 {
		return time.Time{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("port %d is outside 1-65535", port))
	}
	switch {
	case ttl < 0:
		return time.Time{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the link's ttl must not be negative")
	case !public && ttl != 0:
		return time.Time{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, "a ttl is for public links: add --public, or drop --ttl")
	case !public:
		return time.Time{}, nil
	case ttl == 0:
		ttl = DefaultLinkTTL
	case ttl > MaxLinkTTL:
		return time.Time{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("a public link lasts at most %s; ask for a shorter --ttl", MaxLinkTTL))
	}
	// Whole seconds: the link carries its expiry in seconds.
	return now.Add(ttl).Truncate(time.Second), nil
}
