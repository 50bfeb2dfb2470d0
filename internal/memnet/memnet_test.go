package memnet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An HTTP/2 (h2c) server on the listener answers a client that dials it,
// a large body crossing both ways intact; after Close, Dial fails.
func TestServeHTTP2(t *testing.T) {
	l := Listen()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Proto", r.Proto)
		io.WriteString(w, strings.Repeat("x", int(n)))
	}), Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(l)
	defer srv.Close()
	tr := &http.Transport{DialContext: l.Dial, Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	body := strings.Repeat("y", 8<<20)
	resp, err := (&http.Client{Transport: tr}).Post("http://in-process/", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if len(got) != len(body) || resp.Header.Get("X-Proto") != "HTTP/2.0" {
		t.Fatalf("got %d bytes over %q, want %d over HTTP/2.0", len(got), resp.Header.Get("X-Proto"), len(body))
	}
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := l.Dial(ctx, "", ""); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Dial after Close: %v, want net.ErrClosed", err)
	}
}

// A Dial nobody accepts ends with its context.
func TestDialWaitsForContext(t *testing.T) {
	l := Listen()
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Dial(ctx, "", ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial with no Accept: %v, want the deadline", err)
	}
}
