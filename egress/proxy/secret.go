package proxy

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
)

// Secret is a secret as the proxy uses it: the sandbox holds Placeholder,
// and requests to Hosts get Value in its place.
type Secret struct {
	Name        string
	Placeholder string
	Value       []byte
	Hosts       []string // names or *.domain
}

// MaxSecretValue bounds a secret's value: it goes into a header or URL.
const MaxSecretValue = 16 << 10

const placeholderPrefix = "reins-secret-"

// NewPlaceholder makes a random, unguessable placeholder for a secret.
func NewPlaceholder() string {
	var b [16]byte
	rand.Read(b[:])
	return placeholderPrefix + hex.EncodeToString(b[:])
}

func (s Secret) boundTo(name string) bool {
	return slices.ContainsFunc(s.Hosts, func(h string) bool { return egress.MatchName(h, name) })
}

// checkSecrets refuses secrets the proxy cannot use safely; errors name
// secrets, never values.
func checkSecrets(secrets []Secret, ca *CA) error {
	seen := map[string]bool{}
	for _, s := range secrets {
		switch {
		case !egress.ValidSecretName(s.Name):
			return fmt.Errorf("secret %q: not a secret name: %w", clip(s.Name), errdefs.ErrInvalidArgument)
		case len(s.Placeholder) < 16:
			return fmt.Errorf("secret %s: its placeholder is too short to be unguessable (make it with NewPlaceholder): %w", s.Name, errdefs.ErrInvalidArgument)
		case seen[s.Placeholder]:
			return fmt.Errorf("secret %s: its placeholder is another secret's: %w", s.Name, errdefs.ErrInvalidArgument)
		case len(s.Value) > MaxSecretValue:
			return fmt.Errorf("secret %s: its value is %d bytes, over the limit of %d: %w", s.Name, len(s.Value), MaxSecretValue, errdefs.ErrTooLarge)
		case len(s.Hosts) == 0:
			return fmt.Errorf("secret %s is bound to no host: %w", s.Name, errdefs.ErrInvalidArgument)
		case strings.ContainsAny(string(s.Value), "\r\n\x00"):
			return fmt.Errorf("secret %s: its value has a line break or NUL, which cannot go in a header: %w", s.Name, errdefs.ErrInvalidArgument)
		}
		seen[s.Placeholder] = true
	}
	if len(secrets) > 0 && ca == nil {
		return fmt.Errorf("secrets need the sandbox's CA to put them in HTTPS requests: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// applySecrets swaps the placeholders of the secrets bound to name for
// their values in req's headers and URL, and returns the note for the
// log (which were injected, and which placeholders were seen going to a
// host they are not bound to, or in a TRACE, and left as they are) and
// the secrets it injected, whose values scrubHeaders takes out of the
// response.
func applySecrets(req *http.Request, name string, secrets []Secret) (string, []Secret) {
	if len(secrets) == 0 {
		return "", nil
	}
	// A TRACE is sent back by the server as it got it: a value put in
	// one would reach the sandbox.
	reflected := req.Method == http.MethodTrace
	var bound, stray []Secret
	for _, s := range secrets {
		if name != "" && s.boundTo(name) && !reflected {
			bound = append(bound, s)
		} else {
			stray = append(stray, s)
		}
	}
	var notes []string
	for _, s := range stray {
		switch {
		case !requestHas(req, s.Placeholder):
		case reflected:
			notes = append(notes, "placeholder of secret "+s.Name+" in a TRACE, which the server echoes (not replaced)")
		default:
			notes = append(notes, "placeholder of secret "+s.Name+" sent to a host it is not bound to (not replaced)")
		}
	}
	var injected []Secret
	for _, s := range bound {
		if replaceIn(req, s) {
			notes = append(notes, "secret "+s.Name+" injected")
			injected = append(injected, s)
		}
	}
	return strings.Join(notes, "; "), injected
}

// scrubHeaders puts the placeholder back wherever a response's header
// repeats an injected secret's value (as it is, or URL-encoded): a bound
// host that redirects to the URL it got (Location), or echoes a request
// header, sends it back to the sandbox. A body that repeats it is not
// scrubbed (decision 0026).
func scrubHeaders(h http.Header, injected []Secret) {
	for _, s := range injected {
		v := string(s.Value)
		forms := []string{v, url.QueryEscape(v), url.PathEscape(v)}
		for k, vs := range h {
			for i, hv := range vs {
				for _, f := range forms {
					if f != "" && strings.Contains(hv, f) {
						hv = strings.ReplaceAll(hv, f, s.Placeholder)
					}
				}
				h[k][i] = hv
			}
		}
	}
}

// requestHas reports whether ph is anywhere in req's headers (Basic
// credentials decoded) or URL.
func requestHas(req *http.Request, ph string) bool {
	if strings.Contains(req.URL.RawPath, ph) || strings.Contains(req.URL.Path, ph) || strings.Contains(req.URL.RawQuery, ph) {
		return true
	}
	if q, err := url.QueryUnescape(req.URL.RawQuery); err == nil && strings.Contains(q, ph) {
		return true
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			if strings.Contains(v, ph) {
				return true
			}
			if k == "Authorization" || k == "Proxy-Authorization" {
				if dec, ok := basic(v); ok && strings.Contains(dec, ph) {
					return true
				}
			}
		}
	}
	return false
}

// replaceIn puts s's value in place of its placeholder in req; it reports
// whether there was any.
func replaceIn(req *http.Request, s Secret) bool {
	ph, val := s.Placeholder, string(s.Value)
	found := false
	for k, vs := range req.Header {
		for i, v := range vs {
			if strings.Contains(v, ph) {
				vs[i] = strings.ReplaceAll(v, ph, val)
				found = true
			} else if k == "Authorization" {
				if dec, ok := basic(v); ok && strings.Contains(dec, ph) {
					vs[i] = "Basic " + base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(dec, ph, val)))
					found = true
				}
			}
		}
	}
	u := req.URL
	if strings.Contains(u.Path, ph) || strings.Contains(u.RawPath, ph) {
		u.Path = strings.ReplaceAll(u.Path, ph, val)
		u.RawPath = ""
		found = true
	}
	if strings.Contains(u.RawQuery, ph) {
		u.RawQuery = strings.ReplaceAll(u.RawQuery, ph, url.QueryEscape(val))
		found = true
	}
	return found
}

// basic decodes Basic credentials.
func basic(v string) (string, bool) {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", false
	}
	return string(b), true
}
