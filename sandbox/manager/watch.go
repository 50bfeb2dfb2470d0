package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

// Recover loads every sandbox record from disk and re-attaches to the
// sandboxes that still run. One that died while the service was down is
// stopped with reason lost (or oom_killed, if its backend says so).
func (m *Manager) Recover(ctx context.Context) error {
	entries, err := os.ReadDir(m.cfg.Dir)
	if err != nil {
		return err
	}
	defer m.collectSoon()
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join(m.cfg.Dir, e.Name())
		rec, err := readRecord(dir)
		if errors.Is(err, os.ErrNotExist) {
			// Created but never recorded: nothing ran; remove it.
			rootfs.Remove(rootfs.Layout{Dir: dir})
			continue
		}
		if err != nil {
			m.log.Warn("skipping unreadable sandbox record", "dir", dir, "err", err)
			continue
		}
		b := &box{dir: dir, rec: *rec, activity: time.Now(), tenant: rec.Tenant}
		b.stopped.Store(rec.State == sandbox.StateStopped)
		m.mu.Lock()
		m.boxes[rec.ID] = b
		m.mu.Unlock()
		m.recoverOne(ctx, b)
	}
	return nil
}

// recoverTimeout bounds the wait for a running sandbox's executor to answer
// after a restart of the service: it was listening before, so it answers at
// once unless something is wrong with it.
const recoverTimeout = 10 * time.Second

func (m *Manager) recoverOne(ctx context.Context, b *box) {
	b.mu.Lock()
	defer b.mu.Unlock()
	log := m.log.With("sandbox", b.rec.ID)
	switch b.rec.State {
	case sandbox.StateStopped, sandbox.StateSuspended, sandbox.StatePaused:
		return // a paused one resumes from its image when asked
	case sandbox.StateCreating:
		// The service died mid-create: the user never got this id.
		m.stopLocked(b, sandbox.ReasonError, "the service restarted while creating it")
		m.cleanup(b, true)
		return
	}
	backend, ok := m.cfg.Backends[b.rec.Spec.Backend]
	if !ok {
		m.stopLocked(b, sandbox.ReasonLost, fmt.Sprintf("backend %q is no longer configured", b.rec.Spec.Backend))
		return
	}
	st, err := backend.Status(ctx, b.rec.ID)
	if (err != nil || !st.Running) && m.recoverPaused(b) {
		return
	}
	if err != nil || !st.Running {
		reason, msg := sandbox.ReasonLost, "it was gone when the service restarted"
		if err == nil && st.OOMKilled {
			reason, msg = sandbox.ReasonOOMKilled, "the memory limit killed it while the service was down"
		}
		m.noteOOM(b, st, err)
		log.Warn("sandbox did not survive", "reason", reason)
		m.stopLocked(b, reason, msg)
		m.cleanup(b, true)
		return
	}
	// The boundary registers it again (same namespace, same rules): the
	// proxy of this process has not seen it yet.
	if m.cfg.Network != nil {
		if _, err := m.cfg.Network.Attach(ctx, m.networkRequest(b)); err != nil {
			log.Warn("network of a surviving sandbox could not be restored", "err", err)
			m.stopLocked(b, sandbox.ReasonLost, "its network could not be restored after the service restarted: "+errdefs.Public(err))
			m.cleanup(b, true)
			return
		}
	}
	// Bounded: a sandbox that cut its own executor off (removed or
	// replaced its socket) must not hold up the service's start.
	wctx, cancel := context.WithTimeout(ctx, min(m.cfg.ReadyTimeout, recoverTimeout))
	defer cancel()
	ex, err := client.WaitReady(wctx, b.endpoint(), b.rec.Token, m.clientOptions(b)...)
	if err != nil {
		log.Warn("executor does not answer after restart", "err", err)
		m.stopLocked(b, sandbox.ReasonLost, "its executor did not answer after the service restarted: "+errdefs.Public(err))
		m.cleanup(b, true)
		return
	}
	b.client = ex
	m.notePid(b, st)
	m.watchDeath(b)
	m.serveGateway(b)
	log.Info("re-attached sandbox")
}

// Run checks running sandboxes every CheckInterval until ctx ends: deaths,
// TTLs, idle timeouts, and forgetting old stopped ones.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.checkAll(ctx)
		}
	}
}

func (m *Manager) checkAll(ctx context.Context) {
	m.mu.Lock()
	boxes := slices.Collect(maps.Values(m.boxes))
	m.mu.Unlock()
	now := time.Now()
	for _, b := range boxes {
		if !b.mu.TryLock() {
			continue // busy with an action; next round
		}
		rec := b.rec
		switch rec.State {
		case sandbox.StateStopped:
			b.mu.Unlock()
			if now.Sub(rec.StoppedAt) > m.cfg.StoppedRetention {
				m.forget(b)
			}
			continue
		case sandbox.StateSuspended, sandbox.StatePaused:
			b.mu.Unlock()
			if !rec.ExpiresAt.IsZero() && now.After(rec.ExpiresAt) {
				m.expire(b, sandbox.ReasonTTLExpired, fmt.Sprintf("it stayed %s past %s (reins serve --suspended-retention, or the ttl an extend gave it), so it was deleted with its workspace",
					rec.State, rec.ExpiresAt.Format(time.RFC3339)))
			}
			continue
		case sandbox.StateRunning:
		default:
			b.mu.Unlock()
			continue
		}
		m.warnExpiryLocked(b, now)
		// A sandbox whose backend waits on it is known alive until the
		// wait says otherwise; the others are checked here.
		alive := b.watched.Load() || m.refreshLocked(ctx, b, false)
		idleFor := now.Sub(b.activity)
		b.mu.Unlock()
		switch {
		case !alive:
		case !rec.ExpiresAt.IsZero() && now.After(rec.ExpiresAt):
			m.expireSoon(b, sandbox.ReasonTTLExpired, fmt.Sprintf("its TTL of %s ran out", rec.Spec.TTL))
		case rec.Spec.IdleTimeout > 0 && idleFor > rec.Spec.IdleTimeout:
			if m.idle(ctx, b, rec.Spec.IdleTimeout) {
				m.expireSoon(b, sandbox.ReasonIdleTimeout, fmt.Sprintf("nothing ran in it for %s", rec.Spec.IdleTimeout))
			}
		}
	}
	if now.Sub(m.lastMaintain) > maintainEvery {
		m.lastMaintain = now
		m.pruneEvents(now)
		m.pruneCheckpoints(now)
	}
}

// expireSoon runs expire in the background: a suspend saves the
// workspace, which must not hold up the checks of the other sandboxes.
// (A second call for the same expiry finds it done: expire checks again
// under the sandbox's lock.)
func (m *Manager) expireSoon(b *box, reason sandbox.Reason, msg string) {
	m.waits.Go(func() { m.expire(b, reason, msg) })
}

// maintainEvery is how often forgotten sandboxes' events and old unnamed
// snapshots are pruned.
const maintainEvery = time.Minute

// warnExpiryLocked sends the expiring event once per deadline, the spec's
// ExpiryWarning (or the service's) before the TTL runs out; b.mu is held.
func (m *Manager) warnExpiryLocked(b *box, now time.Time) {
	at := b.rec.ExpiresAt
	if at.IsZero() || b.warned.Equal(at) {
		return
	}
	warn := b.rec.Spec.ExpiryWarning
	if warn == 0 {
		warn = m.cfg.ExpiryWarning
	}
	if now.Before(at.Add(-warn)) {
		return
	}
	b.warned = at
	action := "it will be suspended (its workspace kept; resume brings it back)"
	if b.rec.Spec.OnExpire == sandbox.ExpireDelete {
		action = "it will be deleted"
	}
	m.emit(b, LifecycleEvent{Kind: EventExpiring, Reason: sandbox.ReasonTTLExpired, At: at,
		Message: fmt.Sprintf("its TTL runs out in %s: %s; reins sandbox extend ID --ttl DUR keeps it longer", at.Sub(now).Round(time.Second), action)})
}

// idle asks the executor whether anything ran recently: a process alive or
// output within the timeout counts as activity, not only API calls.
func (m *Manager) idle(ctx context.Context, b *box, timeout time.Duration) bool {
	b.mu.Lock()
	ex := b.client
	b.mu.Unlock()
	if ex == nil {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u, err := ex.Usage(cctx)
	if err != nil {
		return true
	}
	last := time.Unix(0, u.LastActivityUnixNano)
	if u.RunningExecs > 0 || time.Since(last) < timeout {
		b.mu.Lock()
		if last.After(b.activity) {
			b.activity = last
		}
		if u.RunningExecs > 0 {
			b.activity = time.Now()
		}
		b.mu.Unlock()
		return false
	}
	return true
}

// refreshLocked checks a running sandbox; it returns false (and records the
// stop) when the sandbox is dead. With full, it also asks the backend for
// the OOM count even when the sandbox is alive.
func (m *Manager) refreshLocked(ctx context.Context, b *box, full bool) bool {
	if !full && b.rec.Pid != 0 && pidAlive(b.rec.Pid, b.rec.PidStart) {
		return true
	}
	backend := m.cfg.Backends[b.rec.Spec.Backend]
	st, err := backend.Status(ctx, b.rec.ID)
	if err == nil && st.Running {
		m.notePid(b, st)
		return true
	}
	reason, msg := sandbox.ReasonLost, "its processes vanished"
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		msg = "the runtime no longer knows it"
	case err != nil:
		msg = "its runtime failed to report on it: " + errdefs.Public(err)
	case st.ExitCode == -1:
		msg = "its init and the process watching it vanished"
	case st.OOMKilled:
		reason = sandbox.ReasonOOMKilled
		msg = fmt.Sprintf("the memory limit (%s) killed it", sandbox.FormatBytes(b.rec.Spec.Limits.MemoryBytes))
	default:
		reason = sandbox.ReasonExited
		msg = fmt.Sprintf("its init exited with code %d%s", st.ExitCode, initLog(b.dir))
	}
	m.noteOOM(b, st, err)
	m.log.Warn("sandbox died", "sandbox", b.rec.ID, "reason", reason, "message", msg)
	m.stopLocked(b, reason, msg)
	if err := m.cleanup(b, true); err != nil {
		m.log.Warn("cleanup failed", "sandbox", b.rec.ID, "err", err)
	}
	return false
}

// notePid records the sandbox's host pid and OOM count from a status.
func (m *Manager) notePid(b *box, st sandbox.Status) {
	changed := false
	if st.Pid != 0 && st.Pid != b.rec.Pid {
		b.rec.Pid, b.rec.PidStart = st.Pid, pidStartTime(st.Pid)
		changed = true
	}
	if st.OOMKills > b.rec.OOMKills {
		b.rec.OOMKills, b.rec.LastOOM = st.OOMKills, time.Now()
		changed = true
	}
	if changed {
		if err := writeRecord(b.dir, &b.rec); err != nil {
			m.log.Warn("writing record failed", "sandbox", b.rec.ID, "err", err)
		}
	}
}

// noteOOM keeps the OOM kills a dead sandbox's last status reports, so
// that its record says how it ended (the stop record is written next). A
// sandbox killed whole by the memory limit counts at least one.
func (m *Manager) noteOOM(b *box, st sandbox.Status, err error) {
	if err != nil {
		return
	}
	n := st.OOMKills
	if st.OOMKilled && n == 0 {
		n = 1
	}
	if n > b.rec.OOMKills {
		b.rec.OOMKills, b.rec.LastOOM = n, time.Now()
	}
}

func (m *Manager) forget(b *box) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := rootfs.Remove(rootfs.Layout{Dir: b.dir}); err != nil {
		m.log.Warn("removing stopped sandbox failed", "sandbox", b.rec.ID, "err", err)
		return
	}
	m.mu.Lock()
	delete(m.boxes, b.rec.ID)
	m.mu.Unlock()
	m.removed(b.rec.ID)
}

// pidAlive reports whether pid still runs and is the process that started
// at start (pids are reused).
func pidAlive(pid int, start uint64) bool {
	return pidStartTime(pid) == start && start != 0
}

// pidStartTime reads field 22 of /proc/PID/stat, 0 if the process is gone.
func pidStartTime(pid int) uint64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	// A zombie is not alive.
	if f[0] == "Z" || f[0] == "X" {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// watchDeath waits, through a backend that can (sandbox.Waiter), for the
// running sandbox's init to end, and records the death the moment it does
// rather than at the next periodic check; b.mu is held. A stop the manager
// made itself (rm, suspend, expiry) has changed the state first, and the
// wait then does nothing.
func (m *Manager) watchDeath(b *box) {
	w, ok := m.cfg.Backends[b.rec.Spec.Backend].(sandbox.Waiter)
	if !ok {
		return
	}
	b.starts++
	life, id := b.starts, b.rec.ID
	b.watched.Store(true)
	m.waits.Go(func() {
		_, err := w.Wait(m.life, id)
		if m.life.Err() != nil {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.starts != life {
			return
		}
		b.watched.Store(false)
		if err != nil {
			// The periodic check takes over.
			m.log.Warn("waiting on a sandbox failed", "sandbox", id, "err", err)
			return
		}
		if b.rec.State == sandbox.StateRunning {
			m.refreshLocked(m.life, b, true)
		}
	})
}

// Close ends the waits on sandboxes and drops connections to executors.
// Sandboxes keep running.
func (m *Manager) Close() {
	m.endLife()
	m.waits.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.boxes {
		b.mu.Lock()
		m.stopGateway(b)
		if b.client != nil {
			b.client.Close()
		}
		b.mu.Unlock()
	}
}
