package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

func cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files or directories into or out of a sandbox (ID:/path on one side)",
		Long: `Copy a file or a directory between this machine and a sandbox, like docker cp.
One side is ID:/path, the other a local path. If DST is an existing directory
the source is copied into it; otherwise it is copied to DST's name.

  reins sandbox cp ./src 3f2a9c1b7d4e:/workspace
  reins sandbox cp 3f2a9c1b7d4e:/workspace/out.txt .

As with docker cp, "-" is a tar stream: ID:/path - writes a tar of the
file or directory to standard output; - ID:/dir unpacks a tar read from
standard input into the directory.

  reins sandbox cp 3f2a:/workspace/out - | tar -tv
  tar -c src | reins sandbox cp - 3f2a:/workspace`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, args []string) error {
			srcID, src := splitRemote(args[0])
			dstID, dst := splitRemote(args[1])
			if (srcID == "") == (dstID == "") {
				return usageError{errors.New("give exactly one side as ID:/path (the other is a local path)")}
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			if dstID != "" {
				if dstID, err = resolveOne(ctx, cl, sandboxID, dstID); err != nil {
					return err
				}
				if src == "-" {
					return copyInTar(ctx, c, cl.Sandbox(dstID), dst)
				}
				return copyIn(ctx, cl.Sandbox(dstID), src, dst)
			}
			if srcID, err = resolveOne(ctx, cl, sandboxID, srcID); err != nil {
				return err
			}
			if dst == "-" {
				return copyOutTar(ctx, c, cl.Sandbox(srcID), src)
			}
			return copyOut(ctx, cl.Sandbox(srcID), src, dst)
		},
	}
}

// splitRemote splits "ID:/path"; a local path (which may contain ':' after a
// '/' or start with '.' or '/') gives an empty id.
func splitRemote(s string) (id, p string) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.ContainsAny(s[:i], `/\.`) {
		return "", s
	}
	return s[:i], s[i+1:]
}

func copyIn(ctx context.Context, sb *client.Sandbox, src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("cannot copy %s: %w", src, err)
	}
	// Into an existing directory keeps the source's name; otherwise the
	// copy takes dst's name in dst's parent.
	dir, name := dst, filepath.Base(src)
	info, err := client.Unary(ctx, sb, sb.RPC().Stat, &executorv1.StatRequest{Path: dst})
	switch {
	case err == nil && info.Info.Type == executorv1.FileType_FILE_TYPE_DIR:
	case err == nil && st.IsDir():
		return fmt.Errorf("cannot copy directory %s onto file %s:%s", src, sb.ID, dst)
	case err == nil || errors.Is(err, errdefs.ErrNotFound):
		dir, name = path.Dir(dst), path.Base(dst)
	default:
		return err
	}
	pr, pw := io.Pipe()
	bar := newStatusLine(os.Stderr)
	defer bar.Done()
	go func() {
		inner, iw := io.Pipe()
		go func() { iw.CloseWithError(archive.Write(iw, src)) }()
		err := client.RenameTar(inner, pw, filepath.Base(src), name)
		inner.CloseWithError(err)
		pw.CloseWithError(err)
	}()
	resp, err := sb.Upload(ctx, dir, bar.Counter("copying", pr))
	if err != nil {
		return err
	}
	bar.Done()
	if bar.tty {
		fmt.Fprintf(os.Stderr, "copied %d files (%s) to %s:%s\n", resp.Files, humanBytes(int64(resp.Bytes)), sb.ID, path.Join(dir, name))
	}
	return nil
}

// remoteSource stats what a copy out of the sandbox copies: its file
// info, and the name it is copied under ("root" for /).
func remoteSource(ctx context.Context, sb *client.Sandbox, src string) (*executorv1.FileInfo, string, error) {
	info, err := client.Unary(ctx, sb, sb.RPC().Stat, &executorv1.StatRequest{Path: src})
	if err != nil {
		return nil, "", err
	}
	// The name is the asked path's: the sandbox's answer does not choose
	// which local file is written.
	return info.Info, client.CopyName(src, info.Info.Path), nil
}

func copyOut(ctx context.Context, sb *client.Sandbox, src, dst string) error {
	info, base, err := remoteSource(ctx, sb, src)
	if err != nil {
		return err
	}
	dir, name := dst, base
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
	} else if err == nil && info.Type == executorv1.FileType_FILE_TYPE_DIR {
		return fmt.Errorf("cannot copy directory %s:%s onto file %s", sb.ID, src, dst)
	} else {
		dir, name = filepath.Dir(dst), filepath.Base(dst)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("cannot copy to %s: directory %s does not exist", dst, dir)
	}
	pr, pw := io.Pipe()
	bar := newStatusLine(os.Stderr)
	defer bar.Done()
	go func() {
		_, err := sb.Download(ctx, src, pw)
		pw.CloseWithError(err)
	}()
	// The tar stream comes from an untrusted sandbox: RenameTar keeps only
	// the entries under the copied name, and Extract refuses any entry that
	// would land outside dir.
	rr, rw := io.Pipe()
	go func() { rw.CloseWithError(client.RenameTar(bar.Counter("copying", pr), rw, base, name)) }()
	files, n, err := archive.Extract(rr, dir)
	rr.CloseWithError(err)
	if err != nil {
		return err
	}
	bar.Done()
	if bar.tty {
		fmt.Fprintf(os.Stderr, "copied %d files (%s) to %s\n", files, humanBytes(n), filepath.Join(dir, name))
	}
	return nil
}

// copyInTar unpacks the tar stream on stdin into dir in the sandbox (the
// executor's extractor is the sandbox's own business).
func copyInTar(ctx context.Context, c *cobra.Command, sb *client.Sandbox, dir string) error {
	bar := newStatusLine(os.Stderr)
	defer bar.Done()
	resp, err := sb.Upload(ctx, dir, bar.Counter("copying", c.InOrStdin()))
	if err != nil {
		return err
	}
	bar.Done()
	if bar.tty {
		fmt.Fprintf(os.Stderr, "copied %d files (%s) to %s:%s\n", resp.Files, humanBytes(int64(resp.Bytes)), sb.ID, dir)
	}
	return nil
}

// copyOutTar writes a tar of src in the sandbox to stdout. The stream is
// the sandbox's: it is rewritten, not passed on, so that what a local tar
// unpacks holds only entries under src's name (none with "..", none
// absolute) and no device nodes, fifos or sockets.
func copyOutTar(ctx context.Context, c *cobra.Command, sb *client.Sandbox, src string) error {
	_, base, err := remoteSource(ctx, sb, src)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := sb.Download(ctx, src, pw)
		pw.CloseWithError(err)
	}()
	bar := newStatusLine(os.Stderr)
	defer bar.Done()
	err = safeTar(bar.Counter("copying", pr), c.OutOrStdout(), base)
	pr.CloseWithError(err)
	return err
}

// safeTar copies the tar stream r to w keeping only base and what is under
// it, and only directories, regular files, symlinks and hard links to
// entries of the stream.
func safeTar(r io.Reader, w io.Writer, base string) error {
	rr, rw := io.Pipe()
	go func() { rw.CloseWithError(client.RenameTar(r, rw, base, base)) }()
	tr, tw := tar.NewReader(rr), tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			rr.CloseWithError(err)
			return err
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		case tar.TypeLink:
			// A hard link names another entry of the stream, or nothing.
			if ln := path.Clean(h.Linkname); ln != base && !strings.HasPrefix(ln, base+"/") {
				continue
			}
		default:
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			rr.CloseWithError(err)
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			rr.CloseWithError(err)
			return err
		}
	}
}
