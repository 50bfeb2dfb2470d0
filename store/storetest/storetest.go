// Package storetest is the conformance suite of store.Store and store.Blobs.
// Every implementation, fakes included, runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { … })
//	}
//
// Stores that persist also run RunReopen, and blob stores RunBlobs. Times
// are compared at microsecond precision, the finest every backend keeps.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// Run runs the suite. newStore must return a new, empty store each call and
// arrange for its Close with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateGet", testCreateGet},
		{"CreateDefaults", testCreateDefaults},
		{"CreateDuplicate", testCreateDuplicate},
		{"CreateInvalid", testCreateInvalid},
		{"CreateWithEvents", testCreateWithEvents},
		{"CreateWithEventsRefused", testCreateWithEventsRefused},
		{"UnknownIDs", testUnknownIDs},
		{"TenantIsolation", testTenantIsolation},
		{"ListOrder", testListOrder},
		{"ListFilterAndPages", testListFilterAndPages},
		{"ListDefaultLimit", testListDefaultLimit},
		{"Append", testAppend},
		{"AppendConflict", testAppendConflict},
		{"AppendInvalid", testAppendInvalid},
		{"AppendUpdate", testAppendUpdate},
		{"AppendNoEvents", testAppendNoEvents},
		{"AppendCanceled", testAppendCanceled},
		{"ConcurrentRounds", testConcurrentRounds},
		{"ConcurrentWriters", testConcurrentWriters},
		{"ConcurrentRuns", testConcurrentRuns},
		{"EventsPaging", testEventsPaging},
		{"LargePayloads", testLargePayloads},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newStore(t))
		})
	}
}

// RunReopen checks that everything a store returned from survives closing
// and opening it again. newOpener is called once per test with a fresh
// location and returns a function that opens the store there; RunReopen
// closes what it opens.
func RunReopen(t *testing.T, newOpener func(t *testing.T) (open func() store.Store)) {
	t.Run("Reopen", func(t *testing.T) { testReopen(t, newOpener(t)) })
}

// --- helpers

// ts is a fixed time at microsecond precision.
func ts(sec int) time.Time {
	return time.Date(2025, 6, 1, 12, 0, 0, 123456000, time.UTC).Add(time.Duration(sec) * time.Second)
}

func newRun(id, tenant string, created time.Time) store.Run {
	return store.Run{
		ID:        id,
		Tenant:    tenant,
		Status:    "queued",
		Spec:      json.RawMessage(`{"model":"script:x","task":"` + id + `"}`),
		CreatedAt: created,
	}
}

func create(t *testing.T, s store.Store, run store.Run) {
	t.Helper()
	if err := s.CreateRun(context.Background(), run); err != nil {
		t.Fatalf("CreateRun(%s): %v", run.ID, err)
	}
}

func get(t *testing.T, s store.Store, id string) store.Run {
	t.Helper()
	run, err := s.GetRun(context.Background(), "", id)
	if err != nil {
		t.Fatalf("GetRun(%s): %v", id, err)
	}
	return run
}

func ev(typ string, data string) store.Event {
	return store.Event{Type: typ, Data: json.RawMessage(data)}
}

func appendOK(t *testing.T, s store.Store, id string, after int64, events []store.Event, u store.RunUpdate) int64 {
	t.Helper()
	last, err := s.Append(context.Background(), id, after, events, u)
	if err != nil {
		t.Fatalf("Append(%s, after %d, %d events): %v", id, after, len(events), err)
	}
	if want := after + int64(len(events)); last != want {
		t.Fatalf("Append(%s, after %d, %d events) = %d, want %d", id, after, len(events), last, want)
	}
	return last
}

func allEvents(t *testing.T, s store.Store, id string) []store.Event {
	t.Helper()
	events, err := s.Events(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatalf("Events(%s): %v", id, err)
	}
	return events
}

func wantKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: got error %v, want kind %q", what, err, kind)
	}
}

func ids(runs []store.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.ID)
	}
	return out
}

func sameIDs(t *testing.T, what string, got []store.Run, want ...string) {
	t.Helper()
	if g := strings.Join(ids(got), ","); g != strings.Join(want, ",") {
		t.Fatalf("%s: got runs [%s], want [%s]", what, g, strings.Join(want, ","))
	}
}

// sameJSON compares payloads byte for byte: a store keeps what it is given.
func sameJSON(t *testing.T, what string, got, want json.RawMessage) {
	t.Helper()
	if !bytes.Equal(got, want) {
		g, w := string(got), string(want)
		if len(g) > 200 {
			g = g[:200] + "…"
		}
		if len(w) > 200 {
			w = w[:200] + "…"
		}
		t.Fatalf("%s: got %d bytes %s, want %d bytes %s", what, len(got), g, len(want), w)
	}
}

func sameRun(t *testing.T, got, want store.Run) {
	t.Helper()
	if got.ID != want.ID || got.Tenant != want.Tenant || got.Status != want.Status || got.LastSeq != want.LastSeq {
		t.Fatalf("run: got {id %s tenant %s status %s last_seq %d}, want {id %s tenant %s status %s last_seq %d}",
			got.ID, got.Tenant, got.Status, got.LastSeq, want.ID, want.Tenant, want.Status, want.LastSeq)
	}
	sameJSON(t, "run "+want.ID+" spec", got.Spec, want.Spec)
	sameJSON(t, "run "+want.ID+" summary", got.Summary, want.Summary)
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("run %s: created_at %v, want %v", want.ID, got.CreatedAt, want.CreatedAt)
	}
	if !want.UpdatedAt.IsZero() && !got.UpdatedAt.Equal(want.UpdatedAt) {
		t.Fatalf("run %s: updated_at %v, want %v", want.ID, got.UpdatedAt, want.UpdatedAt)
	}
}

// checkLog fails unless the run's log is seqs 1..n with no gap or duplicate
// and the run's LastSeq is n.
func checkLog(t *testing.T, s store.Store, id string, n int64) []store.Event {
	t.Helper()
	events := allEvents(t, s, id)
	for i, e := range events {
		if e.Seq != int64(i)+1 || e.RunID != id {
			t.Fatalf("run %s event %d: seq %d run %q, want seq %d run %q", id, i, e.Seq, e.RunID, i+1, id)
		}
	}
	if int64(len(events)) != n {
		t.Fatalf("run %s: %d events, want %d", id, len(events), n)
	}
	if last := get(t, s, id).LastSeq; last != n {
		t.Fatalf("run %s: last_seq %d, want %d", id, last, n)
	}
	return events
}

// --- runs

func testCreateGet(t *testing.T, s store.Store) {
	want := newRun("r1", "acme", ts(0))
	want.Status = "running"
	want.Summary = json.RawMessage(`{"steps":0}`)
	want.UpdatedAt = ts(1)
	create(t, s, want)
	sameRun(t, get(t, s, "r1"), want)
	got, err := s.GetRun(context.Background(), "acme", "r1")
	if err != nil {
		t.Fatalf("GetRun(acme, r1): %v", err)
	}
	sameRun(t, got, want)
}

func testCreateDefaults(t *testing.T, s store.Store) {
	before := time.Now().Add(-time.Second)
	create(t, s, store.Run{ID: "r1", Tenant: "acme", LastSeq: 7})
	got := get(t, s, "r1")
	if got.Status != "queued" {
		t.Errorf("status %q, want queued", got.Status)
	}
	if got.LastSeq != 0 {
		t.Errorf("last_seq %d, want 0: a new run's log is empty", got.LastSeq)
	}
	if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("created_at %v, want about now", got.CreatedAt)
	}
	if got.UpdatedAt.Before(got.CreatedAt) {
		t.Errorf("updated_at %v before created_at %v", got.UpdatedAt, got.CreatedAt)
	}
	if len(got.Spec) != 0 || len(got.Summary) != 0 {
		t.Errorf("spec %q summary %q, want none", got.Spec, got.Summary)
	}
	if n := len(allEvents(t, s, "r1")); n != 0 {
		t.Errorf("new run has %d events", n)
	}
}

func testCreateDuplicate(t *testing.T, s store.Store) {
	create(t, s, newRun("r1", "acme", ts(0)))
	err := s.CreateRun(context.Background(), newRun("r1", "acme", ts(1)))
	wantKind(t, "CreateRun of a taken id", err, errdefs.ErrAlreadyExists)
	err = s.CreateRun(context.Background(), newRun("r1", "other", ts(1)))
	wantKind(t, "CreateRun of an id another tenant took", err, errdefs.ErrAlreadyExists)
	if got := get(t, s, "r1"); got.Tenant != "acme" || !got.CreatedAt.Equal(ts(0)) {
		t.Fatalf("a refused CreateRun changed the run: %+v", got)
	}
}

func testCreateInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	wantKind(t, "CreateRun with no id", s.CreateRun(ctx, store.Run{Tenant: "acme"}), errdefs.ErrInvalidArgument)
	bad := newRun("r1", "acme", ts(0))
	bad.Spec = json.RawMessage(`{"model":`)
	wantKind(t, "CreateRun with a malformed spec", s.CreateRun(ctx, bad), errdefs.ErrInvalidArgument)
	bad = newRun("r2", "acme", ts(0))
	bad.Summary = json.RawMessage(`nope`)
	wantKind(t, "CreateRun with a malformed summary", s.CreateRun(ctx, bad), errdefs.ErrInvalidArgument)
	runs, err := s.ListRuns(ctx, store.RunFilter{})
	if err != nil || len(runs) != 0 {
		t.Fatalf("after refused creates: ListRuns = %v, %v; want none", ids(runs), err)
	}
}

// A run created with its first events has them from the start: no reader
// ever sees the run with an empty log.
func testCreateWithEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	run := newRun("r1", "acme", ts(0))
	run.Status = "running"
	run.LastSeq = 9 // ignored
	if err := s.CreateRun(ctx, run, ev("run_created", `{"spec":{}}`),
		store.Event{Type: "note", Time: ts(5), Data: json.RawMessage(`[1]`)}); err != nil {
		t.Fatalf("CreateRun with 2 events: %v", err)
	}
	run.LastSeq = 2
	sameRun(t, get(t, s, "r1"), run)
	events := checkLog(t, s, "r1", 2)
	if events[0].Type != "run_created" || !events[0].Time.Equal(ts(0)) {
		t.Fatalf("first event: %s at %v, want run_created at the run's creation %v", events[0].Type, events[0].Time, ts(0))
	}
	sameJSON(t, "first event", events[0].Data, json.RawMessage(`{"spec":{}}`))
	if events[1].Type != "note" || !events[1].Time.Equal(ts(5)) {
		t.Fatalf("second event: %s at %v, want note at %v", events[1].Type, events[1].Time, ts(5))
	}
	_, err := s.Append(ctx, "r1", 0, []store.Event{ev("x", `{}`)}, store.RunUpdate{})
	wantKind(t, "Append after 0 to a run created with 2 events", err, errdefs.ErrFailedPrecondition)
	appendOK(t, s, "r1", 2, []store.Event{ev("x", `{}`)}, store.RunUpdate{})
	checkLog(t, s, "r1", 3)
}

// A refused create writes nothing: neither a run without its events nor
// events without their run.
func testCreateWithEventsRefused(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, newRun("r1", "acme", ts(0)))
	err := s.CreateRun(ctx, newRun("r1", "other", ts(1)), ev("run_created", `{}`))
	wantKind(t, "CreateRun with events of a taken id", err, errdefs.ErrAlreadyExists)
	checkLog(t, s, "r1", 0)

	err = s.CreateRun(ctx, newRun("r2", "acme", ts(2)), ev("run_created", `{}`), ev("bad", `{"a":`))
	wantKind(t, "CreateRun with a malformed event", err, errdefs.ErrInvalidArgument)
	err = s.CreateRun(ctx, newRun("r3", "acme", ts(3)), ev("run_created", `{}`), store.Event{Data: json.RawMessage(`{}`)})
	wantKind(t, "CreateRun with an event of no type", err, errdefs.ErrInvalidArgument)
	for _, id := range []string{"r2", "r3"} {
		_, err = s.GetRun(ctx, "", id)
		wantKind(t, "GetRun of a run whose create was refused", err, errdefs.ErrNotFound)
		_, err = s.Events(ctx, id, 0, 0)
		wantKind(t, "Events of a run whose create was refused", err, errdefs.ErrNotFound)
	}
	runs, err := s.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns after refused creates", runs, "r1")
}

func testUnknownIDs(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, newRun("r1", "acme", ts(0)))
	_, err := s.GetRun(ctx, "", "nope")
	wantKind(t, "GetRun(nope)", err, errdefs.ErrNotFound)
	if !strings.Contains(err.Error(), "nope") {
		t.Errorf("GetRun(nope) error %q does not name the run", err)
	}
	_, err = s.GetRun(ctx, "acme", "nope")
	wantKind(t, "GetRun(acme, nope)", err, errdefs.ErrNotFound)
	_, err = s.Events(ctx, "nope", 0, 0)
	wantKind(t, "Events(nope)", err, errdefs.ErrNotFound)
	_, err = s.Append(ctx, "nope", 0, []store.Event{ev("x", `{}`)}, store.RunUpdate{})
	wantKind(t, "Append(nope)", err, errdefs.ErrNotFound)
	_, err = s.ListRuns(ctx, store.RunFilter{Before: "nope"})
	wantKind(t, "ListRuns(before nope)", err, errdefs.ErrNotFound)
}

func testTenantIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, newRun("a1", "acme", ts(0)))
	create(t, s, newRun("b1", "beta", ts(1)))
	create(t, s, newRun("a2", "acme", ts(2)))

	_, errOther := s.GetRun(ctx, "beta", "a1")
	wantKind(t, "GetRun of another tenant's run", errOther, errdefs.ErrNotFound)
	_, errMissing := s.GetRun(ctx, "beta", "zz")
	// The two answers must not tell existence apart, apart from the id.
	if strings.ReplaceAll(errOther.Error(), "a1", "ID") != strings.ReplaceAll(errMissing.Error(), "zz", "ID") {
		t.Errorf("another tenant's run answers %q, a missing one %q: existence leaks", errOther, errMissing)
	}
	if _, err := s.GetRun(ctx, "acme", "a1"); err != nil {
		t.Fatalf("GetRun(acme, a1): %v", err)
	}

	runs, err := s.ListRuns(ctx, store.RunFilter{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns(tenant acme)", runs, "a2", "a1")
	runs, err = s.ListRuns(ctx, store.RunFilter{Tenant: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns(tenant beta)", runs, "b1")
	runs, err = s.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns(all tenants)", runs, "a2", "b1", "a1")

	_, err = s.ListRuns(ctx, store.RunFilter{Tenant: "beta", Before: "a2"})
	wantKind(t, "ListRuns(beta, before acme's run)", err, errdefs.ErrNotFound)
	runs, err = s.ListRuns(ctx, store.RunFilter{Tenant: "acme", Before: "a2"})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns(acme, before a2)", runs, "a1")
}

func testListOrder(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Created out of time order, and two at the same instant: newest
	// first, and at the same instant the later created first.
	create(t, s, newRun("mid", "acme", ts(5)))
	create(t, s, newRun("old", "acme", ts(1)))
	create(t, s, newRun("new", "acme", ts(9)))
	create(t, s, newRun("tie1", "acme", ts(3)))
	create(t, s, newRun("tie2", "acme", ts(3)))
	runs, err := s.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns", runs, "new", "mid", "tie2", "tie1", "old")
	sameRun(t, runs[0], newRun("new", "acme", ts(9)))
}

func testListFilterAndPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	statuses := []string{"queued", "running", "succeeded", "failed"}
	var want []string // newest first
	for i := range 10 {
		id := fmt.Sprintf("r%02d", i)
		run := newRun(id, "acme", ts(i))
		run.Status = statuses[i%len(statuses)]
		create(t, s, run)
		want = append([]string{id}, want...)
	}
	runs, err := s.ListRuns(ctx, store.RunFilter{Statuses: []string{"running", "failed"}})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns(running, failed)", runs, "r09", "r07", "r05", "r03", "r01")
	runs, err = s.ListRuns(ctx, store.RunFilter{Statuses: []string{"cancelled"}})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns(cancelled)", runs)

	var got []string
	before := ""
	for page := 0; ; page++ {
		runs, err := s.ListRuns(ctx, store.RunFilter{Tenant: "acme", Limit: 3, Before: before})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if len(runs) > 3 {
			t.Fatalf("page %d: %d runs, limit 3", page, len(runs))
		}
		if len(runs) == 0 {
			break
		}
		got = append(got, ids(runs)...)
		before = runs[len(runs)-1].ID
		if page > 10 {
			t.Fatal("paging does not end")
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pages: got %v, want %v", got, want)
	}

	runs, err = s.ListRuns(ctx, store.RunFilter{Statuses: []string{"queued"}, Limit: 1, Before: "r08"})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns(queued, limit 1, before r08)", runs, "r04")

	_, err = s.ListRuns(ctx, store.RunFilter{Limit: -1})
	wantKind(t, "ListRuns(limit -1)", err, errdefs.ErrInvalidArgument)
}

func testListDefaultLimit(t *testing.T, s store.Store) {
	for i := range 105 {
		create(t, s, store.Run{ID: fmt.Sprintf("r%03d", i), Tenant: "acme", CreatedAt: ts(i)})
	}
	runs, err := s.ListRuns(context.Background(), store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 100 || runs[0].ID != "r104" || runs[99].ID != "r005" {
		t.Fatalf("ListRuns with no limit: %d runs from %s, want the 100 newest", len(runs), ids(runs[:1]))
	}
}

// --- appends

func testAppend(t *testing.T, s store.Store) {
	create(t, s, newRun("r1", "acme", ts(0)))
	before := time.Now().Add(-time.Second)
	in := []store.Event{
		{Type: "run_started", Data: json.RawMessage(`{"task":"fix it"}`), Seq: 42, RunID: "other"},
		{Type: "model_response", Data: json.RawMessage(`{"text":"ok","tool_calls":[]}`), Time: ts(7)},
		{Type: "marker"}, // no data
	}
	inCopy := append([]store.Event(nil), in...)
	last := appendOK(t, s, "r1", 0, in, store.RunUpdate{})
	if last != 3 {
		t.Fatalf("last seq %d, want 3", last)
	}
	for i := range in {
		if in[i].Seq != inCopy[i].Seq || in[i].RunID != inCopy[i].RunID || !in[i].Time.Equal(inCopy[i].Time) {
			t.Fatalf("Append modified the caller's event %d: %+v", i, in[i])
		}
	}
	appendOK(t, s, "r1", 3, []store.Event{ev("tool_call", `{"name":"bash"}`), ev("tool_result", `{"exit":0}`)}, store.RunUpdate{})

	events := checkLog(t, s, "r1", 5)
	wantTypes := []string{"run_started", "model_response", "marker", "tool_call", "tool_result"}
	for i, e := range events {
		if e.Type != wantTypes[i] {
			t.Fatalf("event %d: type %q, want %q", i+1, e.Type, wantTypes[i])
		}
	}
	sameJSON(t, "event 1 data", events[0].Data, in[0].Data)
	sameJSON(t, "event 2 data", events[1].Data, in[1].Data)
	if len(events[2].Data) != 0 {
		t.Fatalf("event 3 data %q, want none", events[2].Data)
	}
	if !events[1].Time.Equal(ts(7)) {
		t.Errorf("event 2 time %v, want the given %v", events[1].Time, ts(7))
	}
	if tm := events[0].Time; tm.Before(before) || tm.After(time.Now().Add(time.Second)) {
		t.Errorf("event 1 time %v, want about now (it was zero)", tm)
	}
}

func testAppendConflict(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, newRun("r1", "acme", ts(0)))
	appendOK(t, s, "r1", 0, []store.Event{ev("a", `1`), ev("b", `2`)}, store.RunUpdate{})
	for _, after := range []int64{0, 1, 3, 100} {
		_, err := s.Append(ctx, "r1", after, []store.Event{ev("late", `{}`)}, store.RunUpdate{Status: "failed"})
		wantKind(t, fmt.Sprintf("Append after %d to a log at 2", after), err, errdefs.ErrFailedPrecondition)
		msg := err.Error()
		if !strings.Contains(msg, "r1") || !strings.Contains(msg, fmt.Sprint(after)) || !strings.Contains(msg, "2") {
			t.Errorf("conflict error %q should name the run and both seqs", msg)
		}
	}
	events := checkLog(t, s, "r1", 2)
	if events[1].Type != "b" {
		t.Fatalf("a refused append changed the log: %+v", events)
	}
	if got := get(t, s, "r1"); got.Status != "queued" {
		t.Fatalf("a refused append changed the status to %q", got.Status)
	}
}

func testAppendInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, newRun("r1", "acme", ts(0)))
	_, err := s.Append(ctx, "r1", 0, []store.Event{ev("ok", `{}`), {Data: json.RawMessage(`{}`)}}, store.RunUpdate{})
	wantKind(t, "Append of an event without a type", err, errdefs.ErrInvalidArgument)
	_, err = s.Append(ctx, "r1", 0, []store.Event{ev("ok", `{}`), ev("bad", `{"a":`)}, store.RunUpdate{})
	wantKind(t, "Append of malformed data", err, errdefs.ErrInvalidArgument)
	_, err = s.Append(ctx, "r1", 0, []store.Event{ev("ok", `{}`)}, store.RunUpdate{Summary: json.RawMessage(`{`)})
	wantKind(t, "Append with a malformed summary", err, errdefs.ErrInvalidArgument)
	_, err = s.Append(ctx, "r1", -1, []store.Event{ev("ok", `{}`)}, store.RunUpdate{})
	wantKind(t, "Append after seq -1", err, errdefs.ErrInvalidArgument)
	checkLog(t, s, "r1", 0)
}

func testAppendUpdate(t *testing.T, s store.Store) {
	create(t, s, newRun("r1", "acme", ts(0)))
	prev := get(t, s, "r1")

	appendOK(t, s, "r1", 0, []store.Event{ev("run_started", `{}`)},
		store.RunUpdate{Status: "running", Summary: json.RawMessage(`{"steps":0}`)})
	got := get(t, s, "r1")
	if got.Status != "running" || string(got.Summary) != `{"steps":0}` || got.LastSeq != 1 {
		t.Fatalf("after update: status %q summary %s last_seq %d", got.Status, got.Summary, got.LastSeq)
	}
	if got.UpdatedAt.Before(prev.UpdatedAt) || !got.CreatedAt.Equal(prev.CreatedAt) {
		t.Fatalf("after update: created %v updated %v; before: created %v updated %v",
			got.CreatedAt, got.UpdatedAt, prev.CreatedAt, prev.UpdatedAt)
	}

	// Empty fields leave the summary as it was.
	appendOK(t, s, "r1", 1, []store.Event{ev("step", `{}`)}, store.RunUpdate{})
	got = get(t, s, "r1")
	if got.Status != "running" || string(got.Summary) != `{"steps":0}` || got.LastSeq != 2 {
		t.Fatalf("after an empty update: status %q summary %s last_seq %d", got.Status, got.Summary, got.LastSeq)
	}

	appendOK(t, s, "r1", 2, []store.Event{ev("step", `{}`)}, store.RunUpdate{Summary: json.RawMessage(`{"steps":1}`)})
	appendOK(t, s, "r1", 3, []store.Event{ev("run_finished", `{}`)}, store.RunUpdate{Status: "succeeded"})
	got = get(t, s, "r1")
	if got.Status != "succeeded" || string(got.Summary) != `{"steps":1}` || got.LastSeq != 4 {
		t.Fatalf("at the end: status %q summary %s last_seq %d", got.Status, got.Summary, got.LastSeq)
	}
	runs, err := s.ListRuns(context.Background(), store.RunFilter{Statuses: []string{"succeeded"}})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns(succeeded)", runs, "r1")
	sameRun(t, runs[0], got)
}

func testAppendNoEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, newRun("r1", "acme", ts(0)))
	appendOK(t, s, "r1", 0, []store.Event{ev("a", `{}`)}, store.RunUpdate{})
	if last := appendOK(t, s, "r1", 1, nil, store.RunUpdate{Status: "paused"}); last != 1 {
		t.Fatalf("Append of no events returned %d, want 1", last)
	}
	if got := get(t, s, "r1"); got.Status != "paused" {
		t.Fatalf("status %q, want paused", got.Status)
	}
	_, err := s.Append(ctx, "r1", 0, nil, store.RunUpdate{Status: "running"})
	wantKind(t, "stale Append of no events", err, errdefs.ErrFailedPrecondition)
	checkLog(t, s, "r1", 1)
}

func testAppendCanceled(t *testing.T, s store.Store) {
	create(t, s, newRun("r1", "acme", ts(0)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Append(ctx, "r1", 0, []store.Event{ev("a", `{}`)}, store.RunUpdate{Status: "running"}); err == nil {
		t.Fatal("Append with a canceled context succeeded")
	}
	checkLog(t, s, "r1", 0)
	if got := get(t, s, "r1"); got.Status != "queued" {
		t.Fatalf("a canceled Append changed the status to %q", got.Status)
	}
}

// testConcurrentRounds races writers that all append after the same seq:
// in each round exactly one wins and the others get a conflict.
func testConcurrentRounds(t *testing.T, s store.Store) {
	const writers, rounds = 8, 25
	create(t, s, newRun("r1", "acme", ts(0)))
	winners := make([]int, rounds)
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		wins := make(chan int, writers)
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				<-start
				e := ev("step", fmt.Sprintf(`{"round":%d,"writer":%d}`, round, w))
				_, err := s.Append(context.Background(), "r1", int64(round), []store.Event{e}, store.RunUpdate{})
				switch {
				case err == nil:
					wins <- w
				case !errors.Is(err, errdefs.ErrFailedPrecondition):
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(wins)
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: Append: %v, want success or a conflict", round, err)
		}
		var won []int
		for w := range wins {
			won = append(won, w)
		}
		if len(won) != 1 {
			t.Fatalf("round %d: writers %v won, want exactly one", round, won)
		}
		winners[round] = won[0]
	}
	events := checkLog(t, s, "r1", rounds)
	for i, e := range events {
		want := fmt.Sprintf(`{"round":%d,"writer":%d}`, i, winners[i])
		sameJSON(t, fmt.Sprintf("event %d", i+1), e.Data, json.RawMessage(want))
	}
}

// testConcurrentWriters lets writers append as fast as they can, each
// reloading the log's end after a conflict, the way two loops that both
// think they own a run would.
func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, each = 4, 25
	create(t, s, newRun("r1", "acme", ts(0)))
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			after := int64(0)
			for i := 0; i < each; {
				e := ev("step", fmt.Sprintf(`{"writer":%d,"i":%d}`, w, i))
				last, err := s.Append(ctx, "r1", after, []store.Event{e}, store.RunUpdate{})
				switch {
				case err == nil:
					after = last
					i++
				case errors.Is(err, errdefs.ErrFailedPrecondition):
					run, err := s.GetRun(ctx, "", "r1")
					if err != nil {
						errs <- err
						return
					}
					after = run.LastSeq
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	events := checkLog(t, s, "r1", writers*each)
	next := make([]int, writers)
	for _, e := range events {
		var d struct{ Writer, I int }
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("event %d: %v", e.Seq, err)
		}
		if d.I != next[d.Writer] {
			t.Fatalf("event %d: writer %d's event %d, want its event %d: lost or duplicated", e.Seq, d.Writer, d.I, next[d.Writer])
		}
		next[d.Writer]++
	}
}

// testConcurrentRuns appends to many runs at once, as many loops do.
func testConcurrentRuns(t *testing.T, s store.Store) {
	const runs, each = 8, 20
	ctx := context.Background()
	for r := range runs {
		create(t, s, newRun(fmt.Sprintf("r%d", r), "acme", ts(r)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for r := range runs {
		wg.Go(func() {
			id := fmt.Sprintf("r%d", r)
			for i := range each {
				_, err := s.Append(ctx, id, int64(i), []store.Event{ev("step", fmt.Sprintf(`{"i":%d}`, i))},
					store.RunUpdate{Summary: json.RawMessage(fmt.Sprintf(`{"steps":%d}`, i+1))})
				if err != nil {
					errs <- err
					return
				}
				if _, err := s.Events(ctx, id, int64(i), 0); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for r := range runs {
		id := fmt.Sprintf("r%d", r)
		checkLog(t, s, id, each)
		if got := get(t, s, id).Summary; string(got) != fmt.Sprintf(`{"steps":%d}`, each) {
			t.Fatalf("run %s summary %s", id, got)
		}
	}
}

func testEventsPaging(t *testing.T, s store.Store) {
	ctx := context.Background()
	create(t, s, newRun("r1", "acme", ts(0)))
	create(t, s, newRun("r2", "acme", ts(1)))
	var in []store.Event
	for i := range 10 {
		in = append(in, ev("step", fmt.Sprintf(`{"i":%d}`, i+1)))
	}
	appendOK(t, s, "r1", 0, in, store.RunUpdate{})
	appendOK(t, s, "r2", 0, in[:2], store.RunUpdate{})

	seqs := func(events []store.Event) string {
		var b strings.Builder
		for _, e := range events {
			fmt.Fprintf(&b, "%d,", e.Seq)
		}
		return b.String()
	}
	for _, tc := range []struct {
		after int64
		limit int
		want  string
	}{
		{0, 0, "1,2,3,4,5,6,7,8,9,10,"},
		{3, 4, "4,5,6,7,"},
		{8, 0, "9,10,"},
		{8, 5, "9,10,"},
		{0, 1, "1,"},
		{10, 0, ""},
		{50, 3, ""},
	} {
		got, err := s.Events(ctx, "r1", tc.after, tc.limit)
		if err != nil {
			t.Fatalf("Events(after %d, limit %d): %v", tc.after, tc.limit, err)
		}
		if seqs(got) != tc.want {
			t.Fatalf("Events(after %d, limit %d) = seqs %s, want %s", tc.after, tc.limit, seqs(got), tc.want)
		}
		for _, e := range got {
			sameJSON(t, fmt.Sprintf("event %d", e.Seq), e.Data, json.RawMessage(fmt.Sprintf(`{"i":%d}`, e.Seq)))
		}
	}
	var all []store.Event
	for after := int64(0); ; {
		page, err := s.Events(ctx, "r1", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].Seq
	}
	if seqs(all) != "1,2,3,4,5,6,7,8,9,10," {
		t.Fatalf("paged by 3: seqs %s", seqs(all))
	}
	checkLog(t, s, "r2", 2)
	_, err := s.Events(ctx, "r1", -1, 0)
	wantKind(t, "Events(after -1)", err, errdefs.ErrInvalidArgument)
}

func testLargePayloads(t *testing.T, s store.Store) {
	// 1 MiB of JSON string, with characters that need care.
	chunk := `abc\"\\\n\u00e9€ `
	big := `{"output":"` + strings.Repeat(chunk, (1<<20)/len(chunk)) + `"}`
	run := newRun("r1", "acme", ts(0))
	run.Spec = json.RawMessage(big)
	create(t, s, run)
	appendOK(t, s, "r1", 0, []store.Event{ev("small", `{}`), ev("big", big), ev("small", `{}`)},
		store.RunUpdate{Summary: json.RawMessage(big)})
	appendOK(t, s, "r1", 3, []store.Event{ev("big", big)}, store.RunUpdate{})
	events := checkLog(t, s, "r1", 4)
	sameJSON(t, "1 MiB event", events[1].Data, json.RawMessage(big))
	sameJSON(t, "1 MiB event", events[3].Data, json.RawMessage(big))
	got := get(t, s, "r1")
	sameJSON(t, "1 MiB spec", got.Spec, json.RawMessage(big))
	sameJSON(t, "1 MiB summary", got.Summary, json.RawMessage(big))
}

// --- reopen

func testReopen(t *testing.T, open func() store.Store) {
	ctx := context.Background()
	s := open()
	run := newRun("r1", "acme", ts(0))
	create(t, s, run)
	create(t, s, newRun("r2", "beta", ts(1)))
	appendOK(t, s, "r1", 0, []store.Event{ev("a", `{"n":1}`), ev("b", `{"n":2}`)},
		store.RunUpdate{Status: "running", Summary: json.RawMessage(`{"steps":1}`)})
	appendOK(t, s, "r1", 2, []store.Event{{Type: "c", Time: ts(9), Data: json.RawMessage(`[1,2,3]`)}}, store.RunUpdate{})
	wantRun := get(t, s, "r1")
	wantEvents := allEvents(t, s, "r1")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = open()
	defer s.Close()
	sameRun(t, get(t, s, "r1"), wantRun)
	got := checkLog(t, s, "r1", 3)
	for i, e := range got {
		w := wantEvents[i]
		if e.Type != w.Type || !e.Time.Equal(w.Time) {
			t.Fatalf("event %d after reopen: %s at %v, want %s at %v", e.Seq, e.Type, e.Time, w.Type, w.Time)
		}
		sameJSON(t, fmt.Sprintf("event %d after reopen", e.Seq), e.Data, w.Data)
	}
	runs, err := s.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ListRuns after reopen", runs, "r2", "r1")
	_, err = s.Append(ctx, "r1", 2, []store.Event{ev("stale", `{}`)}, store.RunUpdate{})
	wantKind(t, "stale Append after reopen", err, errdefs.ErrFailedPrecondition)
	appendOK(t, s, "r1", 3, []store.Event{ev("d", `{}`)}, store.RunUpdate{})
	checkLog(t, s, "r1", 4)
	if err := s.CreateRun(ctx, run); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("CreateRun of an id taken before reopen: %v", err)
	}
}
