package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/internal/memnet"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/server/e2b"
)

// inProcessURL is the URL the E2B front end's clients call the API at:
// the in-process listener ignores it.
const inProcessURL = "http://reins.in-process"

// e2bFront is the E2B-compatible endpoint (--e2b-addr): its own listener,
// and a client of the API's handler through an in-process listener, so
// that every check of the API holds for E2B callers.
type e2bFront struct {
	ln     net.Listener
	mem    *memnet.Listener
	api    *http.Server
	srv    *http.Server
	client *http.Client
}

// listenE2B takes --e2b-addr's port before anything starts, so that a
// taken one fails the start at once; nil when the flag is unset.
func listenE2B(addr string) (*e2bFront, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for the E2B API: %w (choose another --e2b-addr)", addr, err)
	}
	return &e2bFront{ln: ln}, nil
}

// serve serves the E2B API with api as the service's handler; domain is
// its sandboxes' (the SDK's getHost: PORT-ID.domain).
func (f *e2bFront) serve(api http.Handler, dataDir, domain string, log *slog.Logger) error {
	key, err := secretFile(filepath.Join(dataDir, "e2b.key"), 32)
	if err != nil {
		return err
	}
	f.mem = memnet.Listen()
	f.api = newHTTPServer(api)
	go f.api.Serve(f.mem)
	tr := &http.Transport{DialContext: f.mem.Dial, Protocols: new(http.Protocols),
		HTTP2: &http.HTTP2Config{MaxReadFrameSize: 1 << 20, MaxReceiveBufferPerStream: 8 << 20, MaxReceiveBufferPerConnection: 16 << 20}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	f.client = &http.Client{Transport: tr}
	h := e2b.New(e2b.Config{
		Client: func(token string) *client.Client { return client.NewWithHTTPClient(inProcessURL, token, f.client) },
		Domain: domain,
		Key:    key,
	})
	f.srv = newHTTPServer(h)
	log.Info("reins serving the E2B API", "addr", f.ln.Addr().String(), "domain", domain,
		"sdk_env", "E2B_API_URL=http://"+f.ln.Addr().String()+" E2B_SANDBOX_URL=http://"+f.ln.Addr().String()+" E2B_API_KEY=<a reins token>")
	go f.srv.Serve(f.ln)
	return nil
}

// shutdown stops the front end: its listener, then the in-process API.
func (f *e2bFront) shutdown(ctx context.Context) {
	if f.srv != nil {
		f.srv.Shutdown(ctx)
	} else {
		f.ln.Close()
	}
	if f.api != nil {
		f.api.Shutdown(ctx)
		f.client.CloseIdleConnections()
	}
}

// newHTTPServer serves h over HTTP/1.1 and h2c, as the API's listener.
func newHTTPServer(h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}

// e2bDomain is the domain of the create replies: --e2b-domain, or the
// port URLs' domain with the API's port, so that the SDK's getHost(port)
// is the port URL's host.
func e2bDomain(flag string, ports *server.Ports) string {
	if flag != "" {
		return flag
	}
	if ports.ServicePort != "" {
		return ports.Domain + ":" + ports.ServicePort
	}
	return ports.Domain
}
