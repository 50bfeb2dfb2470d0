package trusted

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/tool"
)

// newSQLiteFile makes a database file with a table people(id, name, note).
func newSQLiteFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "crm.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT NOT NULL, note TEXT, photo BLOB)`,
		`INSERT INTO people (id, name, note) VALUES (1, 'alice', 'likes | pipes'), (2, 'bob', NULL), (3, 'carol', 'two
lines')`,
		`UPDATE people SET photo = x'89504e470d0a1a0a0000' WHERE id = 1`,
		`CREATE TABLE nums (n INTEGER)`,
		`WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c WHERE n < 250) INSERT INTO nums SELECT n FROM c`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return path
}

func newSQLTool(t *testing.T, cfg SQLConfig) *SQL {
	t.Helper()
	s, err := NewSQL(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func call(t *testing.T, tl tool.Tool, input string) (tool.Result, error) {
	t.Helper()
	return tl.Call(context.Background(), "run1/2/3", json.RawMessage(input))
}

func mustCall(t *testing.T, tl tool.Tool, input string) tool.Result {
	t.Helper()
	res, err := call(t, tl, input)
	if err != nil {
		t.Fatalf("Call(%s): %v", input, err)
	}
	return res
}

func TestSQLSpec(t *testing.T) {
	path := newSQLiteFile(t)
	ro := newSQLTool(t, SQLConfig{URL: "sqlite:" + path})
	rw := newSQLTool(t, SQLConfig{Name: "crm", URL: "sqlite:" + path, AllowWrites: true, ToolName: "crm_sql"})

	spec := ro.Spec()
	if spec.Name != "sql_query" || spec.Side != tool.SideTrusted {
		t.Errorf("spec = %+v", spec)
	}
	if !spec.HasLabel(tool.LabelReadsUntrusted) || spec.HasLabel(tool.LabelDestructive) {
		t.Errorf("read-only labels = %v", spec.Labels)
	}
	for _, want := range []string{`"crm"`, "Read-only", "writes are disabled by configuration", "200 rows", "?"} {
		if !strings.Contains(spec.Description, want) {
			t.Errorf("description lacks %q: %s", want, spec.Description)
		}
	}
	checkSchema(t, spec.InputSchema, "query")
	// The policy reads the query argument through the spec (sql_read,
	// sql_write); the tool's own read-only check is the same function.
	if ro := spec.Args["query"].ReadOnlySQL; ro == nil || !ro("SELECT 1") || ro("SELECT 1; DROP TABLE t") {
		t.Errorf("the spec does not classify its query argument as the tool does")
	}

	spec = rw.Spec()
	if spec.Name != "crm_sql" || !spec.HasLabel(tool.LabelDestructive) || !spec.HasLabel(tool.LabelReadsUntrusted) {
		t.Errorf("read-write spec = %+v", spec)
	}
	if !strings.Contains(spec.Description, "Writes are allowed") {
		t.Errorf("description: %s", spec.Description)
	}
}

// checkSchema checks that schema is a JSON object schema requiring required.
func checkSchema(t *testing.T, schema json.RawMessage, required ...string) {
	t.Helper()
	var s struct {
		Type       string         `json:"type"`
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	if s.Type != "object" || strings.Join(s.Required, ",") != strings.Join(required, ",") {
		t.Errorf("schema = %s", schema)
	}
	for _, r := range required {
		if s.Properties[r] == nil {
			t.Errorf("schema has no property %q", r)
		}
	}
}

func TestSQLSelect(t *testing.T) {
	path := newSQLiteFile(t)
	s := newSQLTool(t, SQLConfig{URL: "sqlite:" + path})
	short := newSQLTool(t, SQLConfig{URL: "sqlite:" + path, MaxCellChars: 10})
	tests := []struct {
		name, input, want string
		short             bool
	}{
		{
			name:  "table",
			input: `{"query":"SELECT id, name, note FROM people ORDER BY id"}`,
			want: "id | name  | note\n" +
				"---+-------+---------------\n" +
				"1  | alice | likes \\| pipes\n" +
				"2  | bob   | NULL\n" +
				"3  | carol | two\\nlines\n" +
				"(3 rows)",
		},
		{
			name:  "params",
			input: `{"query":"SELECT name FROM people WHERE id = ? OR name = ?","params":[2, "carol"]}`,
			want:  "name\n-----\nbob\ncarol\n(2 rows)",
		},
		{
			name:  "no rows",
			input: `{"query":"SELECT name FROM people WHERE id > ?","params":[99]}`,
			want:  "name\n----\n(0 rows)",
		},
		{
			name:  "cut cell",
			input: `{"query":"SELECT 'abcdefghijklmnop' AS long, NULL AS n, 1.5 AS f, true AS b"}`,
			want:  "long                  | n    | f   | b\n----------------------+------+-----+--\nabcdefghij…(+6 chars) | NULL | 1.5 | 1\n(1 row)",
			short: true,
		},
		{
			name:  "binary",
			input: `{"query":"SELECT photo FROM people WHERE id = 1"}`,
			want:  "photo\n--------------------------------\n<10 bytes: 89504e470d0a1a0a0000>\n(1 row)",
			short: true,
		},
		{
			name:  "cte",
			input: `{"query":"WITH x AS (SELECT count(*) AS c FROM nums) SELECT c FROM x;"}`,
			want:  "c\n---\n250\n(1 row)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := s
			if tt.short {
				tl = short
			}
			res := mustCall(t, tl, tt.input)
			if res.IsError || res.Text != tt.want {
				t.Errorf("got (IsError=%v)\n%s\nwant\n%s", res.IsError, res.Text, tt.want)
			}
		})
	}
}

func TestSQLMaxRows(t *testing.T) {
	s := newSQLTool(t, SQLConfig{URL: "sqlite:" + newSQLiteFile(t), MaxRows: 3})
	res := mustCall(t, s, `{"query":"SELECT n FROM nums ORDER BY n"}`)
	want := "n\n-\n1\n2\n3\n… 247 more rows not shown (3 of 250 above). Narrow the query or page with LIMIT/OFFSET."
	if res.Text != want {
		t.Errorf("got\n%s\nwant\n%s", res.Text, want)
	}

	// The default is 200.
	s = newSQLTool(t, SQLConfig{URL: "sqlite:" + newSQLiteFile(t)})
	res = mustCall(t, s, `{"query":"SELECT n FROM nums"}`)
	if !strings.HasSuffix(res.Text, "… 50 more rows not shown (200 of 250 above). Narrow the query or page with LIMIT/OFFSET.") {
		t.Errorf("got tail %q", res.Text[len(res.Text)-120:])
	}
}

func TestSQLReadOnly(t *testing.T) {
	path := newSQLiteFile(t)
	s := newSQLTool(t, SQLConfig{Name: "crm", URL: "sqlite:" + path})
	for _, q := range []string{
		"DELETE FROM people",
		"INSERT INTO people (name) VALUES ('eve')",
		"SELECT 1; DROP TABLE people",
		"PRAGMA user_version = 7",
		"ATTACH DATABASE 'other.db' AS other",
	} {
		input, _ := json.Marshal(map[string]string{"query": q})
		_, err := call(t, s, string(input))
		if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), `writes are disabled by configuration for database "crm"`) {
			t.Errorf("%s: err = %v", q, err)
		}
	}

	// The classifier is not the guard: the connection itself is read-only.
	tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.readOnly(tctx, "DELETE FROM people", nil)
	if err == nil || !isReadOnlyRefusal(err) {
		t.Fatalf("a write on the read-only connection: err = %v", err)
	}
	res, err := s.failure(context.Background(), tctx, err)
	if err != nil || !res.IsError || !strings.Contains(res.Text, "writes are disabled by configuration") {
		t.Errorf("failure = %+v, %v", res, err)
	}
	if _, err := s.db.ExecContext(tctx, "CREATE TABLE x (a int)"); err == nil {
		t.Error("the read-only pool accepted CREATE TABLE")
	}
	res = mustCall(t, s, `{"query":"SELECT count(*) AS n FROM people"}`)
	if !strings.Contains(res.Text, "\n3\n") {
		t.Errorf("people changed: %s", res.Text)
	}
}

func TestSQLWrites(t *testing.T) {
	s := newSQLTool(t, SQLConfig{URL: "sqlite:" + newSQLiteFile(t), AllowWrites: true})
	steps := []struct{ input, want string }{
		{`{"query":"INSERT INTO people (name) VALUES (?), (?)","params":["dave","erin"]}`, "OK: 2 rows affected."},
		{`{"query":"UPDATE people SET note = 'x' WHERE name = 'dave'"}`, "OK: 1 row affected."},
		{`{"query":"INSERT INTO people (name) VALUES ('fay') RETURNING id, name"}`, "id | name\n---+-----\n6  | fay\n(1 row)"},
		{`{"query":"CREATE TABLE t (a int); INSERT INTO t VALUES (1);"}`, "OK: 1 row affected."},
		{`{"query":"SELECT count(*) AS n FROM people"}`, "n\n-\n6\n(1 row)"},
	}
	for _, st := range steps {
		res := mustCall(t, s, st.input)
		if res.IsError || res.Text != st.want {
			t.Errorf("%s: got (IsError=%v)\n%s\nwant\n%s", st.input, res.IsError, res.Text, st.want)
		}
	}
}

func TestSQLDatabaseErrors(t *testing.T) {
	s := newSQLTool(t, SQLConfig{URL: "sqlite:" + newSQLiteFile(t), Timeout: 300 * time.Millisecond})
	res := mustCall(t, s, `{"query":"SELECT * FROM nope"}`)
	if !res.IsError || !strings.Contains(res.Text, "no such table: nope") {
		t.Errorf("missing table: %+v", res)
	}
	res = mustCall(t, s, `{"query":"SELECT nosuchfunc(1)"}`)
	if !res.IsError || !strings.HasPrefix(res.Text, "Database error:") || !strings.Contains(res.Text, "nosuchfunc") {
		t.Errorf("unknown function: %+v", res)
	}
	start := time.Now()
	res = mustCall(t, s, `{"query":"WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c) SELECT count(*) FROM c"}`)
	if !res.IsError || !strings.Contains(res.Text, "did not finish within 300ms") {
		t.Errorf("endless query: %+v", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("endless query took %s", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Call(ctx, "k", json.RawMessage(`{"query":"SELECT 1"}`)); !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("cancelled call: err = %v", err)
	}
}

func TestSQLBadInput(t *testing.T) {
	s := newSQLTool(t, SQLConfig{URL: "sqlite:" + newSQLiteFile(t)})
	tests := []struct{ input, want string }{
		{`{}`, "query is required"},
		{`{"query":"   "}`, "query is required"},
		{`{"query":5}`, `field "query" must be a string, not number`},
		{`{"query":"SELECT ?","params":"x"}`, `field "params" must be an array, not string`},
		{`{"query":"SELECT ?","params":[{"a":1}]}`, "params[0] must be a string, number, boolean or null, not an object"},
		{`{"query":"SELECT ?","params":[[1]]}`, "params[0] must be a string, number, boolean or null, not an array"},
		{`{"query":"SELECT 1","limit":5}`, `unknown field "limit"`},
		{`["SELECT 1"]`, "arguments must be a JSON object, not array"},
		{`{"query":`, "not valid JSON"},
		{``, "no arguments"},
	}
	for _, tt := range tests {
		_, err := call(t, s, tt.input)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.input, err, tt.want)
		}
	}
}

func TestNewSQLErrors(t *testing.T) {
	tests := []struct {
		url  string
		kind error
	}{
		{"mysql://x", errdefs.ErrInvalidArgument},
		{"", errdefs.ErrInvalidArgument},
		{"sqlite:", errdefs.ErrInvalidArgument},
		{"sqlite:" + filepath.Join(t.TempDir(), "missing.db"), errdefs.ErrNotFound},
		{"postgres://%zz", errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		if s, err := NewSQL(SQLConfig{URL: tt.url}); !errors.Is(err, tt.kind) {
			t.Errorf("NewSQL(%q) = %v, want %v", tt.url, err, tt.kind)
			if s != nil {
				s.Close()
			}
		}
	}
}
