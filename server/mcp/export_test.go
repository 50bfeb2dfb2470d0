package mcp

import "maps"

// SessionsForTest answers the session ids h holds and their tenants.
func SessionsForTest(h *HTTP) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.sessions)
}
