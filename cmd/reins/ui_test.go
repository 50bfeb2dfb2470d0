package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// A build's progress counts steps, a pull's bytes.
func TestProgressUnits(t *testing.T) {
	for _, c := range []struct {
		p    *reinsv1.Progress
		want string
	}{
		{&reinsv1.Progress{Phase: reinsv1.ProgressPhase_PROGRESS_PHASE_BUILD, Done: 412, Total: 639, Message: "Setting up xterm (379-1) ..."},
			"build [============        ] 412 / 639 steps  Setting up xterm"},
		{&reinsv1.Progress{Phase: reinsv1.ProgressPhase_PROGRESS_PHASE_PULL, Item: "sha256:abc", Done: 1 << 20, Total: 4 << 20},
			"pull sha256:abc [=====               ] 1 MiB / 4 MiB"},
	} {
		f, err := os.Create(filepath.Join(t.TempDir(), "tty"))
		if err != nil {
			t.Fatal(err)
		}
		s := newStatusLine(f)
		s.tty = true // a file stands in for the terminal
		s.Progress(c.p)
		f.Close()
		b, _ := os.ReadFile(f.Name())
		if !strings.Contains(string(b), c.want) {
			t.Errorf("shown %q; want it to contain %q", b, c.want)
		}
	}
}
