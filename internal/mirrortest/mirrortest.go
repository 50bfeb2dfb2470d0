// Package mirrortest starts, in the test process and on loopback,
// stand-ins for the package sources a coding agent reaches on a network —
// an apt repository, a pip simple index, an npm registry and a git
// smart-HTTP server — each serving one tiny package made at test time, and
// each keeping a record of the requests that reached it.
//
// Command gives the shell commands that install each package from a base
// URL and print Marker(tool) from the installed package, so a test proves
// a tool worked end to end (through the egress proxy, say) by the marker
// in the output and by the source's record. The packages:
//
//	apt  reins-hello 1.0 (all): /usr/bin/reins-hello; deb [trusted=yes] BASE stable main
//	pip  reins-hello 1.0: a pure-Python wheel, module reins_hello; index BASE/simple
//	npm  reins-hello 1.0.0: index.js; registry BASE
//	git  BASE/hello.git: one commit with the file MARK
//
// Every link a source serves is relative to the request or built from its
// Host header, so a client may reach a source under any name.
package mirrortest

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Tool names a package source and the client that speaks to it.
type Tool string

// The tools, each with its source.
const (
	Apt Tool = "apt"
	Pip Tool = "pip"
	NPM Tool = "npm"
	Git Tool = "git"
)

// Tools lists every tool, in a fixed order.
var Tools = []Tool{Apt, Pip, NPM, Git}

// Package is the name of the package every source serves.
const Package = "reins-hello"

// Marker is what the installed package of tool prints.
func Marker(tool Tool) string { return "reins mirror: " + string(tool) + " ok" }

// Request is one request that reached a source.
type Request struct {
	Method, Host, Path, UserAgent string
}

// Source is one running stand-in.
type Source struct {
	Tool Tool
	// URL is the base URL on loopback (http://127.0.0.1:PORT), what
	// Command takes.
	URL string

	mu   sync.Mutex
	reqs []Request
}

// Requests returns what reached the source so far, oldest first.
func (s *Source) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// Served reports whether a GET or POST reached a path ending in suffix.
func (s *Source) Served(suffix string) bool {
	return slices.ContainsFunc(s.Requests(), func(r Request) bool { return strings.HasSuffix(r.Path, suffix) })
}

func (s *Source) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, Request{Method: r.Method, Host: r.Host, Path: r.URL.Path, UserAgent: r.UserAgent()})
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// Mirrors are the four sources, started by Start.
type Mirrors struct {
	Apt, Pip, NPM, Git *Source
}

// Source returns the source of tool.
func (m *Mirrors) Source(tool Tool) *Source {
	return map[Tool]*Source{Apt: m.Apt, Pip: m.Pip, NPM: m.NPM, Git: m.Git}[tool]
}

// Start builds the packages (the .deb with dpkg-deb, the repository with
// git) and starts the four sources, closed when the test ends.
func Start(t testing.TB) *Mirrors {
	t.Helper()
	m := &Mirrors{}
	for _, src := range []struct {
		tool Tool
		h    http.Handler
		dst  **Source
	}{
		{Apt, aptHandler(t), &m.Apt}, {Pip, pipHandler(t), &m.Pip},
		{NPM, npmHandler(t), &m.NPM}, {Git, gitHandler(t), &m.Git},
	} {
		s := &Source{Tool: src.tool}
		srv := httptest.NewServer(s.record(src.h))
		t.Cleanup(srv.Close)
		s.URL = srv.URL
		*src.dst = s
	}
	return m
}

// Command is a shell script (sh) that installs Package from the source of
// tool at base and runs it, printing Marker(tool). It uses only that
// source: apt reads no other list, pip no other index, npm no other
// registry. It writes under $TMPDIR (default /tmp) and where each tool
// installs (as root: the system's packages and site-packages).
func Command(tool Tool, base string) string {
	base = strings.TrimSuffix(base, "/")
	switch tool {
	case Apt:
		opts := "-o Dir::Etc::SourceList=\"$list\" -o Dir::Etc::SourceParts=/nonexistent"
		return "set -e\n" +
			"list=\"${TMPDIR:-/tmp}/reins-mirror.list\"\n" +
			"echo 'deb [trusted=yes] " + base + " stable main' > \"$list\"\n" +
			"apt-get -q " + opts + " update\n" +
			"DEBIAN_FRONTEND=noninteractive apt-get -q -y " + opts + " install " + Package + "\n" +
			"dpkg-query -W -f '${Status}\\n' " + Package + "\n" +
			Package + "\n"
	case Pip:
		// pip trusts plain HTTP only from loopback unless told: a
		// stand-in reached by name (through a proxy) is trusted by name.
		trusted := ""
		if u, err := url.Parse(base); err == nil && u.Scheme == "http" {
			trusted = " --trusted-host " + u.Hostname()
		}
		return "set -e\n" +
			"python3 -m pip install --no-input --disable-pip-version-check --root-user-action=ignore --break-system-packages" + trusted + " --index-url " + base + "/simple " + Package + "\n" +
			"python3 -c 'import reins_hello; print(reins_hello.MARK)'\n"
	case NPM:
		return "set -e\n" +
			"mkdir -p \"${TMPDIR:-/tmp}/reins-npm\" && cd \"${TMPDIR:-/tmp}/reins-npm\"\n" +
			"npm install --registry " + base + "/ --no-audit --no-fund --no-update-notifier " + Package + "\n" +
			"node -e 'console.log(require(\"" + Package + "\").mark)'\n"
	case Git:
		return "set -e\n" +
			"dir=\"${TMPDIR:-/tmp}/reins-git\"\n" +
			"rm -rf \"$dir\"\n" +
			"git clone -q " + base + "/hello.git \"$dir\"\n" +
			"cat \"$dir/MARK\"\n"
	}
	return "echo unknown tool " + string(tool) + " >&2; exit 2\n"
}

// Env is what the service sets in a sandbox for its clients to use the
// egress proxy at proxy (http://HOST:PORT), in the spellings apt, pip,
// npm, git and curl read; none when proxy is "".
func Env(proxy string) []string {
	if proxy == "" {
		return nil
	}
	var env []string
	for _, k := range []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"} {
		env = append(env, k+"="+proxy)
	}
	return append(env, "no_proxy=localhost,127.0.0.1,::1", "NO_PROXY=localhost,127.0.0.1,::1")
}
