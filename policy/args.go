package policy

import (
	"bytes"
	"encoding/json"
	"strings"
)

// arguments reads a call's input once, on first use.
type arguments struct {
	input  json.RawMessage
	parsed bool
	keys   []string
	vals   []json.RawMessage
}

// values returns what the tool may take for argument name: the values of
// every top-level key equal to name under case folding (encoding/json's
// rule), arrays spread into their elements, strings as themselves, anything
// else as its compact JSON text. Input that is not a JSON object has none.
func (a *arguments) values(name string) []string {
	if !a.parsed {
		a.parsed = true
		a.keys, a.vals = topLevel(a.input)
	}
	var out []string
	for i, k := range a.keys {
		if strings.EqualFold(k, name) {
			out = appendValues(out, a.vals[i])
		}
	}
	return out
}

// topLevel splits a JSON object into its keys and raw values, in order,
// duplicates kept. It returns nothing for anything but one valid object.
func topLevel(input json.RawMessage) ([]string, []json.RawMessage) {
	if !json.Valid(input) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals
}

func appendValues(out []string, v json.RawMessage) []string {
	v = bytes.TrimSpace(v)
	if len(v) > 0 && v[0] == '[' {
		var elems []json.RawMessage
		if json.Unmarshal(v, &elems) == nil {
			for _, e := range elems {
				out = append(out, scalarText(e))
			}
			return out
		}
	}
	return append(out, scalarText(v))
}

// scalarText is a JSON string's value, or any other value's compact text.
func scalarText(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) > 0 && v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, v) == nil {
		return b.String()
	}
	return string(v)
}
