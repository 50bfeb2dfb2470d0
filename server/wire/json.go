package wire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// JSON is the one JSON form of the API: what the service answers a JSON
// caller (curl, a Connect client in JSON) and what the CLI's --json prints.
// Field names are the .proto's (snake_case), every field is present, enums
// are their names (RUN_STATUS_SUCCEEDED) and 64-bit integers strings.
// Readers accept either field-name style, as every protojson reader does.
var JSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// JSONCodec is a Connect codec in the JSON form above, named Codec
// ("json", or "json; charset=utf-8", the two names Connect reads JSON by).
// With Opaque, a request it cannot read is refused without quoting it:
// protojson's errors quote the offending value, which in the secret API
// is a secret.
type JSONCodec struct {
	Codec  string
	Opaque bool
}

func (c JSONCodec) Name() string { return c.Codec }

// IsBinary is false: the JSON form is text (Connect's GET requests).
func (JSONCodec) IsBinary() bool { return false }

func (JSONCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, errors.New("wire: the JSON codec carries protobuf messages only")
	}
	return JSON.Marshal(pm)
}

func (c JSONCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return errors.New("wire: the JSON codec carries protobuf messages only")
	}
	if len(data) == 0 {
		return errors.New("an empty body is not a JSON object: send {} for an empty request")
	}
	err := protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, pm)
	if err != nil && c.Opaque {
		return fmt.Errorf("the request is not JSON of a %s: check each field's type (bytes are base64)", pm.ProtoReflect().Descriptor().FullName())
	}
	return err
}
