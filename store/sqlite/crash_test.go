package sqlite_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/sqlite"
)

// crashChildEnv, set to a database path, makes the test binary run
// crashChild instead of the tests.
const crashChildEnv = "REINS_STORE_CRASH_CHILD"

const crashRuns = 4

// crashChild appends to crashRuns runs from as many goroutines until it is
// killed, and reports each append on stdout once Append has returned: from
// then on the events must survive anything.
func crashChild() {
	path := os.Getenv(crashChildEnv)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	s, err := sqlite.Open(path)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	var mu sync.Mutex // one report line per write
	var wg sync.WaitGroup
	for r := range crashRuns {
		id := fmt.Sprintf("c%d", r)
		err := s.CreateRun(ctx, store.Run{ID: id, Tenant: "crash"})
		if err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			fail(err)
		}
		run, err := s.GetRun(ctx, "", id)
		if err != nil {
			fail(err)
		}
		wg.Go(func() {
			after := run.LastSeq
			for i := 0; ; i++ {
				n := 1 + i%3
				events := make([]store.Event, n)
				for j := range events {
					events[j] = store.Event{Type: "step",
						Data: fmt.Appendf(nil, `{"run":%q,"seq":%d,"pad":%q}`, id, after+int64(j)+1, strings.Repeat("x", i%500))}
				}
				last, err := s.Append(ctx, id, after, events,
					store.RunUpdate{Status: "running", Summary: fmt.Appendf(nil, `{"last":%d}`, after+int64(n))})
				if err != nil {
					fail(err)
				}
				after = last
				mu.Lock()
				_, err = fmt.Fprintf(os.Stdout, "%s %d\n", id, last)
				mu.Unlock()
				if err != nil {
					fail(err)
				}
			}
		})
	}
	wg.Wait()
}

// TestCrash kills a process that appends, at random moments, and checks
// that every append it saw return is in the file, with no gap.
func TestCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reins.db")
	reported := map[string]int64{}
	const rounds = 6
	for round := range rounds {
		lines := crashOnce(t, path, round)
		for _, line := range lines {
			id, seq, ok := strings.Cut(line, " ")
			n, err := strconv.ParseInt(seq, 10, 64)
			if !ok || err != nil {
				t.Fatalf("round %d: child reported %q", round, line)
			}
			reported[id] = max(reported[id], n)
		}
		checkCrashLog(t, path, round, reported)
	}
	t.Logf("after %d kills: reported seqs %v", rounds, reported)
}

// crashOnce runs a child against path, kills it with SIGKILL at a random
// moment and returns the lines it reported.
func crashOnce(t *testing.T, path string, round int) []string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var lines []string
	// Round 0 kills the child while it may still be opening the file and
	// migrating; the others once it is appending.
	if round > 0 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	kill := time.AfterFunc(time.Duration(rand.N(300))*time.Millisecond, func() { cmd.Process.Kill() })
	defer kill.Stop()
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != -1 {
		t.Fatalf("round %d: child ended with %v before it was killed; stderr:\n%s", round, err, stderr.String())
	}
	t.Logf("round %d: child killed after %d appends", round, len(lines))
	return lines
}

func checkCrashLog(t *testing.T, path string, round int, reported map[string]int64) {
	t.Helper()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatalf("round %d: reopen after kill: %v", round, err)
	}
	defer s.Close()
	ctx := context.Background()
	for r := range crashRuns {
		id := fmt.Sprintf("c%d", r)
		run, err := s.GetRun(ctx, "", id)
		if errors.Is(err, errdefs.ErrNotFound) && reported[id] == 0 {
			continue // killed before it made the run
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if run.LastSeq < reported[id] {
			t.Fatalf("round %d: run %s ends at seq %d, but seq %d was reported appended", round, id, run.LastSeq, reported[id])
		}
		events, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(events)) != run.LastSeq {
			t.Fatalf("round %d: run %s has %d events, last_seq %d", round, id, len(events), run.LastSeq)
		}
		for i, e := range events {
			var d struct {
				Run string
				Seq int64
			}
			if err := json.Unmarshal(e.Data, &d); err != nil || e.Seq != int64(i)+1 || d.Seq != e.Seq || d.Run != id {
				t.Fatalf("round %d: run %s event %d: seq %d data %.80s (%v)", round, id, i, e.Seq, e.Data, err)
			}
		}
		if run.LastSeq > 0 && string(run.Summary) != fmt.Sprintf(`{"last":%d}`, run.LastSeq) {
			t.Fatalf("round %d: run %s summary %s, last_seq %d: not updated with its events", round, id, run.Summary, run.LastSeq)
		}
	}
}
