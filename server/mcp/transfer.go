package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// Over stdio the server runs on the client's machine: upload and download
// take local paths and move files and directories as tar streams. Over
// HTTP there is no client filesystem: upload takes base64 content and
// download answers an embedded resource.

type localUploadArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	LocalPath string `json:"local_path" jsonschema:"a file or directory on this machine"`
	Dest      string `json:"dest" jsonschema:"the directory in the sandbox it is copied into (made if missing), keeping its name"`
	Overwrite bool   `json:"overwrite,omitempty" jsonschema:"replace what the sandbox has at dest/NAME (default: refuse)"`
}

type localDownloadArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"a file or directory in the sandbox"`
	LocalDir  string `json:"local_dir" jsonschema:"an existing directory on this machine it is copied into, keeping its name"`
	Overwrite bool   `json:"overwrite,omitempty" jsonschema:"replace what local_dir/NAME holds (default: refuse)"`
}

type inlineUploadArgs struct {
	SandboxID     string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path          string `json:"path" jsonschema:"the file's path in the sandbox; parent directories are made"`
	ContentBase64 string `json:"content_base64" jsonschema:"the file's bytes, base64 (at most 10 MiB decoded)"`
	Overwrite     bool   `json:"overwrite,omitempty" jsonschema:"replace an existing file (default: refuse)"`
}

type inlineDownloadArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file's path in the sandbox (at most 10 MiB)"`
}

type transferResult struct {
	Source string `json:"source"`
	Dest   string `json:"dest"`
	Files  uint64 `json:"files"`
	Bytes  uint64 `json:"bytes"`
}

func (t *tools) addTransferTools(s *sdk.Server) {
	up := &sdk.ToolAnnotations{Title: "Upload into a sandbox", DestructiveHint: boolp(false), OpenWorldHint: boolp(false)}
	down := &sdk.ToolAnnotations{Title: "Download from a sandbox", DestructiveHint: boolp(false), OpenWorldHint: boolp(false)}
	if t.opts.Local {
		sdk.AddTool(s, &sdk.Tool{
			Name:        "upload",
			Description: "Copy a file or directory from this machine into the sandbox (dest/NAME); it refuses to replace what is there unless overwrite.",
			Annotations: up,
		}, t.uploadLocal)
		sdk.AddTool(s, &sdk.Tool{
			Name:        "download",
			Description: "Copy a file or directory from the sandbox into a directory on this machine (local_dir/NAME); it refuses to replace what is there unless overwrite.",
			Annotations: down,
		}, t.downloadLocal)
		return
	}
	sdk.AddTool(s, &sdk.Tool{
		Name:        "upload",
		Description: "Put a file into the sandbox from base64 content (at most 10 MiB; bigger files go through the raw file API, PUT /v1/sandboxes/ID/files?path=).",
		Annotations: up,
	}, t.uploadInline)
	down.ReadOnlyHint, down.IdempotentHint = true, true
	sdk.AddTool(s, &sdk.Tool{
		Name:        "download",
		Description: "Fetch a file from the sandbox as an embedded resource (at most 10 MiB; bigger files through the raw file API, GET /v1/sandboxes/ID/files?path=).",
		Annotations: down,
	}, t.downloadInline)
}

// exists reports whether p is there in the sandbox.
func exists(ctx context.Context, sb *client.Sandbox, p string) (*executorv1.FileInfo, error) {
	st, err := client.Unary(ctx, sb, sb.RPC().Stat, &executorv1.StatRequest{Path: p})
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return st.Info, nil
}

func (t *tools) uploadInline(ctx context.Context, req *sdk.CallToolRequest, a inlineUploadArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.Path == "" {
		return nil, nil, argError("path", "is empty: give the file's path in the sandbox")
	}
	data, err := t.decode("content_base64", a.ContentBase64, "base64")
	if err != nil {
		return nil, nil, err
	}
	if !a.Overwrite {
		if info, err := exists(ctx, sb, a.Path); err != nil {
			return nil, nil, err
		} else if info != nil {
			return nil, nil, fmt.Errorf("%s already exists in sandbox %s: pass overwrite: true to replace it: %w", a.Path, sb.ID, errdefs.ErrAlreadyExists)
		}
	}
	resp, err := client.Unary(ctx, sb, sb.RPC().WriteFile, &executorv1.WriteFileRequest{Path: a.Path, Data: data, MakeParents: true})
	if err != nil {
		return nil, nil, err
	}
	r := transferResult{Source: "content_base64", Dest: a.Path, Files: 1, Bytes: resp.Size}
	return result(fmt.Sprintf("uploaded %d bytes to %s", resp.Size, a.Path), r), nil, nil
}

func (t *tools) downloadInline(ctx context.Context, req *sdk.CallToolRequest, a inlineDownloadArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.Path == "" {
		return nil, nil, argError("path", "is empty: give the file's path in the sandbox")
	}
	limit := t.opts.maxInline()
	// One byte past the bound tells a file that is too big from one that
	// fits exactly, whatever size a stat would claim.
	resp, err := client.Unary(ctx, sb, sb.RPC().ReadFile, &executorv1.ReadFileRequest{Path: a.Path, Limit: uint64(limit) + 1})
	if err != nil {
		return nil, nil, err
	}
	if int64(len(resp.Data)) > limit || !resp.Eof {
		return nil, nil, fmt.Errorf("%s is %d bytes; at most %d cross in one call: %s: %w", a.Path, resp.Size, limit, bigFileAdvice, errdefs.ErrTooLarge)
	}
	mt := mime.TypeByExtension(path.Ext(a.Path))
	if mt == "" {
		mt = "application/octet-stream"
		if utf8.Valid(resp.Data) {
			mt = "text/plain"
		}
	}
	uri := (&url.URL{Scheme: "reins", Host: sb.ID, Path: path.Join("/", a.Path)}).String()
	r := transferResult{Source: a.Path, Dest: uri, Files: 1, Bytes: uint64(len(resp.Data))}
	return &sdk.CallToolResult{
		Content: []sdk.Content{
			&sdk.TextContent{Text: fmt.Sprintf("%s: %d bytes (%s), in the resource below", a.Path, len(resp.Data), mt)},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: uri, MIMEType: mt, Blob: resp.Data}},
		},
		StructuredContent: r,
	}, nil, nil
}

func (t *tools) uploadLocal(ctx context.Context, req *sdk.CallToolRequest, a localUploadArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.LocalPath == "" {
		return nil, nil, argError("local_path", "is empty: give a file or directory on this machine")
	}
	if a.Dest == "" {
		return nil, nil, argError("dest", "is empty: give the directory in the sandbox to copy into, such as /workspace")
	}
	st, err := os.Stat(a.LocalPath)
	if err != nil {
		return nil, nil, argError("local_path", "cannot be read: %v", err)
	}
	name := filepath.Base(filepath.Clean(a.LocalPath))
	if !st.IsDir() && !st.Mode().IsRegular() {
		return nil, nil, argError("local_path", "%s is neither a file nor a directory", a.LocalPath)
	}
	target := path.Join(a.Dest, name)
	if !a.Overwrite {
		if info, err := exists(ctx, sb, target); err != nil {
			return nil, nil, err
		} else if info != nil {
			return nil, nil, fmt.Errorf("%s already exists in sandbox %s: pass overwrite: true to replace it: %w", target, sb.ID, errdefs.ErrAlreadyExists)
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.Write(pw, a.LocalPath)) }()
	defer pr.Close()
	limit := t.opts.maxLocal()
	// A byte past the bound tells a stream cut there from one that ends.
	lr := &io.LimitedReader{R: pr, N: limit + 1}
	resp, err := sb.Upload(ctx, a.Dest, lr)
	if lr.N == 0 {
		return nil, nil, fmt.Errorf("%s is more than %d bytes as a tar stream: copy it with `reins sandbox cp`: %w", a.LocalPath, limit, errdefs.ErrTooLarge)
	}
	if err != nil {
		return nil, nil, err
	}
	r := transferResult{Source: a.LocalPath, Dest: target, Files: uint64(resp.Files), Bytes: resp.Bytes}
	return result(fmt.Sprintf("uploaded %s to %s:%s (%d files, %d bytes)", a.LocalPath, sb.ID, target, resp.Files, resp.Bytes), r), nil, nil
}

func (t *tools) downloadLocal(ctx context.Context, req *sdk.CallToolRequest, a localDownloadArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.Path == "" {
		return nil, nil, argError("path", "is empty: give a file or directory in the sandbox")
	}
	if a.LocalDir == "" {
		return nil, nil, argError("local_dir", "is empty: give a directory on this machine")
	}
	if st, err := os.Stat(a.LocalDir); err != nil || !st.IsDir() {
		return nil, nil, argError("local_dir", "%s is not an existing directory on this machine", a.LocalDir)
	}
	info, err := client.Unary(ctx, sb, sb.RPC().Stat, &executorv1.StatRequest{Path: a.Path})
	if err != nil {
		return nil, nil, err
	}
	base := client.CopyName(a.Path, info.Info.Path)
	target := filepath.Join(a.LocalDir, base)
	if _, err := os.Lstat(target); err == nil && !a.Overwrite {
		return nil, nil, fmt.Errorf("%s already exists on this machine: pass overwrite: true to replace it: %w", target, errdefs.ErrAlreadyExists)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := sb.Download(ctx, a.Path, pw)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	// The tar stream is the sandbox's: RenameTar keeps only entries under
	// the copied name, and the extractor writes nothing outside local_dir
	// (no entry, link or symlink leads out) and stops at MaxLocal bytes.
	rr, rw := io.Pipe()
	go func() { rw.CloseWithError(client.RenameTar(pr, rw, base, base)) }()
	defer rr.Close()
	limit := t.opts.maxLocal()
	files, n, err := archive.Options{MaxBytes: limit}.Extract(rr, a.LocalDir)
	if err != nil {
		return nil, nil, fmt.Errorf("copying %s:%s to %s: %w", sb.ID, a.Path, a.LocalDir, err)
	}
	r := transferResult{Source: a.Path, Dest: target, Files: uint64(files), Bytes: uint64(n)}
	return result(fmt.Sprintf("downloaded %s:%s to %s (%d files, %d bytes)", sb.ID, a.Path, target, files, n), r), nil, nil
}
