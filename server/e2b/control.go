package e2b

import "net/http"

// routeControl registers the control plane's routes (X-API-KEY).
func (h *Handler) routeControl() {
	h.control.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, "reins does not implement the E2B call "+r.Method+" "+r.URL.Path)
	})
}
