// Package consttest lists the string constants a Go package declares, read
// from its source, so that a test can check each one is handled: a
// constant added without, say, a wire form then fails that test instead
// of reaching a user as "unspecified".
package consttest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Typed returns the values of the constants of type typeName declared in
// the package in dir (its non-test files).
func Typed(t testing.TB, dir, typeName string) []string {
	t.Helper()
	return collect(t, dir, func(name string, typ ast.Expr) bool {
		id, ok := typ.(*ast.Ident)
		return ok && id.Name == typeName
	})
}

// Prefixed returns the values of the string constants whose names start
// with prefix, typed or not, declared in the package in dir.
func Prefixed(t testing.TB, dir, prefix string) []string {
	t.Helper()
	return collect(t, dir, func(name string, _ ast.Expr) bool { return strings.HasPrefix(name, prefix) })
}

func collect(t testing.TB, dir string, match func(name string, typ ast.Expr) bool) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !match(n.Name, vs.Type) {
						continue
					}
					if i >= len(vs.Values) {
						t.Fatalf("%s: constant %s has no value of its own: consttest reads only NAME = \"literal\"", fset.Position(n.Pos()), n.Name)
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: constant %s is not a string literal: consttest reads only NAME = \"literal\"", fset.Position(n.Pos()), n.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, v)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no matching constants in %s", dir)
	}
	sort.Strings(out)
	return out
}
