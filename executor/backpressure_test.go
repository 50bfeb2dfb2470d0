package executor_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/executor"
)

// Finding 8: a foreground exec's output came from the ring buffer with no
// backpressure, so a client that read slowly lost bytes silently (a 5 MB
// file came back 2.7-4 MB, exit 0). These use a small ring, so that any
// loss shows at once.

func smallRing(c *executor.Config) { c.RingBytes = 16 << 10 }

// slowReader collects an exec's output, pausing now and then like a client
// behind a slow pipe, and counts the losses reported.
type slowReader struct {
	out     bytes.Buffer
	dropped uint64
	events  int
}

func (r *slowReader) event(ev *executorv1.ExecEvent) {
	if d := ev.GetDropped(); d != nil {
		r.dropped += d.StdoutBytes + d.StderrBytes
	}
	if b := ev.GetStdout(); b != nil {
		r.out.Write(b)
		if r.events++; r.events%8 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

func TestExecForegroundIsExactForASlowReader(t *testing.T) {
	e := newEnv(t, smallRing)
	ctx := ctxT(t)
	data := make([]byte, 8<<20)
	rand.Read(data)
	if err := os.WriteFile(e.host("big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var r slowReader
	exit, err := e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"cat", "big.bin"}}, r.event)
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if r.dropped != 0 || r.out.Len() != len(data) || sha256.Sum256(r.out.Bytes()) != sha256.Sum256(data) {
		t.Errorf("cat of %d random bytes: got %d bytes (sha256 equal: %v), %d reported dropped",
			len(data), r.out.Len(), bytes.Equal(r.out.Bytes(), data), r.dropped)
	}

	r = slowReader{}
	exit, err = e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"seq", "1", "2000000"}}, r.event)
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	var want bytes.Buffer
	for i := 1; i <= 2000000; i++ {
		want.WriteString(strconv.Itoa(i))
		want.WriteByte('\n')
	}
	if r.dropped != 0 || !bytes.Equal(r.out.Bytes(), want.Bytes()) {
		t.Errorf("seq 1 2000000: got %d bytes, want %d; %d reported dropped", r.out.Len(), want.Len(), r.dropped)
	}
}

// TestExecForegroundBlocksTheCommand: while the client holds the stream,
// the command waits in write instead of running ahead of it.
func TestExecForegroundBlocksTheCommand(t *testing.T) {
	e := newEnv(t, smallRing)
	ctx := ctxT(t)
	hold := make(chan struct{})
	var first bool
	done := make(chan error, 1)
	go func() {
		_, err := e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "head -c 40000000 /dev/zero; echo > finished"}},
			func(ev *executorv1.ExecEvent) {
				if ev.GetStdout() != nil && !first {
					first = true
					<-hold
				}
			})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	_, err := os.Stat(e.host("finished"))
	close(hold)
	if err == nil {
		t.Error("the command wrote 40 MB and finished while its client read nothing")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.host("finished")); err != nil {
		t.Errorf("the command did not finish once its client read: %v", err)
	}
}

// TestExecReattachIsExactOrReportsLoss: a client that left and reattached
// by key is told exactly what was lost meanwhile, and gets the rest whole.
func TestExecReattachIsExactOrReportsLoss(t *testing.T) {
	e := newEnv(t, smallRing)
	ctx := ctxT(t)
	const total = 3000000
	req := &executorv1.ExecRequest{
		Argv:           []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x; echo > finished; sleep 0.2", total)},
		IdempotencyKey: "k",
	}
	lctx, leave := context.WithCancel(ctx)
	e.c.Exec(lctx, req, func(ev *executorv1.ExecEvent) {
		if ev.GetStarted() != nil {
			leave() // the client goes away at once
		}
	})
	// Unheld, it runs to the end, and the ring keeps only its tail.
	waitFor(t, "the command to finish", func() bool { _, err := os.Stat(e.host("finished")); return err == nil })
	var r slowReader
	exit, err := e.c.Exec(ctx, req, r.event)
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if r.dropped == 0 || r.dropped+uint64(r.out.Len()) != total || bytes.Count(r.out.Bytes(), []byte("x")) != r.out.Len() {
		t.Errorf("reattached: got %d bytes and %d reported dropped; want them to add up to %d", r.out.Len(), r.dropped, total)
	}
}
