package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/client"
)

type readArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file's path in the sandbox"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"the first line to answer, from 1; with end_line or alone it reads by lines"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"the last line to answer (default: start_line + 1999)"`
}

type readResult struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	Size       uint64 `json:"size"`
	Truncated  bool   `json:"truncated"`
	StartLine  uint64 `json:"start_line"`
	EndLine    uint64 `json:"end_line"`
	TotalLines uint64 `json:"total_lines"`
}

type writeArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file's path in the sandbox; missing parent directories are made"`
	Content   string `json:"content" jsonschema:"the whole new content of the file"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (the default) or base64, for binary content"`
}

type editArgs struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path       string `json:"path" jsonschema:"the file's path in the sandbox"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace; it must occur once unless replace_all"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence instead of exactly one"`
}

type listFilesArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path,omitempty" jsonschema:"the directory to list (default: the sandbox's workdir)"`
	Depth     int    `json:"depth,omitempty" jsonschema:"how many levels to descend (default 1: the directory's own entries; at most 10)"`
	Glob      string `json:"glob,omitempty" jsonschema:"instead of listing, the paths under path matching this pattern, such as **/*.py"`
}

type fileEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Size   uint64 `json:"size"`
	Target string `json:"symlink_target"`
}

type listFilesResult struct {
	Entries   []fileEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
}

type grepArgs struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Pattern    string `json:"pattern" jsonschema:"an RE2 regular expression, or with literal the exact text"`
	Literal    bool   `json:"literal,omitempty" jsonschema:"pattern is the exact text to find, not a regular expression"`
	Path       string `json:"path,omitempty" jsonschema:"a file or a directory searched recursively (default: the workdir)"`
	Include    string `json:"include,omitempty" jsonschema:"only files whose names match this glob, such as *.go"`
	IgnoreCase bool   `json:"ignore_case,omitempty" jsonschema:"match regardless of case"`
	Limit      int    `json:"limit,omitempty" jsonschema:"the most matches to answer (default 1000)"`
}

func (t *tools) addFileTools(s *sdk.Server) {
	readOnly := &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolp(false)}
	titled := func(a sdk.ToolAnnotations, title string) *sdk.ToolAnnotations { a.Title = title; return &a }
	sdk.AddTool(s, &sdk.Tool{
		Name:        "read_file",
		Description: "Read a text file in the sandbox, whole (up to 10 MiB) or by a range of lines (start_line, end_line).",
		Annotations: titled(*readOnly, "Read a file"),
	}, t.read)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "write_file",
		Description: "Write a whole file in the sandbox (replacing it; parent directories are made): text, or base64 with encoding base64.",
		Annotations: &sdk.ToolAnnotations{Title: "Write a file", DestructiveHint: boolp(true), IdempotentHint: true, OpenWorldHint: boolp(false)},
	}, t.write)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "edit_file",
		Description: "Replace an exact string in a file in the sandbox: old_string must occur exactly once, unless replace_all.",
		Annotations: &sdk.ToolAnnotations{Title: "Edit a file", DestructiveHint: boolp(true), OpenWorldHint: boolp(false)},
	}, t.edit)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "list_files",
		Description: "List a directory in the sandbox (type, size), to a depth, or find the paths matching a glob.",
		Annotations: titled(*readOnly, "List files"),
	}, t.listFiles)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "grep",
		Description: "Search files in the sandbox for a regular expression (or, with literal, exact text); answers path:line: text for each match.",
		Annotations: titled(*readOnly, "Search files"),
	}, t.grep)
}

func (t *tools) read(ctx context.Context, req *sdk.CallToolRequest, a readArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.Path == "" {
		return nil, nil, argError("path", "is empty: give the file's path")
	}
	if a.StartLine < 0 || a.EndLine < 0 || (a.EndLine > 0 && a.StartLine > a.EndLine) {
		return nil, nil, argError("end_line", "the range %d-%d is not a range of lines (from 1, start_line <= end_line)", a.StartLine, a.EndLine)
	}
	if a.StartLine == 0 && a.EndLine == 0 {
		return t.readWhole(ctx, sb, a.Path)
	}
	first := max(a.StartLine, 1)
	n := 2000
	if a.EndLine > 0 {
		n = a.EndLine - first + 1
	}
	if n > 100000 {
		return nil, nil, argError("end_line", "the range covers %d lines; read at most 100000 at once", n)
	}
	resp, err := client.Unary(ctx, sb, sb.RPC().ReadLines, &executorv1.ReadLinesRequest{Path: a.Path, FirstLine: uint64(first), MaxLines: uint32(n), MaxLineBytes: 4000})
	if err != nil {
		return nil, nil, err
	}
	if resp.Binary {
		return nil, nil, fmt.Errorf("%s is a binary file (%d bytes): use download to fetch it", a.Path, resp.Size)
	}
	var b strings.Builder
	cut := false
	for _, l := range resp.Lines {
		b.Write(bytes.ToValidUTF8(l.Text, []byte(string(utf8.RuneError))))
		b.WriteByte('\n')
		cut = cut || l.Cut
	}
	last := uint64(first) + uint64(len(resp.Lines)) - 1
	r := readResult{Path: a.Path, Content: b.String(), Size: resp.Size, Truncated: cut, StartLine: uint64(first), EndLine: last, TotalLines: resp.TotalLines}
	if len(resp.Lines) == 0 {
		r.EndLine = 0
	}
	return result(r.Content, r), nil, nil
}

func (t *tools) readWhole(ctx context.Context, sb *client.Sandbox, path string) (*sdk.CallToolResult, any, error) {
	limit := t.opts.maxInline()
	resp, err := client.Unary(ctx, sb, sb.RPC().ReadFile, &executorv1.ReadFileRequest{Path: path, Limit: uint64(limit)})
	if err != nil {
		return nil, nil, err
	}
	if bytes.IndexByte(resp.Data[:min(len(resp.Data), 8000)], 0) >= 0 {
		return nil, nil, fmt.Errorf("%s is a binary file (%d bytes): use download to fetch it", path, resp.Size)
	}
	r := readResult{Path: path, Content: strings.ToValidUTF8(string(resp.Data), string(utf8.RuneError)), Size: resp.Size, Truncated: !resp.Eof}
	r.TotalLines = uint64(strings.Count(r.Content, "\n"))
	if r.Content != "" && !strings.HasSuffix(r.Content, "\n") {
		r.TotalLines++
	}
	if r.TotalLines > 0 {
		r.StartLine, r.EndLine = 1, r.TotalLines
	}
	text := r.Content
	if r.Truncated {
		text += fmt.Sprintf("\n[cut at %d of %d bytes: read the rest by lines (start_line) or download the file]", len(resp.Data), resp.Size)
	}
	return result(text, r), nil, nil
}

func (t *tools) write(ctx context.Context, req *sdk.CallToolRequest, a writeArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.Path == "" {
		return nil, nil, argError("path", "is empty: give the file's path")
	}
	data, err := t.decode("content", a.Content, a.Encoding)
	if err != nil {
		return nil, nil, err
	}
	resp, err := client.Unary(ctx, sb, sb.RPC().WriteFile, &executorv1.WriteFileRequest{Path: a.Path, Data: data, MakeParents: true})
	if err != nil {
		return nil, nil, err
	}
	return result(fmt.Sprintf("wrote %d bytes to %s", resp.Size, a.Path), map[string]any{"path": a.Path, "size": resp.Size}), nil, nil
}

// decode reads content in encoding ("", text or base64), bounded by
// MaxInline before and after decoding.
func (t *tools) decode(arg, content, encoding string) ([]byte, error) {
	limit := t.opts.maxInline()
	switch encoding {
	case "", "text":
		if int64(len(content)) > limit {
			return nil, argError(arg, "is %d bytes; at most %d cross in one call: %s", len(content), limit, bigFileAdvice)
		}
		return []byte(content), nil
	case "base64":
		if int64(base64.StdEncoding.DecodedLen(len(content))) > limit+2 {
			return nil, argError(arg, "is %d bytes of base64, more than the %d bytes that cross in one call: %s", len(content), limit, bigFileAdvice)
		}
		data, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, argError(arg, "is not base64 (standard alphabet, padded): %v", err)
		}
		if int64(len(data)) > limit {
			return nil, argError(arg, "is %d bytes; at most %d cross in one call: %s", len(data), limit, bigFileAdvice)
		}
		return data, nil
	}
	return nil, argError("encoding", "%q is not an encoding: give text or base64", encoding)
}

// bigFileAdvice says where bigger files go.
const bigFileAdvice = "move bigger files with the raw file API (PUT or GET /v1/sandboxes/ID/files?path=/abs/path with the reins token), `reins sandbox cp`, or `reins mcp` (stdio), whose upload and download take local paths"

func (t *tools) edit(ctx context.Context, req *sdk.CallToolRequest, a editArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.Path == "" {
		return nil, nil, argError("path", "is empty: give the file's path")
	}
	if a.OldString == "" {
		return nil, nil, argError("old_string", "is empty: give the exact text to replace (write_file replaces a whole file)")
	}
	resp, err := client.Unary(ctx, sb, sb.RPC().EditFile, &executorv1.EditFileRequest{Path: a.Path, Old: a.OldString, New: a.NewString, ReplaceAll: a.ReplaceAll})
	if err != nil {
		return nil, nil, err
	}
	return result(fmt.Sprintf("replaced %d occurrence(s) in %s", resp.Replacements, a.Path), map[string]any{"path": a.Path, "replacements": resp.Replacements}), nil, nil
}

func (t *tools) listFiles(ctx context.Context, req *sdk.CallToolRequest, a listFilesArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.Depth < 0 || a.Depth > 10 {
		return nil, nil, argError("depth", "%d is outside 0-10", a.Depth)
	}
	var r listFilesResult
	if a.Glob != "" {
		resp, err := client.Unary(ctx, sb, sb.RPC().Glob, &executorv1.GlobRequest{Pattern: a.Glob, Dir: a.Path, Info: true})
		if err != nil {
			return nil, nil, err
		}
		r.Truncated = resp.Truncated
		for _, e := range resp.Entries {
			r.Entries = append(r.Entries, entryOf(e))
		}
	} else {
		path := a.Path
		if path == "" {
			path = "."
		}
		resp, err := client.Unary(ctx, sb, sb.RPC().ListDir, &executorv1.ListDirRequest{Path: path, Depth: uint32(a.Depth), Limit: 5000})
		if err != nil {
			return nil, nil, err
		}
		r.Truncated = resp.Truncated
		for _, e := range resp.Entries {
			r.Entries = append(r.Entries, entryOf(e))
		}
	}
	if r.Entries == nil {
		r.Entries = []fileEntry{}
	}
	var b strings.Builder
	for _, e := range r.Entries {
		switch {
		case e.Type == "dir":
			fmt.Fprintf(&b, "%s/\n", e.Path)
		case e.Type == "symlink":
			fmt.Fprintf(&b, "%s -> %s\n", e.Path, e.Target)
		default:
			fmt.Fprintf(&b, "%s\t%d\n", e.Path, e.Size)
		}
	}
	if len(r.Entries) == 0 {
		b.WriteString("no entries\n")
	}
	if r.Truncated {
		b.WriteString("[more entries than answered: list a smaller directory or a narrower glob]\n")
	}
	return result(b.String(), r), nil, nil
}

func entryOf(e *executorv1.FileInfo) fileEntry {
	return fileEntry{Path: e.Path, Type: fileType(e.Type), Size: e.Size, Target: e.SymlinkTarget}
}

func fileType(t executorv1.FileType) string {
	switch t {
	case executorv1.FileType_FILE_TYPE_FILE:
		return "file"
	case executorv1.FileType_FILE_TYPE_DIR:
		return "dir"
	case executorv1.FileType_FILE_TYPE_SYMLINK:
		return "symlink"
	}
	return "other"
}

func (t *tools) grep(ctx context.Context, req *sdk.CallToolRequest, a grepArgs) (*sdk.CallToolResult, any, error) {
	sb, err := t.sandbox(ctx, a.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if a.Pattern == "" {
		return nil, nil, argError("pattern", "is empty: give a regular expression")
	}
	if a.Limit < 0 || a.Limit > 10000 {
		return nil, nil, argError("limit", "%d is outside 0-10000", a.Limit)
	}
	path := a.Path
	if path == "" {
		path = "."
	}
	resp, err := client.Unary(ctx, sb, sb.RPC().Grep, &executorv1.GrepRequest{Pattern: a.Pattern, Path: path, Include: a.Include, IgnoreCase: a.IgnoreCase, Limit: uint32(a.Limit), Literal: a.Literal})
	if err != nil {
		return nil, nil, err
	}
	js, err := protoJSON(resp)
	if err != nil {
		return nil, nil, err
	}
	var b strings.Builder
	for _, m := range resp.Matches {
		fmt.Fprintf(&b, "%s:%d: %s\n", m.Path, m.Line, m.Text)
	}
	if len(resp.Matches) == 0 {
		b.WriteString("no matches\n")
	}
	if resp.Truncated {
		b.WriteString("[more matches than answered: narrow the pattern, the path or include]\n")
	}
	return result(b.String(), js), nil, nil
}
