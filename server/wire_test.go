package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/server/wire"
	"github.com/reinsdev/reins/store"
)

// TestTypedWire: through a real Connect transport, in both the binary and
// the JSON protocol, a run's status and its events arrive typed, and
// listings filter by typed statuses.
func TestTypedWire(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	ctx := context.Background()
	tok := e.tenant(t, "acme", nil)
	acme := e.client(tok)
	run, err := acme.StartRun(ctx, &reinsv1.RunSpec{Task: "ask first", Model: "script:ask"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, acme, run.Id, "waiting_approval")
	if err := acme.AnswerRun(ctx, run.Id, "yes"); err != nil {
		t.Fatal(err)
	}
	if got := waitStatus(t, acme, run.Id, "succeeded"); got.Status != reinsv1.RunStatus_RUN_STATUS_SUCCEEDED {
		t.Fatalf("status %v", got.Status)
	}

	for name, opts := range map[string][]connect.ClientOption{"proto": nil, "json": {connect.WithProtoJSON()}} {
		t.Run(name, func(t *testing.T) {
			rc := e.rawRunsWith(tok, opts...)
			stream, err := rc.Events(ctx, connect.NewRequest(&reinsv1.RunEventsRequest{Id: run.Id}))
			if err != nil {
				t.Fatal(err)
			}
			seen := map[reinsv1.EventType]*reinsv1.RunEvent{}
			for stream.Receive() {
				ev := stream.Msg()
				if ev.Type == reinsv1.EventType_EVENT_TYPE_UNSPECIFIED || ev.Payload == nil {
					t.Errorf("event %d has no type or no payload: %v", ev.Seq, ev)
				}
				seen[ev.Type] = ev
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if got := seen[reinsv1.EventType_EVENT_TYPE_RUN_CREATED].GetRunCreated().GetSpec().GetTask(); got != "ask first" {
				t.Errorf("run_created's task: %q", got)
			}
			if got := seen[reinsv1.EventType_EVENT_TYPE_WAITING].GetWaiting().GetQuestion(); got != "go on?" {
				t.Errorf("waiting's question: %q", got)
			}
			if got := seen[reinsv1.EventType_EVENT_TYPE_HUMAN_ANSWER].GetHumanAnswer().GetText(); got != "yes" {
				t.Errorf("human_answer's text: %q", got)
			}
			mr := seen[reinsv1.EventType_EVENT_TYPE_MODEL_RESPONSE].GetModelResponse()
			if c := mr.GetContent(); len(c) != 1 || c[0].Type != reinsv1.BlockType_BLOCK_TYPE_TEXT || c[0].Text != "done" ||
				mr.StopReason != reinsv1.StopReason_STOP_REASON_END_TURN {
				t.Errorf("last model response: %v", mr)
			}
			if tc := seen[reinsv1.EventType_EVENT_TYPE_TOOL_CALL].GetToolCall(); tc.GetName() != "ask_human" || !strings.Contains(tc.GetInputJson(), `"go on?"`) {
				t.Errorf("tool call: %v", tc)
			}
			if f := seen[reinsv1.EventType_EVENT_TYPE_FINISHED].GetFinished(); f.GetStatus() != reinsv1.RunStatus_RUN_STATUS_SUCCEEDED || f.GetText() != "done" {
				t.Errorf("finished: %v", f)
			}
		})
	}

	for _, c := range []struct {
		statuses []reinsv1.RunStatus
		n        int
	}{
		{nil, 1},
		{[]reinsv1.RunStatus{reinsv1.RunStatus_RUN_STATUS_SUCCEEDED}, 1},
		{[]reinsv1.RunStatus{reinsv1.RunStatus_RUN_STATUS_FAILED, reinsv1.RunStatus_RUN_STATUS_RUNNING}, 0},
	} {
		runs, err := acme.ListRuns(ctx, c.statuses)
		if err != nil || len(runs) != c.n {
			t.Errorf("ListRuns(%v): %d runs, %v; want %d", c.statuses, len(runs), err, c.n)
		}
	}
	for _, bad := range []reinsv1.RunStatus{reinsv1.RunStatus_RUN_STATUS_UNSPECIFIED, 42} {
		if _, err := acme.ListRuns(ctx, []reinsv1.RunStatus{bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ListRuns(%v): %v, want invalid argument", bad, err)
		}
	}
}

// TestOneJSON: a JSON caller (curl) gets the JSON the CLI prints
// (wire.JSON): proto field names, enum names, every field.
func TestOneJSON(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	ctx := context.Background()
	tok := e.tenant(t, "acme", nil)
	acme := e.client(tok)
	run, err := acme.StartRun(ctx, &reinsv1.RunSpec{Task: "say hi", Model: "script:hi"})
	if err != nil {
		t.Fatal(err)
	}
	run = waitStatus(t, acme, run.Id, "succeeded")
	want, err := wire.JSON.Marshal(&reinsv1.GetRunResponse{Run: run})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8"} {
		req, _ := http.NewRequest("POST", e.url+"/reins.v1.RunService/Get", strings.NewReader(`{"id":"`+run.Id+`"}`))
		req.Header.Set("Content-Type", ct)
		resp, err := (&http.Client{Transport: bearer(tok)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got, exp any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %v: %s", ct, err, body)
		}
		json.Unmarshal(want, &exp)
		if d := cmp.Diff(exp, got); d != "" {
			t.Errorf("%s: the API's JSON is not the CLI's (-cli +api):\n%s", ct, d)
		}
		if !strings.Contains(string(body), `"RUN_STATUS_SUCCEEDED"`) || !strings.Contains(string(body), `"last_seq"`) {
			t.Errorf("%s: %s", ct, body)
		}
	}
}

// rawRunsWith is the generated run client with options (a protocol).
func (e *env) rawRunsWith(token string, opts ...connect.ClientOption) reinsv1connect.RunServiceClient {
	return reinsv1connect.NewRunServiceClient(&http.Client{Transport: bearer(token)}, e.url, opts...)
}
