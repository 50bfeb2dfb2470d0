// Package template builds and keeps templates: a template is a snapshot
// made by running steps (RUN a command, COPY files, ENV K=V) in a build
// sandbox on an image, in the order given, plus the env those steps set
// and an optional start command (with the ready command that says it is
// up) that every sandbox made from it runs before it is handed over.
//
// Each step's result is cached: the step's key is the sha256 of its
// parent's key, its kind, its text (a copy's tar digest and destination)
// and the env set so far, and its result is an unnamed snapshot kept by
// that key. A build whose first k steps have cached results starts its
// build sandbox from the snapshot of step k and runs only the rest; a
// build that fails or is cancelled keeps the steps it finished, so the
// next one resumes from them. The template record itself is written only
// when every step has succeeded, so a failed build leaves the template of
// that name (if any) as it was.
//
// Records are JSON files under the Store's directory, one per tenant and
// name, written atomically; cache entries are one small file per tenant
// and key. Names are [a-z0-9][a-z0-9._-]{0,62}, per tenant: no tenant
// sees, uses, replaces or learns of another's template or cache.
package template

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
)

// Kinds of step.
const (
	StepRun  = "run"
	StepCopy = "copy"
	StepEnv  = "env"
)

// Step is one step of a build.
type Step struct {
	Kind string `json:"kind"`
	// Text is the command of a run step, K=V of an env step.
	Text string `json:"text,omitempty"`
	// A copy step's tar stream (in a build request only; never kept), its
	// sha256 (kept), where it goes inside the sandbox and the source as
	// the user named it (for progress).
	Tar       []byte `json:"-"`
	TarDigest string `json:"tar_digest,omitempty"`
	Dst       string `json:"dst,omitempty"`
	Src       string `json:"src,omitempty"`
}

// What is how progress names the step: "RUN apt-get install -y jq",
// "COPY ./src /app", "ENV A=1".
func (s Step) What() string {
	switch s.Kind {
	case StepCopy:
		return "COPY " + s.Src + " " + s.Dst
	case StepEnv:
		return "ENV " + s.Text
	default:
		return "RUN " + s.Text
	}
}

// Spec is what a build is asked to make.
type Spec struct {
	Name string
	// From is an image reference or template:NAME.
	From  string
	Steps []Step
	// Start is left running in every sandbox made from the template;
	// Ready exits 0 once it is up (polled up to ReadyTimeout).
	Start        string
	Ready        string
	ReadyTimeout time.Duration
	Backend      string
	NoCache      bool
}

// DefaultReadyTimeout bounds the wait for Ready when a Spec sets none.
const DefaultReadyTimeout = 60 * time.Second

// Template is a built template's record.
type Template struct {
	Version int    `json:"version"`
	Tenant  string `json:"tenant,omitempty"`
	Name    string `json:"name"`
	From    string `json:"from"`
	Backend string `json:"backend,omitempty"`
	// Steps as they were given, copies without their tar.
	Steps        []Step        `json:"steps,omitempty"`
	Env          []string      `json:"env,omitempty"`
	Start        string        `json:"start,omitempty"`
	Ready        string        `json:"ready,omitempty"`
	ReadyTimeout time.Duration `json:"ready_timeout,omitempty"`
	// Snapshot is the digest of the snapshot sandboxes start from.
	Snapshot  string    `json:"snapshot"`
	CreatedAt time.Time `json:"created_at"`
	// Bytes is the snapshot's content size; CachedSteps how many steps
	// the build that made it took from the cache.
	Bytes       int64 `json:"bytes,omitempty"`
	CachedSteps int   `json:"cached_steps,omitempty"`
}

// Ref is how sandboxes name the template as their image.
func (t Template) Ref() string { return Prefix + t.Name }

// Prefix marks a template in an image reference: "template:web".
const Prefix = "template:"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckName refuses a name that is not [a-z0-9][a-z0-9._-]{0,62}: no
// "/", no "..", nothing that could be more than one file name.
func CheckName(name string) error {
	if !nameRE.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("template name %q is not valid: use 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit, without \"..\": %w",
			truncate(name, 80), errdefs.ErrInvalidArgument)
	}
	return nil
}

// Bounds on a spec: it is the user's to fill, and kept in the record.
const (
	MaxSteps     = 256
	MaxTextBytes = 64 << 10 // one command, one env entry, start or ready
	// MaxOutputShown is how much of one step's output is streamed to the
	// caller; the rest is counted, and its tail kept for an error.
	MaxOutputShown = 1 << 20
	tailBytes      = 4 << 10
)

// Check checks a spec's name and steps, before anything is made.
func (s Spec) Check() error {
	if err := CheckName(s.Name); err != nil {
		return err
	}
	if s.From == "" {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "a template needs --from: the image (or template:NAME) its steps run on")
	}
	if s.From == Prefix+s.Name {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "template "+s.Name+" cannot be built --from itself")
	}
	if len(s.Steps) > MaxSteps {
		return fmt.Errorf("%d steps: at most %d: %w", len(s.Steps), MaxSteps, errdefs.ErrInvalidArgument)
	}
	for i, st := range s.Steps {
		if err := st.check(); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, truncate(st.What(), 80), err)
		}
	}
	if len(s.Start) > MaxTextBytes || len(s.Ready) > MaxTextBytes {
		return fmt.Errorf("the start or ready command is over %d bytes: %w", MaxTextBytes, errdefs.ErrInvalidArgument)
	}
	if s.Ready != "" && s.Start == "" {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "--ready says when --start is up: give a --start too")
	}
	if s.ReadyTimeout < 0 {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "the ready timeout must not be negative")
	}
	return nil
}

func (s Step) check() error {
	if len(s.Text) > MaxTextBytes {
		return fmt.Errorf("over %d bytes: %w", MaxTextBytes, errdefs.ErrInvalidArgument)
	}
	switch s.Kind {
	case StepRun:
		if strings.TrimSpace(s.Text) == "" {
			return errdefs.WithMessage(errdefs.ErrInvalidArgument, "an empty command")
		}
	case StepEnv:
		if k, _, ok := strings.Cut(s.Text, "="); !ok || k == "" || strings.ContainsRune(s.Text, 0) {
			return errdefs.WithMessage(errdefs.ErrInvalidArgument, "want K=V")
		}
	case StepCopy:
		if !strings.HasPrefix(s.Dst, "/") || s.Dst == "/" || len(s.Dst) > 1024 || strings.ContainsRune(s.Dst, 0) || hasDotDot(s.Dst) {
			return errdefs.WithMessage(errdefs.ErrInvalidArgument, "the destination must be an absolute path inside the sandbox, not /, without .. or NUL")
		}
		if len(s.Src) > 4096 {
			return errdefs.WithMessage(errdefs.ErrInvalidArgument, "the source's name is over 4096 bytes")
		}
	default:
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "a step is run, copy or env")
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
