package e2b

import (
	"net/http"
)

// SandboxClientOf exposes sandboxClient to the tests: the id of the
// sandbox whose client it made.
func (h *Handler) SandboxClientOf(r *http.Request) (string, error) {
	_, sb, _, err := h.sandboxClient(r)
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

// Seal makes an access token as the create reply's.
func (h *Handler) Seal(id, token string) string { return h.tokens.seal(id, token) }
