package trusted

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"
)

// render writes the response for the model: status, a few headers, body.
func (h *HTTP) render(req *http.Request, resp *http.Response, note string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", resp.Proto, resp.Status)
	if resp.Request != nil && resp.Request.URL.String() != req.URL.String() {
		fmt.Fprintf(&b, "Final URL: %s\n", resp.Request.URL.Redacted())
	}
	for _, k := range []string{"Content-Type", "Content-Length", "Location", "Retry-After"} {
		if v := resp.Header.Get(k); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	if note != "" {
		b.WriteString(note + "\n")
	}
	if req.Method == "HEAD" {
		return b.String(), nil
	}
	max := h.cfg.MaxResponseBytes
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return "", err
	}
	if len(body) == 0 {
		b.WriteString("\n(empty body)")
		return b.String(), nil
	}
	// How much was dropped: Content-Length when known, else count the rest.
	total, atLeast := int64(len(body)), false
	if int64(len(body)) > max {
		body = body[:max]
		if resp.ContentLength > max {
			total = resp.ContentLength
		} else {
			n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxCountedBytes))
			if err != nil {
				return "", err
			}
			total = max + 1 + n
			atLeast = n == maxCountedBytes
		}
	}
	b.WriteString("\n")
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = http.DetectContentType(body)
	}
	if !isTextType(ct) || bytes.IndexByte(body, 0) >= 0 {
		sum := sha256.Sum256(body)
		more := ""
		if atLeast || total > int64(len(body)) {
			more = " or more"
		}
		fmt.Fprintf(&b, "[binary body not shown: %d bytes%s of %s, sha256 of the first %d bytes %s]",
			total, more, ct, len(body), hex.EncodeToString(sum[:8]))
		return b.String(), nil
	}
	cut := total > int64(len(body))
	shown := string(body)
	if cut {
		shown = trimPartialRune(shown)
	}
	b.WriteString(strings.ToValidUTF8(shown, "\uFFFD"))
	if cut {
		qual := ""
		if atLeast {
			qual = "at least "
		}
		fmt.Fprintf(&b, "\n…[response cut: %s%d more bytes dropped; showing the first %d of %s%d bytes]",
			qual, total-int64(len(shown)), len(shown), qual, total)
	}
	return b.String(), nil
}

// trimPartialRune drops an incomplete UTF-8 sequence that a cut left at the
// end of s.
func trimPartialRune(s string) string {
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				return s[:i]
			}
			break
		}
	}
	return s
}

// isTextType reports whether a media type is text a model can read.
func isTextType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"),
		strings.HasSuffix(mt, "/json"), strings.HasSuffix(mt, "/xml"):
		return true
	}
	switch mt {
	case "application/javascript", "application/x-www-form-urlencoded", "application/yaml",
		"application/x-yaml", "application/x-ndjson", "application/graphql", "application/sql", "application/csv":
		return true
	}
	return false
}

// redact replaces the configured secret values in text. A value's
// space-separated parts are replaced too, so "Bearer abc…" echoed as
// "abc…" is caught.
func (h *HTTP) redact(text string) string {
	var pairs []string
	for _, s := range h.secrets {
		for _, v := range s.headers {
			if len(v) >= 4 {
				pairs = append(pairs, v, "[secret]")
			}
			if parts := strings.Fields(v); len(parts) > 1 {
				for _, p := range parts {
					if len(p) >= 8 {
						pairs = append(pairs, p, "[secret]")
					}
				}
			}
		}
	}
	if len(pairs) == 0 {
		return text
	}
	return strings.NewReplacer(pairs...).Replace(text)
}
