package errdefs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestSites reads the module's code (tests and test suites aside) and holds two rules:
// errors become wire codes in one place, the Interceptor (so ToConnect is
// called in this package alone), and no error is matched by its text (no
// strings.Contains(err.Error(), …), no err.Error() == "…"): match kinds
// with errors.Is and types with errors.As.
func TestSites(t *testing.T) {
	fset := token.NewFileSet()
	matchers := map[string]bool{"Contains": true, "HasPrefix": true, "HasSuffix": true, "Index": true,
		"EqualFold": true, "ContainsAny": true, "CutPrefix": true, "Cut": true}
	isText := func(e ast.Expr) bool { // err.Error() or ce.Message()
		c, ok := e.(*ast.CallExpr)
		if !ok || len(c.Args) != 0 {
			return false
		}
		s, ok := c.Fun.(*ast.SelectorExpr)
		return ok && (s.Sel.Name == "Error" || s.Sel.Name == "Message")
	}
	n := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Conformance suites (storetest, sandboxtest, …) are tests: they
		// may check what an error says.
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" ||
			strings.HasSuffix(d.Name(), "test")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		n++
		inErrdefs := filepath.Dir(path) == filepath.Join("..", "errdefs")
		ast.Inspect(f, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "errdefs" && x.Sel.Name == "ToConnect" && !inErrdefs {
					t.Errorf("%s: errdefs.ToConnect outside the interceptor: return the error; errdefs.Interceptor translates it", fset.Position(x.Pos()))
				}
			case *ast.CallExpr:
				s, ok := x.Fun.(*ast.SelectorExpr)
				if !ok {
					break
				}
				if id, isID := s.X.(*ast.Ident); isID && id.Name == "strings" && matchers[s.Sel.Name] {
					for _, a := range x.Args {
						if isText(a) {
							t.Errorf("%s: an error matched by its text: use errors.Is or errors.As", fset.Position(x.Pos()))
						}
					}
				}
			case *ast.BinaryExpr:
				if (x.Op == token.EQL || x.Op == token.NEQ) && (isText(x.X) || isText(x.Y)) {
					t.Errorf("%s: an error compared by its text: use errors.Is or errors.As", fset.Position(x.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("read only %d files: is the module root ..?", n)
	}
}
