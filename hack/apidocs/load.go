package main

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// apiPackage is one API version's package: its group, its version (the
// package name) and its named types.
type apiPackage struct {
	Dir     string // as given, slash-separated and cleaned
	Group   string // from +groupName= in the package comment
	Version string // the package name
	Types   map[string]*apiType
}

// apiType is one named type of an API package.
type apiType struct {
	Name    string
	Doc     string   // the doc comment, markers removed
	Markers []string // the +markers of the doc comment, without the +
	Expr    ast.Expr // the type's definition (a struct, an identifier, ...)
}

// IsStruct reports whether the type is a struct.
func (t *apiType) IsStruct() bool {
	_, ok := t.Expr.(*ast.StructType)
	return ok
}

// IsKind reports whether the type is a kind: a root object that is not a
// list.
func (t *apiType) IsKind() bool {
	return hasMarker(t.Markers, "kubebuilder:object:root=true") && !strings.HasSuffix(t.Name, "List")
}

// loadPackage parses the non-test, non-generated Go files of dir.
func loadPackage(dir string) (*apiPackage, error) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no Go files", dir)
	}
	d, err := doc.NewFromFiles(fset, files, "", doc.PreserveAST|doc.AllDecls)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	p := &apiPackage{
		Dir:     filepath.ToSlash(filepath.Clean(dir)),
		Version: d.Name,
		Types:   map[string]*apiType{},
	}
	_, pkgMarkers := splitDoc(d.Doc)
	p.Group = markerValue(pkgMarkers, "groupName=")
	for _, t := range d.Types {
		if at := newType(t); at != nil {
			p.Types[at.Name] = at
		}
	}
	return p, nil
}

// parseDir parses dir's Go files in name order, leaving out tests and
// generated code.
func parseDir(fset *token.FileSet, dir string) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || strings.HasPrefix(n, "zz_generated") {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	var files []*ast.File
	for _, n := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// newType reads one type of go/doc's package, or nil for a type this
// reference has no use for (an alias, an unexported type).
func newType(t *doc.Type) *apiType {
	if !ast.IsExported(t.Name) {
		return nil
	}
	for _, spec := range t.Decl.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || ts.Name.Name != t.Name || ts.Assign.IsValid() {
			continue
		}
		text, markers := splitDoc(t.Doc)
		return &apiType{Name: t.Name, Doc: text, Markers: markers, Expr: ts.Type}
	}
	return nil
}

// splitDoc splits a doc comment's text into its prose (one paragraph per
// blank line, lines joined) and its markers (lines starting with +, the +
// removed).
func splitDoc(text string) (string, []string) {
	var paras []string
	var cur []string
	var markers []string
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, strings.Join(cur, " "))
			cur = nil
		}
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "+"):
			markers = append(markers, strings.TrimPrefix(line, "+"))
		case line == "":
			flush()
		default:
			cur = append(cur, line)
		}
	}
	flush()
	return strings.Join(paras, "\n\n"), markers
}

// commentText is a field's doc comment, or its line comment when it has
// none.
func commentText(f *ast.Field) string {
	if f.Doc != nil {
		return f.Doc.Text()
	}
	if f.Comment != nil {
		return f.Comment.Text()
	}
	return ""
}

// hasMarker reports whether markers hold m exactly.
func hasMarker(markers []string, m string) bool {
	for _, x := range markers {
		if x == m {
			return true
		}
	}
	return false
}

// markerValue is the value after prefix of the first marker that starts
// with it, or "".
func markerValue(markers []string, prefix string) string {
	for _, m := range markers {
		if v, ok := strings.CutPrefix(m, prefix); ok {
			return v
		}
	}
	return ""
}

// enumValues are the values of a +kubebuilder:validation:Enum= marker.
func enumValues(markers []string) []string {
	v := markerValue(markers, "kubebuilder:validation:Enum=")
	if v == "" {
		return nil
	}
	return strings.Split(v, ";")
}

// ruleMessages are the messages of the +kubebuilder:validation:XValidation
// markers (those with a fixed message= only).
func ruleMessages(markers []string) []string {
	var out []string
	for _, m := range markers {
		rest, ok := strings.CutPrefix(m, "kubebuilder:validation:XValidation:")
		if !ok {
			continue
		}
		if msg := quotedArg(rest, "message="); msg != "" {
			out = append(out, msg)
		}
	}
	return out
}

// quotedArg is the double-quoted value of key in a marker's arguments
// (key="value", with \" inside), or "".
func quotedArg(args, key string) string {
	i := strings.Index(args, ","+key+`"`)
	if i < 0 {
		if !strings.HasPrefix(args, key+`"`) {
			return ""
		}
		i = -1
	}
	s := args[i+1+len(key)+1:]
	var b strings.Builder
	for j := 0; j < len(s); j++ {
		switch {
		case s[j] == '\\' && j+1 < len(s):
			j++
			b.WriteByte(s[j])
		case s[j] == '"':
			return b.String()
		default:
			b.WriteByte(s[j])
		}
	}
	return ""
}
