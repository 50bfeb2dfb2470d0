package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/server"
)

// pool: create → first exec of `true` through reins serve's API (Connect
// over loopback HTTP/2, the Go client) of a sandbox handed out of the warm
// pool, with labels, env and a TTL applied, beside a cold create of the
// same spec through the same API (a manager with no pool) and raw `runsc
// run` of busybox true, interleaved round by round. The pool is full
// before each round: its refill is the background's, not the caller's.
func (b *bench) pool(n int) error {
	took := &handOuts{}
	m, err := manager.New(manager.Config{
		Dir: filepath.Join(b.dir, "poolsb"), ExecutorPath: b.executor,
		Backends: map[string]sandbox.Backend{"gvisor": b.gv}, DefaultBackend: "gvisor",
		Images: manager.ImageStore(b.images), CheckInterval: time.Hour,
		Pool:   []manager.PoolSize{{Image: "busybox", Size: 1}},
		Logger: slog.New(took),
	})
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, stop := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { m.RunPool(ctx) })
	defer func() {
		stop()
		wg.Wait()
		for _, s := range m.List(b.ctx, "", nil) {
			m.Delete(b.ctx, "", s.ID)
		}
	}()
	warm, cold := apiServer(m), apiServer(b.m)
	defer warm.Close()
	defer cold.Close()
	wc, cc := client.New(warm.URL, "t"), client.New(cold.URL, "t")
	spec := func(i int) *reinsv1.SandboxSpec {
		return &reinsv1.SandboxSpec{Image: "busybox", Labels: map[string]string{"round": fmt.Sprint(i)},
			Env: []string{"ROUND=" + fmt.Sprint(i)}, TtlMs: 600_000}
	}
	var ours, coldT, raw, creates, firsts, seconds []time.Duration
	for i := 0; i < n; i++ {
		if err := waitReady(b.ctx, m, 1); err != nil {
			return err
		}
		p, err := createExec(b.ctx, wc, spec(i))
		if err != nil {
			return fmt.Errorf("pool: %w", err)
		}
		ours, creates, firsts, seconds = append(ours, p.total()), append(creates, p.create), append(firsts, p.first), append(seconds, p.second)
		if p, err = createExec(b.ctx, cc, spec(i)); err != nil {
			return fmt.Errorf("cold: %w", err)
		}
		coldT = append(coldT, p.total())
		d, err := b.rawRun(fmt.Sprintf("poolraw%d", i), nil)
		if err != nil {
			return err
		}
		raw = append(raw, d)
	}
	if took.n() != n {
		return fmt.Errorf("%d of %d creates were served by the pool", took.n(), n)
	}
	for _, p := range []int{50, 90} {
		po := pct(ours, p)
		b.add(fmt.Sprintf("warm pool: create → first exec via the API (p%d)", p), ms(po),
			ms(pct(coldT, p))+" cold create → first exec via the API, same spec", ratio(po, pct(coldT, p)), map[int]string{50: "p50 ≤ 20 ms"}[p])
		b.add(fmt.Sprintf("warm pool: create → first exec via the API (p%d) beside raw runsc", p), ms(po),
			ms(pct(raw, p))+" raw `runsc run` true, bare busybox bundle", ratio(po, pct(raw, p)), "")
	}
	b.add("warm pool phases (p50): Create call, first exec; ratio: first exec / a second one", fmt.Sprintf("create %s, first exec %s", ms(pct(creates, 50)), ms(pct(firsts, 50))),
		ms(pct(seconds, 50))+" second exec", ratio(pct(firsts, 50), pct(seconds, 50)), "")
	h := pct(took.all(), 50)
	b.add("warm pool: the manager's hand-out alone (p50: "+took.breakdown()+")", ms(h), ms(pct(ours, 50))+" create → first exec via the API", ratio(h, pct(ours, 50)), "")
	return nil
}

// apiServer serves m's API over loopback HTTP/1.1 and h2c, token "t".
func apiServer(m *manager.Manager) *httptest.Server {
	srv := httptest.NewUnstartedServer(server.New(server.Over(m), "t", nil).Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	return srv
}

// phases are one create → first exec's parts: the Create call, the first
// exec, and (untimed in the total) a second exec, for what a first costs
// more.
type phases struct{ create, first, second time.Duration }

func (p phases) total() time.Duration { return p.create + p.first }

// createExec times Create and the first exec of `true` through c, then a
// second exec, and removes the sandbox (untimed).
func createExec(ctx context.Context, c *client.Client, spec *reinsv1.SandboxSpec) (phases, error) {
	var p phases
	t0 := time.Now()
	sb, err := c.Create(ctx, spec, nil)
	if err != nil {
		return p, err
	}
	defer c.Delete(ctx, sb.Id)
	p.create = time.Since(t0)
	for _, d := range []*time.Duration{&p.first, &p.second} {
		t := time.Now()
		x, err := c.Sandbox(sb.Id).Exec(ctx, &executorv1.ExecRequest{Argv: []string{"true"}}, nil)
		if err != nil || x == nil || x.ExitCode != 0 {
			return p, fmt.Errorf("exec: %v %v", x, err)
		}
		*d = time.Since(t)
	}
	return p, nil
}

func waitReady(ctx context.Context, m *manager.Manager, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if st := m.Pool(); len(st) == 1 && st[0].Ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pool did not refill in a minute: %+v", m.Pool())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// handOuts collects the manager's "took" of each hand-out it logs.
type handOuts struct {
	mu    sync.Mutex
	d     []time.Duration
	parts map[string][]time.Duration
}

func (h *handOuts) n() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.d) }
func (h *handOuts) all() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.d...)
}
func (h *handOuts) Enabled(context.Context, slog.Level) bool { return true }
func (h *handOuts) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *handOuts) WithGroup(string) slog.Handler            { return h }
func (h *handOuts) Handle(_ context.Context, r slog.Record) error {
	switch r.Message {
	case "sandbox created from the warm pool", "pool hand-out":
	default:
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		switch a.Key {
		case "took":
			h.d = append(h.d, a.Value.Duration())
		case "network", "set_defaults", "record":
			if h.parts == nil {
				h.parts = map[string][]time.Duration{}
			}
			h.parts[a.Key] = append(h.parts[a.Key], a.Value.Duration())
		}
		return true
	})
	return nil
}

// breakdown is the hand-out's parts, p50 each.
func (h *handOuts) breakdown() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, k := range []string{"network", "set_defaults", "record"} {
		out = append(out, fmt.Sprintf("%s %s", strings.ReplaceAll(k, "_", " "), ms(pct(h.parts[k], 50))))
	}
	return strings.Join(out, ", ")
}
