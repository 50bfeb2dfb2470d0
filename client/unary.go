package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
)

// RunCommand runs one command in the sandbox to completion (the service's
// RunCommand; req.SandboxId is set from s). The call's deadline, when ctx
// has none, is the command's timeout and a minute more.
func (s *Sandbox) RunCommand(ctx context.Context, req *reinsv1.RunCommandRequest) (*reinsv1.RunCommandResponse, error) {
	r := proto.CloneOf(req)
	r.SandboxId = s.ID
	if _, ok := ctx.Deadline(); !ok {
		timeout := time.Duration(r.TimeoutMs) * time.Millisecond
		if timeout <= 0 {
			timeout = time.Minute
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+time.Minute)
		defer cancel()
	}
	resp, err := s.c.sandboxes.RunCommand(ctx, connect.NewRequest(r))
	if err != nil {
		return nil, s.c.wrap(err)
	}
	return resp.Msg, nil
}

// rawURL is the raw file route of path in s.
func (s *Sandbox) rawURL(p string) string {
	return s.c.URL + "/v1/sandboxes/" + url.PathEscape(s.ID) + "/files?path=" + url.QueryEscape(p)
}

// ReadRaw streams the file at path (absolute, in the sandbox) as raw
// bytes: GET /v1/sandboxes/{id}/files?path=. The caller closes it. A
// transfer cut short is an error from Read, never a short file.
func (s *Sandbox) ReadRaw(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.rawURL(path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return nil, s.c.wrap(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, rawError(resp)
	}
	return resp.Body, nil
}

// WriteRaw writes r's bytes to the file at path, replacing it (parents
// made): PUT /v1/sandboxes/{id}/files?path=. size is r's length, or -1
// when unknown (the body is then chunked).
func (s *Sandbox) WriteRaw(ctx context.Context, path string, r io.Reader, size int64) error {
	_, err := s.WriteRawMode(ctx, path, r, size, 0)
	return err
}

// WriteRawMode is WriteRaw with the file's permission bits (0: 0644) and
// the service's answer.
func (s *Sandbox) WriteRawMode(ctx context.Context, path string, r io.Reader, size int64, mode uint32) (*reinsv1.WriteRawFileResponse, error) {
	u := s.rawURL(path)
	if mode != 0 {
		u += fmt.Sprintf("&mode=%o", mode)
	}
	if size == 0 {
		r = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, r)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.c.http.Do(req)
	if err != nil {
		return nil, s.c.wrap(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, rawError(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("reading the service's answer to the write of %s: %w", path, err)
	}
	out := &reinsv1.WriteRawFileResponse{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("the service's answer to the write of %s is not what it should be: %w", path, err)
	}
	return out, nil
}

// rawError reads a raw file route's error answer (Connect's error JSON,
// the kind in its header) as an error of that kind.
func rawError(resp *http.Response) error {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) != nil || e.Message == "" {
		return errdefs.WithMessage(errdefs.ErrInternal, fmt.Sprintf("the service answered %s: %.200s", resp.Status, strings.TrimSpace(string(b))))
	}
	var code connect.Code
	if code.UnmarshalText([]byte(e.Code)) != nil {
		code = connect.CodeUnknown
	}
	ce := connect.NewError(code, errors.New(e.Message))
	for _, k := range []string{errdefs.KindHeader, errdefs.ExitCodeHeader} {
		if v := resp.Header.Get(k); v != "" {
			ce.Meta().Set(k, v)
		}
	}
	return errdefs.FromConnect(ce)
}
