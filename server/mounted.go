package server

import "net/http"

// WithHandler serves h at pattern (a ServeMux pattern, such as "/mcp")
// behind the API's token check: h sees only authenticated requests, and
// RequestTenant names their tenant.
func (s *Server) WithHandler(pattern string, h http.Handler) *Server {
	if s.mounted == nil {
		s.mounted = map[string]http.Handler{}
	}
	s.mounted[pattern] = h
	return s
}

// RequestTenant is the tenant an authenticated request speaks for; "" is
// the admin.
func RequestTenant(r *http.Request) string { return tenant(r.Context()) }
