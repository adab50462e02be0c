package deploy

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
)

const (
	chartDir     = "../../charts/gamesession-controller"
	artifactsDir = "../../artifacts"
	// The namespace artifacts/ installs into, and the one the chart is
	// rendered into to compare with it.
	systemNamespace = "gamesession-system"

	// waitTimeout bounds every wait on the control plane or the controller.
	// The slowest wait measured, a profile edit's rollout, takes 0.6s (0.5s
	// of it the controller's --profile-change-delay), the Lease 0.2s; the
	// margin is for CI, whose 2 cores the control plane and builds share.
	waitTimeout = 60 * time.Second
)

// cp is the control plane of this test binary: an API server and etcd only.
// Nothing here needs pods to run (kwok pods run no containers anyway) or
// Deployments to roll, so there are no nodes and no kube-controller-manager.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	controlplane.RunTestMain(m, controlplane.Options{}, func(c *controlplane.ControlPlane) { cp = c })
}

// adminConfig is a system:masters config without client-side rate limits.
func adminConfig() *rest.Config {
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// clusterValues and namespaceValues select the chart's two RBAC modes; the
// rest of the values are the chart's defaults.
var (
	clusterValues   = map[string]any{}
	namespaceValues = map[string]any{"rbac": map[string]any{"scope": "namespace"}}
)

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// renderManifest renders the chart as `helm template --include-crds
// --namespace namespace` does, with values over the chart's defaults.
func renderManifest(t testing.TB, namespace string, values map[string]any) (string, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{Log: t.Logf})
	install.DryRun, install.ClientOnly, install.Replace, install.IncludeCRDs = true, true, true, true
	install.ReleaseName = "gamesession-controller"
	install.Namespace = namespace
	rel, err := install.Run(loadChart(t), values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// render is renderManifest, decoded; it fails the test on any error.
func render(t testing.TB, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	manifest, err := renderManifest(t, namespace, values)
	if err != nil {
		t.Fatalf("rendering the chart into %s with %v: %v", namespace, values, err)
	}
	return decode(t, manifest)
}

func decode(t testing.TB, manifest string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Decode(strings.NewReader(manifest))
	if err != nil {
		t.Fatalf("decoding a manifest: %v\n%s", err, manifest)
	}
	return objs
}

// kustomize builds dir as `kubectl kustomize dir` does: kubectl embeds the
// same kustomize API.
func kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := resources.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("decoding the kustomize build of %s: %v", dir, err)
	}
	return objs
}

// key names an object the way the API server does.
func key(obj *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s %s/%s", obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName())
}

// byKey indexes objects by key, failing the test on a duplicate.
func byKey(t testing.TB, what string, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := make(map[string]*unstructured.Unstructured, len(objs))
	for _, obj := range objs {
		k := key(obj)
		if _, dup := m[k]; dup {
			t.Errorf("%s has %s twice", what, k)
		}
		m[k] = obj
	}
	return m
}

// sortedKeys returns the keys of objs, sorted.
func sortedKeys(objs []*unstructured.Unstructured) []string {
	keys := make([]string, 0, len(objs))
	for _, obj := range objs {
		keys = append(keys, key(obj))
	}
	slices.Sort(keys)
	return keys
}

// compareObjects reports, one error each, the objects only one side has and
// the objects that differ, with a diff (-want +got).
func compareObjects(t *testing.T, gotName string, got []*unstructured.Unstructured, wantName string, want []*unstructured.Unstructured) {
	t.Helper()
	gotByKey, wantByKey := byKey(t, gotName, got), byKey(t, wantName, want)
	for _, k := range sortedKeys(want) {
		g, ok := gotByKey[k]
		switch {
		case !ok:
			t.Errorf("%s is in %s, not in %s", k, wantName, gotName)
		// Both sides come from the same YAML decoder, so equal objects
		// hold equal Go values: int64 for integers, strings for quantities.
		case !reflect.DeepEqual(g.Object, wantByKey[k].Object):
			t.Errorf("%s differs (-%s +%s):\n%s", k, wantName, gotName, diff.Diff(wantByKey[k].Object, g.Object))
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := wantByKey[k]; !ok {
			t.Errorf("%s is in %s, not in %s", k, gotName, wantName)
		}
	}
}

// without returns objs minus those of the given kind.
func without(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	return slices.DeleteFunc(slices.Clone(objs), func(obj *unstructured.Unstructured) bool { return obj.GetKind() == kind })
}

// only returns the objects of objs of the given kind.
func only(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	return slices.DeleteFunc(slices.Clone(objs), func(obj *unstructured.Unstructured) bool { return obj.GetKind() != kind })
}

// eventually polls cond every 100ms until it returns true, failing the test
// with cond's last error after waitTimeout.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s (last error: %v)", waitTimeout, what, last)
	}
}
