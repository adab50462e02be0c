package deploy

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/gamesession-controller/internal/testutil"
)

const (
	dashboardFile      = "files/grafana-dashboard.json"
	dashboardConfigMap = "gamesession-controller-grafana-dashboard"
	dashboardKey       = "gamesession-controller.json"
)

// TestGrafanaDashboard: grafanaDashboard.enabled renders a ConfigMap whose
// one key is files/grafana-dashboard.json byte for byte, with the sidecar's
// label (replaceable), extra labels and annotations, in the release
// namespace or the one given. Default values render none.
func TestGrafanaDashboard(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(chartDir, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	dashboards := func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
		var found []*unstructured.Unstructured
		for _, cm := range only(objs, "ConfigMap") {
			if cm.GetName() == dashboardConfigMap {
				found = append(found, cm)
			}
		}
		return found
	}
	for name, values := range map[string]map[string]any{"cluster": clusterValues, "namespace": namespaceValues} {
		if got := dashboards(render(t, systemNamespace, values)); len(got) != 0 {
			t.Errorf("default values (%s) render %v, want no dashboard", name, sortedKeys(got))
		}
	}

	for _, tc := range []struct {
		name        string
		values      map[string]any
		namespace   string
		labels      map[string]string
		annotations map[string]string
	}{
		{"defaults", map[string]any{"enabled": true}, systemNamespace,
			map[string]string{"app.kubernetes.io/name": "gamesession-controller", "grafana_dashboard": "1"}, nil},
		{"a folder, another label, another namespace",
			map[string]any{"enabled": true, "namespace": "monitoring",
				"labels":      map[string]any{"grafana_dashboard": nil, "example.com/dashboards": "games"},
				"annotations": map[string]any{"grafana_folder": "GameSessions"}},
			"monitoring",
			map[string]string{"app.kubernetes.io/name": "gamesession-controller", "example.com/dashboards": "games"},
			map[string]string{"grafana_folder": "GameSessions"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dashboards(render(t, systemNamespace, map[string]any{"grafanaDashboard": tc.values}))
			if len(got) != 1 {
				t.Fatalf("rendered dashboards %v, want one", sortedKeys(got))
			}
			cm := got[0]
			if cm.GetNamespace() != tc.namespace {
				t.Errorf("dashboard ConfigMap in %q, want %q", cm.GetNamespace(), tc.namespace)
			}
			if !maps.Equal(cm.GetLabels(), tc.labels) {
				t.Errorf("labels %v, want %v", cm.GetLabels(), tc.labels)
			}
			if !maps.Equal(cm.GetAnnotations(), tc.annotations) {
				t.Errorf("annotations %v, want %v", cm.GetAnnotations(), tc.annotations)
			}
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			if keys := slices.Sorted(maps.Keys(data)); !slices.Equal(keys, []string{dashboardKey}) {
				t.Fatalf("data keys %v, want [%s]", keys, dashboardKey)
			}
			if data[dashboardKey] != string(want) {
				t.Errorf("data[%s] differs from %s (%d bytes, want %d)", dashboardKey, dashboardFile, len(data[dashboardKey]), len(want))
			}
		})
	}
}

// TestGrafanaDashboardQueries: the dashboard's own conventions, which need
// no controller: a Prometheus data source variable that every panel uses,
// unique panel ids, and queries that parse and select the job variable's
// job on every selector, so that the dashboard never mixes in the
// workqueue_* and rest_client_* series of other components. Whether the
// metrics exist is TestReadinessAndMetrics' part (test/integration), against
// a running controller.
func TestGrafanaDashboardQueries(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct{ Name, Type, Query any } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int            `json:"id"`
			Type       string         `json:"type"`
			Title      string         `json:"title"`
			Datasource map[string]any `json:"datasource"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.SchemaVersion < 39 {
		t.Errorf("uid %q, schemaVersion %d: want a uid and schemaVersion 39 or later", d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name.(string)] = v.Type.(string)
		if v.Name == "datasource" && (v.Type != "datasource" || v.Query != "prometheus") {
			t.Errorf("variable datasource is %v %v, want a datasource variable of prometheus", v.Type, v.Query)
		}
	}
	if vars["datasource"] == "" || vars["job"] != "query" {
		t.Errorf("variables %v, want datasource and a job query", vars)
	}
	ids := map[int]string{}
	for _, p := range d.Panels {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type != "row" && (p.Datasource["type"] != "prometheus" || p.Datasource["uid"] != "${datasource}") {
			t.Errorf("panel %q: datasource %v, want the datasource variable", p.Title, p.Datasource)
		}
	}

	queries, err := testutil.DashboardQueries(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		refs, err := testutil.PromQLMetrics(q.Expr)
		if err != nil || len(refs) == 0 {
			t.Errorf("%s: %d metrics, %v", q.Where, len(refs), err)
		}
		for _, r := range refs {
			if q.Where != "variable job" && !r.Has("job", "=", "$job") {
				t.Errorf("%s: %s selects no job=\"$job\"", q.Where, r.Name)
			}
		}
	}
	t.Logf("%d panels, %d queries", len(d.Panels), len(queries))
}
