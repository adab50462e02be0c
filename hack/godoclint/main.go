package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: godoclint dir...\n\n"+
			"Reports packages without a package comment and exported names without\n"+
			"a doc comment that starts with the name. Exits 1 if it reports anything.\n")
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Args(), os.Stdout, os.Stderr))
}

// run lints dirs, prints the findings to stdout and errors to stderr, and
// returns the exit code: 0 when clean, 1 with findings, 2 on errors.
func run(dirs []string, stdout, stderr io.Writer) int {
	var all []finding
	failed := false
	for _, dir := range dirs {
		found, err := lintDir(dir)
		if err != nil {
			fmt.Fprintf(stderr, "godoclint: %v\n", err)
			failed = true
			continue
		}
		all = append(all, found...)
	}
	for _, f := range all {
		fmt.Fprintln(stdout, f)
	}
	switch {
	case failed:
		return 2
	case len(all) > 0:
		fmt.Fprintf(stderr, "godoclint: %d missing or malformed doc comments\n", len(all))
		return 1
	}
	return 0
}

// A finding is one problem, at the position of the declaration it is about.
type finding struct {
	pos token.Position
	msg string
}

func (f finding) String() string {
	return fmt.Sprintf("%s:%d: %s", f.pos.Filename, f.pos.Line, f.msg)
}

// lintDir checks the package in dir and returns its findings in file and line
// order.
func lintDir(dir string) ([]finding, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var (
		files     []*ast.File // non-test, non-generated: what is checked
		generated int         // non-test, generated
		tests     []*ast.File // package clauses and comments of in-package test files
		pkgName   string
	)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		path := displayPath(filepath.Join(dir, name))
		if strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				return nil, err
			}
			if !strings.HasSuffix(f.Name.Name, "_test") {
				tests = append(tests, f)
			}
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if ignored(f) {
			continue
		}
		pkgName = f.Name.Name
		if ast.IsGenerated(f) {
			generated++
			continue
		}
		files = append(files, f)
	}

	var found []finding
	switch {
	case len(files) > 0:
		found = lintPackageDoc(fset, pkgName, files, true)
	case generated > 0:
		return nil, nil // generated package: its generator writes its doc.go
	case len(tests) > 0:
		// A package of tests only: its package comment cannot be anywhere
		// but in a test file.
		found = lintPackageDoc(fset, tests[0].Name.Name, tests, false)
	default:
		return nil, nil // no package here
	}

	for _, f := range files {
		found = append(found, lintFile(fset, f)...)
	}
	sort.SliceStable(found, func(i, j int) bool {
		a, b := found[i].pos, found[j].pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Line < b.Line
	})
	return found, nil
}

// lintPackageDoc checks that exactly one of files has a package comment, in
// doc.go if inDocGo, and that a library's starts with "Package <name> ".
func lintPackageDoc(fset *token.FileSet, pkgName string, files []*ast.File, inDocGo bool) []finding {
	var docs []*ast.File
	for _, f := range files {
		if f.Doc != nil {
			docs = append(docs, f)
		}
	}
	var found []finding
	switch {
	case len(docs) == 0:
		found = append(found, finding{fset.Position(files[0].Package), fmt.Sprintf("package %s has no package comment (add a doc.go)", pkgName)})
	case len(docs) > 1:
		for _, f := range docs {
			found = append(found, finding{fset.Position(f.Doc.Pos()), fmt.Sprintf("package %s has %d package comments; keep one, in doc.go", pkgName, len(docs))})
		}
	default:
		doc := docs[0]
		pos := fset.Position(doc.Doc.Pos())
		if inDocGo && filepath.Base(pos.Filename) != "doc.go" {
			found = append(found, finding{pos, fmt.Sprintf("package %s: move the package comment into doc.go", pkgName)})
		}
		if want := "Package " + pkgName + " "; pkgName != "main" && !strings.HasPrefix(doc.Doc.Text(), want) {
			found = append(found, finding{pos, fmt.Sprintf("package comment should start with %q", want)})
		}
	}
	return found
}

// displayPath returns path relative to the working directory if it is inside
// it, so that findings read like the compiler's.
func displayPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(wd, path); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return rel
	}
	return path
}

// lintFile checks the exported top-level declarations of one file.
func lintFile(fset *token.FileSet, f *ast.File) []finding {
	var found []finding
	report := func(pos token.Pos, format string, args ...any) {
		found = append(found, finding{fset.Position(pos), fmt.Sprintf(format, args...)})
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			kind, name := "func", d.Name.Name
			if d.Recv != nil {
				recv := receiverType(d.Recv)
				if !ast.IsExported(recv) {
					continue // unexported type: not in the package's documentation
				}
				kind, name = "method", recv+"."+d.Name.Name
			}
			checkDoc(report, d.Pos(), kind, name, d.Name.Name, d.Doc)
		case *ast.GenDecl:
			if d.Tok == token.IMPORT {
				continue
			}
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						checkSpec(report, d, s.Doc, "type", []*ast.Ident{s.Name})
					}
				case *ast.ValueSpec:
					checkSpec(report, d, s.Doc, strings.ToLower(d.Tok.String()), s.Names)
				}
			}
		}
	}
	return found
}

// checkSpec checks the names of one spec of a const, var or type declaration.
// In a parenthesised group with a comment, that comment documents them all.
// Otherwise the spec's own comment (for an unparenthesised declaration, the
// declaration's) must exist and, for a single name, start with it.
func checkSpec(report func(token.Pos, string, ...any), d *ast.GenDecl, doc *ast.CommentGroup, kind string, names []*ast.Ident) {
	grouped := d.Lparen.IsValid()
	if grouped && d.Doc != nil {
		return
	}
	if !grouped {
		doc = d.Doc
	}
	for _, n := range names {
		if !n.IsExported() {
			continue
		}
		if doc == nil {
			report(n.Pos(), "exported %s %s has no doc comment", kind, n.Name)
		} else if len(names) == 1 {
			checkDoc(report, n.Pos(), kind, n.Name, n.Name, doc)
		}
	}
}

// checkDoc reports a missing doc, or one that does not start with name (or,
// for a type, with "A", "An" or "The" and the name).
func checkDoc(report func(token.Pos, string, ...any), pos token.Pos, kind, full, name string, doc *ast.CommentGroup) {
	if doc == nil {
		report(pos, "exported %s %s has no doc comment", kind, full)
		return
	}
	text := doc.Text()
	prefixes := []string{name}
	if kind == "type" {
		prefixes = append(prefixes, "A "+name, "An "+name, "The "+name)
	}
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(text, p); ok && (rest == "" || !isIdentRune(rest[0])) {
			return
		}
	}
	report(pos, "comment on exported %s %s should start with %q", kind, full, name+" ")
}

// ignored reports whether f has the "//go:build ignore" constraint, the
// convention for a program kept beside a package (a generator, say) and never
// built with it.
func ignored(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if strings.TrimSpace(c.Text) == "//go:build ignore" {
				return true
			}
		}
	}
	return false
}

// receiverType is the name of a method's receiver type, without pointer or
// type parameters.
func receiverType(recv *ast.FieldList) string {
	if len(recv.List) == 0 {
		return ""
	}
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// isIdentRune says whether b continues an identifier, so that "Names are" is
// not taken for a comment on Name.
func isIdentRune(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b >= 0x80
}
