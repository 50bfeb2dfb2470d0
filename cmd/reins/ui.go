package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server/wire"
)

// statusLine shows live progress on one terminal line, redrawn at most ten
// times a second. When the output is not a terminal it shows nothing, so
// scripts see only results.
type statusLine struct {
	w     *os.File
	tty   bool
	mu    sync.Mutex
	last  time.Time
	shown bool
	start time.Time
}

func newStatusLine(w *os.File) *statusLine {
	return &statusLine{w: w, tty: term.IsTerminal(int(w.Fd())), start: time.Now()}
}

func (s *statusLine) show(text string, force bool) {
	if !s.tty {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force && time.Since(s.last) < 100*time.Millisecond {
		return
	}
	s.last = time.Now()
	width := 80
	if w, _, err := term.GetSize(int(s.w.Fd())); err == nil && w > 10 {
		width = w - 1
	}
	if len(text) > width {
		text = text[:width]
	}
	fmt.Fprintf(s.w, "\r\033[K%s", text)
	s.shown = true
}

// Done clears the line.
func (s *statusLine) Done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shown {
		fmt.Fprint(s.w, "\r\033[K")
		s.shown = false
	}
}

// Progress shows a step of sandbox creation or of an image build.
func (s *statusLine) Progress(p *reinsv1.Progress) {
	text := cmp.Or(wire.ProgressPhaseFromProto(p.Phase), p.Phase.String())
	if p.Item != "" {
		item := p.Item
		if len(item) > 19 {
			item = item[:19]
		}
		text += " " + item
	}
	// A build counts steps (packages fetched, unpacked, set up); the
	// other phases bytes.
	count := humanBytes
	if p.Phase == reinsv1.ProgressPhase_PROGRESS_PHASE_BUILD {
		count = func(n int64) string { return fmt.Sprint(n) }
	}
	if p.Total > 0 {
		text += fmt.Sprintf(" %s %s / %s", bar(p.Done, p.Total, 20), count(p.Done), count(p.Total))
		if p.Phase == reinsv1.ProgressPhase_PROGRESS_PHASE_BUILD {
			text += " steps"
		}
	} else if p.Done > 0 {
		text += " " + count(p.Done)
	}
	if p.Message != "" {
		text += "  " + p.Message
	}
	s.show(fmt.Sprintf("%s  (%.1fs)", text, time.Since(s.start).Seconds()), p.Total > 0 && p.Done >= p.Total)
}

// Counter wraps r so that bytes read through it are shown with a rate.
func (s *statusLine) Counter(label string, r io.Reader) io.Reader {
	return &counter{r: r, s: s, label: label}
}

type counter struct {
	r     io.Reader
	s     *statusLine
	label string
	n     int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	el := time.Since(c.s.start).Seconds()
	if el > 0.3 {
		c.s.show(fmt.Sprintf("%s %s  %s/s", c.label, humanBytes(c.n), humanBytes(int64(float64(c.n)/el))), false)
	}
	return n, err
}

func bar(done, total int64, width int) string {
	n := int(float64(width) * float64(done) / float64(total))
	n = min(max(n, 0), width)
	return "[" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + "]"
}

func humanBytes(n int64) string { return sandbox.FormatBytes(n) }
