package policy

import (
	"fmt"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// The policy is read from YAML nodes rather than decoded into structs so
// that every error can say where it is in the policy's own terms, and so
// that duplicate keys (which a decoder into nodes lets through, and JSON
// parsers resolve silently) are refused.

type entry struct {
	key string
	val *yaml.Node
}

// mapping returns n's entries in order. Duplicate keys are errors, and so
// are keys outside known unless known is nil.
func mapping(n *yaml.Node, where string, known []string) ([]entry, error) {
	if err := plain(n, where); err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, errf(where, "want a mapping (an object), not %s", describe(n))
	}
	seen := map[string]bool{}
	out := make([]entry, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, err := scalar(n.Content[i], where)
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, errf(where, "duplicate key %q", key)
		}
		seen[key] = true
		out = append(out, entry{key, n.Content[i+1]})
	}
	if known != nil {
		if err := checkKeys(out, where, known); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func checkKeys(entries []entry, where string, known []string) error {
	for _, e := range entries {
		if !slices.Contains(known, e.key) {
			return errf(where, "unknown key %q (known: %s)", e.key, strings.Join(known, ", "))
		}
	}
	return nil
}

// scalarTags are the tags whose text is taken as a string.
var scalarTags = []string{"!!str", "!!int", "!!float", "!!bool", "!!timestamp"}

// scalar returns the text of a scalar node that is not null.
func scalar(n *yaml.Node, where string) (string, error) {
	if err := plain(n, where); err != nil {
		return "", err
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!merge" {
		return "", errf(where, "merge keys (<<) are not supported; write the entries out")
	}
	if n.Kind != yaml.ScalarNode || !slices.Contains(scalarTags, n.ShortTag()) {
		return "", errf(where, "want a string, not %s", describe(n))
	}
	return n.Value, nil
}

// stringList reads a string or a non-empty list of strings.
func stringList(n *yaml.Node, where string) ([]string, error) {
	if err := plain(n, where); err != nil {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		s, err := scalar(n, where)
		if err != nil {
			return nil, errf(where, "want a string or a list of strings, not %s", describe(n))
		}
		return []string{s}, nil
	}
	if len(n.Content) == 0 {
		return nil, errf(where, "empty list")
	}
	out := make([]string, len(n.Content))
	for i, c := range n.Content {
		var err error
		if out[i], err = scalar(c, fmt.Sprintf("%s[%d]", where, i)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// plain refuses aliases: a policy has no use for them, and following them
// would let a small document expand into a huge one.
func plain(n *yaml.Node, where string) error {
	if n.Kind == yaml.AliasNode {
		return errf(where, "aliases (*%s) are not supported; write the value out", n.Value)
	}
	return nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names a node's kind for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "that"
}
