package manager

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/reinsdev/reins/sandbox"
)

// spyExecutor serves on a socket of its own and forwards to the executor
// at sock; before forwarding a SetDefaults it calls seen.
func spyExecutor(t *testing.T, sock string, seen func()) string {
	t.Helper()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "executor"}) },
		Transport: &http.Transport{Protocols: p, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
	}
	srv := &http.Server{Protocols: p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/SetDefaults") {
			seen()
		}
		rp.ServeHTTP(w, r)
	})}
	spy := filepath.Join(t.TempDir(), "spy.sock")
	l, err := net.Listen("unix", spy)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return spy
}

// A pool sandbox handed out is its tenant's on disk before its executor
// holds anything of the tenant's (its environment): a service that dies
// in between must not take it back into the pool at its restart (its
// record still the admin's, LabelPool set) and hand another tenant a
// sandbox whose processes start with the first one's variables.
func TestHostilePoolHandOutRecordedBeforeTenantEnv(t *testing.T) {
	m, _ := newPoolManager(t, map[string]int{"busybox": 1}, nil)
	var b *box
	for _, x := range m.boxes {
		b = x
	}
	// As a pool sandbox's record is on disk: the admin's, LabelPool set.
	if err := writeRecord(b.dir, &b.rec); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var onDisk []string
	b.rec.Endpoint.Unix = spyExecutor(t, b.rec.Endpoint.Unix, func() {
		rec, err := readRecord(b.dir)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			onDisk = append(onDisk, "unreadable: "+err.Error())
			return
		}
		onDisk = append(onDisk, rec.Tenant+" "+rec.Spec.Labels[LabelPool])
	})
	info, err := m.Create(context.Background(), "acme", sandbox.Spec{Image: "busybox", Env: []string{"ACME_KEY=private"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != b.rec.ID {
		t.Fatalf("got %s, not the pool's %s", info.ID, b.rec.ID)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(onDisk) == 0 {
		t.Fatal("the hand-out never told the executor the tenant's environment")
	}
	for _, s := range onDisk {
		if s != "acme " {
			t.Errorf("when the executor got acme's environment, the record on disk was (tenant, pool key) %q: a restart would take it back into the pool", s)
		}
	}
}
