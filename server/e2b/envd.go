package e2b

import "net/http"

// routeData registers envd's routes (the data plane).
func (h *Handler) routeData() {
	h.data.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, "reins does not implement the envd call "+r.Method+" "+r.URL.Path)
	})
}
