package egresslog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func entry(sb string, i int) egress.Entry {
	return egress.Entry{Time: time.Now(), Sandbox: sb, Proto: "tcp", Host: fmt.Sprintf("h%d.test", i), Port: 443, Allowed: i%2 == 0, Rule: "test"}
}

// Entries reach the store in order, per tenant; Since and Wait see them;
// Delete removes a sandbox's log.
func TestLog(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "reins.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := New(st, nil)
	defer l.Close()
	ctx := context.Background()
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		waited <- l.Wait(wctx, "sb1", 0)
	}()
	for i := range 1000 {
		l.Add("acme", entry("sb1", i))
	}
	l.Add("beta", entry("sb2", 0))
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	got, last, err := l.Since(ctx, "sb1", 0)
	if err != nil || len(got) != 1000 || last != 1000 || got[999].Host != "h999.test" {
		t.Fatalf("Since: %d entries, last %d, %v", len(got), last, err)
	}
	if recs, err := l.Egress(ctx, "beta", "sb1", 0, 0); err != nil || len(recs) != 0 {
		t.Errorf("another tenant read sb1's log: %d, %v", len(recs), err)
	}
	if recs, err := l.Egress(ctx, "beta", "sb2", 0, 0); err != nil || len(recs) != 1 {
		t.Errorf("beta's own: %d, %v", len(recs), err)
	}
	if err := l.Delete(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := l.Since(ctx, "sb1", 0); len(got) != 0 {
		t.Errorf("%d entries after Delete", len(got))
	}
	if err := l.Wait(ctx, "sb1", 1000); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Wait on a removed sandbox: %v", err)
	}
}

// slowStore blocks every append until released.
type slowStore struct {
	store.EgressLog
	release chan struct{}
	mu      sync.Mutex
	got     []egress.Entry
}

func (s *slowStore) AppendEgress(ctx context.Context, tenant string, es []egress.Entry) error {
	<-s.release
	s.mu.Lock()
	s.got = append(s.got, es...)
	s.mu.Unlock()
	return nil
}

// A store far behind costs entries, never the proxy's time, and the loss
// is written down with its count.
func TestLossIsCounted(t *testing.T) {
	s := &slowStore{release: make(chan struct{})}
	l := New(s, nil)
	t0 := time.Now()
	n := queueSize + batchSize + 100
	for i := range n {
		l.Add("", entry("sb", i))
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Add blocked: %d entries took %v", n, d)
	}
	close(s.release)
	l.Flush(context.Background())
	l.Close()
	lost := 0
	for _, e := range s.got {
		if e.Proto == "log" {
			fmt.Sscanf(e.Note, "%d entries were lost", &lost)
			if !strings.Contains(e.Note, "could not keep up") {
				t.Errorf("loss note %q", e.Note)
			}
		}
	}
	if stored := len(s.got) - 1; lost == 0 || stored+lost != n {
		t.Errorf("%d stored + %d counted lost, want %d in all", stored, lost, n)
	}
}
