package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/server/wire"
)

// RawFilePath is the route of whole files as raw bytes, beside the
// Connect API: GET answers the file's bytes, PUT writes the request's
// body to it; ?path= names the file (absolute, in the sandbox).
const RawFilePath = "/v1/sandboxes/{id}/files"

// Raw files (docs/api.md, "Unary calls and raw files") are for callers
// without a Connect client (curl, SDKs): one file's bytes as they are,
// streamed end to end with no size cap but the sandbox's disk. They are
// served by the executor client's OpenFile and WriteFileFrom: staged
// through the host's view of the sandbox's root when they can be
// (docs/decisions/0017-staged-transfers.md), over the executor's socket
// otherwise. The service holds one buffer per transfer, never the file.
func (s *Server) handleRawFiles(mux *http.ServeMux) {
	mux.HandleFunc("GET "+RawFilePath, s.readRaw)
	mux.HandleFunc("PUT "+RawFilePath, s.writeRaw)
}

// rawBuffer is the size of the buffer a raw transfer copies through.
const rawBuffer = 1 << 20

func (s *Server) readRaw(w http.ResponseWriter, r *http.Request) {
	id, p, ex, err := s.rawTarget(r)
	if err != nil {
		s.writeRawError(w, r, err)
		return
	}
	// As Download: each transfer holds a buffer in the service's memory.
	release, err := s.downloads.acquire(r.Context(), id)
	if err != nil {
		s.writeRawError(w, r, err)
		return
	}
	defer release()
	f, info, err := ex.OpenFile(r.Context(), p)
	if err != nil {
		s.writeRawError(w, r, s.downloadError(id, err))
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatUint(info.Size, 10))
	if info.MtimeUnixNano > 0 {
		h.Set("Last-Modified", time.Unix(0, info.MtimeUnixNano).UTC().Format(http.TimeFormat))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	buf := make([]byte, rawBuffer)
	if _, err := io.CopyBuffer(w, struct{ io.Reader }{f}, buf); err != nil {
		// The status is sent: cut the connection, so the caller sees a
		// short body (against Content-Length), never a silently short file.
		s.log.Info("raw file read cut", "sandbox", id, "tenant", tenant(r.Context()), "err", errdefs.Redact(err))
		panic(http.ErrAbortHandler)
	}
}

func (s *Server) writeRaw(w http.ResponseWriter, r *http.Request) {
	id, p, ex, err := s.rawTarget(r)
	var mode uint32
	if err == nil {
		mode, err = rawMode(r.URL.Query().Get("mode"))
	}
	if err != nil {
		s.writeRawError(w, r, err)
		return
	}
	body := &countingReader{r: r.Body}
	n, err := ex.WriteFileFrom(r.Context(), p, mode, body)
	if err == nil && r.ContentLength >= 0 && n != r.ContentLength {
		err = fmt.Errorf("the body was %d bytes, its Content-Length says %d: %w", n, r.ContentLength, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		if body.err != nil && !errors.Is(body.err, io.EOF) {
			// The caller's body broke (it went away, or sent less than its
			// Content-Length): that is the story, and no file was written.
			err = fmt.Errorf("the request body ended after %d bytes, before its end (%v); %s is unchanged: %w",
				body.n, body.err, p, errdefs.ErrInvalidArgument)
		}
		s.writeRawError(w, r, s.downloadError(id, err))
		return
	}
	b, err := wire.JSON.Marshal(&reinsv1.WriteRawFileResponse{Path: p, SizeBytes: n})
	if err != nil {
		s.writeRawError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// rawTarget is the sandbox, its executor and the file a raw file call
// names. The sandbox is found first, so another tenant's is answered as
// a missing one whatever else the request says.
func (s *Server) rawTarget(r *http.Request) (id, p string, ex Executor, err error) {
	id = r.PathValue("id")
	if ex, err = s.m.Executor(r.Context(), tenant(r.Context()), id); err != nil {
		return "", "", nil, err
	}
	p = r.URL.Query().Get("path")
	switch {
	case p == "":
		err = errdefs.WithMessage(errdefs.ErrInvalidArgument, "name the file with ?path=/absolute/path/in/the/sandbox")
	case !path.IsAbs(p):
		err = errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("path %.200q is relative: give an absolute path in the sandbox", p))
	case strings.HasSuffix(p, "/") && p != "/":
		err = errdefs.WithMessage(errdefs.ErrIsDirectory, fmt.Sprintf("path %.200q ends with \"/\", so it is a directory: name a file", p))
	}
	return id, p, ex, err
}

// rawMode parses ?mode= (octal permission bits; "" for the default).
func rawMode(v string) (uint32, error) {
	if v == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m > 0o777 || m == 0 {
		return 0, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("mode %.20q: give octal permission bits, 1 to 0777 (e.g. 0644)", v))
	}
	return uint32(m), nil
}

// countingReader counts what a request body yields and keeps its error.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// writeRawError answers a raw file call with err as Connect's error JSON
// ({"code": "not_found", "message": …}, the kind in Reins-Error-Kind),
// translated as every call's (errors.go), with the HTTP status a plain
// HTTP client expects of the kind.
func (s *Server) writeRawError(w http.ResponseWriter, r *http.Request, err error) {
	var ce *connect.Error
	if !errors.As(s.errs.Error(r.Context(), r.URL.Path, err), &ce) {
		ce = connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
	kind := ce.Meta().Get(errdefs.KindHeader)
	w.Header().Set(errdefs.KindHeader, kind)
	if code := ce.Meta().Get(errdefs.ExitCodeHeader); code != "" {
		w.Header().Set(errdefs.ExitCodeHeader, code)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rawStatus(kind, ce.Code()))
	json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{ce.Code().String(), ce.Message()})
}

// rawStatus is the HTTP status of an error kind for a plain HTTP caller.
func rawStatus(kind string, code connect.Code) int {
	switch kind {
	case "not_found":
		return http.StatusNotFound
	case "invalid_argument", "is_directory":
		return http.StatusBadRequest
	case "already_exists", "failed_precondition":
		return http.StatusConflict
	case "too_large":
		return http.StatusRequestEntityTooLarge
	case "no_space":
		return http.StatusInsufficientStorage
	case "permission_denied":
		return http.StatusForbidden
	case "unauthenticated":
		return http.StatusUnauthorized
	case "resource_exhausted":
		return http.StatusTooManyRequests
	case "timeout":
		return http.StatusGatewayTimeout
	case "unavailable":
		return http.StatusServiceUnavailable
	case "unimplemented":
		return http.StatusNotImplemented
	case "canceled":
		return 499 // the caller went away (nginx's "client closed request")
	}
	if code == connect.CodeInternal || code == connect.CodeUnknown {
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}
