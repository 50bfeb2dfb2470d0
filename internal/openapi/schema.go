package openapi

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/reinsdev/reins/server/wire"
)

// message adds md's schema (and those it refers to) to the components.
func (g *generator) message(md protoreflect.MessageDescriptor) {
	name := string(md.FullName())
	if _, ok := g.schemas[name]; ok {
		return
	}
	g.schemas[name] = nil // being made: a message that holds itself refers to it
	props := object{}
	var oneofs object
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		props = append(props, member{string(fd.Name()), g.field(fd)})
		if tn, ok := wire.TimeField(fd); ok {
			props = append(props, member{tn, obj(
				"description", "The time of "+string(fd.Name())+" in RFC 3339 (UTC, nine fraction digits); \"\" when it is 0. Output only.",
				"readOnly", true,
				"anyOf", []any{obj("type", "string", "format", "date-time"), obj("type", "string", "maxLength", 0)})})
		}
	}
	desc := g.comments[name]
	for i := 0; i < md.Oneofs().Len(); i++ {
		od := md.Oneofs().Get(i)
		if od.IsSynthetic() {
			continue
		}
		var members []any
		var names []string
		for j := 0; j < od.Fields().Len(); j++ {
			members = append(members, string(od.Fields().Get(j).Name()))
			names = append(names, string(od.Fields().Get(j).Name()))
		}
		oneofs = append(oneofs, member{string(od.Name()), members})
		desc = strings.TrimSpace(desc + "\n\nAt most one of " + strings.Join(names, ", ") + " is present (oneof " + string(od.Name()) + ").")
	}
	g.schemas[name] = obj("type", "object", "description", desc, "properties", props, "x-oneof", oneofs)
}

// field is the schema of one field, its comment as description.
func (g *generator) field(fd protoreflect.FieldDescriptor) object {
	desc := g.comments[string(fd.FullName())]
	var s object
	switch {
	case fd.IsMap():
		s = obj("type", "object", "additionalProperties", g.single(fd.MapValue()))
		if k := fd.MapKey().Kind(); k != protoreflect.StringKind {
			s = append(s, member{"propertyNames", obj("description", "The key, a "+k.String()+", as text.")})
		}
	case fd.IsList():
		s = obj("type", "array", "items", g.single(fd))
	case (wire.IsMessage(fd) || fd.HasPresence()) && (fd.ContainingOneof() == nil || fd.ContainingOneof().IsSynthetic()):
		// Unset: null (an unset oneof member is left out instead).
		s = obj("anyOf", []any{g.single(fd), obj("type", "null")})
	default:
		s = g.single(fd)
	}
	if strings.HasSuffix(string(fd.Name()), "_unix_nano") {
		desc = strings.TrimSpace(desc + "\n\nNanoseconds since 1970-01-01 UTC; 0 for none.")
	}
	if desc != "" {
		s = append(obj("description", desc), s...)
	}
	return s
}

// maxExact is 2^53−1, the largest int64 wire.JSON writes as a number.
const maxExact = 1<<53 - 1

// single is the schema of one value of fd's kind.
func (g *generator) single(fd protoreflect.FieldDescriptor) object {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return obj("type", "boolean")
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return obj("type", "integer", "format", "int32")
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return obj("type", "integer", "format", "uint32", "minimum", 0, "maximum", uint64(1<<32-1))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return obj("type", []any{"integer", "string"}, "format", "int64", "pattern", `^-?[0-9]+$`,
			"x-wire", "a number when |v| <= 2^53-1, else a decimal string", "x-number-max", maxExact)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return obj("type", []any{"integer", "string"}, "format", "uint64", "pattern", `^[0-9]+$`, "minimum", 0,
			"x-wire", "a number when v <= 2^53-1, else a decimal string", "x-number-max", maxExact)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		format := "double"
		if fd.Kind() == protoreflect.FloatKind {
			format = "float"
		}
		return obj("anyOf", []any{obj("type", "number", "format", format), obj("type", "string", "enum", []any{"NaN", "Infinity", "-Infinity"})})
	case protoreflect.StringKind:
		return obj("type", "string")
	case protoreflect.BytesKind:
		return obj("type", "string", "contentEncoding", "base64", "format", "byte")
	case protoreflect.EnumKind:
		g.enum(fd.Enum())
		return ref(string(fd.Enum().FullName()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		if md.ParentFile() != nil && md.ParentFile().Package() == "google.protobuf" {
			return obj("description", string(md.FullName())+" in protojson's form for it")
		}
		g.message(md)
		return ref(string(md.FullName()))
	}
	return obj()
}

func (g *generator) enum(ed protoreflect.EnumDescriptor) {
	name := string(ed.FullName())
	if _, ok := g.schemas[name]; ok {
		return
	}
	var names []any
	var lines []string
	vals := ed.Values()
	for i := 0; i < vals.Len(); i++ {
		v := vals.Get(i)
		names = append(names, string(v.Name()))
		if c := g.comments[name+"."+string(v.Name())]; c != "" {
			lines = append(lines, "- "+string(v.Name())+": "+strings.Join(strings.Fields(c), " "))
		}
	}
	desc := g.comments[name]
	if len(lines) > 0 {
		desc = strings.TrimSpace(desc + "\n\n" + strings.Join(lines, "\n"))
	}
	g.schemas[name] = obj("type", "string", "description", desc, "enum", names)
}
