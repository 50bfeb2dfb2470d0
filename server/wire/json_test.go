package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// eachMessage calls f with every message of the files, nested ones too.
func eachMessage(files []protoreflect.FileDescriptor, f func(protoreflect.MessageDescriptor)) {
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			if !ms.Get(i).IsMapEntry() {
				f(ms.Get(i))
			}
			walk(ms.Get(i).Messages())
		}
	}
	for _, fd := range files {
		walk(fd.Messages())
	}
}

// sampleNano is a real time, far beyond 2^53.
const sampleNano = 1796137448678000123

// filler sets every field of a message to a value the JSON form treats
// specially: 64-bit integers alternately within 2^53 and beyond it (and
// negative), strings needing escapes, bytes, two-element lists and maps.
// Variant v picks the v-th member of each oneof, and moves which 64-bit
// fields are large.
type filler struct{ variant int }

func (f filler) fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && od.Fields().Get(f.variant%od.Fields().Len()) != fd {
			continue
		}
		n := f.variant + i
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for j := range 2 {
				k := f.scalar(fd.MapKey(), n+j).MapKey()
				mp.Set(k, f.value(m.Mutable(fd).Map().NewValue, fd.MapValue(), n+j, depth))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := range 2 {
				l.Append(f.value(l.NewElement, fd, n+j, depth))
			}
		case fd.Message() != nil:
			if depth < 3 {
				f.fill(m.Mutable(fd).Message(), depth+1)
			}
		default:
			m.Set(fd, f.scalar(fd, n))
		}
	}
}

func (f filler) value(newValue func() protoreflect.Value, fd protoreflect.FieldDescriptor, n, depth int) protoreflect.Value {
	if fd.Message() == nil {
		return f.scalar(fd, n)
	}
	v := newValue()
	if depth < 3 {
		f.fill(v.Message(), depth+1)
	}
	return v
}

func (f filler) scalar(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	big := n%2 == 1
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-7 - n))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(7 + n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		switch {
		case strings.HasSuffix(string(fd.Name()), "_unix_nano"):
			return protoreflect.ValueOfInt64(sampleNano + int64(n))
		case big && n%4 == 1:
			return protoreflect.ValueOfInt64(-(maxExactInt + 1 + int64(n)))
		case big:
			return protoreflect.ValueOfInt64(maxExactInt + 1 + int64(n))
		case n%4 == 2:
			return protoreflect.ValueOfInt64(-maxExactInt) // the last exact one
		}
		return protoreflect.ValueOfInt64(int64(maxExactInt - n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if big {
			return protoreflect.ValueOfUint64(math.MaxUint64 - uint64(n))
		}
		return protoreflect.ValueOfUint64(uint64(n))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) + 0.25)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64([]float64{1.5e-9, 2.5, 3e22}[n%3])
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("s%d \"q\" \\ \n\t\x01 é \u2028 <&>", n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{0, byte(n), 0xff, '"'})
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(n % vals.Len()).Number())
	}
	panic(fmt.Sprintf("no sample for %v", fd.Kind()))
}

// maxOneof is the most members any oneof of the files has: the variants
// needed for every member to be set once.
func maxOneof(files []protoreflect.FileDescriptor) int {
	most := 1
	eachMessage(files, func(md protoreflect.MessageDescriptor) {
		for i := 0; i < md.Oneofs().Len(); i++ {
			most = max(most, md.Oneofs().Get(i).Fields().Len())
		}
	})
	return most
}

// TestJSONEveryMessage: every message of the API, populated and empty,
// is written in the one shape and reads back (through the codec) equal.
func TestJSONEveryMessage(t *testing.T) {
	variants := maxOneof(Files)
	count := 0
	eachMessage(Files, func(md protoreflect.MessageDescriptor) {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
		if err != nil {
			t.Fatalf("%s: %v", md.FullName(), err)
		}
		count++
		for v := -1; v < variants; v++ {
			m := mt.New()
			if v >= 0 {
				filler{v}.fill(m, 0)
			}
			data, err := JSON.Marshal(m.Interface())
			if err != nil {
				t.Fatalf("%s (variant %d): %v", md.FullName(), v, err)
			}
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				t.Fatalf("%s: not JSON: %v\n%s", md.FullName(), err, data)
			}
			checkShape(t, string(md.FullName()), m, obj)
			back := mt.New().Interface()
			if err := (JSONCodec{}).Unmarshal(data, back); err != nil {
				t.Fatalf("%s: its JSON does not read back: %v\n%s", md.FullName(), err, data)
			}
			if !proto.Equal(m.Interface(), back) {
				t.Errorf("%s (variant %d): read back differs:\nsent %v\nread %v", md.FullName(), v, m.Interface(), back)
			}
		}
	})
	if count < 100 {
		t.Errorf("only %d messages walked: is a file missing?", count)
	}
}

// checkShape holds obj, m's JSON, to the rules of wire.JSON.
func checkShape(t *testing.T, path string, m protoreflect.Message, obj map[string]any) {
	t.Helper()
	fields := m.Descriptor().Fields()
	want := 0
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		name := string(fd.Name())
		got, present := obj[name]
		at := path + "." + name
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && !m.Has(fd) {
			if present {
				t.Errorf("%s: an unset oneof member is written", at)
			}
			continue
		}
		want++
		if !present {
			t.Errorf("%s: missing", at)
			continue
		}
		if tn, ok := TimeField(fd); ok {
			want++
			wantTime := ""
			if n := m.Get(fd).Int(); n != 0 {
				wantTime = time.Unix(0, n).UTC().Format(time.RFC3339Nano)
			}
			s, _ := obj[tn].(string)
			if parsed, err := time.Parse(time.RFC3339Nano, s); s != "" && (err != nil || parsed.Format(time.RFC3339Nano) != wantTime || len(s) != len(timeLayout)) {
				t.Errorf("%s: %s is %q, want %s in nine digits", at, tn, s, wantTime)
			} else if s == "" && wantTime != "" {
				t.Errorf("%s: %s is %v, want %s", at, tn, obj[tn], wantTime)
			}
		}
		switch {
		case !m.Has(fd) && fd.Cardinality() != protoreflect.Repeated && (fd.Message() != nil || fd.HasPresence()):
			if got != nil {
				t.Errorf("%s: unset, written as %v, want null", at, got)
			}
		case fd.IsMap():
			mp, ok := got.(map[string]any)
			if !ok || len(mp) != m.Get(fd).Map().Len() {
				t.Errorf("%s: %v, want a map of %d", at, got, m.Get(fd).Map().Len())
				continue
			}
			m.Get(fd).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				checkValue(t, at+"["+k.String()+"]", fd.MapValue(), v, mp[k.String()])
				return true
			})
		case fd.IsList():
			l := m.Get(fd).List()
			arr, ok := got.([]any)
			if !ok || len(arr) != l.Len() {
				t.Errorf("%s: %v, want a list of %d", at, got, l.Len())
				continue
			}
			for j := range arr {
				checkValue(t, fmt.Sprintf("%s[%d]", at, j), fd, l.Get(j), arr[j])
			}
		default:
			checkValue(t, at, fd, m.Get(fd), got)
		}
	}
	if len(obj) != want {
		t.Errorf("%s: %d keys, want %d: %v", path, len(obj), want, obj)
	}
}

func checkValue(t *testing.T, at string, fd protoreflect.FieldDescriptor, v protoreflect.Value, got any) {
	t.Helper()
	switch fd.Kind() {
	case protoreflect.MessageKind:
		obj, ok := got.(map[string]any)
		if !ok {
			t.Errorf("%s: %v, want an object", at, got)
			return
		}
		checkShape(t, at, v.Message(), obj)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		checkInt(t, at, strconv.FormatInt(v.Int(), 10), v.Int() >= -maxExactInt && v.Int() <= maxExactInt, got)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		checkInt(t, at, strconv.FormatUint(v.Uint(), 10), v.Uint() <= maxExactInt, got)
	case protoreflect.EnumKind:
		if name := string(fd.Enum().Values().ByNumber(v.Enum()).Name()); got != name {
			t.Errorf("%s: %v, want the name %s", at, got, name)
		}
	case protoreflect.StringKind:
		if got != v.String() {
			t.Errorf("%s: %q, want %q", at, got, v.String())
		}
	}
}

func checkInt(t *testing.T, at, digits string, fits bool, got any) {
	t.Helper()
	switch g := got.(type) {
	case json.Number:
		if !fits || g.String() != digits {
			t.Errorf("%s: the number %s, want %s as a %s", at, g, digits, map[bool]string{true: "number", false: "string"}[fits])
		}
	case string:
		if fits || g != digits {
			t.Errorf("%s: the string %q, want %s as a %s", at, g, digits, map[bool]string{true: "number", false: "string"}[fits])
		}
	default:
		t.Errorf("%s: %v (%T), want %s", at, got, got, digits)
	}
}

// TestJSONTimeNames: every X_unix_nano field of the API gets its X_time
// (no field of that name is in the way), and the names read as meant.
func TestJSONTimeNames(t *testing.T) {
	n := 0
	eachMessage(Files, func(md protoreflect.MessageDescriptor) {
		for i := 0; i < md.Fields().Len(); i++ {
			fd := md.Fields().Get(i)
			if !strings.HasSuffix(string(fd.Name()), "_unix_nano") {
				continue
			}
			n++
			if _, ok := TimeField(fd); !ok {
				t.Errorf("%s has no time beside it: rename the field in its way", fd.FullName())
			}
		}
	})
	if n == 0 {
		t.Fatal("no _unix_nano field found")
	}
	for field, want := range map[protoreflect.FieldDescriptor]string{
		(&reinsv1.Sandbox{}).ProtoReflect().Descriptor().Fields().ByName("created_unix_nano"):            "created_time",
		(&reinsv1.EgressLogEntry{}).ProtoReflect().Descriptor().Fields().ByName("time_unix_nano"):        "time",
		(&reinsv1.SandboxLifecycleEvent{}).ProtoReflect().Descriptor().Fields().ByName("at_unix_nano"):   "at_time",
		(&reinsv1.SandboxLifecycleEvent{}).ProtoReflect().Descriptor().Fields().ByName("time_unix_nano"): "time",
	} {
		if got, _ := TimeField(field); got != want {
			t.Errorf("%s: %q, want %q", field.FullName(), got, want)
		}
	}
}

// TestJSONSample pins the shape on one message, as a reader sees it.
func TestJSONSample(t *testing.T) {
	e := &reinsv1.EgressLogEntry{Seq: 4, Sandbox: "sbx1", TimeUnixNano: 1796137448678000000, Proto: "http",
		Port: 80, BytesOut: 1 << 53, BytesIn: 1<<53 - 1, DurationNano: -3}
	got, err := JSON.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"seq":4,"sandbox":"sbx1","time_unix_nano":"1796137448678000000","time":"2026-12-01T15:04:08.678000000Z",` +
		`"proto":"http","host":"","port":80,"addr":"","allowed":false,"rule":"","bytes_out":"9007199254740992",` +
		`"bytes_in":9007199254740991,"duration_nano":-3,"note":""}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	sparse, _ := JSONForm{OmitZero: true}.Marshal(&reinsv1.EgressLogEntry{Seq: 4, Host: "a"})
	if string(sparse) != `{"seq":4,"host":"a"}` {
		t.Errorf("OmitZero: %s", sparse)
	}
	// protojson's own reader takes the shape (times aside).
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(got, &reinsv1.EgressLogEntry{}); err != nil {
		t.Error(err)
	}
}

// TestJSONFloats: the values JSON has no number for are protojson's
// strings, and read back.
func TestJSONFloats(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{math.NaN(), `"NaN"`}, {math.Inf(1), `"Infinity"`}, {math.Inf(-1), `"-Infinity"`}, {0, `0`}, {1e21, `1e+21`}, {1e-7, `1e-07`}, {0.5, `0.5`}} {
		got, err := JSON.Marshal(&reinsv1.CreateSandboxRequest{Spec: &reinsv1.SandboxSpec{Cpus: c.v}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(got), `"cpus":`+c.want+`,`) {
			t.Errorf("%v: %s, want cpus %s", c.v, got, c.want)
		}
		var back reinsv1.CreateSandboxRequest
		if err := (JSONCodec{}).Unmarshal(got, &back); err != nil {
			t.Fatalf("%v: %v", c.v, err)
		}
		if b := back.Spec.Cpus; b != c.v && !(math.IsNaN(b) && math.IsNaN(c.v)) {
			t.Errorf("%v read back as %v", c.v, b)
		}
	}
}

// TestJSONRefusesBadUTF8: a string that is not UTF-8 is an error naming
// the field, not mangled text.
func TestJSONRefusesBadUTF8(t *testing.T) {
	_, err := JSON.Marshal(&reinsv1.Sandbox{Id: "ok", Message: "bad \xff"})
	if err == nil || !strings.Contains(err.Error(), "message") {
		t.Errorf("a string of bad UTF-8: %v", err)
	}
}
