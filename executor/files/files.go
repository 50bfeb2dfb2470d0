// Package files is the executor's file service: stat, list, read, atomic
// write, edit, glob, grep, mkdir, remove and move, all confined to a root.
//
// Paths are absolute inside the sandbox, or relative to its working
// directory. Where they lead depends on the root:
//
//   - Root "/" (inside a real sandbox, which is itself the confinement):
//     plain paths; symbolic links are followed like any program would,
//     absolute ones included (images are full of them, /etc/alternatives).
//   - any other Root (tests, use on a host): every operation goes through an
//     os.Root, so neither ".." nor a symbolic link can leave it. Absolute
//     symbolic links count as leaving.
//
// In both cases a path whose ".." components climb above "/" is refused.
// Errors carry errdefs kinds and say what to do.
package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/reinsdev/reins/errdefs"
)

// MaxRead is the most ReadFile returns, and the largest file WriteFile and
// EditFile accept, per call.
const MaxRead = 16 << 20

// FS is a confined view of a directory tree. It is safe for concurrent use.
type FS struct {
	rootDir string
	workdir atomic.Pointer[string] // absolute, clean, inside the sandbox (SetWorkdir changes it)
	root    *os.Root               // nil when rootDir is "/"
	tree    tree
	isRoot  bool // the executor runs as uid 0 and may keep files' owners
	// users and groups name files' owners (owners.go).
	users, groups accountNames
}

// tree is what FS needs from a directory tree. *os.Root implements it;
// plainTree does the same with ordinary paths.
type tree interface {
	Open(name string) (*os.File, error)
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	OpenRoot(name string) (*os.Root, error)
	Lstat(name string) (fs.FileInfo, error)
	Stat(name string) (fs.FileInfo, error)
	Mkdir(name string, perm fs.FileMode) error
	MkdirAll(name string, perm fs.FileMode) error
	Remove(name string) error
	RemoveAll(name string) error
	Rename(oldname, newname string) error
	Readlink(name string) (string, error)
	Link(oldname, newname string) error
	Lchown(name string, uid, gid int) error
	Chmod(name string, mode fs.FileMode) error
}

// New returns an FS over the directory root (required; "/" inside a
// sandbox). workdir is where relative paths start (default "/").
func New(root, workdir string) (*FS, error) {
	if root == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			"files: the root directory is required (use \"/\" inside a sandbox)")
	}
	if !filepath.IsAbs(root) {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("files: the root directory %q must be an absolute path", root))
	}
	if workdir == "" {
		workdir = "/"
	}
	if !path.IsAbs(workdir) {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("files: the working directory %q must be an absolute path inside the sandbox", workdir))
	}
	f := &FS{rootDir: filepath.Clean(root), isRoot: os.Geteuid() == 0,
		users: accountNames{name: "etc/passwd"}, groups: accountNames{name: "etc/group"}}
	w := path.Clean(workdir)
	f.workdir.Store(&w)
	if f.rootDir == "/" {
		f.tree = plainTree{}
		return f, nil
	}
	r, err := os.OpenRoot(f.rootDir)
	if err != nil {
		return nil, pathError(root, err)
	}
	f.root, f.tree = r, r
	return f, nil
}

// Close releases the root.
func (f *FS) Close() error {
	if f.root != nil {
		return f.root.Close()
	}
	return nil
}

// Workdir is the sandbox's working directory.
func (f *FS) Workdir() string { return *f.workdir.Load() }

// SetWorkdir makes the directory p (and its parents) when it is missing
// and makes it the working directory of relative paths and processes
// from now on. It refuses what is not a directory there.
func (f *FS) SetWorkdir(p string) error {
	if !path.IsAbs(p) {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("the working directory %q must be an absolute path inside the sandbox", p))
	}
	if err := f.MakeDir(p, true, 0); err != nil {
		return err
	}
	_, abs, err := f.resolve(p)
	if err != nil {
		return err
	}
	f.workdir.Store(&abs)
	return nil
}

// Confined reports whether paths go through an os.Root (Root is not "/").
func (f *FS) Confined() bool { return f.root != nil }

// Resolve turns a path given by a client into the absolute, clean path
// inside the sandbox. It refuses empty paths and ".." above "/".
func (f *FS) Resolve(p string) (string, error) {
	_, abs, err := f.resolve(p)
	return abs, err
}

// HostPath is where the sandbox path abs (from Resolve) is on the host the
// executor sees: abs itself when the root is "/". Only for handing to
// processes (their working directory); file operations go through the FS.
func (f *FS) HostPath(abs string) string {
	return filepath.Join(f.rootDir, abs)
}

// OpenRoot opens the directory abs as an os.Root, for streaming writers and
// readers (archive) that must stay inside it.
func (f *FS) OpenRoot(abs string) (*os.Root, error) {
	name, abs, err := f.resolve(abs)
	if err != nil {
		return nil, err
	}
	r, err := f.tree.OpenRoot(name)
	return r, pathError(abs, err)
}

// resolve returns the name of p inside the tree ("." for the root) and its
// absolute sandbox path.
func (f *FS) resolve(p string) (name, abs string, err error) {
	switch {
	case p == "":
		return "", "", errdefs.WithMessage(errdefs.ErrInvalidArgument, "the path is empty")
	case strings.IndexByte(p, 0) >= 0:
		return "", "", errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("the path %q has a NUL byte", p))
	}
	full := p
	if !path.IsAbs(full) {
		full = f.Workdir() + "/" + full
	}
	if climbsAboveRoot(full) {
		return "", "", errdefs.WithMessage(errdefs.ErrPermissionDenied,
			fmt.Sprintf("the path %s leaves the sandbox's root directory through \"..\"", p))
	}
	abs = path.Clean(full)
	name = strings.TrimPrefix(abs, "/")
	if name == "" {
		name = "."
	}
	return name, abs, nil
}

// climbsAboveRoot reports whether the absolute path p has more ".."
// components than directories before them.
func climbsAboveRoot(p string) bool {
	depth := 0
	for part := range strings.SplitSeq(p, "/") {
		switch part {
		case "", ".":
		case "..":
			if depth == 0 {
				return true
			}
			depth--
		default:
			depth++
		}
	}
	return false
}

// plainTree is tree over ordinary paths, for Root "/".
type plainTree struct{}

func plainPath(name string) string { return "/" + name }

func (plainTree) Open(name string) (*os.File, error) { return os.Open(plainPath(name)) }
func (plainTree) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(plainPath(name), flag, perm)
}
func (plainTree) OpenRoot(name string) (*os.Root, error)    { return os.OpenRoot(plainPath(name)) }
func (plainTree) Lstat(name string) (fs.FileInfo, error)    { return os.Lstat(plainPath(name)) }
func (plainTree) Stat(name string) (fs.FileInfo, error)     { return os.Stat(plainPath(name)) }
func (plainTree) Mkdir(name string, perm fs.FileMode) error { return os.Mkdir(plainPath(name), perm) }
func (plainTree) MkdirAll(name string, perm fs.FileMode) error {
	return os.MkdirAll(plainPath(name), perm)
}
func (plainTree) Remove(name string) error    { return os.Remove(plainPath(name)) }
func (plainTree) RemoveAll(name string) error { return os.RemoveAll(plainPath(name)) }
func (plainTree) Rename(oldname, newname string) error {
	return os.Rename(plainPath(oldname), plainPath(newname))
}
func (plainTree) Readlink(name string) (string, error) { return os.Readlink(plainPath(name)) }
func (plainTree) Link(oldname, newname string) error {
	return os.Link(plainPath(oldname), plainPath(newname))
}
func (plainTree) Lchown(name string, uid, gid int) error {
	return os.Lchown(plainPath(name), uid, gid)
}
func (plainTree) Chmod(name string, mode fs.FileMode) error {
	return os.Chmod(plainPath(name), mode)
}

// isNoSpace reports a full disk or an exhausted quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// OpenParent opens, as an os.Root, the directory holding what p leads to
// (symbolic links at its end are followed) and returns it with that thing's
// name in it ("." when p is the root directory) and p's sandbox path. It is
// for streaming readers (archive) that must stay inside.
func (f *FS) OpenParent(p string) (root *os.Root, name, abs string, err error) {
	name, abs, err = f.resolve(p)
	if err != nil {
		return nil, "", "", err
	}
	orig := abs
	name, abs, fi, err := f.followLinks(name, abs)
	if err != nil {
		return nil, "", "", err
	}
	if fi == nil {
		return nil, "", "", pathError(orig, fs.ErrNotExist)
	}
	if name == "." {
		root, err = f.tree.OpenRoot(".")
		return root, ".", orig, pathError(orig, err)
	}
	dir, base := path.Split(name)
	if dir == "" {
		dir = "."
	}
	root, err = f.tree.OpenRoot(dir)
	return root, base, orig, pathError(orig, err)
}
