package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"

	"github.com/reinsdev/reins/errdefs"
)

// maxFileParts bounds the files one multipart POST /files may carry
// (mime/multipart bounds each part's headers); the bytes of the files
// are streamed, never held.
const maxFileParts = 1000

// getFile is envd's GET /files?path=&username=: the file's bytes,
// streamed from the executor (no size cap).
func (h *Handler) getFile(w http.ResponseWriter, r *http.Request) {
	sb := callOf(r.Context()).sb
	acct, err := accountNamed(r.URL.Query().Get("username"))
	if err != nil {
		writeFilesError(w, err)
		return
	}
	p := acct.abs(r.URL.Query().Get("path"))
	if p == "" {
		writeFilesError(w, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the path query parameter is missing: GET /files?path=/abs/file"))
		return
	}
	rc, err := sb.ReadRaw(r.Context(), p)
	if err != nil {
		writeFilesError(w, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	// An error after the first byte can only cut the answer short: the
	// client sees a body shorter than it should be, or a reset.
	io.Copy(w, rc)
}

// writtenEntry is envd's answer for each file POST /files wrote.
type writtenEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// postFiles is envd's POST /files?path=&username=: one file as the body
// (application/octet-stream), or one or more as multipart/form-data
// parts, each named by the path parameter or, without one, by its
// filename. Each file is streamed to the sandbox as it arrives.
func (h *Handler) postFiles(w http.ResponseWriter, r *http.Request) {
	acct, err := accountNamed(r.URL.Query().Get("username"))
	if err != nil {
		writeFilesError(w, err)
		return
	}
	dest := acct.abs(r.URL.Query().Get("path"))
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []writtenEntry
	switch mt {
	case "multipart/form-data":
		written, err = h.writeParts(r, acct, dest, params["boundary"])
	case "application/octet-stream", "":
		written, err = h.writeBody(r, acct, dest)
	default:
		err = errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("POST /files takes multipart/form-data or application/octet-stream, not %q", mt))
	}
	if err != nil {
		writeFilesError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(written)
}

func (h *Handler) writeBody(r *http.Request, acct account, dest string) ([]writtenEntry, error) {
	if dest == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the path query parameter is missing: POST /files?path=/abs/file")
	}
	if r.Header.Get("Content-Encoding") != "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "reins does not take a Content-Encoding on POST /files: send the bytes as they are")
	}
	size := r.ContentLength
	if size < 0 {
		size = -1
	}
	sb := callOf(r.Context()).sb
	if err := acct.makeParent(r.Context(), sb, dest); err != nil {
		return nil, err
	}
	if err := sb.WriteRaw(r.Context(), dest, r.Body, size); err != nil {
		return nil, err
	}
	if err := acct.own(r.Context(), sb, dest); err != nil {
		return nil, err
	}
	return []writtenEntry{entryWritten(dest)}, nil
}

func (h *Handler) writeParts(r *http.Request, acct account, dest, boundary string) ([]writtenEntry, error) {
	if boundary == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the multipart/form-data body has no boundary")
	}
	mr := multipart.NewReader(r.Body, boundary)
	var written []writtenEntry
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the multipart/form-data body is malformed: "+err.Error())
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		if len(written) >= maxFileParts {
			return nil, errdefs.WithMessage(errdefs.ErrTooLarge, "POST /files takes at most "+strconv.Itoa(maxFileParts)+" files at once")
		}
		p := dest
		if p == "" {
			p = acct.abs(partFileName(part))
		}
		if p == "" {
			return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "a file part names no path: give ?path= or the part's filename")
		}
		if err := acct.makeParent(r.Context(), callOf(r.Context()).sb, p); err != nil {
			return nil, err
		}
		body := &readErr{r: part}
		err = callOf(r.Context()).sb.WriteRaw(r.Context(), p, body, -1)
		part.Close()
		if body.err != nil && !errors.Is(body.err, io.EOF) {
			// The body broke, not the write.
			return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the multipart/form-data body is malformed or cut short: "+body.err.Error())
		}
		if err != nil {
			return nil, err
		}
		written = append(written, entryWritten(p))
	}
	if len(written) > 0 {
		ps := make([]string, len(written))
		for i, w := range written {
			ps[i] = w.Path
		}
		if err := acct.own(r.Context(), callOf(r.Context()).sb, ps...); err != nil {
			return nil, err
		}
	}
	if len(written) == 0 {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "the multipart/form-data body has no part named \"file\"")
	}
	return written, nil
}

// partFileName is a part's filename as sent: the SDK names the file's
// path there (Part.FileName keeps only its last element).
func partFileName(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// readErr remembers the error its reader returned.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

func entryWritten(p string) writtenEntry {
	return writtenEntry{Name: path.Base(p), Type: "file", Path: p}
}

// writeFilesError answers a /files call's error as envd does: E2B's
// {code, message}, with the status its SDK maps to its errors.
func writeFilesError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch errdefs.Kind(err) {
	case errdefs.ErrNotFound:
		code = http.StatusNotFound
	case errdefs.ErrInvalidArgument, errdefs.ErrIsDirectory, errdefs.ErrAlreadyExists, errdefs.ErrFailedPrecondition:
		code = http.StatusBadRequest
	case errdefs.ErrUnauthenticated:
		code = http.StatusUnauthorized
	case errdefs.ErrPermissionDenied:
		code = http.StatusForbidden
	case errdefs.ErrNoSpace:
		code = http.StatusInsufficientStorage
	case errdefs.ErrTooLarge, errdefs.ErrResourceExhausted:
		code = http.StatusRequestEntityTooLarge
	case errdefs.ErrUnavailable:
		code = http.StatusBadGateway
	}
	writeError(w, code, errdefs.Public(err))
}
