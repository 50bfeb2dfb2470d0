package files

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sync"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

const (
	// DefaultGrepLimit is how many matches Grep returns when not told.
	DefaultGrepLimit = 1000
	// maxMatchText is how much of a matching line Grep returns.
	maxMatchText = 1000
	// binaryProbe is how much of a file is looked at for a NUL byte, the
	// sign of a binary file, which Grep skips (as grep -I does).
	binaryProbe = 8000
	// maxLine is how much of one line is matched; longer lines are cut.
	maxLine = 1 << 20
)

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// GrepOptions shape a Grep.
type GrepOptions struct {
	Include    string // glob on file names, e.g. "*.go"; empty: every file
	IgnoreCase bool
	Literal    bool // the pattern is a fixed string, not a regular expression
	Limit      int  // at most this many matches; 0: DefaultGrepLimit
}

// Grep searches the file or directory p (recursively; symbolic links are not
// entered, ".git" directories and binary files are skipped) for lines
// matching the RE2 expression pattern.
func (f *FS) Grep(ctx context.Context, pattern, p string, o GrepOptions) (matches []*executorv1.GrepMatch, truncated bool, err error) {
	if o.Literal {
		pattern = regexp.QuoteMeta(pattern)
	}
	if o.IgnoreCase {
		pattern = "(?i)" + pattern
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, false, invalid("the pattern is not a valid RE2 regular expression: %v", err)
	}
	if o.Include != "" {
		if _, err := path.Match(o.Include, ""); err != nil {
			return nil, false, invalid("the include glob %q is malformed: %v", o.Include, err)
		}
	}
	if p == "" {
		p = f.Workdir()
	}
	name, abs, err := f.resolve(p)
	if err != nil {
		return nil, false, err
	}
	fi, err := f.tree.Stat(name)
	if err != nil {
		return nil, false, pathError(abs, err)
	}
	if o.Limit <= 0 {
		o.Limit = DefaultGrepLimit
	}
	g := &grepper{f: f, ctx: ctx, re: re, opts: o}
	if fi.IsDir() {
		err = g.dir(name, abs)
	} else {
		err = g.file(name, abs)
	}
	if err != nil && err != errEnough {
		return nil, false, err
	}
	return g.out, g.truncated, nil
}

type grepper struct {
	f         *FS
	ctx       context.Context
	re        *regexp.Regexp
	opts      GrepOptions
	out       []*executorv1.GrepMatch
	truncated bool
	long      []byte
}

func (g *grepper) dir(name, abs string) error {
	entries, err := g.f.readDir(name)
	if err != nil {
		return nil // unreadable: nothing to find there
	}
	for _, e := range entries {
		if err := g.ctx.Err(); err != nil {
			return err
		}
		cname, cabs := child(name, abs, e.Name())
		switch e.Type() {
		case fs.ModeDir:
			if e.Name() == ".git" {
				continue
			}
			if err := g.dir(cname, cabs); err != nil {
				return err
			}
		case 0:
			if g.opts.Include != "" {
				if ok, _ := path.Match(g.opts.Include, e.Name()); !ok {
					continue
				}
			}
			if err := g.file(cname, cabs); err != nil {
				return err
			}
		}
	}
	return nil
}

func (g *grepper) file(name, abs string) error {
	file, err := g.f.tree.Open(name)
	if err != nil {
		return nil // unreadable or gone
	}
	defer file.Close()
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(file)
	defer func() { br.Reset(nil); readerPool.Put(br) }()
	head, _ := br.Peek(binaryProbe)
	if bytes.IndexByte(head, 0) >= 0 {
		return nil
	}
	for lineNo := uint32(1); ; lineNo++ {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			line, err = g.longLine(br, line)
		}
		if len(line) > 0 {
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			if g.re.Match(line) {
				if len(g.out) >= g.opts.Limit {
					g.truncated = true
					return errEnough
				}
				text := line[:min(len(line), maxMatchText)]
				g.out = append(g.out, &executorv1.GrepMatch{Path: validUTF8(abs), Line: lineNo, Text: validUTF8(string(text))})
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return nil // a read error ends this file only
		}
	}
}

// longLine gathers a line longer than the reader's buffer, keeping at most
// maxLine bytes of it.
func (g *grepper) longLine(br *bufio.Reader, first []byte) ([]byte, error) {
	g.long = append(g.long[:0], first...)
	for {
		part, err := br.ReadSlice('\n')
		if len(g.long) < maxLine {
			g.long = append(g.long, part[:min(len(part), maxLine-len(g.long))]...)
		}
		if err != bufio.ErrBufferFull {
			return g.long, err
		}
	}
}
