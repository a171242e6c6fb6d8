package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestKmsgValuesUseDefaults fails when non-test code builds a franz-go kmsg
// struct as a composite literal. kmsg's New…/Default() set the protocol's
// defaults (-1 leader ids and epochs, tagged fields such as KIP-951's
// CurrentLeader); a literal leaves zeros, which clients read as real values
// ("broker 0 leads this partition").
func TestKmsgValuesUseDefaults(t *testing.T) {
	files, err := filepath.Glob("../../internal/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		kmsgName := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"github.com/twmb/franz-go/pkg/kmsg"` {
				kmsgName = "kmsg"
				if imp.Name != nil {
					kmsgName = imp.Name.Name
				}
			}
		}
		if kmsgName == "" {
			continue
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if isKmsgStruct(cl.Type, kmsgName) {
				t.Errorf("%s: kmsg struct built as a literal; use kmsg.New…() or Default()", fset.Position(cl.Pos()))
			}
			// Elided element types: []kmsg.T{{…}}.
			if at, ok := cl.Type.(*ast.ArrayType); ok && isKmsgStruct(at.Elt, kmsgName) {
				for _, e := range cl.Elts {
					if _, ok := e.(*ast.CompositeLit); ok {
						t.Errorf("%s: kmsg struct built as a literal; use kmsg.New…() or Default()", fset.Position(e.Pos()))
					}
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no file importing kmsg checked")
	}
}

func isKmsgStruct(e ast.Expr, kmsgName string) bool {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == kmsgName
}
