package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/manifests"
)

const artifactsDir = "../../artifacts"

// TestArtifactsApplyWithServerSideDryRun renders artifacts/ (the cluster-wide
// install) and artifacts/namespaced/ as kustomize would, and has the API
// server validate and admit every object with a server-side dry run: no
// error and no warning.
func TestArtifactsApplyWithServerSideDryRun(t *testing.T) {
	e := newEnv(t)
	warnings := &warningRecorder{}
	cfg := adminConfig()
	cfg.WarningHandler = warnings

	clusterWide := renderKustomization(t, artifactsDir, "")
	wantKinds := []string{"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "CustomResourceDefinition", "Deployment",
		"Namespace", "Role", "RoleBinding", "Service", "ServiceAccount",
		// gamesession-pod-rights, gamesession-profile-ack, gamesession-live-subpath.
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy",
		"ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding"}
	if got := kindsOf(clusterWide); !slices.Equal(got, wantKinds) {
		t.Fatalf("artifacts/ renders %v, want %v", got, wantKinds)
	}
	// The namespaced objects need their namespace to exist, even in a dry
	// run; the test binary's control plane is its own, so the fixed name is
	// free.
	applier, err := manifests.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range clusterWide {
		if obj.GetKind() == "Namespace" {
			if err := applier.Apply(e.ctx, "", obj); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.deleteClusterScoped("Namespace", obj.GetName(), e.kube.CoreV1().Namespaces().Delete) })
		}
	}
	dryRun, err := manifests.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dryRun.DryRun = true
	if err := dryRun.Apply(e.ctx, "", clusterWide...); err != nil {
		t.Errorf("dry run of artifacts/: %v", err)
	}

	// The tenant install, moved to the test's namespace as its
	// kustomization tells tenants to do.
	namespaced := renderKustomization(t, filepath.Join(artifactsDir, "namespaced"), e.ns)
	if got, want := kindsOf(namespaced), []string{"Deployment", "Role", "RoleBinding", "Service", "ServiceAccount"}; !slices.Equal(got, want) {
		t.Fatalf("artifacts/namespaced renders %v, want %v", got, want)
	}
	for _, obj := range namespaced {
		if obj.GetNamespace() != e.ns {
			t.Errorf("%s %s in namespace %q, want %q", obj.GetKind(), obj.GetName(), obj.GetNamespace(), e.ns)
		}
		switch obj.GetKind() {
		case "RoleBinding":
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			if len(subjects) != 1 || subjects[0].(map[string]any)["namespace"] != e.ns {
				t.Errorf("RoleBinding subjects %v, want the ServiceAccount of %s", subjects, e.ns)
			}
		case "Deployment":
			containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
			args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
			if !slices.Contains(args, "--namespace=$(POD_NAMESPACE)") {
				t.Errorf("namespaced Deployment args %v lack --namespace=$(POD_NAMESPACE)", args)
			}
		}
	}
	if err := dryRun.Apply(e.ctx, "", namespaced...); err != nil {
		t.Errorf("dry run of artifacts/namespaced: %v", err)
	}
	if w := warnings.all(); len(w) > 0 {
		t.Errorf("the API server warned about the artifacts: %q", w)
	}
}

// TestManagerDeploymentPassesRestrictedPodSecurity applies the controller's
// Deployment to a namespace that enforces, and warns about, the "restricted"
// Pod Security level: no warning, and its pods are admitted.
func TestManagerDeploymentPassesRestrictedPodSecurity(t *testing.T) {
	e := newEnv(t)
	ns, err := e.kube.CoreV1().Namespaces().Get(e.ctx, e.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"enforce", "warn"} {
		ns.Labels["pod-security.kubernetes.io/"+mode] = "restricted"
		ns.Labels["pod-security.kubernetes.io/"+mode+"-version"] = "latest"
	}
	if _, err := e.kube.CoreV1().Namespaces().Update(e.ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	warnings := &warningRecorder{}
	cfg := adminConfig()
	cfg.WarningHandler = warnings
	applier, err := manifests.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	objs := renderKustomization(t, filepath.Join(artifactsDir, "manager"), "")
	var deployment *unstructured.Unstructured
	for _, obj := range objs {
		obj.SetNamespace(e.ns)
		if obj.GetKind() == "Deployment" {
			deployment = obj
		}
	}
	if deployment == nil {
		t.Fatal("artifacts/manager has no Deployment")
	}

	// The control: with a weaker security context the same Deployment
	// draws a warning, so silence below means compliance, not deafness.
	weakened := deployment.DeepCopy()
	unstructured.RemoveNestedField(weakened.Object, "spec", "template", "spec", "securityContext")
	dryRun, err := manifests.NewApplier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dryRun.DryRun = true
	if err := dryRun.Apply(e.ctx, "", weakened); err != nil {
		t.Fatal(err)
	}
	if w := warnings.all(); len(w) == 0 || !strings.Contains(strings.Join(w, " "), `violate PodSecurity "restricted`) {
		t.Fatalf("a Deployment without a pod security context drew warnings %q, want a restricted PodSecurity violation", w)
	}
	warnings.reset()

	if err := applier.Apply(e.ctx, "", objs...); err != nil {
		t.Fatalf("applying artifacts/manager: %v", err)
	}
	if w := warnings.all(); len(w) > 0 {
		t.Errorf("the API server warned about artifacts/manager: %q", w)
	}
	// Enforcement applies to pods: their creation by the ReplicaSet is the
	// admission that matters.
	e.eventually("the controller's pods admitted and running", func() (bool, error) {
		d, err := e.kube.AppsV1().Deployments(e.ns).Get(e.ctx, deployment.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range d.Status.Conditions {
			if c.Type == "ReplicaFailure" && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("pods rejected: %s", c.Message)
			}
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		return d.Status.ReadyReplicas == want, fmt.Errorf("%d of %d replicas ready", d.Status.ReadyReplicas, want)
	})
}

func kindsOf(objs []*unstructured.Unstructured) []string {
	var kinds []string
	for _, obj := range objs {
		kinds = append(kinds, obj.GetKind())
	}
	slices.Sort(kinds)
	return kinds
}

// warningRecorder keeps the warnings the API server sends with its answers.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

var _ rest.WarningHandler = (*warningRecorder)(nil)

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.warnings)
}

func (w *warningRecorder) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = nil
}

// kustomization is the part of kustomize's Kustomization that artifacts/
// uses. renderKustomization fails on any other field, so that a feature
// added to the artifacts cannot be skipped here unnoticed.
type kustomization struct {
	APIVersion   string   `json:"apiVersion"`
	Kind         string   `json:"kind"`
	Resources    []string `json:"resources"`
	Transformers []string `json:"transformers"`
	Images       []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
	Patches []struct {
		Target struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target"`
		Patch string `json:"patch"`
	} `json:"patches"`
}

// namespacedKinds says which kinds in the artifacts are namespaced. A kind
// not listed fails the render rather than be guessed.
var namespacedKinds = map[string]bool{
	"CustomResourceDefinition": false, "Namespace": false, "ClusterRole": false, "ClusterRoleBinding": false,
	"Role": true, "RoleBinding": true, "ServiceAccount": true, "Deployment": true, "Service": true,
	"ValidatingAdmissionPolicy": false, "ValidatingAdmissionPolicyBinding": false,
}

// renderKustomization builds dir the way `kustomize build` does, for the
// features the artifacts use: resources (files and directories, built
// first), a builtin NamespaceTransformer given inline (namespace, when not
// empty, replaces its target namespace, as a tenant edits it), JSON 6902
// patches with a kind and name target, and image tags.
func renderKustomization(t *testing.T, dir, namespace string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Strict: a field this test does not render fails it.
	var k kustomization
	if err := utilyaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v; teach renderKustomization", dir, err)
	}

	var objs []*unstructured.Unstructured
	for _, res := range k.Resources {
		path := filepath.Join(dir, res)
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.IsDir() {
			objs = append(objs, renderKustomization(t, path, "")...)
			continue
		}
		decoded, err := manifests.DecodeFiles(path)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, decoded...)
	}
	for _, obj := range objs {
		if _, known := namespacedKinds[obj.GetKind()]; !known {
			t.Fatalf("%s: kind %s: add it to namespacedKinds", dir, obj.GetKind())
		}
	}

	for _, p := range k.Patches {
		matched := false
		for _, obj := range objs {
			if obj.GetKind() == p.Target.Kind && obj.GetName() == p.Target.Name {
				applyJSONPatch(t, obj, p.Patch)
				matched = true
			}
		}
		if !matched {
			t.Fatalf("%s: patch target %s %s matches nothing", dir, p.Target.Kind, p.Target.Name)
		}
	}
	for _, config := range k.Transformers {
		applyNamespaceTransformer(t, objs, config, namespace)
	}
	for _, img := range k.Images {
		setImage(t, objs, img.Name, img.NewName, img.NewTag)
	}
	return objs
}

// applyNamespaceTransformer moves every namespaced object, and with
// setRoleBindingSubjects: allServiceAccounts every ServiceAccount subject of
// a binding, to the transformer's namespace (or to override).
func applyNamespaceTransformer(t *testing.T, objs []*unstructured.Unstructured, config, override string) {
	t.Helper()
	decoded, err := manifests.Decode(strings.NewReader(config))
	if err != nil || len(decoded) != 1 {
		t.Fatalf("transformer config: %v (%d objects)", err, len(decoded))
	}
	tr := decoded[0]
	if tr.GetAPIVersion() != "builtin" || tr.GetKind() != "NamespaceTransformer" {
		t.Fatalf("transformer %s/%s is not rendered by this test", tr.GetAPIVersion(), tr.GetKind())
	}
	for field := range tr.Object {
		if !slices.Contains([]string{"apiVersion", "kind", "metadata", "setRoleBindingSubjects"}, field) {
			t.Fatalf("NamespaceTransformer field %q is not rendered by this test", field)
		}
	}
	subjects, _, _ := unstructured.NestedString(tr.Object, "setRoleBindingSubjects")
	if subjects != "allServiceAccounts" {
		t.Fatalf("NamespaceTransformer setRoleBindingSubjects %q is not rendered by this test", subjects)
	}
	ns := tr.GetNamespace()
	if override != "" {
		ns = override
	}
	for _, obj := range objs {
		if namespacedKinds[obj.GetKind()] {
			obj.SetNamespace(ns)
		}
		if kind := obj.GetKind(); kind == "RoleBinding" || kind == "ClusterRoleBinding" {
			list, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range list {
				if subject := s.(map[string]any); subject["kind"] == "ServiceAccount" {
					subject["namespace"] = ns
				}
			}
			if err := unstructured.SetNestedSlice(obj.Object, list, "subjects"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// applyJSONPatch applies RFC 6902 "add" operations, the only ones the
// artifacts use.
func applyJSONPatch(t *testing.T, obj *unstructured.Unstructured, patch string) {
	t.Helper()
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(patch)), 4096).Decode(&ops); err != nil {
		t.Fatalf("patch: %v", err)
	}
	for _, op := range ops {
		if op.Op != "add" {
			t.Fatalf("patch op %q is not rendered by this test", op.Op)
		}
		path := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		if _, err := jsonPatchAdd(obj.Object, path, op.Value); err != nil {
			t.Fatalf("patch path %s: %v", op.Path, err)
		}
	}
}

// jsonPatchAdd adds value at path below node and returns the new node: a
// list grows into a new slice, which its parent must then hold.
func jsonPatchAdd(node any, path []string, value any) (any, error) {
	seg := strings.NewReplacer("~1", "/", "~0", "~").Replace(path[0])
	switch n := node.(type) {
	case map[string]any:
		if len(path) == 1 {
			n[seg] = value
			return n, nil
		}
		child, ok := n[seg]
		if !ok {
			return nil, fmt.Errorf("no %q", seg)
		}
		child, err := jsonPatchAdd(child, path[1:], value)
		n[seg] = child
		return n, err
	case []any:
		index := len(n)
		if seg != "-" {
			var err error
			if index, err = strconv.Atoi(seg); err != nil || index < 0 || index > len(n) {
				return nil, fmt.Errorf("bad index %q", seg)
			}
		}
		if len(path) == 1 {
			return slices.Insert(n, index, value), nil
		}
		if index == len(n) {
			return nil, fmt.Errorf("no element %q", seg)
		}
		child, err := jsonPatchAdd(n[index], path[1:], value)
		n[index] = child
		return n, err
	}
	return nil, fmt.Errorf("nothing to add to at %q", seg)
}

// setImage gives the containers whose image is name (any tag) the new name
// and tag.
func setImage(t *testing.T, objs []*unstructured.Unstructured, name, newName, newTag string) {
	t.Helper()
	if newName == "" {
		newName = name
	}
	for _, obj := range objs {
		containers, found, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		if !found {
			continue
		}
		for _, c := range containers {
			container := c.(map[string]any)
			image, _ := container["image"].(string)
			base, _, _ := strings.Cut(image, "@")
			if i := strings.LastIndex(base, ":"); i > strings.LastIndex(base, "/") {
				base = base[:i]
			}
			if base == name {
				container["image"] = newName + ":" + newTag
			}
		}
		if err := unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNamespacedRoleMatchesClusterRBAC: the tenant install's Role grants
// exactly the rules of the cluster-wide roles, which TestRBACEachVerbIsNeeded
// shows necessary and TestRBACIsSufficient sufficient, but for those on
// ReferenceGrants: a controller of one namespace sees no other namespace's
// profiles, so it never reads grants.
func TestNamespacedRoleMatchesClusterRBAC(t *testing.T) {
	cluster := loadControllerRBAC(t)
	clusterRules := slices.DeleteFunc(slices.Clone(cluster.clusterRole.Rules), func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "referencegrants")
	})
	if len(clusterRules) != len(cluster.clusterRole.Rules)-1 {
		t.Errorf("artifacts/rbac/clusterrole.yaml: want one rule on referencegrants")
	}
	want := append(clusterRules, cluster.leaseRole.Rules...)
	var role rbacv1.Role
	objs, err := manifests.DecodeFiles(filepath.Join(artifactsDir, "namespaced", "role.yaml"))
	if err != nil || len(objs) != 1 {
		t.Fatalf("decoding artifacts/namespaced/role.yaml: %v (%d objects)", err, len(objs))
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(objs[0].Object, &role, true); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("artifacts/namespaced/role.yaml rules:\n%+v\nwant those of artifacts/rbac:\n%+v", role.Rules, want)
	}
}
