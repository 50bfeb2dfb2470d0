package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

// TestUploadsInFirstMessage: the model's first message is the task and,
// when the run has uploads, the list of them with their sizes and the
// paths that will be brought back.
func TestUploadsInFirstMessage(t *testing.T) {
	spec := runlog.Spec{Task: "summarize", Sandboxes: map[string]string{"default": "busybox"},
		Uploads:   []runlog.Upload{{Path: "/workspace/in", Dir: true}, {Path: "/workspace/in/a.pdf", Size: 1234}},
		Downloads: []string{"/workspace/*.md"}}
	data, _ := json.Marshal(runlog.RunCreated{Spec: spec})
	s := newState("run_x")
	if err := s.apply(store.Event{Seq: 1, Type: runlog.EventRunCreated, Data: data}); err != nil {
		t.Fatal(err)
	}
	got := s.messages[0].Content[0].Text
	for _, want := range []string{"summarize\n\n", `uploaded into the sandbox "default"`, "- /workspace/in/ (directory)\n", "- /workspace/in/a.pdf (1234 bytes)\n", "brought back to the user: /workspace/*.md"} {
		if !strings.Contains(got, want) {
			t.Errorf("the first message lacks %q:\n%s", want, got)
		}
	}
	spec.Uploads = nil
	data, _ = json.Marshal(runlog.RunCreated{Spec: spec})
	s = newState("run_y")
	s.apply(store.Event{Seq: 1, Type: runlog.EventRunCreated, Data: data})
	if got := s.messages[0].Content[0].Text; got != "summarize" {
		t.Errorf("without uploads the first message is %q, want the task alone", got)
	}
}
