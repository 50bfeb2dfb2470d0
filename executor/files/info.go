package files

import (
	"cmp"
	"context"
	"io/fs"
	"slices"
	"strings"
	"unicode/utf8"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/archive"
)

// DefaultListLimit is how many entries ListDir returns when not told.
const DefaultListLimit = 10000

// Stat describes the file at p without following a final symbolic link (the
// link's target is in SymlinkTarget).
func (f *FS) Stat(p string) (*executorv1.FileInfo, error) {
	name, abs, err := f.resolve(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.tree.Lstat(name)
	if err != nil {
		return nil, pathError(abs, err)
	}
	return f.info(name, abs, fi), nil
}

// ListDir lists the directory p (following a symbolic link to it), down to
// depth levels (0 and 1: direct entries only), sorted by path, at most limit
// entries (0: DefaultListLimit). Symbolic links to directories are listed,
// not entered. Subdirectories that cannot be read are skipped.
func (f *FS) ListDir(ctx context.Context, p string, depth, limit int) (entries []*executorv1.FileInfo, truncated bool, err error) {
	name, abs, err := f.resolve(p)
	if err != nil {
		return nil, false, err
	}
	fi, err := f.tree.Stat(name)
	if err != nil {
		return nil, false, pathError(abs, err)
	}
	if !fi.IsDir() {
		return nil, false, invalid("%s is not a directory; use Stat or ReadFile for a file", abs)
	}
	if depth < 1 {
		depth = 1
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	l := &lister{f: f, ctx: ctx, limit: limit}
	if err := l.list(name, abs, depth, true); err != nil {
		return nil, false, err
	}
	return l.out, l.truncated, nil
}

type lister struct {
	f         *FS
	ctx       context.Context
	limit     int
	out       []*executorv1.FileInfo
	truncated bool
}

func (l *lister) list(name, abs string, depth int, top bool) error {
	entries, err := l.f.readDir(name)
	if err != nil {
		if top {
			return pathError(abs, err)
		}
		return nil
	}
	for _, e := range entries {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if len(l.out) >= l.limit {
			l.truncated = true
			return nil
		}
		cname, cabs := child(name, abs, e.Name())
		fi, err := l.f.tree.Lstat(cname)
		if err != nil {
			continue // gone since the directory was read
		}
		l.out = append(l.out, l.f.info(cname, cabs, fi))
		if fi.IsDir() && depth > 1 {
			if err := l.list(cname, cabs, depth-1, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// readDir reads the directory name, sorted by name.
func (f *FS) readDir(name string) ([]fs.DirEntry, error) {
	d, err := f.tree.Open(name)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return cmp.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// child returns the tree name and sandbox path of base inside name/abs.
func child(name, abs, base string) (string, string) {
	if name == "." {
		return base, "/" + base
	}
	return name + "/" + base, abs + "/" + base
}

func (f *FS) info(name, abs string, fi fs.FileInfo) *executorv1.FileInfo {
	info := &executorv1.FileInfo{
		Path:          validUTF8(abs),
		Name:          validUTF8(baseName(abs)),
		Size:          uint64(max(fi.Size(), 0)),
		Mode:          archive.UnixMode(fi.Mode()),
		MtimeUnixNano: fi.ModTime().UnixNano(),
	}
	f.setOwner(info, fi)
	switch {
	case fi.Mode().IsRegular():
		info.Type = executorv1.FileType_FILE_TYPE_FILE
	case fi.IsDir():
		info.Type = executorv1.FileType_FILE_TYPE_DIR
	case fi.Mode()&fs.ModeSymlink != 0:
		info.Type = executorv1.FileType_FILE_TYPE_SYMLINK
		if target, err := f.tree.Readlink(name); err == nil {
			info.SymlinkTarget = validUTF8(target)
		}
	default:
		info.Type = executorv1.FileType_FILE_TYPE_OTHER
	}
	return info
}

func baseName(abs string) string {
	if abs == "/" {
		return "/"
	}
	return abs[strings.LastIndexByte(abs, '/')+1:]
}

// goMode is the inverse of archive.UnixMode.
func goMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// validUTF8 makes s safe for a protobuf string: file names are bytes, and a
// name that is not UTF-8 must not break a whole listing.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
