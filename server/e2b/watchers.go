package e2b

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/api/e2b/envd/filesystem"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// The bounds of the polled watchers (CreateWatcher): per sandbox, per
// tenant (its API key), in all, events kept between two polls, and how
// long a watcher nobody polls lives. A tenant may hold an eighth of all,
// so that one cannot starve the others.
const (
	maxWatchersPerSandbox = 16
	maxWatchersPerCaller  = 128
	maxWatchers           = 1024
	maxPolledEvents       = 1024
	watcherIdle           = 5 * time.Minute
)

// watchers are the polled watchers: each holds an executor Watch open
// and keeps its events until GetWatcherEvents takes them.
type watchers struct {
	mu sync.Mutex
	m  map[string]*polledWatcher // by id
}

type polledWatcher struct {
	sandbox string
	caller  string
	ctx     context.Context // ends when it is removed
	cancel  context.CancelFunc

	mu       sync.Mutex
	events   []*filesystem.FilesystemEvent
	dropped  uint64
	err      error // the watch ended
	lastPoll time.Time
}

// full says why one more watcher of caller on sandbox is refused, or "".
func (w *watchers) full(sandbox, caller string) string {
	here, mine := 0, 0
	for _, pw := range w.m {
		if pw.sandbox == sandbox {
			here++
		}
		if pw.caller == caller {
			mine++
		}
	}
	switch {
	case here >= maxWatchersPerSandbox:
		return fmt.Sprintf("the sandbox has %d watchers, the most it may have: remove one (RemoveWatcher) first", here)
	case mine >= maxWatchersPerCaller:
		return fmt.Sprintf("your sandboxes have %d watchers, the most a tenant may have: remove one (RemoveWatcher) first", mine)
	case len(w.m) >= maxWatchers:
		return "the service holds as many watchers as it may: remove one of yours (RemoveWatcher), or try again later"
	}
	return ""
}

func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	who := callOf(ctx)
	sb, dir := who.sb, req.Msg.Path
	if err := paths(req.Header(), &dir); err != nil {
		return nil, err
	}
	// The watch outlives this call: it lives until removed or left
	// unpolled for watcherIdle. Its slot is taken before it starts, so
	// concurrent calls cannot pass the bounds.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pw := &polledWatcher{sandbox: sb.ID, caller: who.caller, ctx: wctx, cancel: cancel, lastPoll: time.Now()}
	id := rand.Text()
	ws := &f.h.watchers
	ws.mu.Lock()
	if why := ws.full(sb.ID, who.caller); why != "" {
		ws.mu.Unlock()
		cancel()
		return nil, errdefs.WithMessage(errdefs.ErrResourceExhausted, why)
	}
	if ws.m == nil {
		ws.m = map[string]*polledWatcher{}
	}
	ws.m[id] = pw
	ws.mu.Unlock()
	started := make(chan error, 1)
	go pw.run(wctx, sb, dir, req.Msg.Recursive, req.Msg.IncludeEntry, started)
	if err := <-started; err != nil {
		ws.remove(id)
		return nil, err
	}
	go ws.expire(id, pw)
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

// run keeps the executor's watch open, collecting its events; started
// gets the watch's start or its failure.
func (pw *polledWatcher) run(ctx context.Context, sb *client.Sandbox, dir string, recursive, withEntry bool, started chan<- error) {
	begun := false
	err := sb.Watch(ctx, &executorv1.WatchRequest{Path: dir, Recursive: recursive}, func(ev *executorv1.WatchEvent) error {
		switch e := ev.Event.(type) {
		case *executorv1.WatchEvent_Started:
			// Once: a modified executor may say it again, and nobody
			// reads started a second time.
			if !begun {
				begun = true
				started <- nil
			}
		case *executorv1.WatchEvent_Change:
			fe := fsEvent(ctx, sb, dir, e.Change, withEntry)
			pw.mu.Lock()
			if len(pw.events) < maxPolledEvents {
				pw.events = append(pw.events, fe)
			} else {
				pw.dropped++
			}
			pw.mu.Unlock()
		case *executorv1.WatchEvent_Dropped:
			pw.mu.Lock()
			pw.dropped += e.Dropped
			pw.mu.Unlock()
		}
		return nil
	})
	if !begun {
		started <- err
		return
	}
	if ctx.Err() != nil {
		return
	}
	if err == nil {
		err = errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("the watch of %s ended: the directory is gone", dir))
	}
	pw.mu.Lock()
	pw.err = err
	pw.mu.Unlock()
}

// expire removes the watcher once nobody has polled it for watcherIdle.
func (w *watchers) expire(id string, pw *polledWatcher) {
	for {
		pw.mu.Lock()
		idle := time.Since(pw.lastPoll)
		pw.mu.Unlock()
		if idle >= watcherIdle {
			w.remove(id)
			return
		}
		select {
		case <-time.After(watcherIdle - idle):
		case <-pw.ctx.Done():
			return
		}
	}
}

func (w *watchers) remove(id string) *polledWatcher {
	w.mu.Lock()
	defer w.mu.Unlock()
	pw := w.m[id]
	if pw != nil {
		pw.cancel()
		delete(w.m, id)
	}
	return pw
}

// get returns the watcher id of sandbox: another sandbox's is not found,
// like a missing one.
func (w *watchers) get(id, sandbox string) (*polledWatcher, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if pw := w.m[id]; pw != nil && pw.sandbox == sandbox {
		return pw, nil
	}
	return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("watcher %q not found: it was removed, expired after %s unpolled, or never made", id, watcherIdle))
}

func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	pw, err := f.h.watchers.get(req.Msg.WatcherId, callOf(ctx).sb.ID)
	if err != nil {
		return nil, err
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.lastPoll = time.Now()
	if pw.dropped > 0 {
		n := pw.dropped
		pw.dropped, pw.events = 0, nil
		return nil, errLost(n)
	}
	if pw.err != nil && len(pw.events) == 0 {
		return nil, pw.err
	}
	out := &filesystem.GetWatcherEventsResponse{Events: pw.events}
	pw.events = nil
	return connect.NewResponse(out), nil
}

func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	w := &f.h.watchers
	if _, err := w.get(req.Msg.WatcherId, callOf(ctx).sb.ID); err != nil {
		return nil, err
	}
	w.remove(req.Msg.WatcherId)
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
