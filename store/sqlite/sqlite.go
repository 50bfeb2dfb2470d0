// Package sqlite is the store.Store of a single node: one SQLite file in WAL
// mode, through modernc.org/sqlite (pure Go, so the service stays
// CGO_ENABLED=0).
//
// # Connections and group commit
//
// SQLite allows one writer at a time. The Store keeps one writer connection,
// owned by one goroutine, so writers queue in Go instead of many connections
// spinning on SQLITE_BUSY. That goroutine commits the writes that queued up
// while it was busy together, in one transaction with one fsync (group
// commit), each write in its own savepoint so that one write's failure (a
// stale Append) undoes only that write. A write is answered only after its
// transaction is committed. So one Append costs one fsync, and many loops
// appending at once share fsyncs instead of waiting for each other's.
// Transactions begin IMMEDIATE, so a read-then-write never fails half way on
// a lock. Reads go to a separate pool of query-only connections, which in WAL
// mode never block the writer nor wait for it.
//
// # Durability
//
// The file is opened with synchronous=FULL: in WAL mode SQLite then fsyncs
// the WAL at every commit, so an Append that has returned survives kill -9
// of the service and also a kernel crash or power loss. synchronous=NORMAL
// would survive kill -9 too (the WAL pages are in the OS page cache), but a
// power loss could roll back the last commits after the loop had acted on
// them: a tool call whose logged intent vanished could run twice. FULL costs
// one fsync per commit: an Append takes about the time of one 4 KiB write
// and fsync plus 0.2–0.4 ms (BenchmarkAppend against BenchmarkFsync, measured
// in the same run), well inside the loop's 5 ms per step, and group commit
// spreads the fsync over concurrent appenders. So durability wins.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

var _ store.Store = (*Store)(nil)

// busyTimeout is how long a connection waits for a lock held by another
// process on the same file (a second `reins serve`, a backup) before failing
// with SQLITE_BUSY. Within one Store writers never contend.
const busyTimeout = 10 * time.Second

// Store is a store.Store in one SQLite file. It is safe for concurrent use.
type Store struct {
	path string
	w    *sql.DB // the one writer connection, used by writeLoop only
	r    *sql.DB // query-only readers
	st   stmts

	writes    chan *write   // to writeLoop, unbuffered
	quit      chan struct{} // closed by Close
	loopDone  chan struct{} // closed when writeLoop returns
	closeOnce sync.Once
	closeErr  error

	// egressKeep, when not 0, bounds each sandbox's egress log below
	// store.MaxEgressPerSandbox (tests set it).
	egressKeep int
}

// Open opens the store in the SQLite file at path, creating it and its
// schema if need be, and migrating an older schema to this version. It
// refuses a file whose schema is newer than this code knows
// (errdefs.ErrFailedPrecondition). Close the Store when done.
func Open(path string) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("open store %q: want a plain file path: %w", path, errdefs.ErrInvalidArgument)
	}
	if err := makePrivate(path); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	common := fmt.Sprintf("_busy_timeout=%d&_foreign_keys=1&_journal_mode=WAL&_synchronous=FULL",
		busyTimeout.Milliseconds())
	w, err := sql.Open("sqlite", path+"?"+common+"&_txlock=immediate&_pragma=journal_size_limit(67108864)")
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	s := &Store{
		path:     path,
		w:        w,
		writes:   make(chan *write),
		quit:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	// Migrate before the readers and the write loop exist, so that nothing
	// sees a half-made schema, and the writer sets journal_mode=WAL first.
	if err := s.migrate(); err != nil {
		w.Close()
		return nil, err
	}

	r, err := sql.Open("sqlite", path+"?"+common+"&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	r.SetConnMaxIdleTime(5 * time.Minute)
	s.r = r
	if err := s.prepare(context.Background()); err != nil {
		s.st.close()
		r.Close()
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, s.dbErr(err))
	}
	go s.writeLoop()
	return s, nil
}

// Close waits for the write in progress, refuses new ones and closes the
// store's connections. Reads in flight may fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.loopDone
		s.st.close()
		if err := errors.Join(s.r.Close(), s.w.Close()); err != nil {
			s.closeErr = fmt.Errorf("close store %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// dbErr gives an error from the database a kind: a done context stays
// itself (callers test context.Canceled), anything else is unavailable.
func (s *Store) dbErr(err error) error {
	if err == nil {
		return nil
	}
	if errdefs.Kind(err) != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("store %s: %w (%w)", s.path, err, errdefs.ErrUnavailable)
}

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// now is the store's clock, UTC with the monotonic reading stripped so that
// a time read back compares equal with ==.
func now() time.Time { return time.Now().UTC().Round(0) }

// makePrivate creates the database file, if missing, readable by its owner
// only, and takes the group and world bits off an existing one and its
// WAL and shared-memory files: they hold every tenant's event log. SQLite
// gives the -wal and -shm files it makes later the database's own mode.
func makePrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if err := os.Chmod(path+suffix, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
