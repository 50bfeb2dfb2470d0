package manager

// The warm pool (issue 11 point 7; docs/decisions/0037-pool-hand-out.md):
// per image (or snapshot:, template:) a few sandboxes wait ready, made in
// the background by the service itself (tenant ""), so that a Create the
// pool can serve is a change of record rather than a boot.
//
// A pool sandbox is an admin sandbox labelled LabelPool=KEY: it counts
// against no tenant's quota, no tenant sees it, and it has no TTL or idle
// timeout. Its network is the boundary's egress mode with nothing allowed.
// Handing it out, under its box's lock and after it was taken off the
// ready list (so never to two callers):
//
//	admission   counted as the tenant's, atomically with every create's
//	record      tenant, spec (labels, TTL, idle timeout, on-expire, env,
//	            workdir, rules), CreatedAt and ExpiresAt from now
//	network     the tenant's rules, as SetNetwork applies them
//	executor    SetDefaults: the spec's environment, its workdir
//
// What a running sandbox cannot take (other limits, another backend, a
// model gateway, secrets, network none) is not served: the create goes
// cold and the log says why. Pool sandboxes survive a restart like any
// sandbox and RunPool takes them back, or removes them when their key is
// no longer configured or its spec changed.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/sandbox"
)

// LabelPool marks a sandbox of the warm pool; its value is the pool's key.
// LabelPoolReady is added once it waits ready. Only the manager sets them
// (the API refuses labels that begin with LabelPool); a handed-out sandbox
// has its user's labels instead.
const (
	LabelPool      = sandbox.LabelPool
	LabelPoolReady = sandbox.LabelPoolReady
)

// PoolSize is one key of the warm pool: Size sandboxes of Image (any image
// reference, snapshot:NAME or template:NAME) wait ready.
type PoolSize struct {
	Image string
	Size  int
}

// MaxPoolSize bounds the sandboxes one key keeps ready.
const MaxPoolSize = 64

// Refill backoff after a failed pool create: doubled on each failure in a
// row, from poolBackoffMin up to poolBackoffMax.
const (
	poolBackoffMin = time.Second
	poolBackoffMax = time.Minute
	poolTick       = 5 * time.Second
)

// warmPool is the pool's bookkeeping; its mu is taken after a box's mu or
// m.mu, never before.
type warmPool struct {
	specs   map[string]sandbox.Spec // normalized, per key
	sizes   map[string]int
	workers int
	kick    chan struct{}

	mu      sync.Mutex
	ready   map[string][]*box // oldest first
	making  map[string]int
	backoff map[string]time.Duration
	retryAt map[string]time.Time
}

// newWarmPool checks the pool's configuration: the operator's flags.
func (m *Manager) newWarmPool(keys []PoolSize, workers int) (*warmPool, error) {
	p := &warmPool{specs: map[string]sandbox.Spec{}, sizes: map[string]int{}, workers: min(max(workers, 1), 2),
		ready: map[string][]*box{}, making: map[string]int{}, backoff: map[string]time.Duration{}, retryAt: map[string]time.Time{}}
	p.kick = make(chan struct{}, p.workers)
	for _, k := range keys {
		switch {
		case strings.TrimSpace(k.Image) == "" || k.Image != strings.TrimSpace(k.Image):
			return nil, fmt.Errorf("warm pool: image %q: want an image reference, snapshot:NAME or template:NAME without spaces: %w", k.Image, errdefs.ErrInvalidArgument)
		case k.Size < 1 || k.Size > MaxPoolSize:
			return nil, fmt.Errorf("warm pool: %s=%d: want from 1 to %d sandboxes: %w", k.Image, k.Size, MaxPoolSize, errdefs.ErrInvalidArgument)
		case p.sizes[k.Image] != 0:
			return nil, fmt.Errorf("warm pool: %s is given twice: give each image once: %w", k.Image, errdefs.ErrInvalidArgument)
		}
		spec, err := m.normalize(poolSpec(k.Image))
		if err != nil {
			return nil, fmt.Errorf("warm pool: %s: %w", k.Image, err)
		}
		p.specs[k.Image], p.sizes[k.Image] = spec, k.Size
	}
	return p, nil
}

func poolSpec(key string) sandbox.Spec {
	return sandbox.Spec{Image: key, Labels: map[string]string{LabelPool: key}}
}

// poolKey is the key of the pool sandbox b, "" for any other; b.mu or
// m.mu is held (the label is set at create and removed at hand-out, under
// both).
func poolKey(b *box) string {
	if b.tenant != "" {
		return ""
	}
	return b.rec.Spec.Labels[LabelPool]
}

func (p *warmPool) poke() {
	for range p.workers {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// take removes the oldest live sandbox of key from the ready list: whoever
// takes it is the only one who can hand it out.
func (p *warmPool) take(key string) *box {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready[key]) > 0 {
		b := p.ready[key][0]
		p.ready[key] = p.ready[key][1:]
		if !b.stopped.Load() {
			return b
		}
	}
	return nil
}

// add puts b on key's ready list (at the front with first: a box given
// back keeps its turn), once.
func (p *warmPool) add(key string, b *box, first bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Contains(p.ready[key], b) {
		return
	}
	if first {
		p.ready[key] = append([]*box{b}, p.ready[key]...)
	} else {
		p.ready[key] = append(p.ready[key], b)
	}
}

// live counts key's ready sandboxes that have not stopped; p.mu is held.
func (p *warmPool) live(key string) int {
	n := 0
	for _, b := range p.ready[key] {
		if !b.stopped.Load() {
			n++
		}
	}
	return n
}

// next reserves a refill of the first key short of its size and out of
// backoff, or says how long to wait for one.
func (p *warmPool) next(now time.Time) (string, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wait := poolTick
	for _, key := range slices.Sorted(maps.Keys(p.sizes)) {
		if p.live(key)+p.making[key] >= p.sizes[key] {
			continue
		}
		if at := p.retryAt[key]; now.Before(at) {
			wait = min(wait, at.Sub(now))
			continue
		}
		p.making[key]++
		return key, 0
	}
	return "", wait
}

// done ends a refill of key: b joins the ready list, or err starts (or
// lengthens) its backoff, which it returns.
func (p *warmPool) done(key string, b *box, err error) time.Duration {
	p.mu.Lock()
	p.making[key]--
	if err != nil {
		d := min(max(2*p.backoff[key], poolBackoffMin), poolBackoffMax)
		p.backoff[key], p.retryAt[key] = d, time.Now().Add(d)
		p.mu.Unlock()
		return d
	}
	delete(p.backoff, key)
	delete(p.retryAt, key)
	p.mu.Unlock()
	p.add(key, b, false)
	return 0
}

// PoolState is how one key of the warm pool is doing.
type PoolState struct {
	Image  string
	Size   int
	Ready  int // waiting, alive
	Making int // being made now
	// RetryAt is when a refill that failed is tried again (zero: none
	// failed since the last success).
	RetryAt time.Time
}

// Pool reports on every key of the warm pool, in order of image.
func (m *Manager) Pool() []PoolState {
	p := m.warm
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PoolState
	for _, key := range slices.Sorted(maps.Keys(p.sizes)) {
		out = append(out, PoolState{Image: key, Size: p.sizes[key], Ready: p.live(key), Making: p.making[key], RetryAt: p.retryAt[key]})
	}
	return out
}

// RunPool keeps the warm pool full until ctx ends: it takes back the pool
// sandboxes Recover found (removing those of keys no longer configured, or
// made to another spec, or more than a key's size), then refills each key
// after every hand-out, with at most Config.PoolWorkers creates at once
// so that refills never crowd out users' creates. A failed refill is
// logged and retried with backoff. Call it after Recover, also with no
// pool configured: it removes what an earlier configuration left.
func (m *Manager) RunPool(ctx context.Context) {
	m.adoptPool(ctx)
	if len(m.warm.sizes) == 0 {
		return
	}
	var wg sync.WaitGroup
	for range m.warm.workers {
		wg.Go(func() { m.fillPool(ctx) })
	}
	wg.Wait()
}

func (m *Manager) fillPool(ctx context.Context) {
	p := m.warm
	for ctx.Err() == nil {
		key, wait := p.next(time.Now())
		if key == "" {
			select {
			case <-ctx.Done():
			case <-p.kick:
			case <-time.After(wait):
				m.prunePool(ctx)
			}
			continue
		}
		t0 := time.Now()
		b, err := m.makePoolBox(ctx, key)
		if ctx.Err() != nil {
			p.done(key, b, nil)
			return
		}
		if err == nil {
			m.markReady(b)
		}
		if d := p.done(key, b, err); err != nil {
			m.log.Warn("warm pool refill failed; retrying", "image", key, "retry_in", d, "err", err)
			continue
		}
		st := m.poolState(key)
		m.log.Info("warm pool filled", "image", key, "sandbox", b.rec.ID, "ready", st.Ready, "size", st.Size, "took", time.Since(t0).Round(time.Millisecond))
	}
}

func (m *Manager) poolState(key string) PoolState {
	for _, s := range m.Pool() {
		if s.Image == key {
			return s
		}
	}
	return PoolState{}
}

// makePoolBox creates one sandbox for key's pool; on failure nothing is
// left of it.
func (m *Manager) makePoolBox(ctx context.Context, key string) (*box, error) {
	info, err := m.Create(ctx, "", poolSpec(key), nil)
	if err != nil {
		if info.ID != "" {
			m.Delete(context.Background(), "", info.ID)
		}
		return nil, err
	}
	m.warmUp(ctx, info.ID)
	return m.lookup("", info.ID)
}

// PoolWarmUpTag tags a pool sandbox's warm-up process, which the executor
// forgets right after it (SetDefaults' forget_exited).
const PoolWarmUpTag = "pool warm-up"

// warmUp runs `true` once in a new pool sandbox: a gVisor sandbox's first
// process costs about twice a later one (measured: 14–30 ms against 8–10),
// and that first one is then the pool's, off the create path. An image
// without `true` is not warmed, and that is all.
func (m *Manager) warmUp(ctx context.Context, id string) {
	c, err := m.Client(ctx, "", id)
	if err != nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Exec(wctx, &executorv1.ExecRequest{Argv: []string{"true"}, Tag: PoolWarmUpTag}, nil); err != nil {
		m.log.Debug("warming a pool sandbox", "sandbox", id, "err", err)
	}
	// Forgotten now, off the hand-out's path: its new user's process
	// list starts empty.
	if err := c.SetDefaults(wctx, nil, "", true); err != nil {
		m.log.Debug("warming a pool sandbox", "sandbox", id, "err", err)
	}
}

// markReady labels pool sandbox b LabelPoolReady, for the admin's list
// (a copy of the labels: Info handed out earlier shares the old map).
func (m *Manager) markReady(b *box) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if poolKey(b) == "" || b.rec.Spec.Labels[LabelPoolReady] != "" {
		return
	}
	labels := maps.Clone(b.rec.Spec.Labels)
	labels[LabelPoolReady] = "true"
	b.rec.Spec.Labels = labels
	if err := writeRecord(b.dir, &b.rec); err != nil {
		m.log.Warn("writing record failed", "sandbox", b.rec.ID, "err", err)
	}
}

// adoptPool takes back the running pool sandboxes of configured keys, up
// to each key's size, and removes the others.
func (m *Manager) adoptPool(ctx context.Context) {
	m.mu.Lock()
	boxes := slices.Collect(maps.Values(m.boxes))
	m.mu.Unlock()
	// Oldest first, as they waited.
	created := map[*box]time.Time{}
	for _, b := range boxes {
		b.mu.Lock()
		created[b] = b.rec.CreatedAt
		b.mu.Unlock()
	}
	slices.SortFunc(boxes, func(a, b *box) int { return created[a].Compare(created[b]) })
	for _, b := range boxes {
		b.mu.Lock()
		key, state, spec, id := poolKey(b), b.rec.State, b.rec.Spec, b.rec.ID
		b.mu.Unlock()
		if key == "" || state == sandbox.StateCreating {
			continue
		}
		want, configured := m.warm.specs[key]
		keep := configured && state == sandbox.StateRunning && samePoolSpec(spec, want)
		if keep {
			m.warm.mu.Lock()
			keep = m.warm.live(key) < m.warm.sizes[key]
			m.warm.mu.Unlock()
		}
		if keep {
			m.markReady(b)
			m.warm.add(key, b, false)
			m.log.Info("warm pool took back a sandbox", "image", key, "sandbox", id)
			continue
		}
		if err := m.Delete(ctx, "", id); err != nil {
			m.log.Warn("removing a pool sandbox that is no longer wanted", "sandbox", id, "err", err)
			continue
		}
		m.log.Info("removed a pool sandbox that is no longer wanted", "image", key, "sandbox", id, "state", state, "configured", configured)
	}
}

// prunePool removes pool sandboxes that died while they waited.
func (m *Manager) prunePool(ctx context.Context) {
	m.mu.Lock()
	boxes := slices.Collect(maps.Values(m.boxes))
	m.mu.Unlock()
	for _, b := range boxes {
		if !b.stopped.Load() || !b.mu.TryLock() {
			continue
		}
		key, id := poolKey(b), b.rec.ID
		b.mu.Unlock()
		if key != "" {
			m.log.Info("removing a pool sandbox that died while it waited", "image", key, "sandbox", id)
			m.Delete(ctx, "", id)
		}
	}
}

func samePoolSpec(have, want sandbox.Spec) bool {
	return have.Image == want.Image && have.Backend == want.Backend && have.Limits == want.Limits &&
		have.Workdir == want.Workdir && len(have.Env) == 0 && have.Gateway == nil
}

// poolMismatch says why spec (normalized), asked by tenant, cannot be
// served by key's pool sandboxes; "" when it can.
func (m *Manager) poolMismatch(tenant string, spec, pool sandbox.Spec) string {
	switch {
	case spec.Backend != pool.Backend:
		return "another backend (" + spec.Backend + ") than the pool's (" + pool.Backend + ")"
	case spec.Limits != pool.Limits:
		return "other limits than the pool's (a running sandbox's cannot change)"
	case spec.Gateway != nil:
		return "a model gateway (its token is made at create)"
	case spec.Screen != "":
		return "a screen size (the pool's sandboxes have their image's, from its start)"
	case len(spec.Network.Secrets) > 0:
		return "secrets (bound at create, in the environment)"
	case spec.Network.Mode == egress.ModeNone:
		return "network none (a pool sandbox has a network interface)"
	case tenant != "" && (image.NamesHostPath(spec.Image) || strings.HasPrefix(spec.Image, "snapshot:") || strings.HasPrefix(spec.Image, "template:")):
		// The pool resolved it as the admin: a tenant's snapshot:NAME
		// is its own, and host paths are the operator's.
		return "the pool's sandboxes of " + spec.Image + " are the admin's"
	}
	return ""
}

// fromPool hands out a pool sandbox for spec (normalized; tenant's
// ceilings, quota precheck and network check passed). ok false: the pool
// cannot serve it, or is empty, and the create goes cold. A tenant's spec
// with the pool's labels is refused.
func (m *Manager) fromPool(ctx context.Context, tenant string, spec sandbox.Spec, oldID string, limit int) (Record, bool, error) {
	for k := range spec.Labels {
		if strings.HasPrefix(k, LabelPool) && tenant != "" {
			return Record{}, false, fmt.Errorf("label %s: labels that begin with %s are the warm pool's: %w", truncate(k, 80), LabelPool, errdefs.ErrInvalidArgument)
		}
	}
	pool, ok := m.warm.specs[spec.Image]
	if _, own := spec.Labels[LabelPool]; !ok || own || oldID != "" {
		return Record{}, false, nil // no pool, the pool's own create, or a replacement's
	}
	if why := m.poolMismatch(tenant, spec, pool); why != "" {
		m.log.Info("warm pool skipped: creating cold", "image", spec.Image, "tenant", tenant, "why", why)
		return Record{}, false, nil
	}
	defer m.warm.poke()
	for {
		b := m.warm.take(spec.Image)
		if b == nil {
			m.log.Info("warm pool empty: creating cold", "image", spec.Image, "tenant", tenant)
			return Record{}, false, nil
		}
		if rec, ok, err := m.handOut(ctx, b, tenant, spec, limit); ok || err != nil {
			return rec, ok, err
		}
	}
}

// handOut gives pool sandbox b (taken off the ready list) to tenant with
// spec. ok false: b could not be used (it died, or could not take the
// spec, and is removed); the caller tries the next.
func (m *Manager) handOut(ctx context.Context, b *box, tenant string, spec sandbox.Spec, limit int) (Record, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := spec.Image
	if b.rec.State != sandbox.StateRunning || poolKey(b) != key {
		return Record{}, false, nil
	}
	if err := m.admitAs(tenant, limit, b); err != nil {
		m.warm.add(key, b, true)
		return Record{}, false, err
	}
	t0 := time.Now()
	if err := m.dressLocked(ctx, b, tenant, spec); err != nil {
		m.log.Warn("a pool sandbox could not take its spec: removing it", "sandbox", b.rec.ID, "err", err)
		m.discardLocked(b, "it could not be handed out of the warm pool: "+errdefs.Public(err))
		return Record{}, false, nil
	}
	// Its events start here: the pool's own (the admin's) are not its
	// new owner's.
	m.events.mu.Lock()
	delete(m.events.by, b.rec.ID)
	m.events.mu.Unlock()
	m.emit(b, LifecycleEvent{Kind: EventCreated, Snapshot: b.rec.Workspace, Message: createdWords(b.rec) + " (ready in the warm pool)"})
	m.log.Info("sandbox created from the warm pool", "sandbox", b.rec.ID, "tenant", tenant, "image", key,
		"took", time.Since(t0).Round(time.Microsecond))
	return b.rec, true, nil
}

// admitAs makes b tenant's if tenant is under its quota (limit), under
// m.mu like every admission, so that concurrent creates cannot overshoot.
func (m *Manager) admitAs(tenant string, limit int, b *box) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.quotaLocked(tenant, limit, 1); err != nil {
		return err
	}
	b.tenant = tenant
	return nil
}

// dressLocked makes pool sandbox b look freshly created for tenant's spec;
// b.mu is held. On failure b is in no state to hand to anyone.
func (m *Manager) dressLocked(ctx context.Context, b *box, tenant string, spec sandbox.Spec) error {
	pool := b.rec.Spec
	now := time.Now()
	b.rec.Tenant, b.rec.Spec, b.rec.CreatedAt = tenant, spec, now
	b.rec.ExpiresAt = time.Time{}
	if spec.TTL > 0 {
		b.rec.ExpiresAt = now.Add(spec.TTL)
	}
	// On disk as the tenant's before anything of the tenant's reaches
	// the sandbox (its rules, its environment): a service that dies in
	// between must not take it back into the pool at its restart, and
	// hand another tenant an executor holding this one's variables.
	if err := writeRecord(b.dir, &b.rec); err != nil {
		return err
	}
	t0 := time.Now()
	if m.cfg.Network != nil {
		// As SetNetwork does: the pool's nothing-allowed becomes the
		// tenant's rules, and its egress is the tenant's from now on.
		if err := m.cfg.Network.Update(ctx, m.networkRequest(b)); err != nil {
			return fmt.Errorf("its network rules: %w", err)
		}
	}
	// The spec's env and workdir, when they are not the pool's (the
	// warm-up's exec was forgotten when the sandbox became ready).
	t1 := time.Now()
	if env, workdir := defaultsFor(b.rec, pool, spec); env != nil || workdir != "" {
		if b.client == nil { // re-adopted after a restart, and not yet dialled
			c, err := client.Dial(ctx, b.endpoint(), b.rec.Token, m.clientOptions(b)...)
			if err != nil {
				return fmt.Errorf("its executor: %w", err)
			}
			b.client = c
		}
		if err := b.client.SetDefaults(ctx, env, workdir, true); err != nil {
			return fmt.Errorf("its environment and workdir: %w", err)
		}
	}
	m.log.Debug("pool hand-out", "sandbox", b.rec.ID, "record", t0.Sub(now), "network", t1.Sub(t0), "set_defaults", time.Since(t1))
	b.activity = now
	return nil
}

// defaultsFor is what a pool sandbox's executor must be told for spec:
// the environment a cold create would have given it (nil: the pool's is
// it), and its workdir ("": the pool's is it).
func defaultsFor(rec Record, pool, spec sandbox.Spec) (env []string, workdir string) {
	effective := func(w string) string { return cmp.Or(w, cleanWorkdir(rec.ImageWorkdir), "/workspace") }
	if w := effective(spec.Workdir); w != effective(pool.Workdir) {
		workdir = w
	}
	if len(spec.Env) > 0 {
		// As start and attachNetwork make it: the image's, the user's,
		// then the boundary's, which win on a clash.
		env = buildEnv(buildEnv(rec.ImageEnv, spec.Env), rec.NetEnv)
	}
	return env, workdir
}

// discardLocked removes sandbox b entirely; b.mu is held.
func (m *Manager) discardLocked(b *box, why string) {
	if err := m.removeLocked(b, sandbox.ReasonError, why); err != nil {
		m.log.Warn("cleanup failed", "sandbox", b.rec.ID, "err", err)
	}
}
