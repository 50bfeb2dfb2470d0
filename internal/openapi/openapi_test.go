package openapi

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/reinsdev/reins/server/wire"
)

const checkedIn = "../../api/openapi.json"

// TestInSync: the checked-in api/openapi.json is what the generator
// writes from today's .proto files.
func TestInSync(t *testing.T) {
	want, err := Generate("../../api")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(checkedIn)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("api/openapi.json is not the API's: run go generate ./internal/openapi (or go run ./internal/openapi/gen) and commit it")
	}
}

func load(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(checkedIn)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("api/openapi.json is not JSON: %v", err)
	}
	return doc
}

// TestStructure: the document has OpenAPI 3.1's required parts, every
// operation answers something, and every $ref resolves.
func TestStructure(t *testing.T) {
	doc := load(t)
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", v)
	}
	info, _ := doc["info"].(map[string]any)
	if info["title"] == nil || info["version"] == nil {
		t.Errorf("info lacks title or version: %v", info)
	}
	paths, _ := doc["paths"].(map[string]any)
	if len(paths) == 0 {
		t.Fatal("no paths")
	}
	for p, item := range paths {
		if !strings.HasPrefix(p, "/") {
			t.Errorf("path %q does not start with /", p)
		}
		for method, op := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}, method) {
				t.Errorf("%s: %q is no HTTP method", p, method)
				continue
			}
			o := op.(map[string]any)
			if r, _ := o["responses"].(map[string]any); len(r) == 0 {
				t.Errorf("%s %s: no responses", method, p)
			}
			if o["operationId"] == nil {
				t.Errorf("%s %s: no operationId", method, p)
			}
		}
	}
	refs := 0
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["$ref"].(string); ok {
				refs++
				if resolve(doc, r) == nil {
					t.Errorf("%s: $ref %s does not resolve", at, r)
				}
			}
			for k, e := range x {
				walk(at+"/"+k, e)
			}
		case []any:
			for _, e := range x {
				walk(at, e)
			}
		}
	}
	walk("#", doc)
	if refs < 100 {
		t.Errorf("only %d $refs", refs)
	}
	sec, _ := doc["components"].(map[string]any)["securitySchemes"].(map[string]any)
	if b, _ := sec["bearer"].(map[string]any); b["scheme"] != "bearer" {
		t.Errorf("no bearer auth: %v", sec)
	}
}

// resolve follows a local JSON pointer (#/a/b), or nil.
func resolve(doc map[string]any, ref string) any {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	var cur any = doc
	for _, part := range strings.Split(rest, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[part]; !ok {
			return nil
		}
	}
	return cur
}

// TestEveryCall: every RPC of the API a JSON caller can make is a path, streaming ones in
// Connect's envelopes, executor calls under the Reins-Sandbox header; and
// the raw file routes are there.
func TestEveryCall(t *testing.T) {
	paths := load(t)["paths"].(map[string]any)
	for _, fd := range Files {
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			for j := 0; j < sd.Methods().Len(); j++ {
				md := sd.Methods().Get(j)
				p := "/" + string(sd.FullName()) + "/" + string(md.Name())
				if !Described(md) {
					if paths[p] != nil {
						t.Errorf("%s is described, but a JSON caller cannot make it", p)
					}
					continue
				}
				item, _ := paths[p].(map[string]any)
				op, _ := item["post"].(map[string]any)
				if op == nil {
					t.Errorf("%s is not described", p)
					continue
				}
				body, _ := json.Marshal(op["requestBody"])
				stream := md.IsStreamingClient() || md.IsStreamingServer()
				if want := map[bool]string{true: "application/connect+json", false: `"application/json"`}[stream]; !strings.Contains(string(body), want) {
					t.Errorf("%s: request %s, want %s", p, body, want)
				}
				params, _ := json.Marshal(op["parameters"])
				if isExec := sd.FullName() == "reins.executor.v1.Executor"; isExec != strings.Contains(string(params), "ReinsSandbox") {
					t.Errorf("%s: parameters %s", p, params)
				}
			}
		}
	}
	files, _ := paths["/v1/sandboxes/{id}/files"].(map[string]any)
	if files["get"] == nil || files["put"] == nil {
		t.Errorf("the raw file routes: %v", files)
	}
	for _, p := range []string{"/healthz", "/openapi.json"} {
		op, _ := paths[p].(map[string]any)["get"].(map[string]any)
		if sec, ok := op["security"].([]any); !ok || len(sec) != 0 {
			t.Errorf("%s: security %v, want none", p, op["security"])
		}
	}
}

// TestSchemasAreTheShape: each message's schema names exactly the keys
// wire.JSON writes for it (an empty message, so no oneof member), and
// each 64-bit integer is a number or a string.
func TestSchemasAreTheShape(t *testing.T) {
	schemas := load(t)["components"].(map[string]any)["schemas"].(map[string]any)
	n := 0
	for name, s := range schemas {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
		if err != nil {
			continue // an enum, or connect.Error
		}
		n++
		data, err := wire.JSON.Marshal(mt.New().Interface())
		if err != nil {
			t.Fatal(err)
		}
		var written map[string]any
		json.Unmarshal(data, &written)
		props := s.(map[string]any)["properties"].(map[string]any)
		oneofs, _ := s.(map[string]any)["x-oneof"].(map[string]any)
		for k := range written {
			if props[k] == nil {
				t.Errorf("%s: wire.JSON writes %q, the schema lacks it", name, k)
			}
		}
		for k := range props {
			if _, ok := written[k]; !ok && !inOneof(oneofs, k) {
				t.Errorf("%s: the schema has %q, wire.JSON does not write it", name, k)
			}
		}
		fields := mt.Descriptor().Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if fd.Kind() != protoreflect.Int64Kind && fd.Kind() != protoreflect.Uint64Kind || fd.IsList() || fd.IsMap() {
				continue
			}
			b, _ := json.Marshal(props[string(fd.Name())])
			if !strings.Contains(string(b), `"type":["integer","string"]`) {
				t.Errorf("%s.%s: %s, want integer or string", name, fd.Name(), b)
			}
		}
	}
	if n < 100 {
		t.Errorf("only %d message schemas", n)
	}
}

func inOneof(oneofs map[string]any, k string) bool {
	for _, members := range oneofs {
		for _, m := range members.([]any) {
			if m == k {
				return true
			}
		}
	}
	return false
}

// TestComments: the .proto reader attaches comments as written here.
func TestComments(t *testing.T) {
	c := comments{}
	c.parse([]byte(`// file comment
syntax = "proto3";
package p.v1;

service S {
  // A group's heading.
  //
  // Get gets.
  rpc Get(GetRequest) returns (GetResponse);
  rpc Bare(A) returns (B);
}

// M is a message.
message M {
  string id = 1;                 // its id
                                 // on two lines
  // Leading.
  repeated int64 n = 2;
  oneof msg {
    A a = 3;                     // in a oneof
  }
  map<string, string> labels = 4;
  message Inner { int32 x = 1; }
  int32 after = 5;               // after Inner
}

enum E {
  E_UNSPECIFIED = 0;
  E_ONE = 1;                     // one
}
`))
	want := comments{
		"p.v1.S.Get": "Get gets.", "p.v1.M": "M is a message.", "p.v1.M.id": "its id on two lines",
		"p.v1.M.n": "Leading.", "p.v1.M.a": "in a oneof", "p.v1.M.after": "after Inner", "p.v1.E.E_ONE": "one",
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s: %q, want %q", k, c[k], v)
		}
	}
	for k := range c {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s: %q", k, c[k])
		}
	}
}
