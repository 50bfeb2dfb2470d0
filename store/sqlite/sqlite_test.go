package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/sqlite"
	"github.com/reinsdev/reins/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild() // never returns
	}
	goleak.VerifyTestMain(m)
}

func open(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return s
}

// fresh opens a new, empty store closed when t ends.
func fresh(t *testing.T) *sqlite.Store {
	s := open(t, filepath.Join(t.TempDir(), "reins.db"))
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return fresh(t) })
	storetest.RunTenants(t, func(t *testing.T) store.Tenants { return fresh(t) })
	storetest.RunSecrets(t, func(t *testing.T) store.Secrets { return fresh(t) })
	storetest.RunReopen(t, func(t *testing.T) func() store.Store {
		path := filepath.Join(t.TempDir(), "reins.db")
		return func() store.Store { return open(t, path) }
	})
}

func TestSchemaVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reins.db")
	s := open(t, path)
	if err := s.CreateRun(context.Background(), store.Run{ID: "r1", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v < 1 {
		t.Fatalf("schema_version: %d, %v", v, err)
	}
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v; want wal", mode, err)
	}

	// Reopening at the same version keeps the data.
	s = open(t, path)
	if _, err := s.GetRun(context.Background(), "", "r1"); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
	s.Close()

	// A file from a newer reins is refused, and left alone.
	if _, err := db.Exec(`UPDATE schema_version SET version = ?`, v+1); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(path)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema: %v; want a failed precondition saying it is newer", err)
	}
	var after int
	if err := db.QueryRow(`SELECT version FROM schema_version`).Scan(&after); err != nil || after != v+1 {
		t.Fatalf("schema_version after a refused Open: %d, %v; want %d", after, err, v+1)
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", "x.db?mode=ro", "file:x.db"} {
		if _, err := sqlite.Open(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Open(%q): %v, want invalid argument", p, err)
		}
	}
	notDB := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := sqlite.Open(notDB); err == nil {
		s.Close()
		t.Fatal("Open of a file that is not a database succeeded")
	}
}

// TestClose races appenders with Close: each Append either succeeds, and is
// then in the file, or fails as unavailable; none hangs.
func TestClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reins.db")
	s := open(t, path)
	ctx := context.Background()
	const writers = 16
	for i := range writers {
		if err := s.CreateRun(ctx, store.Run{ID: fmt.Sprint("r", i), Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	last := make([]int64, writers)
	for i := range writers {
		wg.Go(func() {
			for {
				n, err := s.Append(ctx, fmt.Sprint("r", i), last[i], []store.Event{{Type: "step"}}, store.RunUpdate{})
				if err != nil {
					if !errors.Is(err, errdefs.ErrUnavailable) {
						t.Errorf("Append during Close: %v, want unavailable", err)
					}
					return
				}
				last[i] = n
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.GetRun(ctx, "", "r0"); err == nil {
		t.Fatal("GetRun after Close succeeded")
	}

	s = open(t, path)
	defer s.Close()
	for i := range writers {
		run, err := s.GetRun(ctx, "", fmt.Sprint("r", i))
		if err != nil {
			t.Fatal(err)
		}
		if run.LastSeq != last[i] {
			t.Errorf("run r%d: last_seq %d after reopen, but Append returned %d before Close", i, run.LastSeq, last[i])
		}
	}
}

// TestTenantsMigrate opens a file of schema version 1 (runs only): its runs
// stay and tenants work, and survive a reopen.
func TestTenantsMigrate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reins.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER NOT NULL)`, `INSERT INTO schema_version VALUES (1)`,
		`CREATE TABLE runs (n INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, tenant TEXT NOT NULL, status TEXT NOT NULL,
			spec TEXT, summary TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE events (run_id TEXT NOT NULL REFERENCES runs (id), seq INTEGER NOT NULL, type TEXT NOT NULL,
			time INTEGER NOT NULL, data TEXT, PRIMARY KEY (run_id, seq))`,
		`INSERT INTO runs (id, tenant, status, created_at, updated_at) VALUES ('r1', 'acme', 'succeeded', 1, 1)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	ctx := context.Background()
	s := open(t, path)
	if _, err := s.GetRun(ctx, "acme", "r1"); err != nil {
		t.Fatalf("a run of version 1 after migrating: %v", err)
	}
	if err := s.CreateTenant(ctx, store.Tenant{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetTenantToken(ctx, "acme", "h1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	defer s.Close()
	if tn, err := s.TenantByToken(ctx, "h1"); err != nil || tn.Name != "acme" || tn.TokenIssuedAt.IsZero() {
		t.Fatalf("after reopen: %+v, %v", tn, err)
	}
}

// TestFilesArePrivate: the database and its WAL and shared-memory files
// hold every tenant's event log; no other user of the host may read them,
// also when an older version left them world-readable.
func TestFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "reins.db")
	st, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.CreateRun(ctx, store.Run{ID: "r1", Status: "queued", Spec: []byte(`{}`), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			fi, err := os.Stat(path + suffix)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s is %v, want -rw-------", when, filepath.Base(path+suffix), fi.Mode().Perm())
			}
		}
	}
	check("new database")
	st.Close()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Chmod(path+suffix, 0o644)
	}
	st, err = sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.GetRun(ctx, "", "r1"); err != nil {
		t.Fatal(err)
	}
	check("reopened world-readable database")
}

func TestEgressConformance(t *testing.T) {
	storetest.RunEgress(t, func(t *testing.T, keep int) store.EgressLog {
		s := open(t, filepath.Join(t.TempDir(), "reins.db"))
		s.SetEgressKeep(keep)
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}
