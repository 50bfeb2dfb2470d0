package files

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadLines(t *testing.T) {
	root := t.TempDir()
	fs, err := New(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "one\ntwo\nthree")
	write("empty.txt", "")
	write("long.txt", strings.Repeat("x", 5000)+"\nshort\n")
	write("bin", "text\x00more")
	write("crlf.txt", "a\r\nb\r\n")
	text := func(ls []Line) string {
		var out []string
		for _, l := range ls {
			s := string(l.Text)
			if l.Cut {
				s += "…"
			}
			out = append(out, s)
		}
		return strings.Join(out, "|")
	}
	for _, c := range []struct {
		path       string
		first      uint64
		count, cut int
		want       string
		total      uint64
		wantBinary bool
	}{
		{"a.txt", 1, 0, 0, "one|two|three", 3, false},
		{"a.txt", 2, 1, 0, "two", 3, false},
		{"a.txt", 3, 5, 0, "three", 3, false},
		{"a.txt", 9, 5, 0, "", 3, false},
		{"empty.txt", 1, 0, 0, "", 0, false},
		{"long.txt", 1, 0, 10, "xxxxxxxxxx…|short", 2, false},
		{"crlf.txt", 1, 0, 0, "a\r|b\r", 2, false},
		{"bin", 1, 0, 0, "", 0, true},
	} {
		ls, total, _, binary, err := fs.ReadLines(c.path, c.first, c.count, c.cut)
		if err != nil {
			t.Errorf("%s from %d: %v", c.path, c.first, err)
			continue
		}
		if got := text(ls); got != c.want || total != c.total || binary != c.wantBinary {
			t.Errorf("%s from %d (%d, cut %d): %q, %d lines, binary %v; want %q, %d, %v", c.path, c.first, c.count, c.cut, got, total, binary, c.want, c.total, c.wantBinary)
		}
	}
	// Past ReadFile's 16 MiB: every line is counted, and the last ones read.
	var big bytes.Buffer
	for i := range 3_000_000 {
		big.WriteString("line ")
		big.WriteString(strings.Repeat("y", i%7))
		big.WriteByte('\n')
	}
	write("big.txt", big.String())
	ls, total, size, _, err := fs.ReadLines("big.txt", 2_999_999, 10, 0)
	if err != nil || total != 3_000_000 || len(ls) != 2 || size != uint64(big.Len()) {
		t.Errorf("big.txt (%d bytes): %d lines back, %d counted, %v", big.Len(), len(ls), total, err)
	}
	// A caller's limits cannot make the answer large: lines are cut at
	// 1 MiB whatever is asked, and they stop at 16 MiB in all.
	var wide bytes.Buffer
	for range 40 {
		wide.WriteString(strings.Repeat("w", 2<<20))
		wide.WriteByte('\n')
	}
	write("wide.txt", wide.String())
	ls, total, _, _, err = fs.ReadLines("wide.txt", 1, MaxLines, 1<<30)
	kept := 0
	for _, l := range ls {
		if len(l.Text) > MaxLineBytes || !l.Cut {
			t.Errorf("a 2 MiB line came back with %d bytes (cut %v)", len(l.Text), l.Cut)
		}
		kept += len(l.Text)
	}
	if err != nil || total != 40 || kept > MaxRead+MaxLineBytes || len(ls) == 0 || len(ls) >= 40 {
		t.Errorf("wide.txt: %d lines, %d bytes back of %d lines, %v", len(ls), kept, total, err)
	}
	for _, p := range []string{"/", "nosuch", "../etc/passwd"} {
		if _, _, _, _, err := fs.ReadLines(p, 1, 0, 0); err == nil {
			t.Errorf("ReadLines(%q) succeeded", p)
		}
	}
}
