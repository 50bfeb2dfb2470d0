package trusted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/reinsdev/reins/errdefs"
)

// decodeInput decodes a tool's arguments into v, turning JSON errors into
// messages a model can act on. Unknown fields are refused: a misspelt
// optional field would otherwise be dropped without a word.
func decodeInput(toolName string, input json.RawMessage, v any) error {
	if len(bytes.TrimSpace(input)) == 0 {
		return invalidf("%s: no arguments; expected a JSON object", toolName)
	}
	// encoding/json has no typed error for an unknown field, and its text
	// is no contract: the fields are checked here first.
	if name, ok := unknownField(input, v); ok {
		return invalidf("%s: unknown field %q", toolName, name)
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	err := dec.Decode(v)
	if err == nil {
		if dec.More() {
			return invalidf("%s: arguments must be one JSON object", toolName)
		}
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return invalidf("%s: arguments must be a JSON object, not %s", toolName, typeErr.Value)
	case errors.As(err, &typeErr):
		return invalidf("%s: field %q must be %s, not %s", toolName, typeErr.Field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return invalidf("%s: arguments are not valid JSON (%v)", toolName, syntaxErr)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidf("%s: arguments are not valid JSON (they end too early)", toolName)
	default:
		return invalidf("%s: bad arguments: %v", toolName, err)
	}
}

// unknownField returns the first key of the JSON object input that no field
// of the struct v points to takes (matched as encoding/json matches them,
// ignoring case). Input that is not an object, or a v that is not a
// struct, has none: decoding reports those.
func unknownField(input json.RawMessage, v any) (string, bool) {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return "", false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(input, &obj) != nil {
		return "", false
	}
	names := jsonFields(t.Elem(), nil)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, k) }) {
			return k, true
		}
	}
	return "", false
}

// jsonFields appends the JSON names of struct type t's fields, those of
// embedded structs included.
func jsonFields(t reflect.Type, names []string) []string {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-":
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			names = jsonFields(f.Type, names)
		case !f.IsExported():
		case tag != "":
			names = append(names, tag)
		default:
			names = append(names, f.Name)
		}
	}
	return names
}

// jsonKind names a Go kind the way a JSON schema would.
func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "bool":
		return "a boolean"
	case "int", "int64", "float64":
		return "a number"
	}
	return "a " + goKind
}

// kindf returns an error of kind whose text is the formatted message alone:
// the model reads it, and a trailing "invalid argument" would only be noise.
func kindf(kind error, format string, args ...any) error {
	return errdefs.WithMessage(kind, fmt.Sprintf(format, args...))
}

func invalidf(format string, args ...any) error {
	return kindf(errdefs.ErrInvalidArgument, format, args...)
}

func deniedf(format string, args ...any) error {
	return kindf(errdefs.ErrPermissionDenied, format, args...)
}

// cutRunes returns s cut to at most n runes, with a marker saying how many
// runes were dropped.
func cutRunes(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return s[:i] + fmt.Sprintf("…(+%d chars)", utf8.RuneCountInString(s[i:]))
}
