package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// RunEgress runs the suite of store.EgressLog. newLog must return a new,
// empty log each call, bounded to keep entries per sandbox when keep is
// not 0 (store.MaxEgressPerSandbox otherwise), and arrange for its Close
// with t.Cleanup.
func RunEgress(t *testing.T, newLog func(t *testing.T, keep int) store.EgressLog) {
	tests := []struct {
		name string
		fn   func(t *testing.T, newLog func(t *testing.T, keep int) store.EgressLog)
	}{
		{"AppendList", testEgressAppendList},
		{"Paging", testEgressPaging},
		{"Tenants", testEgressTenants},
		{"Invalid", testEgressInvalid},
		{"Bound", testEgressBound},
		{"Delete", testEgressDelete},
		{"Concurrent", testEgressConcurrent},
	}
	for _, tt := range tests {
		t.Run("Egress"+tt.name, func(t *testing.T) { tt.fn(t, newLog) })
	}
}

// entry is an egress entry with every field set, told apart by n.
func entry(sandbox string, n int) egress.Entry {
	return egress.Entry{Time: ts(n), Sandbox: sandbox, Proto: "https", Host: fmt.Sprintf("h%d.example.com", n), Port: 443,
		Addr: "93.184.215.14:443", Allowed: n%2 == 0, Rule: "allow-host *.example.com", BytesOut: int64(100 + n),
		BytesIn: int64(2000 + n), Duration: time.Duration(n)*time.Millisecond + 7*time.Microsecond, Note: fmt.Sprintf("note %d", n)}
}

func appendEgress(t *testing.T, l store.EgressLog, tenant string, entries ...egress.Entry) {
	t.Helper()
	if err := l.AppendEgress(context.Background(), tenant, entries); err != nil {
		t.Fatalf("AppendEgress(%s, %d entries): %v", tenant, len(entries), err)
	}
}

func listEgress(t *testing.T, l store.EgressLog, tenant, sandbox string, after int64, limit int) []store.EgressRecord {
	t.Helper()
	got, err := l.ListEgress(context.Background(), tenant, sandbox, after, limit)
	if err != nil {
		t.Fatalf("ListEgress(%q, %s, %d, %d): %v", tenant, sandbox, after, limit, err)
	}
	return got
}

// seqs are the seqs of records.
func seqs(rs []store.EgressRecord) []int64 {
	out := []int64{}
	for _, r := range rs {
		out = append(out, r.Seq)
	}
	return out
}

// wantSeqs fails unless sandbox's log, as tenant reads it, has the
// entries want.
func wantSeqs(t *testing.T, l store.EgressLog, tenant, sandbox string, want []int64, what string) {
	t.Helper()
	if got := seqs(listEgress(t, l, tenant, sandbox, 0, 0)); !cmp.Equal(got, want, cmpopts.EquateEmpty()) {
		t.Errorf("%s: seqs %v, want %v", what, got, want)
	}
}

func span(from, to int64) []int64 {
	out := []int64{}
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func testEgressAppendList(t *testing.T, newLog func(*testing.T, int) store.EgressLog) {
	l := newLog(t, 0)
	appendEgress(t, l, "acme", entry("sbx-a", 1), entry("sbx-b", 2), entry("sbx-a", 3))
	before := time.Now().Add(-time.Second)
	zero := entry("sbx-a", 4)
	zero.Time = time.Time{}
	appendEgress(t, l, "acme", zero)

	got := listEgress(t, l, "acme", "sbx-a", 0, 0)
	want := []store.EgressRecord{{Seq: 1, Entry: entry("sbx-a", 1)}, {Seq: 2, Entry: entry("sbx-a", 3)}, {Seq: 3, Entry: zero}}
	if len(got) != 3 {
		t.Fatalf("sbx-a has %d entries (%v), want 3", len(got), seqs(got))
	}
	if at := got[2].Entry.Time; at.Before(before) || at.After(time.Now().Add(time.Second)) || at.Location() != time.UTC {
		t.Errorf("a zero time became %v, want now in UTC", at)
	}
	got[2].Entry.Time = time.Time{}
	for i, r := range got {
		if i < 2 && r.Entry.Time.Location() != time.UTC {
			t.Errorf("entry %d: time %v not in UTC", r.Seq, r.Entry.Time)
		}
		if d := cmp.Diff(want[i], r); d != "" {
			t.Errorf("entry %d (-appended +listed):\n%s", i, d)
		}
	}
	if got := listEgress(t, l, "", "sbx-b", 0, 0); len(got) != 1 || got[0].Seq != 1 || got[0].Entry.Host != "h2.example.com" {
		t.Errorf("sbx-b: %+v, want its one entry as seq 1", got)
	}
	if got := listEgress(t, l, "", "sbx-none", 0, 0); len(got) != 0 {
		t.Errorf("a sandbox with no log: %+v", got)
	}
	if err := l.AppendEgress(context.Background(), "acme", nil); err != nil {
		t.Errorf("an empty batch: %v", err)
	}
}

func testEgressPaging(t *testing.T, newLog func(*testing.T, int) store.EgressLog) {
	l := newLog(t, 0)
	var batch []egress.Entry
	for i := range store.DefaultEgressLimit + 20 {
		batch = append(batch, entry("sbx-a", i))
	}
	appendEgress(t, l, "acme", batch...)
	if got := listEgress(t, l, "acme", "sbx-a", 0, 0); len(got) != store.DefaultEgressLimit || got[0].Seq != 1 {
		t.Errorf("limit 0: %d entries from %v, want the default %d from 1", len(got), seqs(got)[:1], store.DefaultEgressLimit)
	}
	if got := seqs(listEgress(t, l, "acme", "sbx-a", 7, 3)); !cmp.Equal(got, span(8, 10)) {
		t.Errorf("after 7, limit 3: %v", got)
	}
	if got := seqs(listEgress(t, l, "acme", "sbx-a", 1015, 100)); !cmp.Equal(got, span(1016, 1020)) {
		t.Errorf("the tail: %v", got)
	}
	if got := listEgress(t, l, "acme", "sbx-a", 1020, 100); len(got) != 0 {
		t.Errorf("past the end: %v", seqs(got))
	}
}

func testEgressTenants(t *testing.T, newLog func(*testing.T, int) store.EgressLog) {
	l := newLog(t, 0)
	appendEgress(t, l, "acme", entry("sbx-a", 1), entry("sbx-a", 2))
	appendEgress(t, l, "beta", entry("sbx-b", 3))
	wantSeqs(t, l, "beta", "sbx-a", nil, "beta reads acme's sandbox's log")
	wantSeqs(t, l, "acme", "sbx-b", nil, "acme reads beta's sandbox's log")
	wantSeqs(t, l, "acme", "sbx-a", span(1, 2), "acme's own")
	wantSeqs(t, l, "", "sbx-b", span(1, 1), "the admin reads beta's")
}

func testEgressInvalid(t *testing.T, newLog func(*testing.T, int) store.EgressLog) {
	l := newLog(t, 0)
	err := l.AppendEgress(context.Background(), "acme", []egress.Entry{entry("sbx-a", 1), entry("", 2)})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("an entry with no sandbox: %v, want invalid argument", err)
	}
	if got := listEgress(t, l, "", "sbx-a", 0, 0); len(got) != 0 {
		t.Errorf("a refused batch wrote %v", seqs(got))
	}
}

func testEgressBound(t *testing.T, newLog func(*testing.T, int) store.EgressLog) {
	l := newLog(t, 5)
	many := func(sandbox string, from, n int) []egress.Entry {
		var out []egress.Entry
		for i := range n {
			out = append(out, entry(sandbox, from+i))
		}
		return out
	}
	appendEgress(t, l, "acme", many("sbx-a", 1, 3)...)
	appendEgress(t, l, "acme", many("sbx-b", 1, 2)...)
	wantSeqs(t, l, "", "sbx-a", span(1, 3), "under the bound")
	appendEgress(t, l, "acme", many("sbx-a", 4, 4)...)
	got := listEgress(t, l, "", "sbx-a", 0, 0)
	if !cmp.Equal(seqs(got), span(3, 7)) || got[0].Entry.Host != "h3.example.com" {
		t.Errorf("past the bound of 5: %v, want the newest 5 (3..7)", seqs(got))
	}
	// One batch longer than the bound keeps its own newest.
	appendEgress(t, l, "acme", many("sbx-a", 8, 12)...)
	wantSeqs(t, l, "", "sbx-a", span(15, 19), "a batch of 12")
	wantSeqs(t, l, "", "sbx-b", span(1, 2), "another sandbox's log changed")
}

func testEgressDelete(t *testing.T, newLog func(*testing.T, int) store.EgressLog) {
	l := newLog(t, 0)
	ctx := context.Background()
	appendEgress(t, l, "acme", entry("sbx-a", 1), entry("sbx-b", 2))
	if err := l.DeleteEgress(ctx, "sbx-a"); err != nil {
		t.Fatal(err)
	}
	if got := listEgress(t, l, "", "sbx-a", 0, 0); len(got) != 0 {
		t.Errorf("deleted log: %v", seqs(got))
	}
	if got := listEgress(t, l, "", "sbx-b", 0, 0); len(got) != 1 {
		t.Errorf("another sandbox's log: %v", seqs(got))
	}
	if err := l.DeleteEgress(ctx, "sbx-none"); err != nil {
		t.Errorf("deleting a log that does not exist: %v", err)
	}
}

// testEgressConcurrent: appenders of one sandbox at once get seqs 1..n,
// each once, and each batch in its own order.
func testEgressConcurrent(t *testing.T, newLog func(*testing.T, int) store.EgressLog) {
	l := newLog(t, 0)
	const writers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			var batch []egress.Entry
			for i := range each {
				e := entry("sbx-a", i)
				e.Note = fmt.Sprintf("w%d", w)
				batch = append(batch, e)
			}
			errs <- l.AppendEgress(context.Background(), "acme", batch)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := listEgress(t, l, "acme", "sbx-a", 0, 0)
	if !cmp.Equal(seqs(got), span(1, writers*each)) {
		t.Fatalf("seqs %v, want 1..%d", seqs(got), writers*each)
	}
	next, first := map[string]int{}, map[string]int64{}
	for _, r := range got {
		w := r.Entry.Note
		if next[w] == 0 {
			first[w] = r.Seq
		}
		if want := fmt.Sprintf("h%d.example.com", next[w]); r.Entry.Host != want || r.Seq != first[w]+int64(next[w]) {
			t.Errorf("seq %d of %s is %s, want %s at %d: a batch was split or reordered", r.Seq, w, r.Entry.Host, want, first[w]+int64(next[w]))
		}
		next[w]++
	}
}
