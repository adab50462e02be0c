package deploy

import (
	"bytes"
	"cmp"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
)

// TestChartRendersTheKustomizeInstall: with default values, the chart
// renders exactly the objects of `kubectl kustomize artifacts/`, but for the
// Namespace, which the chart leaves to `helm install --create-namespace`
// (Helm cannot create the namespace it installs into from the chart).
func TestChartRendersTheKustomizeInstall(t *testing.T) {
	kustomized := kustomize(t, artifactsDir)
	// The one documented exception.
	namespaces := only(kustomized, "Namespace")
	if len(namespaces) != 1 || namespaces[0].GetName() != systemNamespace {
		t.Fatalf("artifacts/ builds Namespaces %v, want %s alone: update the exception here and in the chart's README", sortedKeys(namespaces), systemNamespace)
	}
	kustomized = without(kustomized, "Namespace")

	chart := render(t, systemNamespace, clusterValues)
	compareObjects(t, "the chart", chart, "kustomize artifacts/", kustomized)
}

// TestChartNamespaceScopeRendersArtifactsNamespaced: with rbac.scope=namespace
// the chart renders the objects of artifacts/namespaced/, whose CRDs an admin
// installs separately (the chart carries them in crds/).
func TestChartNamespaceScopeRendersArtifactsNamespaced(t *testing.T) {
	kustomized := kustomize(t, filepath.Join(artifactsDir, "namespaced"))
	deployments := only(kustomized, "Deployment")
	if len(deployments) != 1 {
		t.Fatalf("artifacts/namespaced builds Deployments %v, want one", sortedKeys(deployments))
	}
	// Render into the namespace the kustomization sets.
	namespace := deployments[0].GetNamespace()

	chart := render(t, namespace, namespaceValues)
	if got, want := sortedKeys(only(chart, "CustomResourceDefinition")), projectCRDs(t); !slices.Equal(got, want) {
		t.Errorf("the chart renders CRDs %v with rbac.scope=namespace, want those of artifacts/crd, %v", got, want)
	}
	compareObjects(t, "the chart", without(chart, "CustomResourceDefinition"), "kustomize artifacts/namespaced", kustomized)
}

// TestChartCRDIsTheGeneratedOne: crds/ holds byte-identical copies of the
// generated CRDs of artifacts/crd/, and nothing else. `make codegen` writes
// artifacts/crd/; after it, copy the files over.
func TestChartCRDIsTheGeneratedOne(t *testing.T) {
	generated := filepath.Join(artifactsDir, "crd")
	copied := filepath.Join(chartDir, "crds")
	names := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	if g, c := names(generated), names(copied); !slices.Equal(g, c) {
		t.Fatalf("%s holds %v, %s holds %v: copy them over (cp %s/* %s/)", copied, c, generated, g, generated, copied)
	}
	for _, name := range names(generated) {
		want, err := os.ReadFile(filepath.Join(generated, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(copied, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/%s differs from the generated %s/%s: cp %[3]s/%[4]s %[1]s/", copied, name, generated, name)
		}
	}
}

// projectCRDs lists the CRDs the kustomize install of artifacts/ creates
// (artifacts/crd: GameSession and ProfileRollout), as sortedKeys does.
func projectCRDs(t testing.TB) []string {
	t.Helper()
	crds := only(kustomize(t, artifactsDir), "CustomResourceDefinition")
	if len(crds) == 0 {
		t.Fatal("artifacts/ builds no CustomResourceDefinition")
	}
	return sortedKeys(crds)
}

// deploymentOf returns the one Deployment of objs, typed.
func deploymentOf(t testing.TB, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	deployments := only(objs, "Deployment")
	if len(deployments) != 1 {
		t.Fatalf("rendered Deployments %v, want one", sortedKeys(deployments))
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(deployments[0].Object, &d, true); err != nil {
		t.Fatalf("the rendered Deployment: %v", err)
	}
	return &d
}

// parseArgs parses the controller's arguments with the binary's own flags:
// an argument it does not define fails the test.
func parseArgs(t *testing.T, args []string) *app.Options {
	t.Helper()
	opts := app.NewOptions()
	fs := flag.NewFlagSet("gamesession-controller", flag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the controller refuses the chart's arguments %q: %v", args, err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("the controller would ignore the chart's arguments %q", fs.Args())
	}
	if err := opts.Validate(); err != nil {
		t.Fatalf("the controller refuses the chart's arguments %q: %v", args, err)
	}
	return opts
}

// leaseNames returns the Lease names the Role grants get and update of.
func leaseNames(role *rbacv1.Role) []string {
	for _, rule := range role.Rules {
		if slices.Contains(rule.Resources, "leases") && len(rule.ResourceNames) > 0 {
			return rule.ResourceNames
		}
	}
	return nil
}

// leaseRole returns the rules of the Role that grants the Lease.
func leaseRole(t *testing.T, objs []*unstructured.Unstructured) *rbacv1.Role {
	t.Helper()
	for _, obj := range only(objs, "Role") {
		var role rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
			t.Fatal(err)
		}
		for _, rule := range role.Rules {
			if slices.Contains(rule.Resources, "leases") && len(rule.ResourceNames) > 0 {
				return &role
			}
		}
	}
	t.Fatalf("no rendered Role grants a named Lease")
	return nil
}

// TestControllerValuesBecomeFlags sets every value of `controller:` and the
// leader election, and parses the rendered arguments with the binary's flag
// set: each value reaches its option, zeroes and numbers included, and the
// Lease RBAC follows the Lease's name and namespace. With default values, the
// options are the binary's defaults, leader election aside.
func TestControllerValuesBecomeFlags(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		objs := render(t, systemNamespace, clusterValues)
		got := parseArgs(t, deploymentOf(t, objs).Spec.Template.Spec.Containers[0].Args)
		want := app.NewOptions()
		want.LeaderElect = true
		if !reflect.DeepEqual(got, want) {
			t.Errorf("default values give options\n%+v\nwant the binary's defaults with leader election\n%+v", got, want)
		}
		role := leaseRole(t, objs)
		if names := leaseNames(role); !slices.Equal(names, []string{want.LeaderElectionID}) {
			t.Errorf("the Lease Role grants %v, want the binary's default Lease %q", names, want.LeaderElectionID)
		}
		if role.Namespace != systemNamespace {
			t.Errorf("the Lease Role is in %q, want the release namespace %q", role.Namespace, systemNamespace)
		}
	})

	values := map[string]any{
		"controller": map[string]any{
			"workers":      3,
			"kubeAPIQPS":   50.5,
			"kubeAPIBurst": 1000000, // a float64 after YAML: must not print as 1e+06
			// Spaces and a comma: must survive YAML.
			"profileSelector":      "tier in (gold, silver),games.example.com/profile=true",
			"profileChangeDelay":   "2s",
			"resyncPeriod":         "1h",
			"rolloutMaxRolling":    "10%",
			"rolloutCanary":        1,
			"rolloutMaxFailed":     0, // 0 halts at the first failure: not "unset"
			"revisionHistoryLimit": 0,
			"rolloutMaxDefer":      "45m",
			"maxMovingSessions":    0, // 0 is no limit: not "unset"
			"maxMovesPerMinute":    250,
		},
		"leaderElection": map[string]any{"namespace": "locks", "id": "arena-lease"},
		"metrics":        map[string]any{"port": 9090},
		"health":         map[string]any{"port": 9091},
		"extraArgs":      []any{"--leader-elect-retry-period=3s"},
	}
	want := app.NewOptions()
	want.Workers = 3
	want.KubeAPIQPS = 50.5
	want.KubeAPIBurst = 1000000
	want.ProfileSelector = "tier in (gold, silver),games.example.com/profile=true"
	want.ProfileChangeDelay = 2 * time.Second
	want.ResyncPeriod = time.Hour
	want.RolloutMaxRolling = "10%"
	want.RolloutCanary = "1"
	want.RolloutMaxFailed = "0"
	want.RevisionHistoryLimit = 0
	want.RolloutMaxDefer = "45m"
	want.MaxMovingSessions = 0
	want.MaxMovesPerMinute = 250
	want.LeaderElect = true
	want.LeaderElectionNamespace = "locks"
	want.LeaderElectionID = "arena-lease"
	want.MetricsBindAddress = ":9090"
	want.HealthProbeBindAddress = ":9091"
	want.RetryPeriod = 3 * time.Second

	for _, mode := range []struct {
		name   string
		values map[string]any
	}{{"cluster", clusterValues}, {"namespace", namespaceValues}} {
		t.Run(mode.name, func(t *testing.T) {
			vals := mergeValues(values, mode.values)
			wantOpts := *want
			if mode.name == "namespace" {
				// The Lease must live where the Role is.
				vals["leaderElection"] = map[string]any{"id": "arena-lease"}
				wantOpts.LeaderElectionNamespace = ""
				wantOpts.Namespace = "$(POD_NAMESPACE)" // expanded by the kubelet
			}
			objs := render(t, systemNamespace, vals)
			d := deploymentOf(t, objs)
			c := d.Spec.Template.Spec.Containers[0]
			got := parseArgs(t, c.Args)
			if !reflect.DeepEqual(got, &wantOpts) {
				t.Errorf("values %v give options\n%+v\nwant\n%+v", vals, got, &wantOpts)
			}
			if last := c.Args[len(c.Args)-1]; last != "--leader-elect-retry-period=3s" {
				t.Errorf("extraArgs are not last: args end with %q", last)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if ports["metrics"] != 9090 || ports["health"] != 9091 {
				t.Errorf("container ports %v, want metrics 9090 and health 9091", ports)
			}
			role := leaseRole(t, objs)
			if names := leaseNames(role); !slices.Equal(names, []string{"arena-lease"}) {
				t.Errorf("the Lease Role grants %v, want [arena-lease]", names)
			}
			if wantNS := cmp.Or(wantOpts.LeaderElectionNamespace, systemNamespace); role.Namespace != wantNS {
				t.Errorf("the Lease Role is in %q, want %q", role.Namespace, wantNS)
			}
		})
	}
}

// TestLiveDeliveryValue: liveDelivery=false turns --live-delivery off and
// takes its rules out of the role of either scope, the update of ConfigMaps
// and every pod rule, leaving every other rule and argument as the defaults
// render them.
func TestLiveDeliveryValue(t *testing.T) {
	liveRule := func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "configmaps") && slices.Contains(r.Verbs, "update")
	}
	for _, mode := range []struct {
		name, kind string
		values     map[string]any
	}{{"cluster", "ClusterRole", clusterValues}, {"namespace", "Role", namespaceValues}} {
		t.Run(mode.name, func(t *testing.T) {
			on := render(t, systemNamespace, mode.values)
			off := render(t, systemNamespace, mergeValues(mode.values, map[string]any{"liveDelivery": false}))
			if got := parseArgs(t, deploymentOf(t, on).Spec.Template.Spec.Containers[0].Args); !got.LiveDelivery {
				t.Errorf("default values leave --live-delivery off")
			}
			if got := parseArgs(t, deploymentOf(t, off).Spec.Template.Spec.Containers[0].Args); got.LiveDelivery {
				t.Errorf("liveDelivery=false leaves --live-delivery on")
			}
			rules := func(objs []*unstructured.Unstructured) []rbacv1.PolicyRule {
				// The controller's role, not those of its Lease and key.
				for _, obj := range only(objs, mode.kind) {
					if obj.GetName() == "gamesession-controller" {
						var r rbacv1.ClusterRole
						if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r); err != nil {
							t.Fatal(err)
						}
						return r.Rules
					}
				}
				t.Fatalf("no %s gamesession-controller among %v", mode.kind, sortedKeys(only(objs, mode.kind)))
				return nil
			}
			onRules, offRules := rules(on), rules(off)
			if n := len(slices.DeleteFunc(slices.Clone(onRules), func(r rbacv1.PolicyRule) bool { return !liveRule(r) })); n != 2 {
				t.Errorf("default values grant %d live delivery rules (configmaps update, pods), want 2: %+v", n, onRules)
			}
			if want := slices.DeleteFunc(slices.Clone(onRules), liveRule); !reflect.DeepEqual(offRules, want) {
				t.Errorf("liveDelivery=false grants\n%+v\nwant the defaults' rules less the live delivery ones\n%+v", offRules, want)
			}
		})
	}
}

// mergeValues returns a copy of base with the top-level keys of over.
func mergeValues(base, over map[string]any) map[string]any {
	m := make(map[string]any, len(base)+len(over))
	maps.Copy(m, base)
	maps.Copy(m, over)
	return m
}

// TestInvalidValuesAreRefused: values that would deploy a broken or unsafe
// controller fail the render, with a message that says why.
func TestInvalidValuesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  map[string]any
		wantErr string
	}{
		{"unknown RBAC scope", map[string]any{"rbac": map[string]any{"scope": "everywhere"}}, "scope"},
		{"replicas without leader election", map[string]any{"leaderElection": map[string]any{"enabled": false}}, "leaderElection.enabled"},
		{"an existing ServiceAccount without its name", map[string]any{"serviceAccount": map[string]any{"create": false}}, "serviceAccount.name"},
		{"a Lease outside the namespace of a namespace-scoped install",
			map[string]any{"rbac": map[string]any{"scope": "namespace"}, "leaderElection": map[string]any{"namespace": "elsewhere"}}, "leaderElection.namespace"},
		{"a misspelt controller value", map[string]any{"controller": map[string]any{"worker": 4}}, "worker"},
		{"a controller value of the wrong type", map[string]any{"controller": map[string]any{"workers": "many"}}, "workers"},
		{"the admission policy switch of the wrong type", map[string]any{"admissionPolicy": map[string]any{"enabled": "no"}}, "enabled"},
		{"the live delivery switch of the wrong type", map[string]any{"liveDelivery": "off"}, "liveDelivery"},
		// Unquoted, the sidecar's label value "1" is a number, which no
		// ConfigMap label may be.
		{"a dashboard label that is no string", map[string]any{"grafanaDashboard": map[string]any{"labels": map[string]any{"grafana_dashboard": 1}}}, "grafana_dashboard"},
		{"a dashboard label that is no label", map[string]any{"grafanaDashboard": map[string]any{"labels": map[string]any{"grafana dashboard": "1"}}}, "grafana dashboard"},
		{"a dashboard namespace that is no namespace", map[string]any{"grafanaDashboard": map[string]any{"namespace": "Monitoring"}}, "Monitoring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderManifest(t, systemNamespace, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("rendering with %v: error %v, want one about %q", tc.values, err, tc.wantErr)
			}
		})
	}

	// The controls: the same settings, made consistent, render.
	for _, values := range []map[string]any{
		{"leaderElection": map[string]any{"enabled": false}, "replicas": 1},
		{"serviceAccount": map[string]any{"create": false, "name": "existing"}},
	} {
		if _, err := renderManifest(t, systemNamespace, values); err != nil {
			t.Errorf("rendering with %v: %v", values, err)
		}
	}
}

// TestPrometheusRule: prometheusRule.enabled renders a PrometheusRule whose
// spec is files/prometheus-rules.yaml, with the extra labels.
func TestPrometheusRule(t *testing.T) {
	if rules := only(render(t, systemNamespace, clusterValues), "PrometheusRule"); len(rules) != 0 {
		t.Errorf("default values render %v, want no PrometheusRule", sortedKeys(rules))
	}
	objs := render(t, systemNamespace, map[string]any{
		"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
	})
	rules := only(objs, "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("rendered PrometheusRules %v, want one", sortedKeys(rules))
	}
	rule := rules[0]
	if rule.GetAPIVersion() != "monitoring.coreos.com/v1" || rule.GetNamespace() != systemNamespace {
		t.Errorf("PrometheusRule %s, want monitoring.coreos.com/v1 in %s", key(rule), systemNamespace)
	}
	if got := rule.GetLabels()["release"]; got != "prometheus" {
		t.Errorf("PrometheusRule labels %v lack release=prometheus", rule.GetLabels())
	}
	file, err := os.ReadFile(filepath.Join(chartDir, "files", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := decode(t, string(file))
	if len(want) != 1 {
		t.Fatalf("files/prometheus-rules.yaml holds %d documents, want one", len(want))
	}
	if _, ok := want[0].Object["groups"]; !ok {
		t.Fatalf("files/prometheus-rules.yaml has no top-level groups")
	}
	if !reflect.DeepEqual(rule.Object["spec"], want[0].Object) {
		t.Errorf("PrometheusRule spec:\n%v\nwant files/prometheus-rules.yaml:\n%v", rule.Object["spec"], want[0].Object)
	}
}

// TestChartAdmissionPolicy: the chart's admission policies are those of
// artifacts/admission, byte for byte, each file <name>.yaml there copied to
// files/admission-<name>.yaml; default values render each policy and its
// binding, admissionPolicy.enabled=false leaves out all of them and nothing
// else, and a namespace-scoped install, whose tenant cannot create
// cluster-scoped objects, renders none.
func TestChartAdmissionPolicy(t *testing.T) {
	artifactFiles, err := filepath.Glob(filepath.Join(artifactsDir, "admission", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	artifactFiles = slices.DeleteFunc(artifactFiles, func(p string) bool { return filepath.Base(p) == "kustomization.yaml" })
	copies, err := filepath.Glob(filepath.Join(chartDir, "files", "admission-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wantCopies []string
	for _, artifact := range artifactFiles {
		want, err := os.ReadFile(artifact)
		if err != nil {
			t.Fatal(err)
		}
		copied := filepath.Join(chartDir, "files", "admission-"+filepath.Base(artifact))
		wantCopies = append(wantCopies, copied)
		if got, err := os.ReadFile(copied); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s (%v): cp %s %s", copied, artifact, err, artifact, copied)
		}
	}
	if !slices.Equal(copies, wantCopies) {
		t.Errorf("the chart has %v, want a copy of each policy file of artifacts/admission: %v", copies, wantCopies)
	}
	wantNames := sortedNames(only(kustomize(t, filepath.Join(artifactsDir, "admission")), "ValidatingAdmissionPolicy"))
	if len(wantNames) == 0 {
		t.Fatal("artifacts/admission builds no ValidatingAdmissionPolicy")
	}

	admissionKinds := []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	withoutPolicy := func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
		for _, kind := range admissionKinds {
			objs = without(objs, kind)
		}
		return objs
	}
	defaults := render(t, systemNamespace, clusterValues)
	for _, kind := range admissionKinds {
		if got := only(defaults, kind); !slices.Equal(sortedNames(got), wantNames) {
			t.Errorf("default values render %s %v, want %v", kind, sortedKeys(got), wantNames)
		}
	}
	off := render(t, systemNamespace, map[string]any{"admissionPolicy": map[string]any{"enabled": false}})
	compareObjects(t, "admissionPolicy.enabled=false", off, "the default values less the policy", withoutPolicy(defaults))
	namespaced := render(t, systemNamespace, namespaceValues)
	if got := withoutPolicy(namespaced); len(got) != len(namespaced) {
		t.Errorf("rbac.scope=namespace renders the cluster-scoped admission policy: %v", sortedKeys(namespaced))
	}
}

// sortedNames returns the names of objs, sorted.
func sortedNames(objs []*unstructured.Unstructured) []string {
	names := make([]string, 0, len(objs))
	for _, obj := range objs {
		names = append(names, obj.GetName())
	}
	slices.Sort(names)
	return names
}
