// Command godoclint reports Go code without doc comments: packages without a
// package comment in doc.go, and exported names without a doc comment that
// starts with the name. `make verify` runs it over every package of the
// module:
//
//	go run ./hack/godoclint $(go list -f '{{.Dir}}' ./...)
//
// It prints one "file:line: problem" line per finding and exits 1 if there is
// any, 2 if a directory cannot be read or a file does not parse. It uses the
// standard library only, so it needs no tools module. main.go holds it all;
// main_test.go runs it over the fixtures in testdata/.
//
// # What it checks
//
// Each argument is a package directory. Every .go file in it is read, whatever
// its build constraints, except *_test.go files, files that are never built
// ("//go:build ignore"), and generated files (those with a "// Code generated
// ... DO NOT EDIT." line before the package clause, see [ast.IsGenerated]):
// generated code is fixed by fixing its generator, not by hand.
//
//   - The package has exactly one package comment, in doc.go, and for a
//     library it starts with "Package <name> ". One place, and one name for
//     it, is where a reader looks first. A directory of generated files only is
//     skipped: code-generator writes the doc.go files it wants. In a directory
//     of test files only, the comment is looked for in the test files, the
//     only place it can be.
//   - Every exported top-level func, type, const and var, and every exported
//     method of an exported type, has a doc comment, and the comment starts
//     with the name: the Go convention, which godoc, gopls and pkg.go.dev
//     rely on to show and search it.
//
// Where it is more lenient than golint, on purpose:
//
//   - A type's comment may also start "A Name", "An Name" or "The Name", the
//     forms the Go doc-comment guide (go.dev/doc/comment) uses for types.
//     Funcs, methods, consts and vars must start with the bare name.
//   - In a parenthesised const, var or type group with a comment, that
//     comment documents every name in it, as godoc shows the group as one
//     block (golint does the same for consts and vars). In a group without
//     one, each name needs a comment of its own, starting with the name.
//   - Struct fields and interface methods are not checked.
package main
