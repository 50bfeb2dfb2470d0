package template

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/jsonfile"
)

// recordVersion is bumped when Template changes in a way old code can't read.
const recordVersion = 1

// Store keeps template records and the step cache under a directory
// (DATA/templates): DIR/t-HEX(tenant)/templates/NAME.json and
// DIR/t-HEX(tenant)/cache/KEY.json. Every name in those paths is the
// service's own (hex, a checked template name, a hex key), never one a
// tenant spells. Its methods are safe for concurrent use.
type Store struct {
	dir string
	mu  sync.Mutex
	// usedBy says who needs a template (sandboxes, pools) besides the
	// records here; see UseBy.
	usedBy []func(tenant, name string) []string
}

// Cached is one step's cached result: the snapshot its step left.
type Cached struct {
	Snapshot  string    `json:"snapshot"`
	Step      string    `json:"step"` // what the step was, for an operator reading the file
	Bytes     int64     `json:"bytes,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// NewStore opens (making it if needed) the store in dir.
func NewStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Store{dir: dir}, nil
}

// UseBy adds f to what Delete asks before removing a template: f returns
// who needs tenant's template name ("sandbox:ID", "pool template:web"),
// and a template someone needs is not removed.
func (s *Store) UseBy(f func(tenant, name string) []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usedBy = append(s.usedBy, f)
}

func (s *Store) tenantDir(tenant string) string {
	return filepath.Join(s.dir, "t-"+hex.EncodeToString([]byte(tenant)))
}

func (s *Store) recordPath(tenant, name string) string {
	return filepath.Join(s.tenantDir(tenant), "templates", name+".json")
}

func (s *Store) cachePath(tenant, key string) string {
	return filepath.Join(s.tenantDir(tenant), "cache", key+".json")
}

func notFound(name string) error {
	return fmt.Errorf("template %s not found (reins template ls lists yours): %w", truncate(name, 80), errdefs.ErrNotFound)
}

// Get returns tenant's template name; another tenant's is not found, as
// a missing one.
func (s *Store) Get(tenant, name string) (Template, error) {
	if CheckName(name) != nil {
		return Template{}, notFound(name)
	}
	var t Template
	if err := readJSON(s.recordPath(tenant, name), &t); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Template{}, notFound(name)
		}
		return Template{}, err
	}
	if t.Version > recordVersion {
		return Template{}, fmt.Errorf("template %s: record version %d is newer than this reins understands (%d): upgrade reins", name, t.Version, recordVersion)
	}
	return t, nil
}

// List returns tenant's templates by name.
func (s *Store) List(tenant string) ([]Template, error) {
	ents, err := os.ReadDir(filepath.Join(s.tenantDir(tenant), "templates"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Template
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || CheckName(name) != nil {
			continue
		}
		if t, err := s.Get(tenant, name); err == nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// Put writes t's record, replacing the one of the same name (a build
// does; tests seed records with it).
func (s *Store) Put(t Template) error {
	if err := CheckName(t.Name); err != nil {
		return err
	}
	t.Version = recordVersion
	return writeJSON(s.recordPath(t.Tenant, t.Name), t)
}

// Delete removes tenant's template name, refused (errdefs.ErrFailedPrecondition,
// naming who) while a sandbox or a pool needs it. The snapshots its build
// cached stay, for the next build.
func (s *Store) Delete(tenant, name string) error {
	if _, err := s.Get(tenant, name); err != nil {
		return err
	}
	s.mu.Lock()
	usedBy := slices.Clone(s.usedBy)
	s.mu.Unlock()
	var who []string
	for _, f := range usedBy {
		who = append(who, f(tenant, name)...)
	}
	if len(who) > 0 {
		slices.Sort(who)
		return fmt.Errorf("template %s is needed by %s: remove those first (reins sandbox rm, or drop the pool): %w",
			name, strings.Join(who, ", "), errdefs.ErrFailedPrecondition)
	}
	if err := os.Remove(s.recordPath(tenant, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// SnapshotUsers names tenant's templates that start from snapshot digest
// ("template:web"), and says "template build cache" when a cached step
// result is that snapshot: the snapshot store keeps (and refuses to
// delete) what this returns anything for (manager.SnapshotUsers).
func (s *Store) SnapshotUsers(tenant, digest string) []string {
	var who []string
	ts, _ := s.List(tenant)
	for _, t := range ts {
		if t.Snapshot == digest {
			who = append(who, t.Ref())
		}
	}
	ents, _ := os.ReadDir(filepath.Join(s.tenantDir(tenant), "cache"))
	for _, e := range ents {
		var c Cached
		if readJSON(filepath.Join(s.tenantDir(tenant), "cache", e.Name()), &c) == nil && c.Snapshot == digest {
			who = append(who, "template build cache")
			break
		}
	}
	return who
}

// LiveWorkspaces lists the snapshot digests every tenant's templates and
// cached steps stand on, so that a collection of saved workspaces keeps
// them (manager.SnapshotUsers).
func (s *Store) LiveWorkspaces() []string {
	seen := map[string]bool{}
	tenants, _ := os.ReadDir(s.dir)
	for _, td := range tenants {
		if !strings.HasPrefix(td.Name(), "t-") {
			continue
		}
		for _, sub := range []string{"templates", "cache"} {
			dir := filepath.Join(s.dir, td.Name(), sub)
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				var rec struct {
					Snapshot string `json:"snapshot"`
				}
				if strings.HasSuffix(e.Name(), ".json") && readJSON(filepath.Join(dir, e.Name()), &rec) == nil && rec.Snapshot != "" {
					seen[rec.Snapshot] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// cached returns the cached result of the step with key.
func (s *Store) cached(tenant, key string) (Cached, bool) {
	var c Cached
	if err := readJSON(s.cachePath(tenant, key), &c); err != nil || c.Snapshot == "" {
		return Cached{}, false
	}
	return c, true
}

func (s *Store) putCached(tenant, key string, c Cached) error {
	return writeJSON(s.cachePath(tenant, key), c)
}

func (s *Store) forgetCached(tenant, key string) {
	os.Remove(s.cachePath(tenant, key))
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		// The record's name, not its host path: this may reach a tenant.
		return fmt.Errorf("the record %s is damaged (%v): %w", filepath.Base(path), err, errdefs.ErrInternal)
	}
	return nil
}

// writeJSON writes v to path atomically and durably, making its directory.
func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := jsonfile.Write(path, v); err != nil {
		return fmt.Errorf("writing template record: %w", err)
	}
	return nil
}
