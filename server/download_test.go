package server

import (
	"context"
	"testing"
	"time"
)

// TestDownloadSlots: a sandbox's downloads beyond downloadsPerSandbox wait
// for one to end (another sandbox's do not), a waiter whose caller leaves
// stops waiting, and a sandbox with none leaves no entry behind.
func TestDownloadSlots(t *testing.T) {
	var d downloadSlots
	ctx := context.Background()
	var held []func()
	for range downloadsPerSandbox {
		r, err := d.acquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	if r, err := d.acquire(ctx, "b"); err != nil {
		t.Fatalf("another sandbox's download waits: %v", err)
	} else {
		r()
	}
	got := make(chan func(), 1)
	go func() {
		r, _ := d.acquire(ctx, "a")
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("a download beyond the bound did not wait")
	case <-time.After(100 * time.Millisecond):
	}
	held[0]()
	select {
	case r := <-got:
		held[0] = r // full again
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting download did not get the slot let go")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.acquire(cctx, "a"); err == nil {
		t.Error("a full sandbox's download whose caller left did not fail")
	}
	for _, r := range held {
		r()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.m) != 0 {
		t.Errorf("%d sandboxes' entries left with no download", len(d.m))
	}
}
