package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/reinsdev/reins/errdefs"
)

// maxBatch bounds how many writes one transaction commits together.
const maxBatch = 64

// write is one caller's transaction body, queued for writeLoop.
type write struct {
	ctx  context.Context // checked before fn runs
	fn   func(ctx context.Context, tx *sql.Tx) error
	done chan error // buffered, so writeLoop never waits for a caller
}

func newWrite(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) *write {
	return &write{ctx: ctx, fn: fn, done: make(chan error, 1)}
}

// writeTx runs fn in a write transaction, maybe together with other
// callers' writes, and returns once fn's work is committed, or undone if fn
// or the commit fails. A ctx done before fn begins cancels the write; once
// fn has begun, the write runs to the end and writeTx reports its real
// outcome. fn gets a context without deadline and must use it, not the
// caller's: SQLite answers an interrupted write by rolling back the whole
// transaction, other callers' writes included.
func (s *Store) writeTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := newWrite(ctx, fn)
	select {
	case s.writes <- w:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return fmt.Errorf("store %s is closed: %w", s.path, errdefs.ErrUnavailable)
	}
	return <-w.done
}

// writeLoop owns the writer connection. It takes a write, gathers the ones
// that queued up behind it, and commits them in one transaction.
func (s *Store) writeLoop() {
	defer close(s.loopDone)
	batch := make([]*write, 0, maxBatch)
	for {
		select {
		case w := <-s.writes:
			batch = append(batch[:0], w)
		case <-s.quit:
			return
		}
	gather:
		for len(batch) < maxBatch {
			select {
			case w := <-s.writes:
				batch = append(batch, w)
			default:
				break gather
			}
		}
		s.commit(batch)
		clear(batch)
	}
}

// commit runs a batch of writes in one transaction, each in a savepoint when
// there are several, and answers each write.
func (s *Store) commit(batch []*write) {
	var live []*write
	for _, w := range batch {
		if err := w.ctx.Err(); err != nil {
			w.done <- err
			continue
		}
		live = append(live, w)
	}
	if len(live) == 0 {
		return
	}
	errs := make([]error, len(live))
	answer := func() {
		for i, w := range live {
			w.done <- errs[i]
		}
	}
	// abort undoes the whole transaction: every write that has not failed
	// on its own fails with err.
	abort := func(tx *sql.Tx, err error) {
		if tx != nil {
			tx.Rollback()
		}
		err = s.dbErr(err)
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		answer()
	}

	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		abort(nil, err)
		return
	}
	if len(live) == 1 {
		if errs[0] = live[0].fn(ctx, tx); errs[0] != nil {
			tx.Rollback()
			answer()
			return
		}
	} else {
		for i, w := range live {
			if _, err := tx.StmtContext(ctx, s.st.savepoint).ExecContext(ctx); err != nil {
				abort(tx, err)
				return
			}
			if errs[i] = w.fn(ctx, tx); errs[i] != nil {
				// If fn's failure made SQLite roll back the whole
				// transaction, there is no savepoint left: abort rather
				// than let the next writes run outside a transaction.
				if _, err := tx.StmtContext(ctx, s.st.rollbackTo).ExecContext(ctx); err != nil {
					abort(tx, err)
					return
				}
			}
			if _, err := tx.StmtContext(ctx, s.st.release).ExecContext(ctx); err != nil {
				abort(tx, err)
				return
			}
		}
	}
	if err := tx.Commit(); err != nil {
		abort(nil, err)
		return
	}
	answer()
}
