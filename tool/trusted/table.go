package trusted

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// table is a query result being rendered as compact text:
//
//	id | name  | note
//	---+-------+-----
//	1  | alice | NULL
//	(1 row)
type table struct {
	cols     []string
	rows     [][]string
	maxChars int
	size     int // bytes of cell text so far
}

func newTable(cols []string, maxChars int) *table {
	t := &table{maxChars: maxChars}
	for _, c := range cols {
		t.cols = append(t.cols, cell(c, maxChars))
	}
	return t
}

func (t *table) add(vals []any) {
	row := make([]string, len(vals))
	for i, v := range vals {
		text, summary := cellText(v)
		if summary {
			row[i] = text // already short; cutting it would lose its point
		} else {
			row[i] = cell(text, t.maxChars)
		}
		t.size += len(row[i]) + 3
	}
	t.rows = append(t.rows, row)
}

// String renders the table; more rows were not shown (at least that many
// when capped).
func (t *table) String(more int, capped bool) string {
	widths := make([]int, len(t.cols))
	for _, r := range append([][]string{t.cols}, t.rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(r []string) {
		var l strings.Builder
		for i, c := range r {
			if i > 0 {
				l.WriteString(" | ")
			}
			l.WriteString(c)
			l.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)))
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	line(t.cols)
	for i, w := range widths {
		if i > 0 {
			b.WriteString("-+-")
		}
		b.WriteString(strings.Repeat("-", max(w, 1)))
	}
	b.WriteByte('\n')
	for _, r := range t.rows {
		line(r)
	}
	shown := len(t.rows)
	switch {
	case more == 0:
		fmt.Fprintf(&b, "(%d %s)", shown, plural(int64(shown), "row", "rows"))
	case capped:
		fmt.Fprintf(&b, "… more than %d more rows not shown (the first %d are above). Narrow the query or page with LIMIT/OFFSET.", more, shown)
	default:
		fmt.Fprintf(&b, "… %d more %s not shown (%d of %d above). Narrow the query or page with LIMIT/OFFSET.",
			more, plural(int64(more), "row", "rows"), shown, shown+more)
	}
	return b.String()
}

// cellText renders one value as a driver returns it; summary says the text
// describes the value (binary data) rather than being it.
func cellText(v any) (text string, summary bool) {
	switch v := v.(type) {
	case nil:
		return "NULL", false
	case string:
		return v, false
	case []byte:
		if utf8.Valid(v) && !strings.ContainsRune(string(v), 0) {
			return string(v), false
		}
		head := v[:min(len(v), 16)]
		dots := ""
		if len(v) > len(head) {
			dots = "…"
		}
		return fmt.Sprintf("<%d bytes: %s%s>", len(v), hex.EncodeToString(head), dots), true
	case time.Time:
		if v.Location() == time.UTC && v.Equal(v.Truncate(24*time.Hour)) {
			return v.Format(time.DateOnly), false // a date column
		}
		return v.Format(time.RFC3339Nano), false
	}
	return fmt.Sprint(v), false
}

var cellEscaper = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`, "|", `\|`)

// cell makes s fit on one line of a table and cuts it to maxChars.
func cell(s string, maxChars int) string {
	return cellEscaper.Replace(cutRunes(s, maxChars))
}
