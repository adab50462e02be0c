package v1

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// printerColumn is a column of the CRD's additionalPrinterColumns.
type printerColumn struct {
	Name     string `json:"name"`
	JSONPath string `json:"jsonPath"`
	Priority int32  `json:"priority"`
}

// crdColumns reads the printer columns of the CRD of that plural name.
func crdColumns(t *testing.T, plural string) []printerColumn {
	t.Helper()
	raw, err := os.ReadFile("../../../../artifacts/crd/games.example.com_" + plural + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Columns []printerColumn `json:"additionalPrinterColumns"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("the %s CRD has %d versions, want 1", plural, len(crd.Spec.Versions))
	}
	return crd.Spec.Versions[0].Columns
}

// cell evaluates a column on obj as the API server's table convertor does
// (apiextensions-apiserver's tableconvertor): the JSONPath in braces, missing
// keys allowed, and only the first value found shown. nil for an empty cell.
func cell(t *testing.T, column printerColumn, obj map[string]any) any {
	t.Helper()
	path := jsonpath.New(column.Name)
	if err := path.Parse("{" + column.JSONPath + "}"); err != nil {
		t.Fatalf("column %s: %v", column.Name, err)
	}
	path.AllowMissingKeys(true)
	results, err := path.FindResults(obj)
	if err != nil || len(results) == 0 || len(results[0]) == 0 {
		return nil
	}
	return results[0][0].Interface()
}

// `kubectl get gs -o wide` shows the game server's image in one column,
// whether spec.image or the game server container of spec.template sets it,
// and never a sidecar's image as if it were the game server's.
func TestWideColumnsShowTheGameServersImage(t *testing.T) {
	const image, sidecarImage = "registry.example.com/arena-server:1.4.2", "registry.example.com/arena-metrics:2.0.1"
	server := corev1.Container{Name: "game-server", Image: image}
	sidecar := corev1.Container{Name: "metrics", Image: sidecarImage}
	template := func(containers ...corev1.Container) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers}}
	}
	columns := crdColumns(t, "gamesessions")
	for name, spec := range map[string]GameSessionSpec{
		"spec.image":                             {Image: image},
		"spec.image, a template with a sidecar":  {Image: image, Template: template(sidecar)},
		"the template":                           {Template: template(server)},
		"the template, with a sidecar":           {Template: template(server, sidecar)},
		"the template, with a sidecar before it": {Template: template(sidecar, server)},
	} {
		t.Run(name, func(t *testing.T) {
			// As the API server stores it: spec.container defaulted.
			spec.ProfileRef, spec.Container = "arena", "game-server"
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&GameSession{Spec: spec})
			if err != nil {
				t.Fatal(err)
			}
			var showing []string
			for _, column := range columns {
				switch cell(t, column, obj) {
				case image:
					showing = append(showing, column.Name)
				case sidecarImage:
					t.Errorf("column %s shows the sidecar's image", column.Name)
				}
			}
			if len(showing) != 1 {
				t.Errorf("the game server's image shows in columns %q, want one", showing)
			}
		})
	}
}

// The sample outputs of `kubectl get gs` and `kubectl get pro` in README.md
// and docs/ have the CRDs' columns: a reader holds them against what kubectl
// prints.
func TestDocsSampleOutputsHaveTheCRDsColumns(t *testing.T) {
	header := func(plural string) []string {
		names := []string{"NAME"}
		for _, c := range crdColumns(t, plural) {
			if c.Priority == 0 {
				names = append(names, strings.ToUpper(c.Name))
			}
		}
		return names
	}
	sessions, rollouts := header("gamesessions"), header("profilerollouts")
	want := map[string][]string{"gs": sessions, "gamesessions": sessions, "pro": rollouts, "profilerollouts": rollouts}
	// Runs that predate the CURRENT and UP-TO-DATE columns, and say which
	// commit or what they predate.
	older := map[string]bool{"docs/architecture.md": true, "docs/operations.md": true}

	docs, err := filepath.Glob("../../../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	sample := regexp.MustCompile(`^\$ kubectl get (gs|gamesessions|pro|profilerollouts)\s*$`)
	checked := 0
	for _, path := range append(docs, "../../../../README.md") {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(path, "../../../../")
		lines := strings.Split(string(raw), "\n")
		for i, line := range lines[:len(lines)-1] {
			m := sample.FindStringSubmatch(line)
			if m == nil || (older[name] && (m[1] == "gs" || m[1] == "gamesessions")) {
				continue
			}
			checked++
			if got := strings.Fields(lines[i+1]); !slices.Equal(got, want[m[1]]) {
				t.Errorf("%s:%d: `kubectl get %s` shows columns %q, want %q", name, i+2, m[1], got, want[m[1]])
			}
		}
	}
	if checked == 0 {
		t.Error("found no sample output of kubectl get gs or pro")
	}
}
