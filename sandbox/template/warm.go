package template

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
)

// Executor is what a build and a warm start need of a sandbox's
// executor; *client.Client is one.
type Executor interface {
	Exec(ctx context.Context, req *executorv1.ExecRequest, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error)
	Start(ctx context.Context, req *executorv1.ExecRequest) (*executorv1.Started, error)
	Attach(ctx context.Context, pid int32, follow bool, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error)
	Upload(ctx context.Context, dir string, tarStream io.Reader) (*executorv1.UploadResponse, error)
}

var _ Executor = (*client.Client)(nil)

// Polling of the ready command: how often, and how long one try may take.
const (
	readyEvery   = 100 * time.Millisecond
	readyTryMost = 10 * time.Second
	// StartTag marks the start command in the sandbox's process list.
	StartTag = "template start"
)

// Warm launches start in the background (sh -c, with env added) and
// returns once ready exits 0, polled until timeout (DefaultReadyTimeout
// when 0). A start that exits first, or a ready that never succeeds,
// is an error that says so with the tail of both commands' output.
// Without a ready command, Warm returns once start has started.
func Warm(ctx context.Context, ex Executor, env []string, start, ready string, timeout time.Duration) error {
	if start == "" {
		return nil
	}
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	st, err := ex.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", start}, Env: env, Tag: StartTag})
	if err != nil {
		return fmt.Errorf("starting the start command %q: %w", truncate(start, 80), err)
	}
	if ready == "" {
		return nil
	}
	w := watchStart(ctx, ex, st.Pid)
	defer w.stop()
	deadline := time.Now().Add(timeout)
	var last tail
	var lastCode int32 = -1
	for {
		try := min(time.Until(deadline), readyTryMost)
		if try <= 0 {
			break
		}
		last.reset()
		exit, err := ex.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", ready}, Env: env, TimeoutMs: try.Milliseconds()},
			func(ev *executorv1.ExecEvent) { last.write(ev.GetStdout()); last.write(ev.GetStderr()) })
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return fmt.Errorf("running the ready command %q: %w", truncate(ready, 80), err)
		case exit.ExitCode == 0:
			return nil
		}
		lastCode = exit.ExitCode
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.exited:
			return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
				"the start command %q exited with code %d before the ready command %q succeeded%s",
				truncate(start, 80), w.exit.ExitCode, truncate(ready, 80), outputSays(", its output", w.output())))
		case <-time.After(readyEvery):
		}
	}
	return errdefs.WithMessage(errdefs.ErrTimeout, fmt.Sprintf(
		"the ready command %q did not exit 0 within %s (its last exit code %d%s); the start command %q is running%s: "+
			"check that start serves what ready asks, or give a longer ready timeout",
		truncate(ready, 80), timeout, lastCode, outputSays(", its output", last.String()), truncate(start, 80), outputSays(", its output", w.output())))
}

// startWatch follows the start command's output (its tail) and its exit
// (exited is closed, exit set), until stop.
type startWatch struct {
	mu     sync.Mutex
	out    tail
	exit   *executorv1.Exited
	exited chan struct{}
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func watchStart(ctx context.Context, ex Executor, pid int32) *startWatch {
	w := &startWatch{exited: make(chan struct{})}
	ctx, w.cancel = context.WithCancel(ctx)
	w.done.Go(func() {
		exit, err := ex.Attach(ctx, pid, true, func(ev *executorv1.ExecEvent) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.out.write(ev.GetStdout())
			w.out.write(ev.GetStderr())
		})
		if err == nil && exit != nil {
			w.exit = exit
			close(w.exited)
		}
	})
	return w
}

func (w *startWatch) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

func (w *startWatch) stop() {
	w.cancel()
	w.done.Wait()
}

func outputSays(what, out string) string {
	out = strings.TrimSpace(out)
	if out == "" {
		return ""
	}
	return what + " ended with:\n" + out
}

// tail keeps the last tailBytes written to it.
type tail struct {
	buf  []byte
	seen int64
}

func (t *tail) write(p []byte) {
	t.seen += int64(len(p))
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
}

func (t *tail) reset() { t.buf, t.seen = t.buf[:0], 0 }

func (t *tail) String() string {
	b := t.buf
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
	}
	s := strings.ToValidUTF8(string(b), "?")
	if t.seen > int64(len(b)) {
		s = "…" + s
	}
	return s
}
