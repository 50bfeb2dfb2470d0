// Package fakehttp is a scripted HTTP server for the providers' tests: it
// answers each request with the next canned reply (the last one repeats)
// and records what it was sent.
package fakehttp

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// Reply is one canned answer.
type Reply struct {
	Status int               // default 200
	Header map[string]string // extra headers
	File   string            // body from this file (testdata/…)
	Body   string            // or this body
	Reset  bool              // drop the connection instead of answering
}

// Request is what the server was sent.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	At           time.Time
}

// Server is a running fake.
type Server struct {
	*httptest.Server
	t       testing.TB
	mu      sync.Mutex
	replies []Reply
	reqs    []Request
	// Received gets a value each time a request arrives, if there is room.
	Received chan struct{}
}

// New starts a server that plays replies; it is closed when the test ends.
func New(t testing.TB, replies ...Reply) *Server {
	s := &Server{t: t, replies: replies, Received: make(chan struct{}, 100)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now()})
	reply := s.replies[min(len(s.reqs), len(s.replies))-1]
	s.mu.Unlock()
	select {
	case s.Received <- struct{}{}:
	default:
	}
	if reply.Reset {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	data := []byte(reply.Body)
	if reply.File != "" {
		var err error
		if data, err = os.ReadFile(reply.File); err != nil {
			s.t.Errorf("fakehttp: %v", err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range reply.Header {
		w.Header().Set(k, v)
	}
	if reply.Status == 0 {
		reply.Status = http.StatusOK
	}
	w.WriteHeader(reply.Status)
	w.Write(data)
}

// Requests returns what the server was sent so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Golden compares a JSON body with the golden file at path, ignoring
// formatting; with -update it rewrites the file.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, got, "", "  "); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, got)
	}
	buf.WriteByte('\n')
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantData, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	var g, w any
	if err := json.Unmarshal(wantData, &w); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	json.Unmarshal(got, &g)
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("request body differs from %s (-want +got):\n%s", path, diff)
	}
}
