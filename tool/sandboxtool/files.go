package sandboxtool

import (
	"context"
	"fmt"
	"io"
	"slices"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// The executor calls a run's files use (agent: uploads and downloads)
// beside Executor's; the executor's client has them.
type (
	archiver interface {
		Upload(ctx context.Context, dir string, tarStream io.Reader) (*executorv1.UploadResponse, error)
	}
	stater interface {
		Stat(ctx context.Context, path string) (*executorv1.FileInfo, error)
	}
)

// PutArchive has the executor unpack the tar stream under dir, with its
// hardened extractor, inside the sandbox.
func PutArchive(ctx context.Context, cl Executor, dir string, tarStream io.Reader) error {
	a, ok := cl.(archiver)
	if !ok {
		return errdefs.WithMessage(errdefs.ErrUnimplemented, "this sandbox's executor cannot unpack archives")
	}
	_, err := a.Upload(ctx, dir, tarStream)
	return err
}

// FileProblem is a path (or pattern) MatchFiles could not take, and why.
type FileProblem struct{ Path, Error string }

// MatchFiles expands absolute paths and globs, matched by the executor
// inside the sandbox, into the regular files they name, sorted, at most
// max; a matched directory gives the regular files below it. Symbolic
// links, devices and the like are reported, never followed or read.
func MatchFiles(ctx context.Context, cl Executor, patterns []string, max int) (files []string, problems []FileProblem) {
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] && len(files) < max {
			seen[p] = true
			files = append(files, p)
		}
	}
	problem := func(p string, err error) { problems = append(problems, FileProblem{p, errdefs.Public(err)}) }
	st, ok := cl.(stater)
	if !ok {
		problem(patterns[0], errdefs.WithMessage(errdefs.ErrUnimplemented, "this sandbox's executor cannot stat files"))
		return nil, problems
	}
	for _, pat := range patterns {
		paths, _, err := cl.Glob(ctx, pat, "/")
		if err == nil && len(paths) == 0 {
			err = errdefs.WithMessage(errdefs.ErrNotFound, "nothing in the sandbox matches "+pat)
		}
		if err != nil {
			problem(pat, err)
			continue
		}
		for _, p := range paths {
			fi, err := st.Stat(ctx, p)
			switch {
			case err != nil:
				problem(p, err)
			case fi.Type == executorv1.FileType_FILE_TYPE_FILE:
				add(fi.Path)
			case fi.Type == executorv1.FileType_FILE_TYPE_DIR:
				resp, err := cl.ListDir(ctx, fi.Path, 32, uint32(max))
				if err != nil {
					problem(p, err)
					continue
				}
				for _, e := range resp.Entries {
					if e.Type == executorv1.FileType_FILE_TYPE_FILE {
						add(e.Path)
					}
				}
			default:
				problems = append(problems, FileProblem{p, fmt.Sprintf(
					"%s is not a regular file or a directory (a symbolic link, device, fifo or socket): not saved", p)})
			}
		}
	}
	slices.Sort(files)
	return files, problems
}
