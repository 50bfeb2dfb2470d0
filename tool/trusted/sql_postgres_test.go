package trusted

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
)

// startPostgres starts a PostgreSQL server of its own in a temporary
// directory, listening only on a unix socket there, and returns a URL for
// it. It skips the test when the server binaries are not installed.
func startPostgres(t *testing.T) string {
	t.Helper()
	bin := postgresBinDir()
	if bin == "" {
		testenv.Missing(t, "PostgreSQL server binaries (initdb, postgres) in PATH or /usr/lib/postgresql/*/bin: apt-get install postgresql-15")
	}
	dir, err := os.MkdirTemp("", "reins-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The server refuses to run as root: run it as an unprivileged user.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = unprivileged(t)
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	logPath := filepath.Join(dir, "server.log")
	run := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	if out, err := run("initdb", "-D", data, "-U", "reins", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	if cred != nil {
		logFile.Chown(int(cred.Uid), int(cred.Gid))
	}
	server := run("postgres", "-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "fsync=off")
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	t.Cleanup(func() {
		server.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			server.Process.Kill()
			<-exited
		}
	})

	url := "postgres://reins@/postgres?host=" + dir
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, url)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return url
		}
		select {
		case werr := <-exited:
			exited <- werr
			log, _ := os.ReadFile(logPath)
			t.Fatalf("postgres exited: %v\n%s", werr, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("postgres did not accept connections within 30s: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// postgresBinDir finds the directory holding initdb and postgres.
func postgresBinDir() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir
		}
	}
	return ""
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func unprivileged(t *testing.T) *syscall.Credential {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	testenv.Missing(t, "an unprivileged user (postgres or nobody) to run the PostgreSQL server as, since the tests run as root")
	return nil
}

func TestSQLPostgres(t *testing.T) {
	url := startPostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE people (id serial PRIMARY KEY, name text NOT NULL, born date)`,
		`INSERT INTO people (name, born) VALUES ('alice', '1990-01-02'), ('bob', NULL)`,
		`CREATE FUNCTION sneaky() RETURNS int LANGUAGE sql AS $$ INSERT INTO people (name) VALUES ('eve') RETURNING id $$`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close(ctx)

	ro := newSQLTool(t, SQLConfig{URL: url, Timeout: 500 * time.Millisecond})
	if !strings.Contains(ro.Spec().Description, `PostgreSQL database "postgres"`) || !strings.Contains(ro.Spec().Description, "$1") {
		t.Errorf("description: %s", ro.Spec().Description)
	}

	t.Run("select", func(t *testing.T) {
		res := mustCall(t, ro, `{"query":"SELECT id, name, born FROM people WHERE id <= $1 ORDER BY id","params":[2]}`)
		want := "id | name  | born\n---+-------+-----------\n1  | alice | 1990-01-02\n2  | bob   | NULL\n(2 rows)"
		if res.IsError || res.Text != want {
			t.Errorf("got\n%s\nwant\n%s", res.Text, want)
		}
		res = mustCall(t, ro, `{"query":"SELECT g FROM generate_series(1, 300) g"}`)
		if !strings.HasSuffix(res.Text, "… 100 more rows not shown (200 of 300 above). Narrow the query or page with LIMIT/OFFSET.") {
			t.Errorf("got tail %q", res.Text[len(res.Text)-100:])
		}
		res = mustCall(t, ro, `{"query":"SHOW server_encoding"}`)
		if res.IsError || !strings.Contains(res.Text, "UTF8") {
			t.Errorf("SHOW: %+v", res)
		}
	})

	t.Run("read-only", func(t *testing.T) {
		_, err := call(t, ro, `{"query":"DELETE FROM people"}`)
		if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "writes are disabled by configuration") {
			t.Errorf("DELETE: err = %v", err)
		}
		// SELECTs the classifier lets through but that write: the READ
		// ONLY transaction stops them.
		for _, tt := range []struct{ query, want string }{
			{"SELECT sneaky()", "writes are disabled by configuration"},
			{"SELECT nextval('people_id_seq')", "writes are disabled by configuration"},
			// Too late to leave read-only mode once the statement runs.
			{"SELECT set_config('transaction_read_only', 'off', true), sneaky()", "read-write mode must be set before any query"},
		} {
			res := mustCall(t, ro, fmt.Sprintf(`{"query":%q}`, tt.query))
			if !res.IsError || !strings.Contains(res.Text, tt.want) {
				t.Errorf("%s: %+v", tt.query, res)
			}
		}
		res := mustCall(t, ro, `{"query":"SELECT count(*) AS n FROM people"}`)
		if res.Text != "n\n-\n2\n(1 row)" {
			t.Errorf("people changed:\n%s", res.Text)
		}
	})

	t.Run("errors", func(t *testing.T) {
		res := mustCall(t, ro, `{"query":"SELECT nme FROM people"}`)
		if !res.IsError || !strings.Contains(res.Text, `column "nme" does not exist`) || !strings.Contains(res.Text, "Hint:") {
			t.Errorf("typo: %+v", res)
		}
		res = mustCall(t, ro, `{"query":"SELECT pg_sleep(10)"}`)
		if !res.IsError || !strings.Contains(res.Text, "did not finish within 500ms") {
			t.Errorf("slow query: %+v", res)
		}
	})

	t.Run("writes", func(t *testing.T) {
		rw := newSQLTool(t, SQLConfig{URL: url, AllowWrites: true})
		res := mustCall(t, rw, `{"query":"UPDATE people SET name = upper(name)"}`)
		if res.Text != "OK: 2 rows affected." {
			t.Errorf("UPDATE: %+v", res)
		}
		res = mustCall(t, rw, `{"query":"INSERT INTO people (name) VALUES ($1) RETURNING name","params":["carol"]}`)
		if res.Text != "name\n-----\ncarol\n(1 row)" {
			t.Errorf("INSERT RETURNING: %+v", res)
		}
	})
}
