// Package mcp serves reins' sandboxes as the tools of a Model Context
// Protocol server, so any MCP client (Claude Code, Cursor, an agent
// framework) can use reins as its hands: make a sandbox, run commands,
// read, write and edit files, move files between the client's machine and
// the sandbox, reach a port, delete it.
//
// Every tool acts through a reins *client.Client, so the caller's token,
// its tenant and every check of the API hold: an MCP session can do
// exactly what its token can do through the API, and another tenant's
// sandbox is answered as a missing one.
//
// Two transports (docs/decisions/0053-mcp-tools.md):
//   - stdio (`reins mcp`): the server runs on the client's machine, so
//     upload and download take local paths (Options.Local);
//   - streamable HTTP at /mcp on reins serve (HTTP in http.go): there is no
//     client filesystem, so upload takes base64 content and download
//     answers an embedded resource, both bounded by Options.MaxInline.
package mcp

import (
	"context"
	"encoding/json"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/server/wire"
)

// DefaultMaxInline bounds the bytes that cross inside one message: a base64
// upload over HTTP, a download answered as an embedded resource, a
// write_file, a whole read_file.
const DefaultMaxInline = 10 << 20

// DefaultMaxLocal bounds one stdio upload or download (the tar stream).
const DefaultMaxLocal = 4 << 30

// Options says what a server offers.
type Options struct {
	// Local says the server runs on the client's machine (stdio): upload
	// and download take local paths.
	Local bool
	// MaxInline and MaxLocal replace DefaultMaxInline and DefaultMaxLocal
	// when positive (tests).
	MaxInline, MaxLocal int64
	// Version is the server's build, told to clients.
	Version string
}

func (o Options) maxInline() int64 {
	if o.MaxInline > 0 {
		return o.MaxInline
	}
	return DefaultMaxInline
}

func (o Options) maxLocal() int64 {
	if o.MaxLocal > 0 {
		return o.MaxLocal
	}
	return DefaultMaxLocal
}

// tools holds what every tool handler needs.
type tools struct {
	c    *client.Client
	opts Options
}

// New returns an MCP server whose tools act through c. sopts may be nil.
func New(c *client.Client, opts Options, sopts *sdk.ServerOptions) *sdk.Server {
	if sopts == nil {
		sopts = &sdk.ServerOptions{}
	}
	if sopts.Instructions == "" {
		sopts.Instructions = instructions
	}
	// No logging capability: the tools answer for themselves.
	sopts.Capabilities = &sdk.ServerCapabilities{}
	s := sdk.NewServer(&sdk.Implementation{Name: "reins", Title: "reins sandboxes", Version: opts.Version}, sopts)
	t := &tools{c: c, opts: opts}
	t.addSandboxTools(s)
	t.addExecTool(s)
	t.addFileTools(s)
	t.addTransferTools(s)
	t.addRunTools(s)
	return s
}

const instructions = `reins runs commands and edits files in isolated sandboxes (gVisor).
Make one with sandbox_create (it answers its sandbox_id), then pass that id to
exec, read_file, write_file, edit_file, list_files, grep, upload, download and
port_url; delete it with sandbox_delete when done. Paths inside a sandbox are
absolute (relative ones start at its workdir).`

// result is a tool's answer: text for the model and the same facts as
// structured content.
func result(text string, structured any) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: structured}
}

// protoJSON is m in the API's one JSON shape (wire.JSON), as structured
// content.
func protoJSON(m proto.Message) (json.RawMessage, error) {
	b, err := wire.JSON.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the answer: %w", err)
	}
	return b, nil
}

// argError is a bad argument, named.
func argError(name, format string, args ...any) error {
	return fmt.Errorf("argument %q: %s", name, fmt.Sprintf(format, args...))
}

func boolp(b bool) *bool { return &b }

// sandbox returns a client of sandbox id, refusing an empty id.
func (t *tools) sandbox(ctx context.Context, id string) (*client.Sandbox, error) {
	if id == "" {
		return nil, argError("sandbox_id", "is empty: give the id sandbox_create answered (sandbox_list lists them)")
	}
	return t.c.Sandbox(id), nil
}
