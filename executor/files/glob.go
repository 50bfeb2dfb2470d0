package files

import (
	"context"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// DefaultGlobLimit is how many paths Glob returns when not told.
const DefaultGlobLimit = 1000

// Glob returns the sandbox paths matching pattern, sorted. A relative pattern
// starts at dir (default: the working directory). Each path component is
// matched with path.Match, and a "**" component matches any number of
// directories (zero included), or, at the end of the pattern, everything
// below; "**" does not enter symbolic links, so a link cycle cannot trap it. At most limit paths are returned (0:
// DefaultGlobLimit), with truncated set when there were more.
func (f *FS) Glob(ctx context.Context, pattern, dir string, limit int) (paths []string, truncated bool, err error) {
	if pattern == "" {
		return nil, false, invalid("the glob pattern is empty")
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return nil, false, invalid("the glob pattern %q has a NUL byte", pattern)
	}
	start := dir
	if start == "" {
		start = f.Workdir()
	}
	if path.IsAbs(pattern) {
		start = "/"
	}
	name, abs, err := f.resolve(start)
	if err != nil {
		return nil, false, err
	}
	var segs []string
	for s := range strings.SplitSeq(pattern, "/") {
		if s == "" || s == "." {
			continue
		}
		if s == ".." {
			return nil, false, invalid("the glob pattern %q has a \"..\" component; start it from another directory instead", pattern)
		}
		if _, err := path.Match(s, ""); err != nil {
			return nil, false, invalid("the glob pattern %q is malformed at %q: %v", pattern, s, err)
		}
		segs = append(segs, s)
	}
	if limit <= 0 {
		limit = DefaultGlobLimit
	}
	g := &globber{f: f, ctx: ctx, limit: limit, seen: map[string]bool{}}
	if err := g.walk(name, abs, segs); err != nil && err != errEnough {
		return nil, false, err
	}
	slices.Sort(g.out)
	return g.out, g.truncated, nil
}

type globber struct {
	f         *FS
	ctx       context.Context
	limit     int
	out       []string
	seen      map[string]bool // "**" can reach a path more than one way
	truncated bool
}

type enough struct{}

func (enough) Error() string { return "enough matches" }

var errEnough error = enough{}

func (g *globber) emit(abs string) error {
	if g.seen[abs] {
		return nil
	}
	if len(g.out) >= g.limit {
		g.truncated = true
		return errEnough
	}
	g.seen[abs] = true
	g.out = append(g.out, validUTF8(abs))
	return nil
}

// walk matches segs against the tree below name (sandbox path abs), which
// exists.
func (g *globber) walk(name, abs string, segs []string) error {
	if err := g.ctx.Err(); err != nil {
		return err
	}
	if len(segs) == 0 {
		return g.emit(abs)
	}
	seg, rest := segs[0], segs[1:]
	if seg == "**" {
		if err := g.walk(name, abs, rest); err != nil { // "**" as zero directories
			return err
		}
		entries, err := g.f.readDir(name)
		if err != nil {
			return nil
		}
		for _, e := range entries {
			cname, cabs := child(name, abs, e.Name())
			if e.Type() != fs.ModeDir {
				// Files are matched through rest, or by a final "**";
				// links are not entered.
				if len(rest) == 0 {
					if err := g.emit(cabs); err != nil {
						return err
					}
				}
				continue
			}
			if err := g.walk(cname, cabs, segs); err != nil {
				return err
			}
		}
		return nil
	}
	if !hasMeta(seg) {
		cname, cabs := child(name, abs, seg)
		if _, err := g.f.tree.Lstat(cname); err != nil {
			return nil
		}
		return g.walk(cname, cabs, rest)
	}
	entries, err := g.f.readDir(name)
	if err != nil {
		return nil // not a directory, or unreadable: no matches below
	}
	for _, e := range entries {
		if ok, _ := path.Match(seg, e.Name()); !ok {
			continue
		}
		cname, cabs := child(name, abs, e.Name())
		if err := g.walk(cname, cabs, rest); err != nil {
			return err
		}
	}
	return nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }
