package e2b

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/api/e2b/envd/filesystem/filesystemconnect"
	"github.com/reinsdev/reins/api/e2b/envd/process/processconnect"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// routeData registers envd's routes (the data plane): the Connect services
// process.Process and filesystem.Filesystem, GET and POST /files, GET
// /health. Every route but /health first finds the caller's sandbox
// (sandboxClient), so a call for a sandbox that is not the caller's is
// answered like one for a missing sandbox before anything else is read.
func (h *Handler) routeData() {
	errs := &errdefs.Interceptor{Prepare: func(ctx context.Context, _ string, err error) error {
		return errdefs.Redact(err)
	}}
	opts := []connect.HandlerOption{
		connect.WithInterceptors(errs),
		// envd's messages are small but for SendInput's data and a
		// listing's answer: refuse larger requests in words.
		connect.WithReadMaxBytes(maxMessage),
	}
	errw := connect.NewErrorWriter(opts...)
	connectRoute := func(pattern string, hh http.Handler) {
		h.data.Handle(pattern, h.withSandbox(hh, func(w http.ResponseWriter, r *http.Request, err error) {
			errw.Write(w, r, errs.Error(r.Context(), r.URL.Path, err))
		}))
	}
	connectRoute(processconnect.NewProcessHandler(&processService{h: h}, opts...))
	connectRoute(filesystemconnect.NewFilesystemHandler(&filesystemService{h: h}, opts...))
	filesErr := func(w http.ResponseWriter, r *http.Request, err error) { writeFilesError(w, err) }
	h.data.Handle("GET /files", h.withSandbox(http.HandlerFunc(h.getFile), filesErr))
	h.data.Handle("POST /files", h.withSandbox(http.HandlerFunc(h.postFiles), filesErr))
	h.data.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	h.data.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, "reins does not implement the envd call "+r.Method+" "+r.URL.Path)
	})
}

// maxMessage bounds an envd Connect request (SendInput's data is the
// largest) and an answer's listing.
const maxMessage = 4 << 20

// call is what withSandbox found for a request: the caller's client and
// sandbox.
type call struct {
	c      *client.Client
	sb     *client.Sandbox
	caller string // whose credential: bounds kept per tenant
}

type callKey struct{}

func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// withSandbox finds the request's sandbox as its caller (sandboxClient)
// and hands it to next in the context; a failure is answered by fail.
func (h *Handler) withSandbox(next http.Handler, fail func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, sb, caller, err := h.sandboxClient(r)
		if err != nil {
			if errdefs.Kind(err) == nil {
				err = errdefs.WithMessage(errdefs.ErrUnauthenticated, err.Error())
			}
			fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, &call{c: c, sb: sb, caller: caller})))
	})
}

// account is who an envd call acts as: E2B's user "user" (the default)
// or "root", an account of the sandbox's /etc/passwd (ExecRequest.user:
// the executor sets its uid, groups, HOME, USER and starts in its home).
type account struct {
	name string
	home string
}

// abs makes p absolute: a relative path is under the account's home, as
// envd has it.
func (a account) abs(p string) string {
	if p == "" || path.IsAbs(p) {
		return p
	}
	return path.Join(a.home, p)
}

// makeParent makes p's directory as the account when it is missing, so
// that directories a write makes are the account's, as envd's are.
func (a account) makeParent(ctx context.Context, sb *client.Sandbox, p string) error {
	if a.name == "root" {
		return nil
	}
	dir := path.Dir(p)
	_, err := client.Unary(ctx, sb, sb.RPC().Stat, &executorv1.StatRequest{Path: dir})
	if errdefs.Kind(err) == errdefs.ErrNotFound {
		return makeDir(ctx, sb, a, dir)
	}
	return err
}

// own gives the files at paths to the account, as envd's writes (made by
// the user) are: the executor writes as root (docs/decisions/0049-envd-data-plane.md).
func (a account) own(ctx context.Context, sb *client.Sandbox, paths ...string) error {
	if a.name == "root" {
		return nil
	}
	if msg, err := runArgv(ctx, sb, "", append([]string{"chown", a.name + ":", "--"}, paths...)); err != nil || msg != "" {
		return cmp.Or(err, errdefs.WithMessage(errdefs.ErrFailedPrecondition,
			fmt.Sprintf("the file was written but could not be given to %s: %s", a.name, msg)))
	}
	return nil
}

// runArgv runs argv as user to its end: msg is its stderr (bounded) when it
// failed, "" when it exited 0.
func runArgv(ctx context.Context, sb *client.Sandbox, user string, argv []string) (msg string, err error) {
	var stderr strings.Builder
	x, err := sb.Exec(ctx, &executorv1.ExecRequest{Argv: argv, User: user}, func(ev *executorv1.ExecEvent) {
		if stderr.Len() < 4096 {
			stderr.Write(ev.GetStderr())
		}
	})
	if err != nil || x.GetExitCode() == 0 {
		return "", err
	}
	return cmp.Or(strings.TrimSpace(stderr.String()), fmt.Sprintf("%s exited %d", argv[0], x.GetExitCode())), nil
}

// accountNamed returns the account name stands for ("": the default).
func accountNamed(name string) (account, error) {
	switch name {
	case "", "user":
		return account{name: "user", home: "/home/user"}, nil
	case "root":
		return account{name: "root", home: "/root"}, nil
	}
	return account{}, errdefs.WithMessage(errdefs.ErrUnauthenticated,
		fmt.Sprintf("the sandbox has no user %q: use \"user\" (the default) or \"root\"", name))
}

// accountOf reads the account of a Connect call: envd's SDKs name it in
// "Authorization: Basic base64(user:)".
func accountOf(hdr http.Header) (account, error) {
	v := hdr.Get("Authorization")
	if v == "" {
		return accountNamed("")
	}
	b64, ok := strings.CutPrefix(v, "Basic ")
	if !ok || len(b64) > 1024 {
		return account{}, errdefs.WithMessage(errdefs.ErrUnauthenticated,
			"the Authorization header is not \"Basic base64(user:)\", the form envd takes a user in")
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return account{}, errdefs.WithMessage(errdefs.ErrUnauthenticated, "the Authorization header's user is not base64")
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return accountNamed(name)
}
