package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestViolations runs the linter over the fixtures with problems and checks
// that it reports exactly these, and nothing from test or generated files.
func TestViolations(t *testing.T) {
	want := []string{
		"testdata/bad/bad.go:1: package bad: move the package comment into doc.go",
		"testdata/bad/bad.go:5: exported func Undocumented has no doc comment",
		`testdata/bad/bad.go:8: comment on exported func WrongPrefix should start with "WrongPrefix "`,
		`testdata/bad/bad.go:11: comment on exported func WrongPrefixx should start with "WrongPrefixx "`,
		`testdata/bad/bad.go:14: comment on exported func Function should start with "Function "`,
		"testdata/bad/bad.go:16: exported type UndocumentedType has no doc comment",
		"testdata/bad/bad.go:18: exported method UndocumentedType.Method has no doc comment",
		"testdata/bad/bad.go:20: exported method UndocumentedType.PointerMethod has no doc comment",
		"testdata/bad/bad.go:25: exported method Generic.Get has no doc comment",
		"testdata/bad/bad.go:34: exported var UndocumentedVar has no doc comment",
		`testdata/bad/bad.go:37: comment on exported var WrongVar should start with "WrongVar "`,
		"testdata/bad/bad.go:39: exported var A has no doc comment",
		"testdata/bad/bad.go:39: exported var B has no doc comment",
		`testdata/bad/bad.go:44: comment on exported const Documented should start with "Documented "`,
		"testdata/bad/bad.go:45: exported const Missing has no doc comment",
		`testdata/bad/bad.go:51: comment on exported const InGroup should start with "InGroup "`,
		"testdata/bad/bad.go:57: exported type GroupedUndocumented has no doc comment",
		"testdata/nodoc/nodoc.go:1: package nodoc has no package comment (add a doc.go)",
		"testdata/testonlynodoc/main_test.go:1: package testonlynodoc has no package comment (add a doc.go)",
		"testdata/twodocs/doc.go:1: package twodocs has 2 package comments; keep one, in doc.go",
		"testdata/twodocs/other.go:1: package twodocs has 2 package comments; keep one, in doc.go",
		`testdata/wrongprefix/doc.go:1: package comment should start with "Package wrongprefix "`,
	}
	dirs := []string{"testdata/bad", "testdata/nodoc", "testdata/testonlynodoc", "testdata/twodocs", "testdata/wrongprefix"}
	code, got, stderr := lint(t, dirs...)
	if code != 1 {
		t.Errorf("exit code %d, want 1; stderr:\n%s", code, stderr)
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestClean checks that the fixtures without problems, including a package
// of generated files only and one of test files only, report nothing.
func TestClean(t *testing.T) {
	code, got, stderr := lint(t, "testdata/good", "testdata/generated", "testdata/testonly")
	if code != 0 || len(got) > 0 {
		t.Errorf("exit code %d, findings:\n%s\nstderr:\n%s\nwant exit code 0 and none", code, strings.Join(got, "\n"), stderr)
	}
}

// TestMissingDir checks that a directory that cannot be read is an error,
// not a clean result.
func TestMissingDir(t *testing.T) {
	if code, _, _ := lint(t, "testdata/no-such-dir"); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
}

// lint runs the linter on dirs and returns its exit code, its findings with
// slash-separated paths, and its stderr.
func lint(t *testing.T, dirs ...string) (int, []string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(dirs, &stdout, &stderr)
	var findings []string
	for line := range strings.Lines(stdout.String()) {
		findings = append(findings, filepath.ToSlash(strings.TrimSuffix(line, "\n")))
	}
	return code, findings, stderr.String()
}
