package deploy

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// installMode is one way of installing the chart.
type installMode struct {
	name   string
	values map[string]any
	// namespace, if set, is created by `helm install --create-namespace`,
	// as the README shows. Otherwise the test creates one that enforces Pod
	// Security "restricted", as an admin hands a namespace to a tenant.
	namespace string
	// sessionsElsewhere puts the test's GameSession in another namespace
	// than the controller's: for the cluster-wide controller.
	sessionsElsewhere bool
}

// releaseName is the release of every install; the chart's object names do
// not depend on it.
const releaseName = "gamesession-controller"

// TestHelmInstall installs the chart with the Helm SDK, as `helm install`
// does, in both RBAC modes, one after the other: every object it renders
// exists afterwards, the controller binary reconciles a profile edit with the
// token of the chart's ServiceAccount, and `helm uninstall` removes the
// objects again, all but the CRD, which Helm never deletes.
//
// The cluster-wide install runs first and must create the CRDs (GameSession
// and ProfileRollout) from crds/ (no other test creates them); the
// namespace-scoped one then finds them, as a tenant's install finds the CRDs
// an admin installed, and Helm skips them.
func TestHelmInstall(t *testing.T) {
	crds := only(render(t, systemNamespace, clusterValues), "CustomResourceDefinition")
	if got, want := sortedKeys(crds), projectCRDs(t); !slices.Equal(got, want) {
		t.Fatalf("the chart renders CRDs %v, want those of artifacts/crd, %v", got, want)
	}
	client := newObjectClient(t)
	for _, crd := range crds {
		if _, err := client.get(t.Context(), crd); !apierrors.IsNotFound(err) {
			t.Fatalf("the CRD %s exists before the first install (err %v): the install would not show that Helm creates it", crd.GetName(), err)
		}
	}
	// Helm keeps the CRDs: delete them, so that a next run (-count) starts
	// without them again. The API server itself, not kube-controller-manager,
	// removes a deleted CRD's objects and then the CRD.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		for _, crd := range crds {
			if err := client.deleteAndWait(ctx, crd); err != nil {
				t.Errorf("deleting the CRD %s: %v", crd.GetName(), err)
			}
		}
	})

	for _, mode := range []installMode{
		{name: "cluster", values: clusterValues, namespace: systemNamespace, sessionsElsewhere: true},
		{name: "namespace", values: namespaceValues},
	} {
		t.Run(mode.name, func(t *testing.T) { testInstall(t, client, mode) })
	}
}

func testInstall(t *testing.T, client *objectClient, mode installMode) {
	namespace, helmCreatesNamespace := mode.namespace, mode.namespace != ""
	if !helmCreatesNamespace {
		namespace = createNamespace(t, "tenant", restrictedLabels)
	}
	sessionNamespace := namespace
	if mode.sessionsElsewhere {
		sessionNamespace = createNamespace(t, "arena", nil)
	}
	helm := helmConfig(t, namespace)
	install := action.NewInstall(helm)
	install.ReleaseName = releaseName
	install.Namespace = namespace
	install.CreateNamespace = helmCreatesNamespace
	rel, err := install.RunWithContext(t.Context(), loadChart(t), mode.values)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			if _, err := action.NewUninstall(helm).Run(releaseName); err != nil {
				t.Errorf("helm uninstall: %v", err)
			}
		}
	})
	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s (%s), want deployed", rel.Info.Status, rel.Info.Description)
	}

	// Helm installed what the chart renders: the templates as the release's
	// manifest, the CRD from crds/ before them.
	rendered := render(t, namespace, mode.values)
	installed := decode(t, rel.Manifest)
	if got, want := sortedKeys(installed), sortedKeys(without(rendered, "CustomResourceDefinition")); !slices.Equal(got, want) {
		t.Fatalf("the release's manifest holds\n%q\nwant the rendered templates\n%q", got, want)
	}
	for _, obj := range rendered {
		live, err := client.get(t.Context(), obj)
		if err != nil {
			t.Errorf("after helm install: %s: %v", key(obj), err)
			continue
		}
		// Helm's marks of ownership, which a later upgrade or uninstall
		// relies on; crds/ are deliberately not owned by the release.
		if obj.GetKind() != "CustomResourceDefinition" {
			if got := live.GetAnnotations()["meta.helm.sh/release-name"]; got != releaseName {
				t.Errorf("%s: annotation meta.helm.sh/release-name %q, want %q", key(obj), got, releaseName)
			}
		}
	}
	if t.Failed() {
		return
	}

	runAsChartServiceAccount(t, namespace, sessionNamespace, deploymentOf(t, installed), rendered)

	if _, err := action.NewUninstall(helm).Run(releaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	uninstalled = true
	for _, obj := range rendered {
		_, err := client.get(t.Context(), obj)
		switch {
		case obj.GetKind() == "CustomResourceDefinition" && err != nil:
			t.Errorf("after helm uninstall: %s: %v; Helm keeps the CRDs of crds/", key(obj), err)
		case obj.GetKind() != "CustomResourceDefinition" && !apierrors.IsNotFound(err):
			t.Errorf("after helm uninstall: %s still exists (err %v)", key(obj), err)
		}
	}
}

// helmConfig is the Helm SDK's configuration for the control plane and
// namespace, as the helm CLI builds it from a kubeconfig and --namespace,
// with release records in Secrets (Helm's default storage).
func helmConfig(t *testing.T, namespace string) *action.Configuration {
	t.Helper()
	kubeconfig, cacheDir := cp.KubeconfigPath(), t.TempDir()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	flags.CacheDir = &cacheDir // not the home directory's ~/.kube/cache
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", t.Logf); err != nil {
		t.Fatalf("helm configuration: %v", err)
	}
	return cfg
}

// objectClient reads objects of any kind, mapped to resources through
// discovery.
type objectClient struct {
	client dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newObjectClient(t *testing.T) *objectClient {
	t.Helper()
	cfg := adminConfig()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &objectClient{
		client: dynamic.NewForConfigOrDie(cfg),
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
	}
}

// resource is the client of obj's resource (and namespace). A kind the cached
// discovery does not know, such as one whose CRD was just installed, is
// looked up again.
func (c *objectClient) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		c.mapper.Reset()
		if mapping, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, fmt.Errorf("no resource for %s: %w", gvk, err)
		}
	}
	if obj.GetNamespace() != "" {
		return c.client.Resource(mapping.Resource).Namespace(obj.GetNamespace()), nil
	}
	return c.client.Resource(mapping.Resource), nil
}

// get reads obj's live version.
func (c *objectClient) get(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	resource, err := c.resource(obj)
	if err != nil {
		return nil, err
	}
	return resource.Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// deleteAndWait deletes obj and waits until it is gone.
func (c *objectClient) deleteAndWait(ctx context.Context, obj *unstructured.Unstructured) error {
	resource, err := c.resource(obj)
	if err != nil {
		return err
	}
	if err := resource.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := resource.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
