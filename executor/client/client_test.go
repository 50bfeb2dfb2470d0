package client_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
)

func TestMain(m *testing.M) {
	// net/http lingers 500ms before closing a connection whose request
	// body was not read (a refused upload): a sleep, not a leak.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

const token = "client-test-token"

// serve runs an executor on socket until the test ends.
func serve(t *testing.T, socket string) {
	t.Helper()
	srv, err := executor.New(executor.Config{Root: t.TempDir(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	l, err := executor.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
}

// TestDeadlineAgainstAStalledExecutor: a listener that accepts connections
// and never answers must not hang any call.
func TestDeadlineAgainstAStalledExecutor(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "stall.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held, never read or answered
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})

	c, err := client.Dial(context.Background(), socket, token, client.WithCallTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	calls := map[string]func() error{
		"Health": func() error { return c.Health(ctx) },
		"Exec":   func() error { _, _, _, err := c.Run(ctx, "true"); return err },
		"Upload": func() error {
			_, err := c.Upload(ctx, "/", strings.NewReader(strings.Repeat("x", 64<<20)))
			return err
		},
		"Download": func() error { _, err := c.Download(ctx, "/", discard{}); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		took := time.Since(start)
		if !errors.Is(err, errdefs.ErrTimeout) || !strings.Contains(err.Error(), "did not answer within 300ms") {
			t.Errorf("%s: got %v (kind %v), want a timeout that says so", name, err, errdefs.Kind(err))
		}
		if took > 3*time.Second {
			t.Errorf("%s took %v with a 300ms deadline", name, took)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestLongSocketPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < 150 {
		dir = filepath.Join(dir, "a-rather-long-directory-name")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "executor.sock")
	serve(t, socket)
	c, err := client.Dial(context.Background(), socket, token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("Health over a %d-byte socket path: %v", len(socket), err)
	}
	out, _, exit, err := c.Run(ctx, "echo", "hi")
	if err != nil || exit.ExitCode != 0 || string(out) != "hi\n" {
		t.Errorf("Run = %q %v %v", out, exit, err)
	}
}

func TestWaitReady(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "late.sock")
	ready := make(chan *client.Client, 1)
	errc := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		c, err := client.WaitReady(ctx, socket, token)
		errc <- err
		ready <- c
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	serve(t, socket)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	c := <-ready
	defer c.Close()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("WaitReady noticed the executor %v after it started", d)
	}
	hello, err := c.Hello(ctx)
	if err != nil || hello.ApiVersion != 1 {
		t.Errorf("Hello = %v %v", hello, err)
	}

	// Nothing there: WaitReady gives up when the context ends, saying so.
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = client.WaitReady(short, filepath.Join(t.TempDir(), "none.sock"), token)
	if !errors.Is(err, errdefs.ErrTimeout) || !strings.Contains(err.Error(), "did not become ready") {
		t.Errorf("WaitReady on nothing = %v", err)
	}
}

func TestConnectionReuse(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "e.sock")
	serve(t, socket)
	c, err := client.Dial(context.Background(), socket, token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"true"}}, nil); err != nil {
				t.Error(err)
			}
			if err := c.Health(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// One HTTP/2 connection multiplexes every call: the executor sees one
	// open socket from us.
	if n := openSockets(t); n > 1 {
		t.Errorf("%d connections to the executor, want 1", n)
	}
}

// openSockets counts this process's unix socket connections to the
// executor: both ends live in this process, so accepted ones are counted.
func openSockets(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	// The listener, and client and server ends of each connection.
	return (n - 1) / 2
}

// TestDialRefusesASymlinkedSocket: a sandbox that replaces its executor's
// socket with a symlink to a host socket (finding 2 of the containment
// review) must get no connection to that host socket: not the token, not a
// byte. A regular file in its place is refused too.
func TestDialRefusesASymlinkedSocket(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host.sock")
	l, err := net.Listen("unix", host)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })

	run := t.TempDir() // the sandbox's run directory
	socket := filepath.Join(run, "executor.sock")
	for name, plant := range map[string]func() error{
		"symlink to a host socket": func() error { return os.Symlink(host, socket) },
		"relative symlink":         func() error { return os.Symlink("../"+filepath.Base(filepath.Dir(host))+"/host.sock", socket) },
		"regular file":             func() error { return os.WriteFile(socket, []byte("x"), 0o600) },
		"hard link to a file":      func() error { return os.Link(os.Args[0], socket) },
	} {
		t.Run(name, func(t *testing.T) {
			os.Remove(socket)
			if err := plant(); err != nil {
				if name == "hard link to a file" {
					t.Logf("cannot hard-link here (%v); covered by the others", err)
					return
				}
				t.Fatal(err)
			}
			c, err := client.Dial(context.Background(), socket, token, client.WithCallTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Health(context.Background())
			if err == nil {
				t.Fatal("Health through a planted socket name succeeded")
			}
			select {
			case <-accepted:
				t.Fatal("the host socket got a connection through the symlink")
			default:
			}
		})
	}

	// The real socket still works, and its path may be of any length.
	os.Remove(socket)
	long := filepath.Join(run, strings.Repeat("d", 120))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	serve(t, filepath.Join(long, "executor.sock"))
	c, err := client.WaitReady(context.Background(), filepath.Join(long, "executor.sock"), token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestDialPortBoundsTheAnswer: what answers on the socket may be the
// sandbox's own program; an answer whose head never ends is refused once
// it passes the bound, not read into the service's memory until the
// deadline.
func TestDialPortBoundsTheAnswer(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "hostile.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nX-Endless: "))
		junk := []byte(strings.Repeat("a", 64<<10))
		for {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
	c, err := client.Dial(context.Background(), socket, token, client.WithCallTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	conn, err := c.DialPort(context.Background(), 3000)
	if err == nil {
		conn.Close()
		t.Fatal("DialPort accepted an answer whose head never ends")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("DialPort took %s to refuse an endless answer: it reads until the deadline", d)
	}
	if !errors.Is(err, errdefs.ErrUnavailable) || strings.Contains(err.Error(), socket) {
		t.Errorf("DialPort: %v, want unavailable, naming no path", err)
	}
}
