package trusted

import "testing"

func TestIsReadOnlySQL(t *testing.T) {
	tests := []struct {
		query string
		read  bool
	}{
		{"SELECT 1", true},
		{"  select * from t where a = 1;  ", true},
		{"SELECT 1;;", true},
		{"WITH x AS (SELECT 1) SELECT * FROM x", true},
		{"WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c WHERE n < 5) SELECT n FROM c", true},
		{"(SELECT 1) UNION (SELECT 2)", true},
		{"EXPLAIN SELECT * FROM t", true},
		{"EXPLAIN (FORMAT JSON) SELECT * FROM t", true},
		{"EXPLAIN QUERY PLAN SELECT * FROM t", true},
		{"SHOW search_path", true},
		{"VALUES (1, 'a'), (2, 'b')", true},
		{"SELECT 'DELETE FROM t; DROP TABLE t'", true},
		{`SELECT "update", "delete" FROM t`, true},
		{"SELECT update_time, deleted FROM t", true},
		{"SELECT 1 -- ; DELETE FROM t", true},
		{"SELECT 1 /* ; DELETE FROM t */", true},
		{"SELECT $$hello$$", true},
		{"SELECT $tag$ hello $tag$", true},
		{"SELECT * FROM t WHERE a = $1 AND b = ?", true},
		{"SELECT replace(name, 'a', 'b') FROM t", true},
		{"SELECT a$b FROM t", true},
		{"SELECT * FROM pragma_table_info('t')", true},
		{"SELECT 'it''s'", true},
		{"SELECT 'é' AS ü", true},

		{"", false},
		{"   ;  ", false},
		{"-- only a comment", false},
		{"INSERT INTO t VALUES (1)", false},
		{"update t set a = 1", false},
		{"DELETE FROM t", false},
		{"DROP TABLE t", false},
		{"CREATE TABLE t (a int)", false},
		{"ALTER TABLE t ADD b int", false},
		{"TRUNCATE t", false},
		{"PRAGMA user_version = 3", false},
		{"PRAGMA table_info(t)", false},
		{"ATTACH DATABASE 'x.db' AS x", false},
		{"VACUUM", false},
		{"BEGIN", false},
		{"SET TRANSACTION READ WRITE", false},
		{"COPY t TO '/tmp/x'", false},
		{"TABLE t", false},
		{"SELECT 1; SELECT 2", false},
		{"SELECT 1; DELETE FROM t", false},
		{"SELECT * INTO t2 FROM t", false},
		{"SELECT * FROM t FOR UPDATE", false},
		{"SELECT * FROM t FOR SHARE", false},
		{"SELECT * FROM t FOR KEY SHARE", false},
		{"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", false},
		{"EXPLAIN ANALYZE DELETE FROM t", false},
		{"EXPLAIN ANALYZE INSERT INTO t VALUES (1)", false},
		{"/* hi */ DELETE FROM t", false},
		{"SELECT 'unterminated", false},
		{"SELECT /* unterminated", false},
		// Conservative: SQLite has no dollar quoting, so it would read these
		// keywords as code.
		{"SELECT $$ DELETE $$", false},
		{"SELECT $tag$ ; DROP TABLE t $tag$", false},
		// Tricks that hide a keyword from one dialect's reading.
		{`SELECT E'\''; DELETE FROM t; SELECT ''`, false},
		{`SELECT 'a\'; DELETE FROM t; --'`, false},
		{"SELECT $a$; DELETE FROM t; $a$", false},
		{"SELECT /* /* */ ; DELETE FROM t; /* */", false},
		{"SELECT [x; DELETE FROM t; ]", false},
		{"SELECT `x; DELETE FROM t; `", false},
		{"SELECT 1; -- trailing\nDELETE FROM t", false},
	}
	for _, tt := range tests {
		if got := IsReadOnlySQL(tt.query); got != tt.read {
			t.Errorf("IsReadOnlySQL(%q) = %v, want %v", tt.query, got, tt.read)
		}
	}
}

func TestReturnsRows(t *testing.T) {
	tests := []struct {
		query string
		rows  bool
	}{
		{"INSERT INTO t VALUES (1) RETURNING id", true},
		{"SELECT * FROM t FOR UPDATE", true},
		{"PRAGMA user_version", true},
		{"INSERT INTO t VALUES (1)", false},
		{"UPDATE t SET a = 'returning'", false},
		{"CREATE TABLE t (a int)", false},
	}
	for _, tt := range tests {
		if got := returnsRows(tt.query); got != tt.rows {
			t.Errorf("returnsRows(%q) = %v, want %v", tt.query, got, tt.rows)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		match      bool
	}{
		{"*@example.com", "a@example.com", true},
		{"*@example.com", "a.b/c@example.com", true},
		{"*@example.com", "a@sub.example.com", false},
		{"*@example.com", "a@example.com.evil.org", false},
		{"*@*.example.com", "a@sub.example.com", true},
		{"bob@example.com", "bob@example.com", true},
		{"bob@example.com", "bob@example.co", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "acb", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.s); got != tt.match {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.match)
		}
	}
}
