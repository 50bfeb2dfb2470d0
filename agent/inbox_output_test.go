package agent

import (
	"strings"
	"testing"
)

// TestProgramOutputBounds: a program's stdout is the sandbox's to choose.
// A line longer than maxLine is never held whole (it is skipped, even
// when it is a well-formed result), and the result after it is read.
func TestProgramOutputBounds(t *testing.T) {
	o := newProgramOutput("claude-code")
	o.writeStdout([]byte(`{"type":"result","result":"first"}` + "\n"))
	huge := `{"type":"result","result":"` + strings.Repeat("a", 3*maxLine) + `"}`
	for i := 0; i < len(huge); i += 64 << 10 {
		o.writeStdout([]byte(huge[i:min(i+64<<10, len(huge))]))
		if len(o.stdout) > maxLine {
			t.Fatalf("holding %d bytes of one line", len(o.stdout))
		}
	}
	o.writeStdout([]byte("\n"))
	if o.text() != "first" {
		t.Fatalf("a line over the bound was read: text of %d bytes", len(o.text()))
	}
	// Several lines in one write, the last split across two.
	o.writeStdout([]byte(`{"type":"assistant"}` + "\nnot json\n" + `{"type":"result","res`))
	o.writeStdout([]byte(`ult":"second"}` + "\n"))
	if o.text() != "second" {
		t.Fatalf("text %q", o.text())
	}
	// Bytes the executor dropped break the line in progress.
	o.writeStdout([]byte(`{"type":"result","result":"bro`))
	o.lost()
	o.writeStdout([]byte(`ken"}` + "\n"))
	if o.text() != "second" {
		t.Fatalf("a broken line was read: %q", o.text())
	}
	// Stderr: the last lines, bounded.
	o.writeStderr([]byte(strings.Repeat("e", 10*maxStderrKept)))
	o.writeStderr([]byte("\none\ntwo\n"))
	if len(o.stderr) > maxStderrKept || !strings.HasSuffix(o.stderrTail(), "\none\ntwo") || len(o.stderrTail()) > maxStderrTail+len("…") {
		t.Fatalf("stderr kept %d bytes, tail %d", len(o.stderr), len(o.stderrTail()))
	}
}
