package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/runlog"
)

// A run's files (reins run --upload/--download/--out): see
// docs/decisions/0050-runfiles-design.md.

// uploadDir is where an upload goes when its DEST is not given.
const uploadDir = "/workspace"

// packUploads makes the tar archive of the --upload arguments,
// LOCAL[:DEST], bounded as the service bounds it.
//
// LOCAL itself may be a symbolic link (the user named it: it is followed,
// as cp follows its arguments); inside a directory, a symbolic link is
// refused, not followed. Only regular files and directories are read:
// devices, fifos and sockets are refused, and so is anything on /proc,
// /sys or /dev, whose files only look regular.
func packUploads(args []string) ([]byte, error) {
	var buf bytes.Buffer
	p := &packer{tw: tar.NewWriter(&buf)}
	for _, a := range args {
		local, dest, err := uploadArg(a)
		if err != nil {
			return nil, err
		}
		if err := p.add(local, dest); err != nil {
			return nil, err
		}
	}
	if err := p.tw.Close(); err != nil {
		return nil, err
	}
	if buf.Len() > runlog.MaxUploadBytes {
		return nil, usageError{fmt.Errorf("--upload: the files come to %s, over the %d MiB a run takes; copy large files with reins sandbox cp into a sandbox and run --in it",
			humanBytes(int64(buf.Len())), runlog.MaxUploadBytes>>20)}
	}
	return buf.Bytes(), nil
}

// uploadArg splits LOCAL[:DEST]; DEST is absolute when given (so a LOCAL
// with a colon in its name still works), else /workspace/BASENAME.
func uploadArg(a string) (local, dest string, err error) {
	local = a
	if i := strings.LastIndex(a, ":"); i > 0 && strings.HasPrefix(a[i+1:], "/") {
		local, dest = a[:i], a[i+1:]
	}
	if local == "" {
		return "", "", usageError{fmt.Errorf("--upload %q: give LOCAL[:DEST]", a)}
	}
	if dest == "" {
		abs, err := filepath.Abs(local)
		if err != nil {
			return "", "", err
		}
		dest = path.Join(uploadDir, filepath.Base(abs))
	}
	dest = path.Clean(dest)
	if dest == "/" {
		return "", "", usageError{fmt.Errorf("--upload %q: the destination must be below /, e.g. %s/NAME", a, uploadDir)}
	}
	return local, dest, nil
}

type packer struct {
	tw      *tar.Writer
	entries int
	bytes   int64
}

func (p *packer) add(local, dest string) error {
	fi, err := os.Stat(local) // the argument itself is followed
	if err != nil {
		return usageError{fmt.Errorf("--upload: %w", err)}
	}
	if err := refuseSpecial(local, fi); err != nil {
		return err
	}
	if !fi.IsDir() {
		return p.file(local, dest, fi)
	}
	return filepath.WalkDir(local, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return usageError{fmt.Errorf("--upload: %w", err)}
		}
		rel, _ := filepath.Rel(local, name)
		target := path.Join(dest, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return usageError{fmt.Errorf("--upload: %w", err)}
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			return usageError{fmt.Errorf("--upload: %s is a symbolic link inside %s: uploads take regular files and directories only (copy it with cp -L first, or name it on its own)", name, local)}
		case d.IsDir():
			return p.header(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(target, "/") + "/", Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()})
		}
		if err := refuseSpecial(name, fi); err != nil {
			return err
		}
		return p.file(name, target, fi)
	})
}

// refuseSpecial refuses what is neither a regular file nor a directory,
// and the kernel's pseudo file systems.
func refuseSpecial(name string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return usageError{fmt.Errorf("--upload: %s is not a regular file or a directory (%s): only those are uploaded", name, fi.Mode().Type())}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(name, &st); err != nil {
		return usageError{fmt.Errorf("--upload: %w", err)}
	}
	switch st.Type {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.DEVPTS_SUPER_MAGIC, unix.CGROUP_SUPER_MAGIC,
		unix.CGROUP2_SUPER_MAGIC, unix.DEBUGFS_MAGIC, unix.SECURITYFS_MAGIC, unix.TRACEFS_MAGIC, unix.BPF_FS_MAGIC:
		return usageError{fmt.Errorf("--upload: %s is on a kernel pseudo file system (/proc, /sys and the like), whose files are not data: not uploaded", name)}
	}
	return nil
}

func (p *packer) header(h *tar.Header) error {
	if p.entries++; p.entries > runlog.MaxUploadEntries {
		return usageError{fmt.Errorf("--upload: more than %d files and directories; a run takes at most that many", runlog.MaxUploadEntries)}
	}
	return p.tw.WriteHeader(h)
}

// file adds the regular file name as dest, opened without following a
// link and checked again once open (it may have changed since the walk).
func (p *packer) file(name, dest string, fi fs.FileInfo) error {
	if p.bytes += fi.Size(); p.bytes > runlog.MaxUploadBytes {
		return usageError{fmt.Errorf("--upload: the files come to more than the %d MiB a run takes; copy large files with reins sandbox cp into a sandbox and run --in it", runlog.MaxUploadBytes>>20)}
	}
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		f, err = os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0) // LOCAL itself, a link the user named
	}
	if err != nil {
		return usageError{fmt.Errorf("--upload: %w", err)}
	}
	defer f.Close()
	now, err := f.Stat()
	if err != nil {
		return err
	}
	if !now.Mode().IsRegular() || now.Size() != fi.Size() {
		return usageError{fmt.Errorf("--upload: %s changed while it was read; try again", name)}
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dest, "/"), Mode: int64(now.Mode().Perm()), Size: now.Size(), ModTime: now.ModTime()}
	if err := p.header(h); err != nil {
		return err
	}
	if _, err := io.CopyN(p.tw, f, now.Size()); err != nil {
		return fmt.Errorf("--upload: reading %s: %w", name, err)
	}
	return nil
}

// fetchDownloads writes the artifacts a run's downloads saved (those
// named by their sandbox paths) under dir, through an os.Root of it: a
// name that would leave it is refused, whatever the sandbox made of it.
// It reports each file it could not save and each the run could not.
func fetchDownloads(ctx context.Context, cl *client.Client, id, dir string, quiet bool) error {
	arts, err := cl.Artifacts(ctx, id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	status := newStatusLine(os.Stderr)
	defer status.Done()
	var files int
	var total int64
	var failed []string
	for _, a := range arts {
		if !strings.HasPrefix(a.Name, "/") {
			continue // save_artifact's, by the model
		}
		if a.Error != "" {
			failed = append(failed, fmt.Sprintf("%s: %s", a.Name, a.Error))
			continue
		}
		rel := strings.TrimPrefix(path.Clean(a.Name), "/")
		if !filepath.IsLocal(rel) {
			failed = append(failed, fmt.Sprintf("%s: not a path below %s: skipped", a.Name, dir))
			continue
		}
		n, err := fetchOne(ctx, cl, root, id, a, rel, status, total)
		total += n
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", a.Name, err))
			continue
		}
		files++
	}
	status.Done()
	if !quiet {
		fmt.Fprintf(os.Stderr, "downloaded %d files (%s) to %s\n", files, humanBytes(total), dir)
	}
	for _, f := range failed {
		fmt.Fprintf(os.Stderr, "reins: not downloaded: %s\n", f)
	}
	return nil
}

// fetchOne writes artifact a to rel in root, by way of a temporary name,
// so that a file is whole or absent.
func fetchOne(ctx context.Context, cl *client.Client, root *os.Root, id string, a *reinsv1.Artifact, rel string, status *statusLine, before int64) (int64, error) {
	if d := filepath.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	tmp := rel + ".reins-part"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	w := &progressWriter{w: f, status: status, label: "downloading " + a.Name, base: before}
	err = cl.DownloadArtifact(ctx, id, a.Digest, w)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, rel)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return w.n, err
}

// progressWriter shows the bytes written so far on a status line.
type progressWriter struct {
	w      io.Writer
	status *statusLine
	label  string
	base   int64
	n      int64
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.status.show(fmt.Sprintf("%s  %s in all", p.label, humanBytes(p.base+p.n)), false)
	return n, err
}
