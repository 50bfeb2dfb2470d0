package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

// SnapshotPrefix makes an image reference of a snapshot: "snapshot:NAME"
// for a tenant's named one, "snapshot:sha256:…" for one of its saves by
// digest (a run's checkpoints, a sandbox's suspend).
const SnapshotPrefix = "snapshot:"

// snapshotDir holds the snapshot records, one JSON file each, under the
// manager's directory (Recover skips it: its name is not an id).
const snapshotDir = ".snapshots"

// SnapshotInfo is a snapshot record (sandbox.SnapshotInfo).
type SnapshotInfo = sandbox.SnapshotInfo

func snapshotImage(s SnapshotInfo) Image {
	return Image{Digest: s.ImageDigest, Layers: s.Layers, Env: s.ImageEnv, WorkingDir: s.ImageWorkdir, Screen: s.ImageScreen}
}

// snapshotRef is how a create names s: snapshot:NAME, or snapshot:DIGEST.
func snapshotRef(s SnapshotInfo) string {
	if s.Name != "" {
		return SnapshotPrefix + s.Name
	}
	return SnapshotPrefix + s.Digest
}

var snapshotName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// checkSnapshotName refuses a name outside [a-z0-9][a-z0-9._-]{0,62}.
func checkSnapshotName(name string) error {
	if !snapshotName.MatchString(name) {
		return fmt.Errorf("snapshot name %q: use 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit: %w",
			truncate(name, 80), errdefs.ErrInvalidArgument)
	}
	return nil
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// snapshotPath is where the record of tenant's snapshot key (a name, or a
// digest for an unnamed one) lives: a hash, so that no tenant's string
// is ever part of a host path.
func (m *Manager) snapshotPath(tenant, key string) string {
	h := sha256.Sum256([]byte(tenant + "\x00" + key))
	return filepath.Join(m.cfg.Dir, snapshotDir, hex.EncodeToString(h[:16])+".json")
}

func (m *Manager) writeSnapshot(s *SnapshotInfo) error {
	s.Version = sandbox.SnapshotVersion
	key := s.Name
	if key == "" {
		key = s.Digest
	}
	if err := os.MkdirAll(filepath.Join(m.cfg.Dir, snapshotDir), 0o700); err != nil {
		return err
	}
	return writeJSON(m.snapshotPath(s.Tenant, key), s)
}

func readSnapshot(path string) (SnapshotInfo, error) {
	var s SnapshotInfo
	data, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("snapshot record %s: %w", filepath.Base(path), err)
	}
	if s.Version > sandbox.SnapshotVersion {
		return s, fmt.Errorf("snapshot record %s: version %d is newer than this reins understands (%d): upgrade reins", filepath.Base(path), s.Version, sandbox.SnapshotVersion)
	}
	return s, nil
}

// allSnapshots reads every snapshot record (of every tenant).
func (m *Manager) allSnapshots() ([]SnapshotInfo, error) {
	entries, err := os.ReadDir(filepath.Join(m.cfg.Dir, snapshotDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []SnapshotInfo
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		s, err := readSnapshot(filepath.Join(m.cfg.Dir, snapshotDir, e.Name()))
		if err != nil {
			m.log.Warn("skipping unreadable snapshot record", "file", e.Name(), "err", err)
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

func notFoundSnapshot(ref string) error {
	return fmt.Errorf("snapshot %s not found: list yours with reins snapshot ls: %w", truncate(ref, 80), errdefs.ErrNotFound)
}

// resolveSnapshot finds tenant's snapshot named by ref (the part after
// "snapshot:"): a name, or a digest of a record of tenant's or of the saved
// workspace of one of its sandboxes. Another tenant's is not found.
func (m *Manager) resolveSnapshot(tenant, ref string) (SnapshotInfo, error) {
	if digestRE.MatchString(ref) {
		if s, err := readSnapshot(m.snapshotPath(tenant, ref)); err == nil && s.Tenant == tenant {
			return s, nil
		}
		all, err := m.allSnapshots()
		if err != nil {
			return SnapshotInfo{}, err
		}
		for _, s := range all {
			if s.Tenant == tenant && s.Digest == ref {
				return s, nil
			}
		}
		// A sandbox's own save (a suspend): its record has the image.
		for _, b := range m.tenantBoxes(tenant) {
			b.mu.Lock()
			r := b.rec
			b.mu.Unlock()
			if r.Workspace == ref && r.State != sandbox.StateStopped {
				s := r.saved(ref)
				s.Tenant = tenant
				return s, nil
			}
		}
		return SnapshotInfo{}, notFoundSnapshot(SnapshotPrefix + ref)
	}
	if err := checkSnapshotName(ref); err != nil {
		return SnapshotInfo{}, err
	}
	s, err := readSnapshot(m.snapshotPath(tenant, ref))
	if errors.Is(err, os.ErrNotExist) || err == nil && (s.Tenant != tenant || s.Name != ref) {
		return SnapshotInfo{}, notFoundSnapshot(SnapshotPrefix + ref)
	}
	return s, err
}

func (m *Manager) tenantBoxes(tenant string) []*box {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*box
	for _, b := range m.boxes {
		if b.tenant == tenant {
			out = append(out, b)
		}
	}
	return out
}

// SnapshotUsers names who needs tenant's snapshot of digest besides the
// manager's sandboxes ("template:NAME"), for AddSnapshotUsers.
type SnapshotUsers interface {
	SnapshotUsers(tenant, digest string) []string
	// LiveWorkspaces are digests that must survive a collection.
	LiveWorkspaces() []string
}

// AddSnapshotUsers registers another holder of snapshots (templates), so
// that a snapshot it needs is not deleted and its workspaces not
// collected.
func (m *Manager) AddSnapshotUsers(u SnapshotUsers) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.users = append(m.users, u)
}

// neededBy names who needs tenant's snapshot of digest: a sandbox made
// from it that is not stopped (its origin), a suspended or paused sandbox
// resuming on it, and what AddSnapshotUsers registered.
func (m *Manager) neededBy(tenant, digest string) []string {
	var out []string
	for _, b := range m.tenantBoxes(tenant) {
		b.mu.Lock()
		r := b.rec
		b.mu.Unlock()
		resumesOn := r.Workspace == digest && (r.State == sandbox.StateSuspended || r.State == sandbox.StatePaused)
		if resumesOn || r.Base == digest && r.State != sandbox.StateStopped {
			out = append(out, "sandbox:"+r.ID)
		}
	}
	m.mu.Lock()
	users := slices.Clone(m.users)
	m.mu.Unlock()
	for _, u := range users {
		out = append(out, u.SnapshotUsers(tenant, digest)...)
	}
	slices.Sort(out)
	return out
}

// Snapshot saves running sandbox id's workspace as tenant's snapshot
// name, usable as the image "snapshot:NAME"; name "" makes an unnamed one
// ("snapshot:DIGEST", a run's checkpoint). The sandbox keeps running.
func (m *Manager) Snapshot(ctx context.Context, tenant, id, name string) (SnapshotInfo, error) {
	if name != "" {
		if err := checkSnapshotName(name); err != nil {
			return SnapshotInfo{}, err
		}
		if _, err := readSnapshot(m.snapshotPath(tenant, name)); err == nil {
			return SnapshotInfo{}, errSnapshotExists(name)
		}
	}
	b, err := m.lookup(tenant, id)
	if err != nil {
		return SnapshotInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := m.canSave(b, "snapshot"); err != nil {
		return SnapshotInfo{}, err
	}
	s, err := m.saveLocked(ctx, b, name)
	if err != nil {
		return SnapshotInfo{}, err
	}
	m.emit(b, LifecycleEvent{Kind: EventSnapshot, Snapshot: s.Digest, Message: snapshotWords(s)})
	m.log.Info("snapshot saved", "sandbox", id, "name", name, "digest", s.Digest, "files", s.Files, "stored_bytes", s.StoredBytes)
	return s, nil
}

func snapshotWords(s SnapshotInfo) string {
	w := fmt.Sprintf("%d files, %s (%s new)", s.Files, sandbox.FormatBytes(s.Bytes), sandbox.FormatBytes(s.StoredBytes))
	if s.Name != "" {
		w = s.Name + ": " + w
	}
	return w
}

// canSave refuses to save b's workspace unless it runs; b.mu is held.
func (m *Manager) canSave(b *box, what string) error {
	if m.cfg.Workspaces == nil {
		return fmt.Errorf("this service keeps no workspaces, so it cannot %s a sandbox: %w", what, errdefs.ErrUnimplemented)
	}
	switch b.rec.State {
	case sandbox.StateRunning:
		return nil
	case sandbox.StateSuspended, sandbox.StatePaused:
		return fmt.Errorf("sandbox %s is %s: resume it first (reins sandbox resume %s), then %s it: %w", b.rec.ID, b.rec.State, b.rec.ID, what, errdefs.ErrFailedPrecondition)
	default:
		return fmt.Errorf("sandbox %s is %s%s: only a running sandbox's workspace can be saved: %w", b.rec.ID, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
}

// saveLocked captures running b's workspace and writes a snapshot record
// of it named name ("" for unnamed); b.mu is held. The sandbox's newest
// workspace becomes it.
func (m *Manager) saveLocked(ctx context.Context, b *box, name string) (SnapshotInfo, error) {
	saved, err := m.captureLocked(ctx, b)
	if err != nil {
		return SnapshotInfo{}, err
	}
	s := b.rec.saved(saved.Digest)
	s.Name, s.CreatedAt = name, time.Now()
	s.Files, s.Bytes, s.StoredBytes = saved.Files, saved.Bytes, saved.StoredBytes
	if err := m.recordSnapshot(&s); err != nil {
		return SnapshotInfo{}, err
	}
	b.rec.Workspace = saved.Digest
	if err := writeRecord(b.dir, &b.rec); err != nil {
		m.log.Warn("writing record failed", "sandbox", b.rec.ID, "err", err)
	}
	return s, nil
}

func errSnapshotExists(name string) error {
	return fmt.Errorf("snapshot %s exists: remove it first (reins snapshot rm %s) or choose another name: %w", name, name, errdefs.ErrAlreadyExists)
}

// recordSnapshot writes s's record; a named one only if the name is
// still free (two snapshots of one name at once: the second is refused).
func (m *Manager) recordSnapshot(s *SnapshotInfo) error {
	m.snapMu.Lock()
	defer m.snapMu.Unlock()
	if s.Name != "" {
		if _, err := readSnapshot(m.snapshotPath(s.Tenant, s.Name)); err == nil {
			return errSnapshotExists(s.Name)
		}
	}
	if err := m.writeSnapshot(s); err != nil {
		return fmt.Errorf("recording the snapshot: %w", err)
	}
	return nil
}

// captureLocked flushes running b's writes (the executor's Sync) and saves
// its upper layer, reusing its newest workspace; b.mu is held. The
// sandbox keeps running: what it writes during the capture may or may not
// be in it. A failure (the store full) says so and changes nothing.
func (m *Manager) captureLocked(ctx context.Context, b *box) (Saved, error) {
	t0 := time.Now()
	if b.client != nil {
		if err := b.client.Sync(ctx); err != nil {
			return Saved{}, fmt.Errorf("sandbox %s did not flush its writes before the save (it keeps running): %w", b.rec.ID, err)
		}
	}
	t1 := time.Now()
	saved, err := m.captureUpper(ctx, b)
	m.log.Debug("sandbox save", "sandbox", b.rec.ID, "sync", t1.Sub(t0), "capture", time.Since(t1))
	return saved, err
}

// captureUpper saves b's upper layer as it is on its disk; b.mu is held.
// (A collection running meanwhile keeps what the capture references: the
// store sees to that.)
func (m *Manager) captureUpper(ctx context.Context, b *box) (Saved, error) {
	saved, err := m.cfg.Workspaces.Capture(ctx, rootfs.Layout{Dir: b.dir}.Upper(), b.rec.Workspace, captureProgress(ctx))
	if err != nil {
		return Saved{}, fmt.Errorf("saving sandbox %s's workspace failed, and the sandbox is as it was: %w", b.rec.ID, err)
	}
	return saved, nil
}

// ListSnapshots returns tenant's snapshot records ("" is the admin's own),
// newest first, each with who needs it.
func (m *Manager) ListSnapshots(ctx context.Context, tenant string) ([]SnapshotInfo, error) {
	all, err := m.allSnapshots()
	if err != nil {
		return nil, err
	}
	var out []SnapshotInfo
	for _, s := range all {
		if s.Tenant == tenant {
			s.NeededBy = m.neededBy(tenant, s.Digest)
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b SnapshotInfo) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

// DeleteSnapshot removes tenant's snapshot named name (or an unnamed one
// by its digest), refused while something needs it; the workspace data no
// record needs any more is collected after.
func (m *Manager) DeleteSnapshot(ctx context.Context, tenant, name string) error {
	if !digestRE.MatchString(name) {
		if err := checkSnapshotName(name); err != nil {
			return err
		}
	}
	path := m.snapshotPath(tenant, name)
	s, err := readSnapshot(path)
	if errors.Is(err, os.ErrNotExist) || err == nil && s.Tenant != tenant {
		return notFoundSnapshot(name)
	}
	if err != nil {
		return err
	}
	if users := m.neededBy(tenant, s.Digest); len(users) > 0 {
		return fmt.Errorf("snapshot %s is needed by %s (made from it, or resuming on it): remove those first: %w", name, strings.Join(users, ", "), errdefs.ErrFailedPrecondition)
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	m.log.Info("snapshot removed", "name", name, "digest", s.Digest)
	m.collectSoon()
	return nil
}

// collectSoon deletes, in the background, the saved workspace data that no
// snapshot record, no sandbox that is not stopped and no registered user
// needs.
func (m *Manager) collectSoon() {
	if m.cfg.Workspaces == nil {
		return
	}
	m.waits.Go(func() {
		if err := m.collect(m.life); err != nil && !errors.Is(err, errBusy) && m.life.Err() == nil {
			m.log.Warn("collecting saved workspaces failed", "err", err)
		}
	})
}

// errBusy puts a collection off: a sandbox was in the middle of an action.
var errBusy = errors.New("a sandbox is busy")

func (m *Manager) collect(ctx context.Context) error {
	// One collection at a time; captures go on meanwhile (the store
	// keeps what they reference, and their new manifests a while).
	m.collecting.Lock()
	defer m.collecting.Unlock()
	live := map[string]bool{}
	all, err := m.allSnapshots()
	if err != nil {
		return err
	}
	for _, s := range all {
		live[s.Digest] = true
	}
	m.mu.Lock()
	boxes := slices.Collect(maps.Values(m.boxes))
	users := slices.Clone(m.users)
	m.mu.Unlock()
	for _, b := range boxes {
		// A busy sandbox (a resume restoring its workspace, a suspend)
		// puts the collection off rather than hold it up: its workspace
		// must be counted live.
		if !b.mu.TryLock() {
			return errBusy
		}
		if b.rec.Workspace != "" && b.rec.State != sandbox.StateStopped {
			live[b.rec.Workspace] = true
		}
		b.mu.Unlock()
	}
	for _, u := range users {
		for _, d := range u.LiveWorkspaces() {
			live[d] = true
		}
	}
	return m.cfg.Workspaces.Collect(ctx, slices.Sorted(maps.Keys(live)))
}

// pruneCheckpoints removes unnamed snapshot records older than
// CheckpointRetention (named ones stay until removed).
func (m *Manager) pruneCheckpoints(now time.Time) {
	all, err := m.allSnapshots()
	if err != nil {
		return
	}
	n := 0
	for _, s := range all {
		if s.Name == "" && now.Sub(s.CreatedAt) > m.cfg.CheckpointRetention && len(m.neededBy(s.Tenant, s.Digest)) == 0 {
			if os.Remove(m.snapshotPath(s.Tenant, s.Digest)) == nil {
				n++
			}
		}
	}
	if n > 0 {
		m.collectSoon()
	}
}
