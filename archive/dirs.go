package archive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// The extractor reaches every directory by walking from the destination one
// component at a time with openat(O_DIRECTORY|O_NOFOLLOW): a symbolic link on
// the way, whether the archive made it or it was there before, is never
// followed, so nothing can redirect a later entry (sandbox cp refuses the
// entry). The last component of an entry is then made with an *at call on
// its parent's descriptor that never follows a link either. Directories
// are kept open by name, because consecutive entries mostly share one: a
// file in a known directory costs one openat.
//
// A layer (Options.Layer) is the one place where a directory may be reached
// through a symbolic link: the layer's own links, into its own tree. There the
// walk falls back to os.Root, which follows links that stay inside and
// refuses the rest.

// maxOpenDirs bounds the directories kept open between entries.
const maxOpenDirs = 64

var (
	errSymlink = errors.New("a symbolic link")
	errNotDir  = errors.New("not a directory")
)

// dir returns an open descriptor of the directory name (cleaned, relative
// to the destination, which is "."), making missing directories when mk.
// entry is the name of the entry it is for, for errors.
func (x *extractor) dir(entry, name string, mk bool) (int, error) {
	if name == "." {
		return x.rootFD, nil
	}
	if fd, ok := x.dirs[name]; ok {
		return fd, nil
	}
	start, fd := ".", x.rootFD
	for p := name; ; {
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			break
		}
		p = p[:i]
		if f, ok := x.dirs[p]; ok {
			start, fd = p, f
			break
		}
	}
	rest, cur := name, ""
	if start != "." {
		rest, cur = name[len(start)+1:], start
	}
	owned := false // fd is an uncached intermediate, ours to close
	for rest != "" {
		var comp string
		comp, rest, _ = strings.Cut(rest, "/")
		if cur == "" {
			cur = comp
		} else {
			cur += "/" + comp
		}
		nfd, err := openChild(fd, comp, mk)
		if owned {
			unix.Close(fd)
		}
		if err == errSymlink && x.opts.Layer {
			return x.dirInRoot(entry, name, mk)
		}
		if err != nil {
			return -1, dirError(entry, cur, err)
		}
		fd, owned = nfd, true
		if rest == "" || len(x.dirs) < maxOpenDirs {
			x.dirs[cur], owned = fd, false
		}
	}
	return fd, nil
}

// openChild opens the directory comp in the directory fd, never following
// a link, making it first if mk and it is missing.
func openChild(fd int, comp string, mk bool) (int, error) {
	made := false
	for {
		nfd, err := unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			return nfd, nil
		case err == unix.EINTR:
			continue
		case err == unix.ENOENT && mk && !made:
			if err := unix.Mkdirat(fd, comp, 0o755); err != nil && err != unix.EEXIST {
				return -1, err
			}
			made = true
			continue
		case err == unix.ELOOP || err == unix.ENOTDIR:
			var st unix.Stat_t
			if unix.Fstatat(fd, comp, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, errSymlink
			}
			return -1, errNotDir
		}
		return -1, err
	}
}

// dirInRoot opens name through os.Root, following the layer's own links.
func (x *extractor) dirInRoot(entry, name string, mk bool) (int, error) {
	open := func() (*os.File, error) { return x.root.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY, 0) }
	f, err := open()
	if errors.Is(err, fs.ErrNotExist) && mk {
		if err = x.root.MkdirAll(name, 0o755); err == nil {
			f, err = open()
		}
	}
	if err != nil {
		return -1, entryError(entry, err)
	}
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, entryError(entry, err)
	}
	x.dirs[name] = fd
	x.linked = append(x.linked, name)
	return fd, nil
}

func dirError(entry, dir string, err error) error {
	switch err {
	case errSymlink:
		return refuse(entry, fmt.Sprintf("is beneath %q, a symbolic link: archives may not write through symbolic links", dir))
	case errNotDir:
		return refuse(entry, fmt.Sprintf("is beneath %q, which is not a directory", dir))
	}
	return entryError(entry, err)
}

// forget closes the open directories at or below name, which is being
// removed or replaced, and those reached through a link, which may lead
// there.
func (x *extractor) forget(name string) {
	drop := func(name string) {
		for k, fd := range x.dirs {
			if k == name || strings.HasPrefix(k, name+"/") {
				unix.Close(fd)
				delete(x.dirs, k)
			}
		}
	}
	drop(name)
	for _, l := range x.linked {
		drop(l)
	}
	x.linked = x.linked[:0]
}

// trimDirs closes the open directories when there are too many; it runs
// between entries, when no descriptor is in use.
func (x *extractor) trimDirs() {
	if len(x.dirs) > maxOpenDirs {
		x.closeDirs()
	}
}

func (x *extractor) closeDirs() {
	for k, fd := range x.dirs {
		unix.Close(fd)
		delete(x.dirs, k)
	}
	x.linked = x.linked[:0]
}
