package v1

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestCRDImagePatternIsImageReferencePattern(t *testing.T) {
	raw, err := os.ReadFile("../../../../artifacts/crd/games.example.com_gamesessions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if n := countPatterns(crd, ImageReferencePattern); n != 3 {
		t.Errorf("the CRD checks images with ImageReferencePattern in %d places, want 3 (spec.image, the template's containers and init containers)", n)
	}
}

// countPatterns counts the schemas under v whose pattern is pattern.
func countPatterns(v any, pattern string) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		if p, ok := v["pattern"].(string); ok && p == pattern {
			n++
		}
		for _, child := range v {
			n += countPatterns(child, pattern)
		}
	case []any:
		for _, child := range v {
			n += countPatterns(child, pattern)
		}
	}
	return n
}

func TestImageReferencePattern(t *testing.T) {
	pattern := regexp.MustCompile(ImageReferencePattern)
	for image, want := range map[string]bool{
		"nginx":                            true,
		"registry.example.com/arena:1.4.2": true,
		"registry.example.com:5000/team/arena:v1":            true,
		"localhost/arena@sha256:" + strings.Repeat("ab", 32): true,
		"arena:1.0@sha256:" + strings.Repeat("0", 64):        true,
		"registry.example.com/Arena:1.0":                     false, // the repository must be lowercase
		"registry.example.com/arena:":                        false,
		"registry.example.com/arena:-1":                      false,
		"registry.example.com//arena":                        false,
		"arena@sha256:abc":                                   false, // a digest has at least 32 hex digits
		"arena:" + strings.Repeat("t", 129):                  false, // a tag is at most 128 characters
		"https://registry.example.com/arena":                 false,
		"registry.example.com/arena:1.0 ":                    false,
	} {
		if got := pattern.MatchString(image); got != want {
			t.Errorf("%q: match %v, want %v", image, got, want)
		}
	}
}

// The API server stores a CRD as one etcd object, whose request is limited to
// 1.5 MiB (etcd's default --max-request-bytes) and 3 MiB per request body: the
// whole pod template's schema, descriptions included, must stay well within.
func TestCRDSizeWithinTheAPIServersLimits(t *testing.T) {
	raw, err := os.ReadFile("../../../../artifacts/crd/games.example.com_gamesessions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	asJSON, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 20 // a third of headroom below etcd's 1.5 MiB
	if len(asJSON) > limit {
		t.Errorf("the GameSession CRD is %d bytes as JSON, more than %d", len(asJSON), limit)
	}
	t.Logf("the GameSession CRD is %d bytes as JSON", len(asJSON))
}
