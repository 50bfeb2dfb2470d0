package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

var _ store.EgressLog = (*Store)(nil)

// An egress log is numbered per sandbox, from 1 without gaps, so that the
// bound is one range delete on the primary key: the entries at or below
// last-keep go, in the transaction that appended past them, at a cost of
// what is deleted and not of the log's length. A log is bounded by
// store.MaxEgressPerSandbox unless egressKeep (tests) says less.

// AppendEgress stores a batch of entries in one transaction.
func (s *Store) AppendEgress(ctx context.Context, tenant string, entries []egress.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	at := now()
	rows := make([][]byte, len(entries))
	for i, e := range entries {
		if e.Sandbox == "" {
			return fmt.Errorf("egress entry %d names no sandbox: %w", i, errdefs.ErrInvalidArgument)
		}
		if e.Time.IsZero() {
			e.Time = at
		}
		e.Time = e.Time.UTC()
		data, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("egress entry %d: %w", i, err)
		}
		rows[i] = data
	}
	keep := int64(store.MaxEgressPerSandbox)
	if s.egressKeep > 0 {
		keep = int64(s.egressKeep)
	}
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		last := map[string]int64{}
		for i, e := range entries {
			seq, ok := last[e.Sandbox]
			if !ok {
				if err := tx.StmtContext(ctx, s.st.lastEgress).QueryRowContext(ctx, e.Sandbox).Scan(&seq); err != nil {
					return s.dbErr(fmt.Errorf("egress log of sandbox %s: %w", e.Sandbox, err))
				}
			}
			seq++
			last[e.Sandbox] = seq
			if _, err := tx.StmtContext(ctx, s.st.insertEgress).ExecContext(ctx, e.Sandbox, seq, tenant, rows[i]); err != nil {
				return s.dbErr(fmt.Errorf("egress log of sandbox %s: %w", e.Sandbox, err))
			}
		}
		for sb, seq := range last {
			if seq <= keep {
				continue
			}
			if _, err := tx.StmtContext(ctx, s.st.trimEgress).ExecContext(ctx, sb, seq-keep); err != nil {
				return s.dbErr(fmt.Errorf("egress log of sandbox %s: %w", sb, err))
			}
		}
		return nil
	})
}

// ListEgress returns a sandbox's entries after afterSeq.
func (s *Store) ListEgress(ctx context.Context, tenant, sandbox string, afterSeq int64, limit int) ([]store.EgressRecord, error) {
	if limit <= 0 {
		limit = store.DefaultEgressLimit
	}
	rows, err := s.st.listEgress.QueryContext(ctx, sandbox, afterSeq, tenant, tenant, limit)
	if err != nil {
		return nil, s.dbErr(fmt.Errorf("egress log of sandbox %s: %w", sandbox, err))
	}
	defer rows.Close()
	var out []store.EgressRecord
	for rows.Next() {
		var r store.EgressRecord
		var data []byte
		if err := rows.Scan(&r.Seq, &data); err != nil {
			return nil, s.dbErr(fmt.Errorf("egress log of sandbox %s: %w", sandbox, err))
		}
		if err := json.Unmarshal(data, &r.Entry); err != nil {
			return nil, fmt.Errorf("egress log of sandbox %s, entry %d: %w: %w", sandbox, r.Seq, err, errdefs.ErrInternal)
		}
		r.Entry.Time = r.Entry.Time.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr(fmt.Errorf("egress log of sandbox %s: %w", sandbox, err))
	}
	return out, nil
}

// DeleteEgress removes a sandbox's log.
func (s *Store) DeleteEgress(ctx context.Context, sandbox string) error {
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM egress WHERE sandbox = ?`, sandbox); err != nil {
			return s.dbErr(fmt.Errorf("delete egress log of sandbox %s: %w", sandbox, err))
		}
		return nil
	})
}
