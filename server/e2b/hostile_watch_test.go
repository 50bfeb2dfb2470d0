package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/api/e2b/envd/filesystem"
	"github.com/reinsdev/reins/api/e2b/envd/filesystem/filesystemconnect"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/client"
)

// lyingWatcher is a modified executor: its Watch is watch, the rest
// unimplemented.
type lyingWatcher struct {
	executorv1connect.UnimplementedExecutorHandler
	watch func(context.Context, *connect.ServerStream[executorv1.WatchEvent]) error
}

func (l *lyingWatcher) Watch(ctx context.Context, _ *connect.Request[executorv1.WatchRequest], s *connect.ServerStream[executorv1.WatchEvent]) error {
	return l.watch(ctx, s)
}

// oneSandbox is the service's answer about the one sandbox, running.
type oneSandbox struct {
	reinsv1connect.UnimplementedSandboxServiceHandler
}

func (oneSandbox) Get(ctx context.Context, req *connect.Request[reinsv1.GetSandboxRequest]) (*connect.Response[reinsv1.GetSandboxResponse], error) {
	return connect.NewResponse(&reinsv1.GetSandboxResponse{Sandbox: &reinsv1.Sandbox{
		Id: req.Msg.Id, State: reinsv1.SandboxState_SANDBOX_STATE_RUNNING}}), nil
}

// lyingEnvd serves a Handler whose one sandbox is behind the executor
// watch; it answers a filesystem client of that sandbox.
func lyingEnvd(t *testing.T, watch func(context.Context, *connect.ServerStream[executorv1.WatchEvent]) error) filesystemconnect.FilesystemClient {
	t.Helper()
	return lyingEnvds(t, watch)("sb1", "reins_test")
}

// lyingEnvds is lyingEnvd for any sandbox id and API key: every id is a
// running sandbox behind the same executor.
func lyingEnvds(t *testing.T, watch func(context.Context, *connect.ServerStream[executorv1.WatchEvent]) error) func(sandbox, key string) filesystemconnect.FilesystemClient {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(executorv1connect.NewExecutorHandler(&lyingWatcher{watch: watch}))
	mux.Handle(reinsv1connect.NewSandboxServiceHandler(oneSandbox{}))
	ex := httptest.NewServer(mux)
	t.Cleanup(ex.Close)
	h := New(Config{Client: func(token string) *client.Client { return client.NewWithHTTPClient(ex.URL, token, &http.Client{}) }})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return func(sandbox, key string) filesystemconnect.FilesystemClient {
		hc := &http.Client{Transport: headers{rt: http.DefaultTransport, set: map[string]string{SandboxIDHeader: sandbox, APIKeyHeader: key}}}
		return filesystemconnect.NewFilesystemClient(hc, srv.URL)
	}
}

// One tenant (one API key) spreading polled watchers over many of its
// sandboxes may not take the slots every tenant shares: another key still
// gets one, and the first is refused at its own bound.
func TestHostileWatchersOfOneTenant(t *testing.T) {
	envd := lyingEnvds(t, func(ctx context.Context, s *connect.ServerStream[executorv1.WatchEvent]) error {
		if err := s.Send(started()); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	ctx := ctxT(t)
	made := 0
	var refusal error
	type made1 struct {
		fs filesystemconnect.FilesystemClient
		id string
	}
	var all []made1
	t.Cleanup(func() { // before the servers close, which wait for the watches
		for _, m := range all {
			m.fs.RemoveWatcher(context.Background(), connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: m.id}))
		}
	})
	for i := 0; refusal == nil && i < maxWatchers/maxWatchersPerSandbox+1; i++ {
		fs := envd(fmt.Sprintf("sb%d", i), "reins_greedy")
		for range maxWatchersPerSandbox {
			resp, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/tmp"}))
			if err != nil {
				refusal = err
				break
			}
			all = append(all, made1{fs, resp.Msg.WatcherId})
			made++
		}
	}
	if made > maxWatchersPerCaller {
		t.Fatalf("one API key made %d polled watchers, past its bound of %d", made, maxWatchersPerCaller)
	}
	if connect.CodeOf(refusal) != connect.CodeResourceExhausted || !strings.Contains(refusal.Error(), "RemoveWatcher") {
		t.Fatalf("the refusal: %v", refusal)
	}
	other := envd("other", "reins_other")
	resp, err := other.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/tmp"}))
	if err != nil {
		t.Fatalf("another tenant's first watcher, after one tenant made %d: %v", made, err)
	}
	all = append(all, made1{other, resp.Msg.WatcherId})
}

func started() *executorv1.WatchEvent {
	return &executorv1.WatchEvent{Event: &executorv1.WatchEvent_Started{Started: &executorv1.WatchStarted{}}}
}

// goroutines counts the goroutines whose stack holds fn.
func goroutines(fn string) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// waitNone waits up to 3 s for no goroutine to run fn.
func waitNone(fn string) int {
	n := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n = goroutines(fn); n == 0 {
			return 0
		}
	}
	return n
}

// A modified executor that says "started" again and again must not
// leave a keepalive ticker behind for each time it says so.
func TestHostileWatchDirRepeatedStart(t *testing.T) {
	fs := lyingEnvd(t, func(ctx context.Context, s *connect.ServerStream[executorv1.WatchEvent]) error {
		for range 50 {
			if err := s.Send(started()); err != nil {
				return err
			}
		}
		return nil
	})
	stream, err := fs.WatchDir(ctxT(t), connect.NewRequest(&filesystem.WatchDirRequest{Path: "/tmp"}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	stream.Close()
	if n := waitNone("server/e2b.every.func1"); n != 0 {
		t.Fatalf("%d keepalive tickers outlive the WatchDir call", n)
	}
}

// A modified executor that says "started" more than once must not wedge
// the polled watcher's goroutine past RemoveWatcher.
func TestHostileCreateWatcherRepeatedStart(t *testing.T) {
	fs := lyingEnvd(t, func(ctx context.Context, s *connect.ServerStream[executorv1.WatchEvent]) error {
		for range 5 {
			if err := s.Send(started()); err != nil {
				return err
			}
		}
		<-ctx.Done()
		return nil
	})
	ctx := ctxT(t)
	resp, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/tmp"}))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the lies arrive
	if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: resp.Msg.WatcherId})); err != nil {
		t.Fatal(err)
	}
	if n := waitNone("(*polledWatcher).run"); n != 0 {
		t.Fatalf("%d polled watchers' goroutines outlive RemoveWatcher", n)
	}
}

// Watchers made at once, while the executor is slow to start them, are
// bounded as watchers made one after another.
func TestHostileCreateWatcherConcurrentBound(t *testing.T) {
	fs := lyingEnvd(t, func(ctx context.Context, s *connect.ServerStream[executorv1.WatchEvent]) error {
		time.Sleep(300 * time.Millisecond)
		if err := s.Send(started()); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	ctx := ctxT(t)
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for range 3 * maxWatchersPerSandbox {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/tmp"}))
			if err == nil {
				mu.Lock()
				ids = append(ids, resp.Msg.WatcherId)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id}))
	}
	if len(ids) > maxWatchersPerSandbox {
		t.Fatalf("%d watchers made at once on one sandbox, past the bound of %d", len(ids), maxWatchersPerSandbox)
	}
}
