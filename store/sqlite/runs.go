package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// defaultListLimit is ListRuns' page size when the filter names none.
const defaultListLimit = 100

const runColumns = `id, tenant, status, spec, summary, created_at, updated_at, last_seq`

// CreateRun stores a new run and its first events (seq 1, 2, …) in one
// transaction. A zero CreatedAt is set to now, a zero UpdatedAt to
// CreatedAt, an empty Status to "queued", an event's zero Time to
// CreatedAt; LastSeq is ignored (it is len(events)). An id already taken,
// by any tenant, is errdefs.ErrAlreadyExists, and then no event is written.
func (s *Store) CreateRun(ctx context.Context, run store.Run, events ...store.Event) error {
	if run.ID == "" {
		return fmt.Errorf("create run: empty id: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkJSON("run "+run.ID+" spec", run.Spec); err != nil {
		return err
	}
	if err := checkJSON("run "+run.ID+" summary", run.Summary); err != nil {
		return err
	}
	if err := checkEvents(run.ID, events); err != nil {
		return err
	}
	if run.Status == "" {
		run.Status = "queued"
	}
	if run.CreatedAt.IsZero() {
		run.CreatedAt = now()
	}
	if run.UpdatedAt.IsZero() {
		run.UpdatedAt = run.CreatedAt
	}
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.StmtContext(ctx, s.st.insertRun).ExecContext(ctx,
			run.ID, run.Tenant, run.Status, jsonText(run.Spec), jsonText(run.Summary),
			nanos(run.CreatedAt), nanos(run.UpdatedAt))
		if err != nil {
			return s.dbErr(fmt.Errorf("create run %s: %w", run.ID, err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.dbErr(fmt.Errorf("create run %s: %w", run.ID, err))
		} else if n == 0 {
			return fmt.Errorf("run %s: %w", run.ID, errdefs.ErrAlreadyExists)
		}
		if len(events) == 0 {
			return nil
		}
		if err := s.insertEvents(ctx, tx, run.ID, 0, events, run.CreatedAt); err != nil {
			return err
		}
		_, err = tx.StmtContext(ctx, s.st.updateRun).ExecContext(ctx,
			len(events), nanos(run.UpdatedAt), nil, nil, run.ID)
		if err != nil {
			return s.dbErr(fmt.Errorf("create run %s: %w", run.ID, err))
		}
		return nil
	})
}

// GetRun returns the run id. With a non-empty tenant, a run of another
// tenant is not found, exactly as a run that does not exist.
func (s *Store) GetRun(ctx context.Context, tenant, id string) (store.Run, error) {
	var row *sql.Row
	if tenant == "" {
		row = s.st.getRun.QueryRowContext(ctx, id)
	} else {
		row = s.st.getTenantRun.QueryRowContext(ctx, id, tenant)
	}
	run, err := scanRun(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Run{}, notFound(id)
	}
	if err != nil {
		return store.Run{}, s.dbErr(fmt.Errorf("get run %s: %w", id, err))
	}
	return run, nil
}

// ListRuns returns runs newest first (by CreatedAt, then by creation order).
// Before pages: the runs listed after the run Before, which must exist and,
// with a tenant filter, belong to that tenant.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("list runs: negative limit %d: %w", f.Limit, errdefs.ErrInvalidArgument)
	}
	limit := f.Limit
	if limit == 0 {
		limit = defaultListLimit
	}
	var where []string
	var args []any
	if f.Tenant != "" {
		where = append(where, `tenant = ?`)
		args = append(args, f.Tenant)
	}
	if len(f.Statuses) > 0 {
		where = append(where, `status IN (?`+strings.Repeat(`, ?`, len(f.Statuses)-1)+`)`)
		for _, st := range f.Statuses {
			args = append(args, st)
		}
	}
	if f.Before != "" {
		var created, n int64
		err := s.r.QueryRowContext(ctx, `SELECT created_at, n FROM runs WHERE id = ? AND (tenant = ? OR ? = '')`,
			f.Before, f.Tenant, f.Tenant).Scan(&created, &n)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("list runs before %s: %w", f.Before, notFound(f.Before))
		}
		if err != nil {
			return nil, s.dbErr(fmt.Errorf("list runs: %w", err))
		}
		where = append(where, `(created_at, n) < (?, ?)`)
		args = append(args, created, n)
	}
	q := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY created_at DESC, n DESC LIMIT ?`
	args = append(args, limit)

	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.dbErr(fmt.Errorf("list runs: %w", err))
	}
	defer rows.Close()
	var runs []store.Run
	for rows.Next() {
		run, err := scanRun(rows)
		if err != nil {
			return nil, s.dbErr(fmt.Errorf("list runs: %w", err))
		}
		runs = append(runs, run)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr(fmt.Errorf("list runs: %w", err))
	}
	return runs, nil
}

func scanRun(row interface{ Scan(...any) error }) (store.Run, error) {
	var (
		run              store.Run
		spec, summary    sql.NullString
		created, updated int64
	)
	err := row.Scan(&run.ID, &run.Tenant, &run.Status, &spec, &summary, &created, &updated, &run.LastSeq)
	if err != nil {
		return store.Run{}, err
	}
	run.Spec = rawJSON(spec)
	run.Summary = rawJSON(summary)
	run.CreatedAt = fromNanos(created)
	run.UpdatedAt = fromNanos(updated)
	return run, nil
}

func notFound(id string) error {
	return fmt.Errorf("run %s not found: %w", id, errdefs.ErrNotFound)
}

// checkJSON refuses a payload that is not valid JSON: the store hands its
// JSON columns back as json.RawMessage, which must marshal.
func checkJSON(what string, m json.RawMessage) error {
	if len(m) > 0 && !json.Valid(m) {
		return fmt.Errorf("%s is not valid JSON: %w", what, errdefs.ErrInvalidArgument)
	}
	return nil
}

// jsonText is the column value of a JSON payload: NULL when there is none.
func jsonText(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return string(m)
}

func rawJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}
