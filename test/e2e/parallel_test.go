package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestParallelism keeps the package's parallelism deliberate (see serialTests): every top-level
// test either calls t.Parallel() as its first statement or is in serialTests, and nothing in
// serialTests calls it or is gone.
func TestParallelism(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files here (%v)", err)
	}
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			name := fn.Name.Name
			seen[name] = true
			parallel := len(fn.Body.List) > 0 && isParallelCall(fn.Body.List[0])
			_, serial := serialTests[name]
			switch {
			case serial && parallel:
				t.Errorf("%s (%s) calls t.Parallel() but is in serialTests", name, fset.Position(fn.Pos()))
			case !serial && !parallel:
				t.Errorf("%s (%s) neither calls t.Parallel() first nor is in serialTests with its reason", name, fset.Position(fn.Pos()))
			}
		}
	}
	for name := range serialTests {
		if !seen[name] {
			t.Errorf("serialTests lists %s, which does not exist", name)
		}
	}
	if len(seen) < 2 || !slices.Contains(files, "env_test.go") {
		t.Fatalf("parsed too little: %v", files)
	}
}

func isParallelCall(stmt ast.Stmt) bool {
	expr, ok := stmt.(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := expr.X.(*ast.CallExpr)
	if !ok || len(call.Args) != 0 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Parallel" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "t"
}
