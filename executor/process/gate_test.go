package process

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// stallSink blocks in its first Output until released, like a client that
// stopped reading.
type stallSink struct {
	release chan struct{}
	got     atomic.Int64
	dropped atomic.Uint64
	stalled chan struct{}
}

func (s *stallSink) Output(stream int, b []byte) error {
	if s.got.Add(int64(len(b))) == int64(len(b)) {
		close(s.stalled)
		<-s.release
	}
	return nil
}
func (s *stallSink) Dropped(o, e uint64) error { s.dropped.Add(o + e); return nil }
func (s *stallSink) Exited(Exit) error         { return nil }

// TestForegroundReaderHoldsTheProcessBack: a foreground reader that stops
// reading stops the process (it loses nothing), and Close still ends it:
// a stalled reader holds nothing up once the table closes.
func TestForegroundReaderHoldsTheProcessBack(t *testing.T) {
	tab, err := NewTable(Options{RingBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := tab.Start(Spec{Argv: []string{"head", "-c", "50000000", "/dev/zero"}, Env: []string{"PATH=/usr/bin:/bin"}, Foreground: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &stallSink{release: make(chan struct{}), stalled: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- p.Stream(context.Background(), Owner, s) }()
	<-s.stalled
	select {
	case <-p.Done():
		t.Fatal("the process finished 50 MB of output while its only foreground reader read nothing")
	case <-time.After(300 * time.Millisecond):
	}
	closed := make(chan struct{})
	go func() { tab.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close hung on a process held back by a stalled reader")
	}
	close(s.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e := p.Exit(); e == nil || e.Reason != ReasonKilled {
		t.Errorf("exit after Close: %+v, want killed", e)
	}
}
