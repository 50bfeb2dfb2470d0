package server

import (
	"net/http"

	"github.com/reinsdev/reins/api"
)

// serveOpenAPI answers the API's OpenAPI description, to anyone: it says
// nothing a reader of the repository does not know.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(api.OpenAPI)
}
