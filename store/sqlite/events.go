package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// Append adds events to the end of run runID's log, numbered afterSeq+1,
// afterSeq+2, …, and applies update, in one transaction; it returns the
// run's new last seq. The events' RunID and Seq are ignored (the store
// numbers them); a zero Time is set to now. The caller's slice is not
// modified. If the log does not end at afterSeq the append is refused with
// errdefs.ErrFailedPrecondition and nothing changes: another writer got
// there first, and the caller must reload the log before deciding again.
// Append with no events applies update alone, under the same check.
func (s *Store) Append(ctx context.Context, runID string, afterSeq int64, events []store.Event, update store.RunUpdate) (int64, error) {
	if afterSeq < 0 {
		return 0, fmt.Errorf("append to run %s: negative seq %d: %w", runID, afterSeq, errdefs.ErrInvalidArgument)
	}
	if err := checkEvents(runID, events); err != nil {
		return 0, err
	}
	if err := checkJSON("run "+runID+" summary", update.Summary); err != nil {
		return 0, err
	}
	t := now()
	last := afterSeq + int64(len(events))
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var cur int64
		err := tx.StmtContext(ctx, s.st.lastSeq).QueryRowContext(ctx, runID).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound(runID)
		}
		if err != nil {
			return s.dbErr(fmt.Errorf("append to run %s: %w", runID, err))
		}
		if cur != afterSeq {
			return fmt.Errorf("append to run %s after seq %d: its log ends at seq %d, reload it and retry: %w",
				runID, afterSeq, cur, errdefs.ErrFailedPrecondition)
		}
		if err := s.insertEvents(ctx, tx, runID, afterSeq, events, t); err != nil {
			return err
		}
		_, err = tx.StmtContext(ctx, s.st.updateRun).ExecContext(ctx,
			last, nanos(t), nullString(update.Status), jsonText(update.Summary), runID)
		if err != nil {
			return s.dbErr(fmt.Errorf("append to run %s: %w", runID, err))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return last, nil
}

// checkEvents refuses an event with no type or with malformed data.
func checkEvents(runID string, events []store.Event) error {
	for i, e := range events {
		if e.Type == "" {
			return fmt.Errorf("append to run %s: event %d has no type: %w", runID, i, errdefs.ErrInvalidArgument)
		}
		if err := checkJSON(fmt.Sprintf("run %s event %d (%s) data", runID, i, e.Type), e.Data); err != nil {
			return err
		}
	}
	return nil
}

// insertEvents writes events numbered afterSeq+1, …; a zero Time is t0.
func (s *Store) insertEvents(ctx context.Context, tx *sql.Tx, runID string, afterSeq int64, events []store.Event, t0 time.Time) error {
	insert := tx.StmtContext(ctx, s.st.insertEvent)
	for i, e := range events {
		_, err := insert.ExecContext(ctx, runID, afterSeq+int64(i)+1, e.Type, nanos(eventTime(e, t0)), jsonText(e.Data))
		if err != nil {
			return s.dbErr(fmt.Errorf("append to run %s: %w", runID, err))
		}
	}
	return nil
}

func eventTime(e store.Event, t0 time.Time) time.Time {
	if e.Time.IsZero() {
		return t0
	}
	return e.Time
}

// Events returns run runID's events after seq afterSeq, in order, at most
// limit of them (0: all).
func (s *Store) Events(ctx context.Context, runID string, afterSeq int64, limit int) ([]store.Event, error) {
	if afterSeq < 0 || limit < 0 {
		return nil, fmt.Errorf("events of run %s: negative seq %d or limit %d: %w", runID, afterSeq, limit, errdefs.ErrInvalidArgument)
	}
	lim := int64(limit)
	if limit == 0 {
		lim = -1 // SQLite: no limit
	}
	rows, err := s.st.events.QueryContext(ctx, runID, afterSeq, lim)
	if err != nil {
		return nil, s.dbErr(fmt.Errorf("events of run %s: %w", runID, err))
	}
	defer rows.Close()
	var events []store.Event
	for rows.Next() {
		e := store.Event{RunID: runID}
		var t int64
		var data sql.NullString
		if err := rows.Scan(&e.Seq, &e.Type, &t, &data); err != nil {
			return nil, s.dbErr(fmt.Errorf("events of run %s: %w", runID, err))
		}
		e.Time = fromNanos(t)
		e.Data = rawJSON(data)
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr(fmt.Errorf("events of run %s: %w", runID, err))
	}
	if len(events) == 0 {
		// An empty page of a run that exists is an answer; of a run that
		// does not, an error.
		var one int
		err := s.st.runExists.QueryRowContext(ctx, runID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, notFound(runID)
		}
		if err != nil {
			return nil, s.dbErr(fmt.Errorf("events of run %s: %w", runID, err))
		}
	}
	return events, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
