package retry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/model/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fast = retry.Policy{Attempts: 4, Base: time.Millisecond, Max: 4 * time.Millisecond}

var errBusy = errors.New("busy")

func always(error) retry.Verdict { return retry.Verdict{Retry: true} }

func TestSucceedsAfterFailures(t *testing.T) {
	n := 0
	err := fast.Do(context.Background(), func(context.Context) error {
		if n++; n < 3 {
			return errBusy
		}
		return nil
	}, always)
	if err != nil || n != 3 {
		t.Fatalf("err %v after %d calls", err, n)
	}
}

func TestGivesUp(t *testing.T) {
	n := 0
	err := fast.Do(context.Background(), func(context.Context) error { n++; return errBusy }, always)
	var re *retry.Error
	if !errors.As(err, &re) || re.Attempts != 4 || n != 4 || !errors.Is(err, errBusy) {
		t.Fatalf("got %v after %d calls", err, n)
	}
	if got := err.Error(); got != "busy (gave up after 4 attempts)" {
		t.Errorf("message %q", got)
	}
}

func TestFinalErrorNotRetried(t *testing.T) {
	n := 0
	err := fast.Do(context.Background(), func(context.Context) error { n++; return errBusy },
		func(error) retry.Verdict { return retry.Verdict{} })
	if err != errBusy || n != 1 {
		t.Fatalf("got %v after %d calls", err, n)
	}
}

func TestHonoursRetryAfter(t *testing.T) {
	var times []time.Time
	err := fast.Do(context.Background(), func(context.Context) error {
		times = append(times, time.Now())
		if len(times) == 1 {
			return errBusy
		}
		return nil
	}, func(error) retry.Verdict { return retry.Verdict{Retry: true, After: 50 * time.Millisecond} })
	if err != nil {
		t.Fatal(err)
	}
	if d := times[1].Sub(times[0]); d < 50*time.Millisecond {
		t.Errorf("waited %v, want at least the 50ms asked", d)
	}
}

func TestRetryAfterTooLong(t *testing.T) {
	p := fast
	p.MaxRetryAfter = time.Second
	start := time.Now()
	err := p.Do(context.Background(), func(context.Context) error { return errBusy },
		func(error) retry.Verdict { return retry.Verdict{Retry: true, After: time.Hour} })
	if !errors.Is(err, retry.ErrWaitTooLong) || time.Since(start) > time.Second {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "gave up after 1 attempt: the server asks to wait 1h0m0s") {
		t.Errorf("message %q", err)
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := retry.Policy{Attempts: 5, Base: time.Hour, Max: time.Hour}
	done := make(chan error)
	go func() {
		done <- p.Do(ctx, func(context.Context) error { return errBusy }, always)
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errBusy) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not return after cancel")
	}
}

func TestDeadlineBeforeNextAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p := retry.Policy{Attempts: 5, Base: time.Minute, Max: time.Minute}
	err := p.Do(ctx, func(context.Context) error { return errBusy }, always)
	if !errors.Is(err, retry.ErrPastDeadline) || !strings.Contains(err.Error(), "past the deadline") {
		t.Fatalf("got %v", err)
	}
}

func TestBackoffGrowsWithJitter(t *testing.T) {
	p := retry.Policy{Attempts: 6, Base: 10 * time.Millisecond, Max: 40 * time.Millisecond}
	var times []time.Time
	_ = p.Do(context.Background(), func(context.Context) error { times = append(times, time.Now()); return errBusy }, always)
	// Waits are base·2^i capped at Max, each in [d/2, d].
	for i, want := range []time.Duration{10, 20, 40, 40, 40} {
		want *= time.Millisecond
		got := times[i+1].Sub(times[i])
		if got < want/2 || got > want+200*time.Millisecond {
			t.Errorf("wait %d: %v, want in [%v, %v]", i, got, want/2, want)
		}
	}
}

func TestAfter(t *testing.T) {
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second, true},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"3"}}, 250 * time.Millisecond, true},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{}, 0, false},
		{nil, 0, false},
	} {
		got, ok := retry.After(tc.h)
		if got != tc.want || ok != tc.ok {
			t.Errorf("After(%v) = %v, %v", tc.h, got, ok)
		}
	}
	date := time.Now().Add(10 * time.Second).UTC().Format(http.TimeFormat)
	if got, ok := retry.After(http.Header{"Retry-After": {date}}); !ok || got < 8*time.Second || got > 10*time.Second {
		t.Errorf("After(date) = %v, %v", got, ok)
	}
}

func TestStatus(t *testing.T) {
	for status, want := range map[int]bool{400: false, 401: false, 404: false, 408: true, 409: true, 429: true, 500: true, 503: true, 529: true} {
		if got := retry.Status(status, http.Header{}); got != want {
			t.Errorf("Status(%d) = %v", status, got)
		}
	}
	if retry.Status(503, http.Header{"X-Should-Retry": {"false"}}) || !retry.Status(400, http.Header{"X-Should-Retry": {"true"}}) {
		t.Error("x-should-retry not honoured")
	}
}

func TestTransient(t *testing.T) {
	if !retry.Transient(fmt.Errorf("read: %w", syscall.ECONNRESET)) || !retry.Transient(fmt.Errorf("dial: %w", syscall.ECONNREFUSED)) {
		t.Error("resets and refusals are transient")
	}
	if retry.Transient(errors.New("bad certificate")) {
		t.Error("an unknown error is not transient")
	}
}
