package deploy

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/example/gamesession-controller/internal/manifests"
)

// restrictedLabels make a namespace enforce, and warn about, the Pod
// Security "restricted" level, as artifacts/namespace.yaml enforces it.
// Enforcement applies to pods only; the warning also covers a Deployment's
// pod template, so that a dry run of the Deployment shows a violation.
var restrictedLabels = map[string]string{
	"pod-security.kubernetes.io/enforce":         "restricted",
	"pod-security.kubernetes.io/enforce-version": "latest",
	"pod-security.kubernetes.io/warn":            "restricted",
	"pod-security.kubernetes.io/warn-version":    "latest",
}

// createNamespace creates a namespace named prefix plus a random suffix,
// with the labels, and returns its name. Unique names let the tests run
// again (-count) on the same control plane: namespaces are left behind, since
// without kube-controller-manager a deleted one never finishes terminating.
func createNamespace(t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(adminConfig())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels}}
	ns, err := kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s-*: %v", prefix, err)
	}
	return ns.Name
}

// TestServerSideDryRun has the API server validate and admit every object the
// chart renders, in both RBAC modes, with a server-side dry run, into
// namespaces that enforce Pod Security "restricted": no error and no warning.
// Nothing is persisted, not even the CRD, which the install test must find
// missing.
func TestServerSideDryRun(t *testing.T) {
	for _, mode := range []struct {
		name   string
		values map[string]any
	}{
		{"cluster", clusterValues},
		{"namespace", namespaceValues},
	} {
		t.Run(mode.name, func(t *testing.T) {
			namespace := createNamespace(t, "dry-run-"+mode.name, restrictedLabels)
			var warnings bytes.Buffer
			dryRun := dryRunApplier(t, &warnings)
			objs := render(t, namespace, mode.values)
			if err := dryRun.Apply(t.Context(), "", objs...); err != nil {
				t.Errorf("dry run of the chart with %v: %v", mode.values, err)
			}
			if warnings.Len() > 0 {
				t.Errorf("the API server warned about the chart with %v:\n%s", mode.values, &warnings)
			}

			// The control: a pod without the restricted security context
			// draws a warning, so silence above means compliance.
			weakened := render(t, namespace, mergeValues(mode.values, map[string]any{"podSecurityContext": nil}))
			warnings.Reset()
			if err := dryRun.Apply(t.Context(), "", only(weakened, "Deployment")...); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(warnings.String(), `violate PodSecurity "restricted`) {
				t.Errorf("a Deployment without a pod security context drew warnings %q, want a restricted PodSecurity violation", &warnings)
			}
		})
	}
}

// dryRunApplier server-side applies with DryRun: All, writing the API
// server's warnings to warnings, one a line.
func dryRunApplier(t *testing.T, warnings *bytes.Buffer) *manifests.Applier {
	t.Helper()
	cfg := adminConfig()
	cfg.WarningHandler = rest.NewWarningWriter(warnings, rest.WarningWriterOptions{})
	applier, err := manifests.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	applier.DryRun = true
	return applier
}
