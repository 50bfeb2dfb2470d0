package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/sandbox/template"
	"github.com/reinsdev/reins/server"
)

func templateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "template",
		Aliases: []string{"tpl"},
		Short:   "Build, list and remove templates (images made by running steps, usable as --image template:NAME)",
	}
	c.AddCommand(templateBuildCmd(), templateLsCmd(), templateRmCmd())
	return group(c)
}

// stepFlag appends its kind of step to a list shared by --run, --copy and
// --env, so that the steps keep the order they were given in.
type stepFlag struct {
	kind  string
	steps *[]stepArg
}

type stepArg struct{ kind, value string }

func (f stepFlag) String() string { return "" }
func (f stepFlag) Type() string   { return "string" }
func (f stepFlag) Set(s string) error {
	if f.kind == "env" {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
			return errors.New("want K=V")
		}
	}
	if f.kind == "copy" {
		if _, _, err := splitCopy(s); err != nil {
			return err
		}
	}
	*f.steps = append(*f.steps, stepArg{f.kind, s})
	return nil
}

// splitCopy splits --copy SRC:DST at the last ":/" (DST is absolute; SRC
// may hold a ':').
func splitCopy(s string) (src, dst string, err error) {
	i := strings.LastIndex(s, ":/")
	if i <= 0 {
		return "", "", errors.New("want SRC:DST, DST an absolute path in the sandbox (./site:/srv/www)")
	}
	return s[:i], s[i+1:], nil
}

func templateBuildCmd() *cobra.Command {
	var (
		req          reinsv1.BuildTemplateRequest
		steps        []stepArg
		readyTimeout time.Duration
		asJSON       bool
	)
	c := &cobra.Command{
		Use:   "build NAME --from IMAGE [--run CMD]... [--copy SRC:DST]... [--env K=V]...",
		Short: "Build a template: run steps on an image, each cached, and save the result",
		Long: `Build a template: a build sandbox is made from --from (an image, or
template:NAME), the steps run in it in the order given (as a Dockerfile's),
and its files are saved as the template. Sandboxes made with
--image template:NAME start from those files, with the --env the steps set.

  --run CMD        run sh -c CMD; a step that exits non-zero stops the build
  --copy SRC:DST   copy SRC from this machine to DST in the sandbox (DST is
                   the copy's own path: ./site:/srv/www makes /srv/www a
                   copy of ./site); symbolic links inside a directory are
                   kept as links
  --env K=V        set K for the later steps and the template's sandboxes

Each step's result is cached by what it is and what came before it: a
build whose first steps are unchanged starts from the last of them (they
show "cached"), and a build interrupted by Ctrl-C resumes from the steps it
finished. --no-cache runs every step again. A failed or interrupted build
leaves the template of that name as it was.

--start leaves a process running in every sandbox made from the template (a
dev server, a display); --ready is a command that exits 0 once it is up:
sandbox create returns only after it does (polled, up to --ready-timeout).
The build runs both once to check them.

  reins template build web --from debian --copy ./site:/srv/www \
      --env PORT=8080 --start 'busybox httpd -f -p 8080 -h /srv/www' \
      --ready 'wget -q -O- http://127.0.0.1:8080/'
  reins sandbox create --image template:web`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			req.Name = args[0]
			if req.From == "" {
				return usageError{errors.New("--from is required: the image (or template:NAME) the steps run on")}
			}
			if readyTimeout < 0 {
				return usageError{errors.New("--ready-timeout must not be negative")}
			}
			req.ReadyTimeoutMs = readyTimeout.Milliseconds()
			if err := buildSteps(&req, steps); err != nil {
				return err
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			pr := newBuildPrinter(os.Stderr)
			t, err := cl.BuildTemplate(ctx, &req, pr.progress)
			pr.bar.Done()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), t)
			}
			fmt.Fprintf(c.OutOrStdout(), "template %s built: %d steps (%d cached), %s\n", t.Name, len(t.Steps), t.CachedSteps, humanBytes(t.Bytes))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&req.From, "from", "", "the image the steps run on: busybox, debian, an OCI reference, or template:NAME")
	f.Var(stepFlag{"run", &steps}, "run", "a step: run sh -c CMD (repeatable; steps run in the order given)")
	f.Var(stepFlag{"copy", &steps}, "copy", "a step: copy SRC on this machine to DST in the sandbox (repeatable)")
	f.Var(stepFlag{"env", &steps}, "env", "a step: set K=V for later steps and the template's sandboxes (repeatable)")
	f.StringVar(&req.Start, "start", "", "a command left running in every sandbox made from the template")
	f.StringVar(&req.Ready, "ready", "", "a command that exits 0 once --start is up; create waits for it")
	durationVar(f, &readyTimeout, "ready-timeout", 0, "how long --ready may take to succeed (default 60s)")
	f.StringVar(&req.Backend, "backend", "", "isolation backend of the build and of the template's sandboxes: gvisor or runc")
	f.BoolVar(&req.NoCache, "no-cache", false, "run every step again, ignoring cached results")
	f.BoolVar(&asJSON, "json", false, "print the template as JSON")
	return c
}

// maxCopyBytes is how much a build's --copy steps may carry in all: they
// travel in the build request, which the service takes up to
// server.MaxMessage.
const maxCopyBytes = server.MaxMessage - 1<<20

// buildSteps turns the flags into the request's steps, reading each
// --copy source into a tar stream named after its destination.
func buildSteps(req *reinsv1.BuildTemplateRequest, steps []stepArg) error {
	total := 0
	for _, s := range steps {
		switch s.kind {
		case "run":
			req.Steps = append(req.Steps, &reinsv1.TemplateStep{Step: &reinsv1.TemplateStep_Run{Run: s.value}})
		case "env":
			req.Steps = append(req.Steps, &reinsv1.TemplateStep{Step: &reinsv1.TemplateStep_Env{Env: s.value}})
		case "copy":
			src, dst, _ := splitCopy(s.value)
			tar, err := copyTar(src, dst)
			if err != nil {
				return err
			}
			if total += len(tar); total > maxCopyBytes {
				return fmt.Errorf("the --copy sources come to more than %s, the most a build carries: put big files in an image, or fetch them in a --run step", humanBytes(maxCopyBytes))
			}
			req.Steps = append(req.Steps, &reinsv1.TemplateStep{Step: &reinsv1.TemplateStep_Copy{Copy: &reinsv1.TemplateCopy{Tar: tar, Dst: dst, Src: src}}})
		}
	}
	return nil
}

// copyTar is a tar stream of src (as sandbox cp makes it: links inside a
// directory kept as links) whose top entry is named base(dst), to be
// unpacked in dst's parent.
func copyTar(src, dst string) ([]byte, error) {
	if _, err := os.Stat(src); err != nil {
		return nil, fmt.Errorf("cannot copy %s: %w", src, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.Write(pw, src)) }()
	var buf bytes.Buffer
	lw := &limitedWriter{w: &buf, left: maxCopyBytes}
	err := client.RenameTar(pr, lw, filepath.Base(src), path.Base(dst))
	pr.CloseWithError(io.ErrClosedPipe)
	if errors.Is(err, errCopyTooBig) {
		return nil, fmt.Errorf("--copy %s is more than %s, the most a build carries: put big files in an image, or fetch them in a --run step", src, humanBytes(maxCopyBytes))
	}
	if err != nil {
		return nil, fmt.Errorf("cannot copy %s: %w", src, err)
	}
	return buf.Bytes(), nil
}

var errCopyTooBig = errors.New("copy too big")

type limitedWriter struct {
	w    io.Writer
	left int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.left {
		return 0, errCopyTooBig
	}
	l.left -= len(p)
	return l.w.Write(p)
}

// buildPrinter shows a build as it goes on stderr: a line per step
// ("step 2/5 RUN make", "step 1/5 RUN apt-get update: cached"), the
// steps' output as it comes, what each saved, and image pulls on the
// status line.
type buildPrinter struct {
	w    io.Writer
	bar  *statusLine
	step int
	what string
}

func newBuildPrinter(w *os.File) *buildPrinter { return &buildPrinter{w: w, bar: newStatusLine(w)} }

func (b *buildPrinter) progress(p *reinsv1.TemplateProgress) {
	if p.Step != int32(b.step) || p.What != b.what {
		b.bar.Done()
		b.step, b.what = int(p.Step), p.What
		switch {
		case p.Step == 0 || p.Step > p.Steps:
			fmt.Fprintf(b.w, "%s\n", p.What)
		case p.Cached:
			fmt.Fprintf(b.w, "step %d/%d %s: cached\n", p.Step, p.Steps, p.What)
		default:
			fmt.Fprintf(b.w, "step %d/%d %s\n", p.Step, p.Steps, p.What)
		}
	}
	if p.Output != "" {
		b.bar.Done()
		io.WriteString(b.w, p.Output)
	}
	if sp := p.Progress; sp != nil {
		switch {
		case sp.Item == template.ItemSaved:
			b.bar.Done()
			fmt.Fprintf(b.w, "  %s\n", sp.Message)
			return
		case sp.Phase == reinsv1.ProgressPhase_PROGRESS_PHASE_UNSPECIFIED:
			// A save of the step's files: bytes of bytes, and the files.
			text := "  " + sp.Item
			if sp.Total > 0 {
				text += fmt.Sprintf(" %s %s / %s", bar(sp.Done, sp.Total, 20), humanBytes(sp.Done), humanBytes(sp.Total))
			} else {
				text += " " + humanBytes(sp.Done)
			}
			b.bar.show(text+"  "+sp.Message, false)
			return
		}
		b.bar.Progress(sp)
	}
}

func templateLsCmd() *cobra.Command {
	return listCmd("List your templates", "NAME\tFROM\tSTEPS\tSIZE\tSTART\tBUILT", (*client.Client).ListTemplates,
		func(t *reinsv1.Template) string {
			start := t.Start
			if start == "" {
				start = "-"
			}
			return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", t.Name, t.From, len(t.Steps), humanBytes(t.Bytes), truncateText(start, 40), ago(t.CreatedUnixNano))
		})
}

func templateRmCmd() *cobra.Command {
	return removeCmd("rm NAME...", "Remove templates (refused while a sandbox or a pool needs one)", "template", (*client.Client).DeleteTemplate)
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
