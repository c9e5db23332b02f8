package docstest

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryExportedIdentifierHasAComment: go doc of each public package
// (not internal/, not a command, not an example) says what each exported
// identifier is.
func TestEveryExportedIdentifierHasAComment(t *testing.T) {
	root := filepath.Join("..", "..")
	var missing []string
	err := filepath.WalkDir(root, func(dir string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, dir)
		switch first := strings.Split(rel, string(filepath.Separator))[0]; {
		case first == "internal", first == "cmd", first == "examples", first == "bench", first == "node_modules",
			strings.HasPrefix(first, "."), strings.Contains(rel, "testdata"), strings.Contains(rel, "node_modules"):
			if rel != "." {
				return filepath.SkipDir
			}
		}
		fset := token.NewFileSet()
		names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		var files []*ast.File
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			files = append(files, f)
		}
		if len(files) > 0 && files[0].Name.Name != "main" {
			d, err := doc.NewFromFiles(fset, files, rel)
			if err != nil {
				return err
			}
			report := func(name, comment string) {
				if strings.TrimSpace(comment) == "" {
					missing = append(missing, rel+": "+name)
				}
			}
			if d.Doc == "" {
				missing = append(missing, rel+": package doc")
			}
			for _, v := range append(d.Consts, d.Vars...) {
				if v.Doc == "" {
					for _, n := range v.Names {
						if ast.IsExported(n) && !documentedSpec(v.Decl, n) {
							missing = append(missing, rel+": "+n)
						}
					}
				}
			}
			for _, f := range d.Funcs {
				report(f.Name, f.Doc)
			}
			for _, typ := range d.Types {
				report(typ.Name, typ.Doc)
				for _, f := range append(typ.Funcs, typ.Methods...) {
					report(typ.Name+"."+f.Name, f.Doc)
				}
				for _, v := range append(typ.Consts, typ.Vars...) {
					if v.Doc == "" {
						for _, n := range v.Names {
							if ast.IsExported(n) && !documentedSpec(v.Decl, n) {
								missing = append(missing, rel+": "+n)
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("exported identifiers without a doc comment:\n%s", strings.Join(missing, "\n"))
	}
}

// documentedSpec reports whether name's spec in a grouped declaration has
// its own comment (above it or at the end of its line).
func documentedSpec(decl *ast.GenDecl, name string) bool {
	for _, s := range decl.Specs {
		vs, ok := s.(*ast.ValueSpec)
		if !ok {
			continue
		}
		for _, n := range vs.Names {
			if n.Name == name {
				return vs.Doc != nil || vs.Comment != nil
			}
		}
	}
	return false
}
