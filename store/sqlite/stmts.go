package sqlite

import (
	"context"
	"database/sql"
	"errors"
)

// stmts are the statements of the hot paths, prepared once: compiling SQL
// costs about as much as running these statements does.
type stmts struct {
	// On the writer; a transaction uses them through tx.StmtContext, which
	// finds them already prepared on the one writer connection.
	lastSeq, insertEvent, updateRun, insertRun *sql.Stmt
	savepoint, rollbackTo, release             *sql.Stmt
	lastEgress, insertEgress, trimEgress       *sql.Stmt
	// On the readers.
	getRun, getTenantRun, events, runExists, listEgress *sql.Stmt
}

func (s *Store) prepare(ctx context.Context) error {
	var errs []error
	p := func(db *sql.DB, q string) *sql.Stmt {
		st, err := db.PrepareContext(ctx, q)
		errs = append(errs, err)
		return st
	}
	s.st = stmts{
		lastSeq:     p(s.w, `SELECT last_seq FROM runs WHERE id = ?`),
		insertEvent: p(s.w, `INSERT INTO events (run_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)`),
		updateRun: p(s.w, `UPDATE runs SET last_seq = ?, updated_at = ?,
				status = coalesce(?, status), summary = coalesce(?, summary)
			WHERE id = ?`),
		insertRun: p(s.w, `INSERT INTO runs (`+runColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, 0)
			ON CONFLICT (id) DO NOTHING`),
		savepoint:  p(s.w, `SAVEPOINT w`),
		rollbackTo: p(s.w, `ROLLBACK TO w`),
		release:    p(s.w, `RELEASE w`),

		lastEgress:   p(s.w, `SELECT coalesce(max(seq), 0) FROM egress WHERE sandbox = ?`),
		insertEgress: p(s.w, `INSERT INTO egress (sandbox, seq, tenant, entry) VALUES (?, ?, ?, ?)`),
		trimEgress:   p(s.w, `DELETE FROM egress WHERE sandbox = ? AND seq <= ?`),

		getRun:       p(s.r, `SELECT `+runColumns+` FROM runs WHERE id = ?`),
		getTenantRun: p(s.r, `SELECT `+runColumns+` FROM runs WHERE id = ? AND tenant = ?`),
		events:       p(s.r, `SELECT seq, type, time, data FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`),
		runExists:    p(s.r, `SELECT 1 FROM runs WHERE id = ?`),
		listEgress: p(s.r, `SELECT seq, entry FROM egress WHERE sandbox = ? AND seq > ? AND (? = '' OR tenant = ?)
			ORDER BY seq LIMIT ?`),
	}
	return errors.Join(errs...)
}

func (st *stmts) close() {
	for _, s := range []*sql.Stmt{st.lastSeq, st.insertEvent, st.updateRun, st.insertRun,
		st.savepoint, st.rollbackTo, st.release, st.lastEgress, st.insertEgress, st.trimEgress,
		st.getRun, st.getTenantRun, st.events, st.runExists, st.listEgress} {
		if s != nil {
			s.Close()
		}
	}
}
