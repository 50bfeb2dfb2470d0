package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// A run's files cross the boundary twice (docs/decisions/0050-runfiles-design.md):
// the uploads, a tar archive the client sent with the run, are unpacked
// by the files sandbox's executor when the sandbox is made, before any
// tool runs in it; the downloads, globs matched by the executor inside
// the sandbox, are streamed into the blob store as artifacts when the
// run ends. The service never unpacks the archive nor opens a path the
// sandbox names: it reads the archive's headers, to list and bound them,
// and reads the sandbox's files through the executor.

// PutUploads checks the tar archive a run is started with and keeps it
// in the blob store, returning its digest and what it holds. Only
// directories and regular files with clean relative names are taken.
func (e *Engine) PutUploads(ctx context.Context, archive []byte) (string, []runlog.Upload, error) {
	if len(archive) > runlog.MaxUploadBytes {
		return "", nil, errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf(
			"the run's uploads are %d bytes, over the %d MiB a run takes; upload fewer files, or put large ones into a sandbox with reins sandbox cp and lend it to the run",
			len(archive), runlog.MaxUploadBytes>>20))
	}
	list, err := listUploads(archive)
	if err != nil {
		return "", nil, err
	}
	digest, _, err := e.cfg.Blobs.Put(ctx, bytes.NewReader(archive))
	if err != nil {
		return "", nil, fmt.Errorf("keeping the run's uploads: %w", err)
	}
	return digest, list, nil
}

func listUploads(archive []byte) ([]runlog.Upload, error) {
	bad := func(format string, a ...any) error {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "the run's uploads: "+fmt.Sprintf(format, a...))
	}
	var list []runlog.Upload
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, bad("not a tar archive (%v)", err)
		}
		if len(list) == runlog.MaxUploadEntries {
			return nil, bad("more than %d files and directories", runlog.MaxUploadEntries)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") ||
			strings.ContainsAny(name, "\x00\n") {
			return nil, bad("entry %q is not a clean relative path (sandbox path without its leading /)", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			list = append(list, runlog.Upload{Path: "/" + name, Dir: true})
		case tar.TypeReg:
			list = append(list, runlog.Upload{Path: "/" + name, Size: h.Size})
		default:
			return nil, bad("entry %q is not a regular file or a directory", h.Name)
		}
	}
	if len(list) == 0 {
		return nil, bad("the archive is empty")
	}
	return list, nil
}

// uploadsNote is what the model's first message says of the uploads.
func uploadsNote(spec runlog.Spec) string {
	if len(spec.Uploads) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n\nThese files were uploaded into the sandbox %q before you started:\n", spec.FilesSandbox())
	for i, u := range spec.Uploads {
		if i == 50 {
			fmt.Fprintf(&b, "- … and %d more\n", len(spec.Uploads)-i)
			break
		}
		if u.Dir {
			fmt.Fprintf(&b, "- %s/ (directory)\n", u.Path)
		} else {
			fmt.Fprintf(&b, "- %s (%d bytes)\n", u.Path, u.Size)
		}
	}
	if len(spec.Downloads) > 0 {
		fmt.Fprintf(&b, "When you finish, these paths are brought back to the user: %s\n", strings.Join(spec.Downloads, " "))
	}
	return b.String()
}

// putUploads unpacks the run's uploads into sandbox id (the files
// sandbox, just made from an image or lent to the run).
func (e *Engine) putUploads(ctx context.Context, r *run, name, id string) error {
	spec := r.st.spec
	if spec.UploadsDigest == "" || name != spec.FilesSandbox() {
		return nil
	}
	cl, err := e.cfg.Sandboxes.Executor(ctx, id)
	if err != nil {
		return err
	}
	blob, err := e.cfg.Blobs.Open(ctx, spec.UploadsDigest)
	if err != nil {
		return fmt.Errorf("the run's uploads: %w", err)
	}
	defer blob.Close()
	if err := sandboxtool.PutArchive(ctx, cl, "/", io.LimitReader(blob, runlog.MaxUploadBytes+1)); err != nil {
		return fmt.Errorf("putting the run's uploads into sandbox %q: %w", name, err)
	}
	return nil
}

// saveDownloads saves the files the run's downloads name, from its files
// sandbox if it has one, as artifacts (and, for a file it could not save,
// an artifact with the reason). It never fails the run: what went wrong
// is in the artifacts.
func (e *Engine) saveDownloads(ctx context.Context, r *run) {
	spec := r.st.spec
	name := spec.FilesSandbox()
	id, ok := r.st.sandboxes[name]
	if len(spec.Downloads) == 0 || !ok || spec.Agent != "" {
		return
	}
	var evs []any
	record := func(a runlog.Artifact) { evs = append(evs, a) }
	defer func() {
		if len(evs) > 0 {
			if err := e.append(ctx, r, "", evs...); err != nil {
				e.log.Error("recording a run's downloads", "run", r.id, "err", err)
			}
		}
	}()
	fail := func(pattern string, err error) {
		record(runlog.Artifact{Name: pattern, Source: name + ":" + pattern, Error: errdefs.Public(err)})
	}
	if _, err := e.cfg.Sandboxes.Wake(ctx, id); err != nil {
		fail(spec.Downloads[0], fmt.Errorf("the sandbox is gone, its files with it: %w", err))
		return
	}
	cl, err := e.cfg.Sandboxes.Executor(ctx, id)
	if err != nil {
		fail(spec.Downloads[0], err)
		return
	}
	files, problems := sandboxtool.MatchFiles(ctx, cl, spec.Downloads, runlog.MaxDownloadFiles+1)
	for _, p := range problems {
		record(runlog.Artifact{Name: p.Path, Error: p.Error})
	}
	sb := e.sandboxFor(cl, id, name, "")
	var total int64
	for i, p := range files {
		if i == runlog.MaxDownloadFiles || total >= runlog.MaxDownloadTotal {
			fail(p, fmt.Errorf("%d more files were not saved: a run's downloads save at most %d files and %d MiB; %w",
				len(files)-i, runlog.MaxDownloadFiles, runlog.MaxDownloadTotal>>20, errdefs.ErrTooLarge))
			break
		}
		a, err := sandboxtool.SaveFile(ctx, sb, p, p)
		if err != nil {
			fail(p, err)
			continue
		}
		total += a.Size
		record(runlog.Artifact{Name: a.Name, Digest: a.Digest, Size: a.Size, Source: a.Source})
	}
}
