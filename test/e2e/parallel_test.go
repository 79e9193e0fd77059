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

// TestParallelism keeps the package's parallelism deliberate (see timingScenarios): every top-level
// test but TestTimingSensitive calls t.Parallel() as its first statement, and every timing
// scenario gives its reason and does not call it (in a lane of TestTimingSensitive, t.Parallel()
// would let the lane start its next scenario beside it). A scenario's function is its name with
// a lower-case first letter.
func TestParallelism(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files here (%v)", err)
	}
	funcs := map[string]*ast.FuncDecl{}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
				funcs[fn.Name.Name] = fn
			}
		}
	}
	tests := 0
	for name, fn := range funcs {
		if !strings.HasPrefix(name, "Test") || name == "TestMain" || name == "TestTimingSensitive" {
			continue
		}
		tests++
		if !callsParallelFirst(fn) {
			t.Errorf("%s (%s) neither calls t.Parallel() first nor is in timingScenarios with its reason", name, fset.Position(fn.Pos()))
		}
	}
	for _, s := range timingScenarios {
		name := strings.ToLower(s.name[:1]) + s.name[1:]
		fn, ok := funcs[name]
		switch {
		case !ok:
			t.Errorf("timingScenarios lists %s, but there is no func %s", s.name, name)
		case callsParallelFirst(fn):
			t.Errorf("%s (%s) is in timingScenarios but calls t.Parallel()", name, fset.Position(fn.Pos()))
		case s.why == "":
			t.Errorf("timingScenarios lists %s without its reason", s.name)
		}
	}
	if tests < 2 || !slices.Contains(files, "env_test.go") {
		t.Fatalf("parsed too little: %v", files)
	}
}

func callsParallelFirst(fn *ast.FuncDecl) bool {
	return len(fn.Body.List) > 0 && isParallelCall(fn.Body.List[0])
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
