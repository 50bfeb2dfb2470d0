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

// inProcessURL is the URL the service's own clients (the E2B front end,
// MCP over HTTP) call the API at: the in-process listener ignores it.
const inProcessURL = "http://reins.in-process"

// inProcess is a client of the service's own API handler through an
// in-process listener: the E2B front end and MCP's HTTP sessions call the
// API with their caller's token through it, so that every check of the
// API holds for them, with no loopback port or TLS in between.
type inProcess struct {
	mem *memnet.Listener
	srv *http.Server
	hc  *http.Client
}

func newInProcess() *inProcess {
	p := &inProcess{mem: memnet.Listen()}
	tr := &http.Transport{DialContext: p.mem.Dial, Protocols: new(http.Protocols),
		HTTP2: &http.HTTP2Config{MaxReadFrameSize: 1 << 20, MaxReceiveBufferPerStream: 8 << 20, MaxReceiveBufferPerConnection: 16 << 20}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	p.hc = &http.Client{Transport: tr}
	return p
}

// serve starts answering the clients' calls with api.
func (p *inProcess) serve(api http.Handler) {
	p.srv = newHTTPServer(api)
	go p.srv.Serve(p.mem)
}

// client is a client of the API that calls as the holder of token.
func (p *inProcess) client(token string) *client.Client {
	return client.NewWithHTTPClient(inProcessURL, token, p.hc)
}

func (p *inProcess) shutdown(ctx context.Context) {
	if p.srv != nil {
		p.srv.Shutdown(ctx)
	} else {
		p.mem.Close()
	}
	p.hc.CloseIdleConnections()
}

// e2bFront is the E2B-compatible endpoint (--e2b-addr): its own listener,
// calling the API through the service's in-process client.
type e2bFront struct {
	ln  net.Listener
	srv *http.Server
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

// serve serves the E2B API, calling the API through self; domain is its
// sandboxes' (the SDK's getHost: PORT-ID.domain).
func (f *e2bFront) serve(self *inProcess, dataDir, domain string, log *slog.Logger) error {
	key, err := secretFile(filepath.Join(dataDir, "e2b.key"), 32)
	if err != nil {
		return err
	}
	h := e2b.New(e2b.Config{Client: self.client, Domain: domain, Key: key})
	f.srv = newHTTPServer(h)
	log.Info("reins serving the E2B API", "addr", f.ln.Addr().String(), "domain", domain,
		"sdk_env", "E2B_API_URL=http://"+f.ln.Addr().String()+" E2B_SANDBOX_URL=http://"+f.ln.Addr().String()+" E2B_API_KEY=<a reins token>")
	go f.srv.Serve(f.ln)
	return nil
}

// shutdown stops the front end's listener.
func (f *e2bFront) shutdown(ctx context.Context) {
	if f.srv != nil {
		f.srv.Shutdown(ctx)
	} else {
		f.ln.Close()
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
