package openapi

import (
	"bufio"
	"bytes"
	"regexp"
	"strings"
)

// The generated descriptors carry no comments (protoc-gen-go drops the
// source info), so the .proto files are read for them: the comment lines
// just above a declaration (leading) and the one after it on its line
// (trailing, with the comment-only lines below it that line up with it).
// This reads the files as they are written here (one declaration a line,
// // comments); it is not a .proto parser, and a declaration it does not
// recognize only goes without its description.

var (
	reScope   = regexp.MustCompile(`^(message|enum|service|oneof)\s+(\w+)\s*\{`)
	rePackage = regexp.MustCompile(`^package\s+([\w.]+)\s*;`)
	reRPC     = regexp.MustCompile(`^rpc\s+(\w+)\s*\(`)
	reField   = regexp.MustCompile(`^(?:optional\s+|repeated\s+)?(?:map\s*<[^>]*>|[\w.]+)\s+(\w+)\s*=\s*\d+`)
	reValue   = regexp.MustCompile(`^(\w+)\s*=\s*-?\d+`)
)

type scope struct{ kind, name string }

// comments maps full names (reins.v1.Sandbox, reins.v1.Sandbox.id,
// reins.v1.SandboxService.Get, reins.v1.SandboxState.SANDBOX_STATE_RUNNING
// for an enum value) to their comment text.
type comments map[string]string

func (c comments) parse(src []byte) {
	var (
		pkg      string
		stack    []scope
		pending  []string // comment lines above the next declaration
		trailKey string   // the declaration a trailing comment continues
		trailCol int
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if text, ok := strings.CutPrefix(line, "//"); ok {
			if col := strings.Index(raw, "//"); trailKey != "" && col == trailCol {
				c[trailKey] += " " + strings.TrimSpace(text)
				continue
			}
			trailKey = ""
			pending = append(pending, strings.TrimPrefix(text, " "))
			continue
		}
		trailKey = ""
		code, trailing, hasTrailing := strings.Cut(line, "//")
		code = strings.TrimSpace(code)
		key := ""
		if m := rePackage.FindStringSubmatch(code); m != nil {
			pkg = m[1]
		} else if m := reScope.FindStringSubmatch(code); m != nil {
			if m[1] != "oneof" {
				key = join(pkg, stack, m[2])
			}
			stack = append(stack, scope{m[1], m[2]})
		} else if m := reRPC.FindStringSubmatch(code); m != nil && inside(stack, "service") {
			key = join(pkg, stack, m[1])
		} else if m := reField.FindStringSubmatch(code); m != nil && inside(stack, "message") {
			key = join(pkg, messages(stack), m[1])
		} else if m := reValue.FindStringSubmatch(code); m != nil && inside(stack, "enum") {
			key = join(pkg, stack, m[1])
		}
		// A scope opened and closed on one line, or a line of closers.
		for n := strings.Count(code, "}"); n > 0 && len(stack) > 0; n-- {
			stack = stack[:len(stack)-1]
		}
		if key != "" {
			text := strings.TrimSpace(strings.Join(own(pending, key), "\n"))
			if hasTrailing {
				text = strings.TrimSpace(text + "\n" + strings.TrimSpace(trailing))
				trailKey, trailCol = key, strings.Index(raw, "//")
			}
			if text != "" {
				c[key] = text
			}
		}
		pending = nil
	}
}

// own drops the paragraphs above the one that starts with the declared
// name (a group's heading above its first call: "Short-lived
// sandboxes.\n\nSuspend saves..."); without one, all are kept.
func own(lines []string, key string) []string {
	name := key[strings.LastIndex(key, ".")+1:]
	for i := len(lines) - 1; i > 0; i-- {
		if strings.TrimSpace(lines[i-1]) == "" && strings.HasPrefix(lines[i], name+" ") {
			return lines[i:]
		}
	}
	return lines
}

func inside(stack []scope, kind string) bool {
	for i := len(stack) - 1; i >= 0; i-- {
		if stack[i].kind != "oneof" {
			return stack[i].kind == kind
		}
	}
	return false
}

// messages is stack without its oneofs: a oneof's fields are its
// message's.
func messages(stack []scope) []scope {
	var out []scope
	for _, s := range stack {
		if s.kind != "oneof" {
			out = append(out, s)
		}
	}
	return out
}

func join(pkg string, stack []scope, name string) string {
	parts := []string{pkg}
	for _, s := range stack {
		parts = append(parts, s.name)
	}
	return strings.Join(append(parts, name), ".")
}
