// Package openapi writes the OpenAPI 3.1 description of reins' JSON API
// (api/openapi.json) from the protobuf descriptors the Go code registers,
// in the JSON shape of server/wire (wire.JSON), with the .proto files'
// comments as descriptions.
//
// Regenerate the checked-in file with `go generate ./internal/openapi`;
// TestInSync fails when it is stale.
package openapi

//go:generate go run ./gen -o ../../api/openapi.json

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/server/wire"
)

// Files are the .proto files the API is made of.
var Files = wire.Files

// SandboxHeader names the sandbox an executor call is for (server.SandboxHeader;
// not imported, to keep the generator off the server's dependencies).
const SandboxHeader = "Reins-Sandbox"

// binaryOnly are the executor calls a JSON caller cannot make, left out of
// the document: the service's own (Sync, Stage, Place, SetDefaults) and
// the bulk transfers and Watch, which it relays as bytes (the raw file routes are their
// JSON callers' way). The service answers every other executor call in
// JSON (server/executorjson.go; TestOpenAPIExecutorCalls holds the two
// lists together).
var binaryOnly = map[protoreflect.Name]bool{"Sync": true, "Stage": true, "Place": true, "SetDefaults": true,
	"Upload": true, "ReadStream": true, "WriteStream": true, "Watch": true}

// Described reports whether the document describes md: every call but
// the executor's binaryOnly ones.
func Described(md protoreflect.MethodDescriptor) bool {
	return md.Parent().FullName() != "reins.executor.v1.Executor" || !binaryOnly[md.Name()]
}

// Generate writes the document, indented, from Files and their sources
// under protoRoot (the repository's api directory).
func Generate(protoRoot string) ([]byte, error) {
	c := comments{}
	for _, fd := range Files {
		src, err := os.ReadFile(filepath.Join(protoRoot, fd.Path()))
		if err != nil {
			return nil, fmt.Errorf("the .proto source of %s, for its comments: %w", fd.Path(), err)
		}
		c.parse(src)
	}
	g := &generator{comments: c, schemas: map[string]any{}}
	doc := g.document()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// object is a JSON object that keeps its keys' order.
type object []member

type member struct {
	key   string
	value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		buf.Write(k)
		buf.WriteByte(':')
		var v bytes.Buffer
		enc := json.NewEncoder(&v)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m.value); err != nil {
			return nil, err
		}
		buf.Write(bytes.TrimRight(v.Bytes(), "\n"))
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// obj builds an object from key, value pairs, leaving out empty strings
// and nil values.
func obj(kv ...any) object {
	o := make(object, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case nil:
			continue
		case string:
			if v == "" {
				continue
			}
		case object:
			if v == nil {
				continue
			}
		}
		o = append(o, member{kv[i].(string), kv[i+1]})
	}
	return o
}

type generator struct {
	comments comments
	schemas  map[string]any // by full name, filled as they are referred to
}

func ref(name string) object { return obj("$ref", "#/components/schemas/"+name) }

func (g *generator) document() object {
	paths := object{}
	for _, fd := range Files {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				if !Described(md) {
					continue
				}
				paths = append(paths, member{"/" + string(sd.FullName()) + "/" + string(md.Name()), obj("post", g.operation(sd, md))})
			}
		}
	}
	paths = append(paths, g.extraPaths()...)
	names := make([]string, 0, len(g.schemas))
	for n := range g.schemas {
		names = append(names, n)
	}
	slices.Sort(names)
	schemas := object{}
	for _, n := range names {
		schemas = append(schemas, member{n, g.schemas[n]})
	}
	schemas = append(schemas, member{"connect.Error", connectError()})
	return obj(
		"openapi", "3.1.0",
		"info", obj("title", "reins API", "version", "v1", "description", infoDescription),
		"servers", []any{obj("url", "http://127.0.0.1:7070", "description", "reins serve's default address (REINS_URL)")},
		"security", []any{obj("bearer", []any{})},
		"tags", g.tags(),
		"paths", paths,
		"components", obj(
			"securitySchemes", obj("bearer", obj("type", "http", "scheme", "bearer",
				"description", "A reins token: the admin's (written to DATA_DIR/admin.token on first start) or a tenant's (reins tenant token NAME).")),
			"parameters", obj("ReinsSandbox", obj("name", SandboxHeader, "in", "header", "required", true,
				"description", "The sandbox the executor call is for. Another tenant's sandbox is answered as a missing one.",
				"schema", obj("type", "string"))),
			"responses", obj("Error", obj("description", errorDescription,
				"content", obj("application/json", obj("schema", ref("connect.Error"))))),
			"schemas", schemas,
		),
	)
}

func (g *generator) tags() []any {
	var out []any
	for _, fd := range Files {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			desc := g.comments[string(sd.FullName())]
			if sd.FullName() == "reins.executor.v1.Executor" {
				desc = strings.TrimSpace("Calls to one sandbox's executor, sent to reins serve with the header " + SandboxHeader +
					": the service checks the token and forwards the call. " + desc)
			}
			out = append(out, obj("name", string(sd.Name()), "description", desc))
		}
	}
	out = append(out, obj("name", "Files", "description", "Whole files as raw bytes, over plain HTTP."),
		obj("name", "Service", "description", "The service itself, without a token."))
	return out
}

func (g *generator) operation(sd protoreflect.ServiceDescriptor, md protoreflect.MethodDescriptor) object {
	in, out := string(md.Input().FullName()), string(md.Output().FullName())
	g.message(md.Input())
	g.message(md.Output())
	desc := g.comments[string(md.FullName())]
	var params []any
	if sd.FullName() == "reins.executor.v1.Executor" {
		params = []any{obj("$ref", "#/components/parameters/ReinsSandbox")}
	}
	op := obj("operationId", string(sd.Name())+"_"+string(md.Name()), "tags", []any{string(sd.Name())},
		"summary", summary(desc))
	if params != nil {
		op = append(op, member{"parameters", params})
	}
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		return append(op,
			member{"description", strings.TrimSpace(desc + "\n\nA unary Connect call: POST the request's JSON with Content-Type: application/json; the answer is the response's JSON.")},
			member{"requestBody", obj("required", true, "content", obj("application/json", obj("schema", ref(in))))},
			member{"responses", obj(
				"200", obj("description", "The response.", "content", obj("application/json", obj("schema", ref(out)))),
				"default", obj("$ref", "#/components/responses/Error"))})
	}
	kind := "server-streaming"
	switch {
	case md.IsStreamingClient() && md.IsStreamingServer():
		kind = "bidirectional-streaming"
	case md.IsStreamingClient():
		kind = "client-streaming"
	}
	reqDesc := "One enveloped message: the request's JSON."
	if md.IsStreamingClient() {
		reqDesc = "Enveloped messages, each a request's JSON, then an end-of-stream envelope (flags 0x02) holding {}."
	}
	respDesc := "The response's JSON, enveloped."
	if md.IsStreamingServer() {
		respDesc = "Enveloped messages, each a response's JSON, then an end-of-stream envelope (flags 0x02) holding {} or {\"error\": connect.Error}."
	}
	return append(op,
		member{"description", strings.TrimSpace(desc + "\n\nA " + kind + " Connect call: " + envelopeDescription)},
		member{"x-connect-streaming", kind},
		member{"requestBody", obj("required", true, "description", reqDesc,
			"content", obj("application/connect+json", obj("schema", ref(in), "x-connect-enveloped", true)))},
		member{"responses", obj(
			"200", obj("description", respDesc+" An error after the stream began is in the end-of-stream envelope, with HTTP 200.",
				"content", obj("application/connect+json", obj("schema", ref(out), "x-connect-enveloped", true))),
			"default", obj("$ref", "#/components/responses/Error"))})
}

// summary is a description's first sentence.
func summary(desc string) string {
	desc = strings.Join(strings.Fields(desc), " ")
	if i := strings.Index(desc, ". "); i >= 0 {
		desc = desc[:i+1]
	}
	if len(desc) > 200 {
		return ""
	}
	return desc
}

func (g *generator) extraPaths() object {
	errs := obj("$ref", "#/components/responses/Error")
	raw := obj("schema", obj("type", "string", "format", "binary"))
	idParam := obj("name", "id", "in", "path", "required", true, "description", "The sandbox's id.", "schema", obj("type", "string"))
	pathParam := obj("name", "path", "in", "query", "required", true, "description", "An absolute path inside the sandbox.",
		"schema", obj("type", "string", "pattern", "^/"))
	read := obj("operationId", "Files_Read", "tags", []any{"Files"}, "summary", "Read a whole file as raw bytes.",
		"description", "Streams the file's bytes (no size cap), with Content-Length and Last-Modified. A missing file is 404 (not_found), a directory 400 (kind is_directory, in the Reins-Error-Kind header).",
		"responses", obj(
			"200", obj("description", "The file's bytes.", "content", obj("application/octet-stream", raw)),
			"default", errs))
	g.message(reinsv1.File_reins_v1_sandbox_proto.Messages().ByName("WriteRawFileResponse"))
	write := obj("operationId", "Files_Write", "tags", []any{"Files"}, "summary", "Write a whole file from raw bytes.",
		"description", "Replaces the file with the body's bytes (streamed, no size cap; its parents are made). A body shorter or longer than its Content-Length is refused and the file left as it was.",
		"parameters", []any{obj("name", "mode", "in", "query", "description", "The file's permission bits in octal (0644); default: the executor's.",
			"schema", obj("type", "string", "pattern", "^0?[0-7]{1,3}$"))},
		"requestBody", obj("required", true, "content", obj("application/octet-stream", raw)),
		"responses", obj("200", obj("description", "Written.", "content", obj("application/json", obj("schema", ref("reins.v1.WriteRawFileResponse")))),
			"default", errs))
	noAuth := []any{}
	health := obj("operationId", "Service_Health", "tags", []any{"Service"}, "summary", "Is the service up.", "security", noAuth,
		"responses", obj("200", obj("description", "ok", "content", obj("text/plain", obj("schema", obj("type", "string"))))))
	self := obj("operationId", "Service_OpenAPI", "tags", []any{"Service"}, "summary", "This document.", "security", noAuth,
		"responses", obj("200", obj("description", "The OpenAPI description of the API.",
			"content", obj("application/json", obj("schema", obj("type", "object"))))))
	return object{
		{"/v1/sandboxes/{id}/files", obj("parameters", []any{idParam, pathParam}, "get", read, "put", write)},
		{"/healthz", obj("get", health)},
		{"/openapi.json", obj("get", self)},
	}
}

func connectError() object {
	codes := []any{"canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
		"permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range", "unimplemented",
		"internal", "unavailable", "data_loss", "unauthenticated"}
	return obj("type", "object", "description", "Connect's error: what happened (message) and its kind (code).",
		"required", []any{"code"},
		"properties", obj(
			"code", obj("type", "string", "enum", codes),
			"message", obj("type", "string", "description", "What happened and what to do."),
			"details", obj("type", "array", "items", obj("type", "object", "properties", obj(
				"type", obj("type", "string", "description", "The detail's protobuf type."),
				"value", obj("type", "string", "contentEncoding", "base64", "description", "The detail, in protobuf's binary form."),
				"debug", obj("description", "The detail as JSON, when the server could write it."))))))
}

const infoDescription = `reins runs AI agents: the agent loop in this trusted service, the work in isolated sandboxes.

The API is Connect: every call is POST /PACKAGE.SERVICE/METHOD. Unary calls take and answer plain JSON (Content-Type: application/json); streaming calls use Connect's envelopes (application/connect+json). Every call but /healthz and /openapi.json carries Authorization: Bearer TOKEN.

The JSON shape (docs/api.md), the same as the CLI's --json:
- Field names are the .proto's (snake_case). An answer carries every field at its zero value (0, "", false, [], {}), an unset message as null, an unset optional scalar as null, and of a oneof only the member that is set (x-oneof names them). A request may leave any field out: it is then its zero value.
- 64-bit integers are JSON numbers when |v| <= 2^53-1 and decimal strings beyond; readers take both forms in requests.
- Beside each X_unix_nano field an answer carries X_time (time_unix_nano: time), the same instant in RFC 3339, UTC, nine fraction digits, or "" for 0. A request's X_time fields are ignored.
- Bytes are base64; enums their value names (a number for a value the server does not know); NaN and infinite floats the strings "NaN", "Infinity", "-Infinity".

Calls to the processes and files of a sandbox are the executor's (tag Executor), sent to the service with the Reins-Sandbox header.`

const envelopeDescription = `the body is a sequence of envelopes, each a 5-byte prefix (one flags byte, then the JSON's length as a 4-byte big-endian integer) and the JSON. Send Content-Type: application/connect+json.`

const errorDescription = `A failed call: Connect's error in JSON. Its HTTP status follows the code: invalid_argument, failed_precondition and out_of_range 400, unauthenticated 401, permission_denied 403, not_found 404, already_exists and aborted 409, resource_exhausted 429, canceled 499, unimplemented 501 (404 for an unknown path), unavailable 503, deadline_exceeded 504, the rest 500. Another tenant's sandbox is answered as a missing one (not_found).`
