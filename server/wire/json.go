package wire

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// Files are the .proto files whose messages cross the API in JSON: the
// service's and the executor's (whose calls the service proxies).
var Files = []protoreflect.FileDescriptor{
	reinsv1.File_reins_v1_sandbox_proto, reinsv1.File_reins_v1_run_proto,
	reinsv1.File_reins_v1_secret_proto, reinsv1.File_reins_v1_tenant_proto,
	executorv1.File_reins_executor_v1_executor_proto,
}

// JSON is the one JSON form of the API: what the service answers a JSON
// caller (curl, a Connect client in JSON) and what the CLI's --json prints.
// The rules, for readers in any language (docs/api.md says the same):
//   - Field names are the .proto's (snake_case) and every field is present
//     at its zero value (0, "", false, [], {}); an unset message is null, an
//     unset `optional` scalar null; of a oneof only the member that is set.
//   - 64-bit integers are JSON numbers when |v| ≤ 2^53−1 (exact in a
//     JavaScript number or a float64) and decimal strings beyond, so a
//     reader either parses a number or, for the rare large value, a string.
//     Nanosecond times (~1.8e18) are always beyond: hence the next rule.
//   - Beside each X_unix_nano field is X_time (time_unix_nano: time), the
//     same instant in RFC 3339 in UTC with all nine fraction digits
//     ("2026-12-02T03:16:47.123456789Z", so the strings sort as the times
//     do), or "" for 0 (no time).
//   - Bytes are base64 (standard, padded); enums their names
//     (SANDBOX_STATE_RUNNING), or the number for a value this build does not
//     know; NaN and ±Inf floats the strings "NaN", "Infinity", "-Infinity".
//   - Map entries are in key order; fields in the .proto's order.
//
// Readers (JSONCodec) take int64s as numbers or strings, either field-name
// style, and ignore the X_time fields (they are output only).
var JSON = JSONForm{}

// JSONForm writes messages in the JSON form above. Its one option is for
// human views only, never for --json or the API.
type JSONForm struct {
	// OmitZero leaves out fields at their zero value (and their X_time):
	// one-line summaries of a payload (reins runs events).
	OmitZero bool
}

// maxDepth bounds the nesting of messages marshalled, as protobuf's own
// decoders do (protowire.DefaultRecursionLimit).
const maxDepth = 10000

// maxExactInt is the largest integer a float64 (a JavaScript number)
// holds exactly: 2^53−1.
const maxExactInt = 1<<53 - 1

// timeLayout is RFC 3339 in UTC with a fixed nine-digit fraction.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// Marshal writes m, compact (no spaces).
func (f JSONForm) Marshal(m proto.Message) ([]byte, error) {
	e := jsonEncoder{omitZero: f.OmitZero}
	if err := e.message(m.ProtoReflect(), 0); err != nil {
		return nil, err
	}
	return e.buf, nil
}

type jsonEncoder struct {
	buf      []byte
	omitZero bool
}

func (e *jsonEncoder) message(m protoreflect.Message, depth int) error {
	if depth > maxDepth {
		return errors.New("wire: messages nested too deeply to write as JSON")
	}
	md := m.Descriptor()
	if !m.IsValid() {
		e.buf = append(e.buf, "null"...)
		return nil
	}
	if md.ParentFile() != nil && md.ParentFile().Package() == "google.protobuf" {
		return e.wellKnown(m)
	}
	e.buf = append(e.buf, '{')
	first := true
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		has := m.Has(fd)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && !has {
			continue
		}
		if e.omitZero && !has {
			continue
		}
		if !first {
			e.buf = append(e.buf, ',')
		}
		first = false
		e.name(string(fd.Name())) // an identifier: valid UTF-8
		var err error
		switch {
		case !has && fd.Cardinality() != protoreflect.Repeated && (IsMessage(fd) || fd.HasPresence()):
			e.buf = append(e.buf, "null"...)
		default:
			err = e.field(fd, m.Get(fd), depth)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", fd.Name(), err)
		}
		if tn, ok := TimeField(fd); ok {
			e.buf = append(e.buf, ',')
			e.name(tn) // an identifier too
			e.buf = strconv.AppendQuote(e.buf, formatNano(m.Get(fd), has))
		}
	}
	e.buf = append(e.buf, '}')
	return nil
}

// TimeField is the name of the RFC 3339 field written beside fd
// (X_unix_nano → X_time; time_unix_nano → time), if fd is a singular 64-bit X_unix_nano field
// and its message has no field of that name already.
func TimeField(fd protoreflect.FieldDescriptor) (string, bool) {
	base, ok := strings.CutSuffix(string(fd.Name()), "_unix_nano")
	if !ok || base == "" || fd.Cardinality() == protoreflect.Repeated || !is64(fd.Kind()) {
		return "", false
	}
	name := base + "_time"
	if strings.HasSuffix(base, "time") {
		name = base // time_unix_nano → time, not time_time
	}
	if fd.ContainingMessage().Fields().ByName(protoreflect.Name(name)) != nil {
		return "", false
	}
	return name, true
}

// formatNano is a nanosecond time in timeLayout, "" for none.
func formatNano(v protoreflect.Value, has bool) string {
	if !has {
		return ""
	}
	var n int64
	switch x := v.Interface().(type) {
	case int64:
		n = x
	case uint64:
		if x > math.MaxInt64 {
			return ""
		}
		n = int64(x)
	}
	if n == 0 {
		return ""
	}
	return time.Unix(0, n).UTC().Format(timeLayout)
}

func is64(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

func (e *jsonEncoder) field(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) error {
	switch {
	case fd.IsMap():
		return e.mapValue(fd, v.Map(), depth)
	case fd.IsList():
		l := v.List()
		e.buf = append(e.buf, '[')
		for i := 0; i < l.Len(); i++ {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.single(fd, l.Get(i), depth); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, ']')
		return nil
	}
	return e.single(fd, v, depth)
}

func (e *jsonEncoder) mapValue(fd protoreflect.FieldDescriptor, m protoreflect.Map, depth int) error {
	keys := make([]protoreflect.MapKey, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, compareKeys)
	e.buf = append(e.buf, '{')
	for i, k := range keys {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		if err := e.name(k.String()); err != nil {
			return fmt.Errorf("a key: %w", err)
		}
		if err := e.single(fd.MapValue(), m.Get(k), depth); err != nil {
			return fmt.Errorf("[%s]: %w", k.String(), err)
		}
	}
	e.buf = append(e.buf, '}')
	return nil
}

// compareKeys orders map keys by value: numbers as numbers, false first.
func compareKeys(a, b protoreflect.MapKey) int {
	switch x := a.Interface().(type) {
	case string:
		return strings.Compare(x, b.String())
	case bool:
		switch {
		case x == b.Bool():
			return 0
		case !x:
			return -1
		}
		return 1
	case int32, int64:
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}

// single writes one value of fd's kind (an element, for a list or map).
func (e *jsonEncoder) single(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) error {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		e.buf = strconv.AppendBool(e.buf, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		e.buf = strconv.AppendInt(e.buf, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		e.buf = strconv.AppendUint(e.buf, v.Uint(), 10)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		n := v.Int()
		if n < -maxExactInt || n > maxExactInt {
			e.buf = append(e.buf, '"')
			e.buf = strconv.AppendInt(e.buf, n, 10)
			e.buf = append(e.buf, '"')
		} else {
			e.buf = strconv.AppendInt(e.buf, n, 10)
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n := v.Uint()
		if n > maxExactInt {
			e.buf = append(e.buf, '"')
			e.buf = strconv.AppendUint(e.buf, n, 10)
			e.buf = append(e.buf, '"')
		} else {
			e.buf = strconv.AppendUint(e.buf, n, 10)
		}
	case protoreflect.FloatKind:
		e.float(v.Float(), 32)
	case protoreflect.DoubleKind:
		e.float(v.Float(), 64)
	case protoreflect.StringKind:
		return e.str(v.String())
	case protoreflect.BytesKind:
		e.buf = append(e.buf, '"')
		e.buf = base64.StdEncoding.AppendEncode(e.buf, v.Bytes())
		e.buf = append(e.buf, '"')
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			e.buf = append(e.buf, "null"...)
			break
		}
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			e.buf = strconv.AppendQuote(e.buf, string(ev.Name()))
		} else {
			e.buf = strconv.AppendInt(e.buf, int64(v.Enum()), 10)
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return e.message(v.Message(), depth+1)
	default:
		return fmt.Errorf("wire: no JSON form for a field of kind %v", fd.Kind())
	}
	return nil
}

func (e *jsonEncoder) float(f float64, bits int) {
	switch {
	case math.IsNaN(f):
		e.buf = append(e.buf, `"NaN"`...)
		return
	case math.IsInf(f, 1):
		e.buf = append(e.buf, `"Infinity"`...)
		return
	case math.IsInf(f, -1):
		e.buf = append(e.buf, `"-Infinity"`...)
		return
	}
	// Plain digits in the usual range, an exponent outside it (both JSON).
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	e.buf = strconv.AppendFloat(e.buf, f, format, -1, bits)
}

func (e *jsonEncoder) name(s string) error {
	if err := e.str(s); err != nil {
		return err
	}
	e.buf = append(e.buf, ':')
	return nil
}

// str writes s as a JSON string. Protobuf strings are UTF-8; one that is
// not is refused (as protobuf's binary form refuses it), never mangled.
func (e *jsonEncoder) str(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("wire: a string is not valid UTF-8")
	}
	e.buf = append(e.buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			e.buf = append(e.buf, s[start:i]...)
			e.buf = appendEscape(e.buf, rune(c))
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\u2028' || r == '\u2029' {
			// Valid JSON, but not valid JavaScript source.
			e.buf = append(e.buf, s[start:i]...)
			e.buf = appendEscape(e.buf, r)
			start = i + size
		}
		i += size
	}
	e.buf = append(e.buf, s[start:]...)
	e.buf = append(e.buf, '"')
	return nil
}

func appendEscape(b []byte, r rune) []byte {
	switch r {
	case '"', '\\':
		return append(b, '\\', byte(r))
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return fmt.Appendf(b, `\u%04x`, r)
}

// wellKnown writes a google.protobuf message (Timestamp, Duration,
// Struct, the wrappers...) in protojson's special form for it. None is in
// the API today; a 64-bit integer inside one stays a string (protojson's
// form), which readers take too.
func (e *jsonEncoder) wellKnown(m protoreflect.Message) error {
	data, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m.Interface())
	if err != nil {
		return err
	}
	// protojson varies its spacing on purpose; the form is compact.
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return err
	}
	e.buf = append(e.buf, buf.Bytes()...)
	return nil
}

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
	err := protojson.UnmarshalOptions{DiscardUnknown: true, RecursionLimit: MaxJSONDepth}.Unmarshal(data, pm)
	switch {
	case err == nil:
		return nil
	case c.Opaque:
		return fmt.Errorf("the request is not JSON of a %s: %s", pm.ProtoReflect().Descriptor().FullName(), jsonHint)
	}
	return fmt.Errorf("the request is not JSON of a %s (%s): %s", pm.ProtoReflect().Descriptor().FullName(),
		shapeNames(err.Error(), pm.ProtoReflect().Descriptor()), jsonHint)
}

// fieldWord is how protojson's errors name a field: by its camelCase JSON
// name.
var fieldWord = regexp.MustCompile(`field ([A-Za-z0-9_]+)`)

// shapeNames renames the fields msg names by their JSON names (protojson
// writes "field memoryBytes") to their names in the JSON shape, which
// are what the caller sent ("field memory_bytes"). A name of no field in
// md's tree is left as it is.
func shapeNames(msg string, md protoreflect.MessageDescriptor) string {
	return fieldWord.ReplaceAllStringFunc(msg, func(w string) string {
		if name := fieldNamed(md, strings.TrimPrefix(w, "field "), map[protoreflect.FullName]bool{}); name != "" {
			return "field " + name
		}
		return w
	})
}

// fieldNamed finds the field of md's tree whose JSON name is json and
// answers its proto name, or "".
func fieldNamed(md protoreflect.MessageDescriptor, json string, seen map[protoreflect.FullName]bool) string {
	if seen[md.FullName()] {
		return ""
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	if fd := fields.ByJSONName(json); fd != nil {
		return string(fd.Name())
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if IsMessage(fd) {
			if name := fieldNamed(fd.Message(), json, seen); name != "" {
				return name
			}
		}
	}
	return ""
}

// jsonHint says what a reader takes, for a request it could not read.
const jsonHint = "check each field's type (64-bit integers are numbers or decimal strings, bytes base64, enums names) and nesting (at most 64 deep)"

// MaxJSONDepth bounds the nesting of a JSON request: of its messages, and
// of anything inside a field it ignores. The API's messages nest far less
// (TestHostileJSONDeepNesting holds them to it), so a deeper body is
// refused before it costs anything.
const MaxJSONDepth = 64

// IsMessage reports whether fd holds a message (or a group); unset, such
// a field is null in the JSON shape.
func IsMessage(fd protoreflect.FieldDescriptor) bool {
	k := fd.Kind()
	return k == protoreflect.MessageKind || k == protoreflect.GroupKind
}
