package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/reinsdev/reins/errdefs"
)

// migrations[i] takes the schema from version i to version i+1. Append new
// ones; never edit one that has shipped, since files in the field have run it.
var migrations = []string{
	// 1: runs and their event logs.
	`
CREATE TABLE runs (
	n          INTEGER PRIMARY KEY, -- insertion order, a stable tie-break for listing
	id         TEXT    NOT NULL UNIQUE,
	tenant     TEXT    NOT NULL,
	status     TEXT    NOT NULL,
	spec       TEXT,               -- JSON
	summary    TEXT,               -- JSON
	created_at INTEGER NOT NULL,   -- unix nanoseconds
	updated_at INTEGER NOT NULL,
	last_seq   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_created ON runs (created_at DESC, n DESC);
CREATE INDEX runs_by_tenant ON runs (tenant, created_at DESC, n DESC);

CREATE TABLE events (
	run_id TEXT    NOT NULL REFERENCES runs (id),
	seq    INTEGER NOT NULL,
	type   TEXT    NOT NULL,
	time   INTEGER NOT NULL,     -- unix nanoseconds
	data   TEXT,                 -- JSON
	PRIMARY KEY (run_id, seq)
);
`,
	// 2: tenants and the hashes of their API tokens.
	`
CREATE TABLE tenants (
	name          TEXT    PRIMARY KEY,
	created_at    INTEGER NOT NULL, -- unix nanoseconds
	max_sandboxes INTEGER NOT NULL DEFAULT 0,
	max_runs      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE tenant_tokens (
	hash       TEXT    PRIMARY KEY, -- hex sha256 of the token
	tenant     TEXT    NOT NULL REFERENCES tenants (name),
	created_at INTEGER NOT NULL
);
CREATE INDEX tenant_tokens_by_tenant ON tenant_tokens (tenant);
`,
	// 3: a tenant's default policy, under every run's own.
	`
ALTER TABLE tenants ADD COLUMN policy TEXT NOT NULL DEFAULT '';
`,
	// 4: sandboxes' egress logs, each numbered from 1 (egress.go).
	`
CREATE TABLE egress (
	sandbox TEXT    NOT NULL,
	seq     INTEGER NOT NULL,
	tenant  TEXT    NOT NULL,
	entry   TEXT    NOT NULL, -- egress.Entry as JSON
	PRIMARY KEY (sandbox, seq)
) WITHOUT ROWID;
`,
	// 5: secrets, sealed by package secret; tenant '' is the admin's own.
	// A tenant's secrets go with it (no row of tenants names the admin).
	`
CREATE TABLE secrets (
	tenant     TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	sealed     BLOB    NOT NULL,
	created_at INTEGER NOT NULL, -- unix nanoseconds
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
CREATE TRIGGER secrets_of_deleted_tenant AFTER DELETE ON tenants
BEGIN
	DELETE FROM secrets WHERE tenant = OLD.name;
END;
`,
}

// schemaVersion is the version this code writes and reads.
var schemaVersion = len(migrations)

// migrate brings the file's schema to schemaVersion, all in one transaction:
// a crash half way leaves the old version whole.
func (s *Store) migrate() error {
	w := newWrite(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)`); err != nil {
			return fmt.Errorf("store %s: create schema_version: %w", s.path, err)
		}
		var v int
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v); err != nil {
			return fmt.Errorf("store %s: read schema version: %w", s.path, err)
		}
		if v > schemaVersion {
			return fmt.Errorf("store %s has schema version %d, newer than the %d this reins knows: run a newer reins, or restore a backup made by this version: %w",
				s.path, v, schemaVersion, errdefs.ErrFailedPrecondition)
		}
		if v == schemaVersion {
			return nil
		}
		for ; v < schemaVersion; v++ {
			if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
				return fmt.Errorf("store %s: migrate schema to version %d: %w", s.path, v+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM schema_version`); err != nil {
			return fmt.Errorf("store %s: record schema version: %w", s.path, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (?)`, v); err != nil {
			return fmt.Errorf("store %s: record schema version: %w", s.path, err)
		}
		return nil
	})
	s.commit([]*write{w})
	return <-w.done
}
