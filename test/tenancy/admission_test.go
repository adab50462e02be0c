package tenancy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gamesclient "github.com/example/gamesession-controller/pkg/generated/clientset/versioned/typed/games/v1"
)

const (
	admissionDir     = "../../artifacts/admission"
	podRightsPolicy  = "gamesession-pod-rights"
	profileAckPolicy = "gamesession-profile-ack"
	matchmakerPolicy = "gamesession-matchmaker-busy-label-only"
)

// installAdmissionPolicies applies the objects of artifacts/admission (the
// resources its kustomization lists) and waits until the API server has
// type-checked each policy against the resources it matches, failing the
// test on any warning: a misspelt field path is one there, and an error, so
// a refusal, at run time. The API server checks validations and message
// expressions only, not variables or match conditions, so a copy of each
// policy, bound to nothing, has each of those as a validation of its own.
// All are removed when the test ends, so that the other tests of the
// package run without them.
func (e *env) installAdmissionPolicies() {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(admissionDir, "kustomization.yaml"))
	if err != nil {
		e.t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		e.t.Fatal(err)
	}
	var paths []string
	for _, r := range k.Resources {
		paths = append(paths, filepath.Join(admissionDir, r))
	}
	objs, err := manifests.DecodeFiles(paths...)
	if err != nil {
		e.t.Fatal(err)
	}
	var policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	for _, obj := range objs {
		if obj.GetKind() == "ValidatingAdmissionPolicy" {
			policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, policy, true); err != nil {
				e.t.Fatal(err)
			}
			policies = append(policies, policy)
		}
	}
	for _, name := range []string{podRightsPolicy, profileAckPolicy, liveSubPathPolicy} {
		if !slices.ContainsFunc(policies, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) bool { return p.Name == name }) {
			e.t.Fatalf("artifacts/admission has no ValidatingAdmissionPolicy %s", name)
		}
	}
	type typeCheck struct {
		probe  *admissionregistrationv1.ValidatingAdmissionPolicy
		probed []string // what each of the probe's validations stands for
	}
	var probes []typeCheck
	for _, policy := range policies {
		probe := policy.DeepCopy()
		probe.Name += "-typecheck"
		probe.Spec.MatchConditions = nil
		probe.Spec.Validations = nil
		var probed []string
		for _, c := range policy.Spec.MatchConditions {
			probe.Spec.Validations = append(probe.Spec.Validations, admissionregistrationv1.Validation{Expression: c.Expression})
			probed = append(probed, "spec.matchConditions "+c.Name)
		}
		for _, v := range policy.Spec.Variables {
			// Any expression, as a validation: it must return a bool.
			probe.Spec.Validations = append(probe.Spec.Validations, admissionregistrationv1.Validation{Expression: "size([" + v.Expression + "]) == 1"})
			probed = append(probed, "spec.variables "+v.Name)
		}
		probes = append(probes, typeCheck{probe, probed})
	}

	applier, err := manifests.NewApplier(adminConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	admission := e.kube.AdmissionregistrationV1()
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, obj := range objs {
			switch obj.GetKind() {
			case "ValidatingAdmissionPolicyBinding":
				_ = admission.ValidatingAdmissionPolicyBindings().Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			case "ValidatingAdmissionPolicy":
				_ = admission.ValidatingAdmissionPolicies().Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			}
		}
		for _, p := range probes {
			_ = admission.ValidatingAdmissionPolicies().Delete(ctx, p.probe.Name, metav1.DeleteOptions{})
		}
	})
	if err := applier.Apply(e.ctx, "", objs...); err != nil {
		e.t.Fatalf("applying artifacts/admission: %v", err)
	}
	for _, p := range probes {
		if _, err := admission.ValidatingAdmissionPolicies().Create(e.ctx, p.probe, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("creating the type checking copy of %s: %v", p.probe.Name, err)
		}
	}
	checked := func(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		var got *admissionregistrationv1.ValidatingAdmissionPolicy
		e.eventually("policy "+name+" type-checked", func() (bool, error) {
			got, err = admission.ValidatingAdmissionPolicies().Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return got.Status.ObservedGeneration == got.Generation && got.Status.TypeChecking != nil,
				fmt.Errorf("status %+v", got.Status)
		})
		return got
	}
	for i, policy := range policies {
		for _, w := range checked(policy.Name).Status.TypeChecking.ExpressionWarnings {
			e.t.Errorf("type checking of %s %s: %s", policy.Name, w.FieldRef, w.Warning)
		}
		for _, w := range checked(probes[i].probe.Name).Status.TypeChecking.ExpressionWarnings {
			what := w.FieldRef
			var j int
			if _, err := fmt.Sscanf(w.FieldRef, "spec.validations[%d]", &j); err == nil && j < len(probes[i].probed) {
				what = probes[i].probed[j]
			}
			e.t.Errorf("type checking of %s %s: %s", policy.Name, what, w.Warning)
		}
	}
}

// bind gives user, in namespace, a Role of the rules, named name.
func (e *env) bind(namespace, name, user string, rules ...rbacv1.PolicyRule) {
	e.t.Helper()
	rbac := e.kube.RbacV1()
	if _, err := rbac.Roles(namespace).Create(e.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(namespace).Create(e.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// access is one question to the authorizer.
type access struct {
	verb, resource, name string
	want                 bool
}

// waitAuthorized waits until the authorizer answers each question about
// user in namespace as wanted: RBAC objects take effect through informers.
func (e *env) waitAuthorized(user string, groups []string, namespace string, questions ...access) {
	e.t.Helper()
	e.eventually("the authorizer to apply the RBAC of "+user, func() (bool, error) {
		for _, q := range questions {
			group := ""
			if q.resource == "gamesessions" {
				group = gamesv1.SchemeGroupVersion.Group
			}
			sar, err := e.kube.AuthorizationV1().SubjectAccessReviews().Create(e.ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: q.verb,
						Group: group, Resource: q.resource, Name: q.name}},
			}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if sar.Status.Allowed != q.want {
				return false, fmt.Errorf("%s %s %q allowed=%v, want %v", q.verb, q.resource, q.name, sar.Status.Allowed, q.want)
			}
		}
		return true, nil
	})
}

// sessionsAs returns a GameSession client of namespace that acts as user.
func sessionsAs(namespace, user string, groups ...string) gamesclient.GameSessionInterface {
	cfg := adminConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return clientset.NewForConfigOrDie(cfg).GamesV1().GameSessions(namespace)
}

// podSession is a session of the profile arena whose template is a game
// server container (its image from spec.image) edited by edit.
func podSession(name string, edit func(*corev1.PodSpec)) *gamesv1.GameSession {
	s := &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: "arena",
			Image:      "registry.example.com/arena-server:1.0.0",
			Replicas:   ptr.To[int32](1),
			Template:   &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "game-server"}}}},
		},
	}
	if edit != nil {
		edit(&s.Spec.Template.Spec)
	}
	return s
}

func secretVolume(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
}

func secretEnv(name, secret string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "token"}}}
}

// refusedFor checks that err is the pod rights policy's refusal, and that
// its message holds every part.
func refusedFor(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+podRightsPolicy+"'") {
		t.Errorf("%s: %v, want a refusal of %s", what, err, podRightsPolicy)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: refused with %q, which does not say %q", what, err.Error(), p)
		}
	}
	t.Logf("%s: %s", what, err)
}

// TestAdmissionPolicyGrantsNoMoreThanPods: with artifacts/admission
// installed, a GameSession gets its pods nothing its writer could not get by
// creating pods itself.
//   - Tenant A may write sessions, not create pods nor get Secrets: a
//     session that runs as another ServiceAccount, uses a Secret (a volume, a
//     projected source, env, envFrom, an image pull secret, a volume
//     driver's credentials) or asks for what
//     Pod Security Baseline forbids (host namespaces, a hostPort, privileged
//     containers, capabilities, hostPath) is refused, on create and on
//     update, and the message names the right A lacks and what asked for it.
//     A plain session is accepted.
//   - Given get on named Secrets, A may use those and no other; a realistic
//     template of several containers reading eight of them stays within
//     the API server's CEL cost limits, as does one at the schema's limits
//     of containers and volumes; a ninth name is refused.
//   - Tenant B, who may also create pods, gets every one of them accepted.
//   - Writes that leave the pod template alone pass on a session A could
//     not create (the admin's, mounting a Secret): A's labels, annotations
//     and finalizers, a change of replicas, and the matchmaker of
//     artifacts/examples flipping games.example.com/busy. A's change of its
//     image is refused: new code next to a mounted Secret reads it.
//   - The controller, as the artifacts' ClusterRole (which may neither create
//     pods nor get Secrets), creates every session's Deployment and writes
//     every status: none of its requests is refused.
func TestAdmissionPolicyGrantsNoMoreThanPods(t *testing.T) {
	e := newEnv(t)
	ns := e.namespace()
	begin := time.Now()
	e.installAdmissionPolicies()
	typeChecked := time.Since(begin)
	e.createProfile(ns, "arena", dataOf("1"))
	if _, err := e.kube.CoreV1().ServiceAccounts(ns).Create(e.ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const tenantA, tenantB = "tenant-a", "tenant-b"
	writer := rbacv1.PolicyRule{APIGroups: []string{gamesv1.SchemeGroupVersion.Group}, Resources: []string{"gamesessions"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}
	e.bind(ns, "writer-a", tenantA, writer)
	e.bind(ns, "writer-b", tenantB, writer, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}})
	e.waitAuthorized(tenantA, nil, ns, access{"create", "gamesessions", "", true}, access{"create", "pods", "", false},
		access{"get", "secrets", "db-password", false})
	e.waitAuthorized(tenantB, nil, ns, access{"create", "gamesessions", "", true}, access{"create", "pods", "", true})
	asA, asB := sessionsAs(ns, tenantA), sessionsAs(ns, tenantB)

	// The policy is served once the API server's informer has it: wait for
	// its first refusal, a dry run, then check each case.
	hostNetwork := func(p *corev1.PodSpec) { p.HostNetwork = true }
	e.eventually("the policy enforced", func() (bool, error) {
		_, err := asA.Create(e.ctx, podSession("probe", hostNetwork), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), fmt.Errorf("a dry run answered %v", err)
	})
	enforced := time.Since(begin)

	mayNotCreatePods := tenantA + ` may not create pods in namespace "` + ns + `"`
	mayNotGet := func(secret string) string {
		return fmt.Sprintf(`%s may not get secrets %q in namespace %q nor create pods there`, tenantA, secret, ns)
	}
	cases := []struct {
		name string
		edit func(*corev1.PodSpec)
		want []string
	}{
		{"service-account", func(p *corev1.PodSpec) { p.ServiceAccountName = "builder" },
			[]string{`runs as ServiceAccount "builder"`, mayNotCreatePods}},
		{"deprecated-service-account", func(p *corev1.PodSpec) { p.DeprecatedServiceAccount = "builder" },
			[]string{`runs as ServiceAccount "builder"`, mayNotCreatePods}},
		{"secret-volume", func(p *corev1.PodSpec) { p.Volumes = append(p.Volumes, secretVolume("db", "db-password")) },
			[]string{`spec.template mounts Secret "db-password"`, mayNotGet("db-password")}},
		{"projected-secret", func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "api-key"}}},
				}}}})
		}, []string{`spec.template mounts Secret "api-key"`, mayNotGet("api-key")}},
		{"secret-env", func(p *corev1.PodSpec) {
			p.Containers[0].Env = append(p.Containers[0].Env, secretEnv("TOKEN", "env-token"))
		},
			[]string{`spec.template reads Secret "env-token"`, mayNotGet("env-token")}},
		{"secret-envfrom", func(p *corev1.PodSpec) {
			p.Containers[0].EnvFrom = append(p.Containers[0].EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "env-bundle"}}})
		}, []string{`spec.template reads Secret "env-bundle"`, mayNotGet("env-bundle")}},
		{"secret-env-of-init-container", func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "fetch", Image: "registry.example.com/fetch:1", Env: []corev1.EnvVar{secretEnv("TOKEN", "init-token")}}}
		}, []string{`spec.template reads Secret "init-token"`, mayNotGet("init-token")}},
		{"image-pull-secret", func(p *corev1.PodSpec) {
			p.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
		}, []string{`spec.template pulls images with Secret "registry"`, mayNotGet("registry")}},
		{"volume-driver-secret", func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "maps", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver: "nfs.csi.k8s.io", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "nfs-credentials"}}}})
		}, []string{`spec.template gives a volume driver Secret "nfs-credentials"`, mayNotGet("nfs-credentials")}},
		{"host-network", hostNetwork, []string{"asks for hostNetwork", mayNotCreatePods}},
		{"host-port", func(p *corev1.PodSpec) {
			p.Containers[0].Ports = []corev1.ContainerPort{{Name: "game", ContainerPort: 7777, HostPort: 7777, Protocol: corev1.ProtocolUDP}}
		}, []string{`hostPort 7777 in container "game-server"`, mayNotCreatePods}},
		{"privileged", func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, []string{`privileged container "game-server"`, mayNotCreatePods}},
		{"privileged-init-container", func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "setup", Image: "registry.example.com/setup:1",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		}, []string{`privileged init container "setup"`, mayNotCreatePods}},
		{"capability", func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
				Add: []corev1.Capability{"NET_BIND_SERVICE", "NET_ADMIN"}}}
		}, []string{`capability NET_ADMIN in container "game-server"`, mayNotCreatePods}},
		{"host-path", func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/var/run"}}})
		}, []string{`hostPath volume "host"`, mayNotCreatePods}},
	}
	for _, c := range cases {
		_, err := asA.Create(e.ctx, podSession("a-"+c.name, c.edit), metav1.CreateOptions{})
		refusedFor(t, "tenant A creating a session with "+c.name, err, c.want...)
		if _, err := asB.Create(e.ctx, podSession("b-"+c.name, c.edit), metav1.CreateOptions{}); err != nil {
			t.Errorf("tenant B, who may create pods, creating a session with %s: %v", c.name, err)
		}
	}
	if _, err := asA.Create(e.ctx, podSession("a-plain", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("tenant A creating a plain session: %v", err)
	}
	// An update that adds a privilege is judged as a create.
	_, err := asA.Patch(e.ctx, "a-plain", types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"hostPID":true}}}}`), metav1.PatchOptions{})
	refusedFor(t, "tenant A patching its session with hostPID", err, "asks for hostPID", mayNotCreatePods)

	// Named Secrets: A may get nine of them. The realistic template reads
	// eight, in several containers: eight checks by name, the most the
	// policy makes, within the cost limits.
	granted := []string{testutil.GameServerSecret}
	for i := 1; i <= 8; i++ {
		granted = append(granted, fmt.Sprintf("granted-%d", i))
	}
	e.bind(ns, "named-secrets-a", tenantA, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"},
		Verbs: []string{"get"}, ResourceNames: granted})
	e.waitAuthorized(tenantA, nil, ns, access{"get", "secrets", testutil.GameServerSecret, true},
		access{"get", "secrets", "granted-8", true}, access{"get", "secrets", "db-password", false}, access{"get", "secrets", "", false})
	if _, err := asA.Create(e.ctx, podSession("a-granted", func(p *corev1.PodSpec) {
		p.Volumes = append(p.Volumes, secretVolume("creds", testutil.GameServerSecret))
	}), metav1.CreateOptions{}); err != nil {
		t.Errorf("tenant A mounting a Secret it may get: %v", err)
	}
	_, err = asA.Create(e.ctx, podSession("a-granted-and-not", func(p *corev1.PodSpec) {
		p.Volumes = append(p.Volumes, secretVolume("creds", testutil.GameServerSecret), secretVolume("db", "db-password"))
	}), metav1.CreateOptions{})
	refusedFor(t, "tenant A mounting a Secret it may get and one it may not", err, `mounts Secret "db-password"`, mayNotGet("db-password"))

	realistic := realisticTemplate(granted[:8])
	created := time.Now()
	if _, err := asA.Create(e.ctx, &gamesv1.GameSession{ObjectMeta: metav1.ObjectMeta{Name: "a-realistic"},
		Spec: gamesv1.GameSessionSpec{ProfileRef: "arena", Replicas: ptr.To[int32](1), Template: realistic}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("tenant A creating a realistic session that reads eight Secrets it may get: %v", err)
	}
	realisticTook := time.Since(created)
	// The schema's limits of containers and volumes, with many env vars:
	// still within the cost budget.
	if _, err := asA.Create(e.ctx, hugeSession(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("tenant A creating a session of 32 containers, 32 init containers and 128 volumes: %v", err)
	}
	nine := realisticTemplate(granted)
	_, err = asA.Create(e.ctx, &gamesv1.GameSession{ObjectMeta: metav1.ObjectMeta{Name: "a-nine"},
		Spec: gamesv1.GameSessionSpec{ProfileRef: "arena", Replicas: ptr.To[int32](1), Template: nine}}, metav1.CreateOptions{})
	refusedFor(t, "tenant A reading nine Secrets, each by name", err, "uses 9 Secrets", "may name at most 8 Secrets")
	if _, err := asB.Create(e.ctx, &gamesv1.GameSession{ObjectMeta: metav1.ObjectMeta{Name: "b-nine"},
		Spec: gamesv1.GameSessionSpec{ProfileRef: "arena", Replicas: ptr.To[int32](1), Template: nine}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("tenant B reading nine Secrets: %v", err)
	}

	// The admin's sessions: one mounts and reads Secrets, one runs as
	// another ServiceAccount.
	admin := e.game.GamesV1().GameSessions(ns)
	for _, s := range []*gamesv1.GameSession{
		podSession("admin-mounts", func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, secretVolume("db", "db-password"))
			p.Containers[0].Env = append(p.Containers[0].Env, secretEnv("TOKEN", "env-token"))
		}),
		podSession("admin-runs-as", func(p *corev1.PodSpec) { p.ServiceAccountName = "builder" }),
	} {
		if _, err := admin.Create(e.ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the admin creating %s: %v", s.Name, err)
		}
	}
	// What leaves the pod template alone passes.
	for what, patch := range map[string]string{
		"a label":     `{"metadata":{"labels":{"tier":"gold"}}}`,
		"annotations": `{"metadata":{"annotations":{"example.com/owner":"tenant-a"}}}`,
		"a finalizer": `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"replicas":    `{"spec":{"replicas":2}}`,
	} {
		if _, err := asA.Patch(e.ctx, "admin-mounts", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Errorf("tenant A changing %s of the admin's session: %v", what, err)
		}
	}
	if _, err := asA.Patch(e.ctx, "admin-mounts", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("tenant A removing its finalizer: %v", err)
	}
	_, err = asA.Patch(e.ctx, "admin-mounts", types.MergePatchType, []byte(`{"spec":{"image":"registry.example.com/arena-server:6.6.6"}}`), metav1.PatchOptions{})
	refusedFor(t, "tenant A changing the image of the admin's session", err, `mounts Secret "db-password"`, mayNotGet("db-password"))
	_, err = asA.Patch(e.ctx, "admin-runs-as", types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"labels":{"tier":"gold"}}}}}`), metav1.PatchOptions{})
	refusedFor(t, "tenant A changing the pod labels of the admin's session", err, `runs as ServiceAccount "builder"`, mayNotCreatePods)

	// The matchmaker of artifacts/examples, as its ServiceAccount.
	e.applyMatchmakerExample(ns)
	matchmaker := "system:serviceaccount:" + ns + ":matchmaker"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	e.waitAuthorized(matchmaker, groups, ns, access{"patch", "gamesessions", "", true})
	asMatchmaker := sessionsAs(ns, matchmaker, groups...)
	for _, value := range []string{`"true"`, "null"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, gamesv1.BusyLabel, value)
		if _, err := asMatchmaker.Patch(e.ctx, "admin-mounts", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Errorf("the matchmaker setting %s to %s on the admin's session: %v", gamesv1.BusyLabel, value, err)
		}
	}

	// The controller reconciles them all, as the artifacts' ClusterRole.
	ctl := e.startController(e.controllerIdentity())
	controllerStart := time.Now()
	list, err := admin.List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("every session's Deployment and status", func() (bool, error) {
		for _, s := range list.Items {
			if _, err := e.kube.AppsV1().Deployments(ns).Get(e.ctx, s.Name, metav1.GetOptions{}); err != nil {
				return false, err
			}
			got, err := admin.Get(e.ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.Status.ObservedGeneration != got.Generation || len(got.Status.Conditions) == 0 {
				return false, fmt.Errorf("%s: status of generation %d, want %d", s.Name, got.Status.ObservedGeneration, got.Generation)
			}
		}
		return true, nil
	})
	converged := time.Since(controllerStart)
	if refused := ctl.refused(); len(refused) > 0 {
		t.Errorf("the API server refused the controller: %v", refused)
	}
	invalid := regexp.MustCompile(` (403|422)$`)
	statusWrites := 0
	for what, n := range ctl.answers() {
		if invalid.MatchString(what) {
			t.Errorf("the controller's %s: %d times", what, n)
		}
		if strings.HasPrefix(what, "PUT /apis/games.example.com/v1/namespaces/"+ns+"/gamesessions/") && strings.HasSuffix(what, "/status 200") {
			statusWrites += n
		}
	}
	if statusWrites < len(list.Items) {
		t.Errorf("%d status writes of %d sessions", statusWrites, len(list.Items))
	}
	t.Logf("policy type-checked after %s, enforced after %s; a realistic session of eight Secrets admitted in %s; "+
		"the controller reconciled %d sessions in %s with %d status writes",
		typeChecked, enforced, realisticTook, len(list.Items), converged, statusWrites)
}

// realisticTemplate is testutil.GameServerTemplate with two more sidecars
// and an init container, reading the Secrets named: the first by the game
// server's env (as the template does), the others by a volume each, env and
// envFrom, over the containers.
func realisticTemplate(secrets []string) *corev1.PodTemplateSpec {
	t := testutil.GameServerTemplate("a-realistic")
	spec := &t.Spec
	gs := &spec.Containers[0]
	gs.Env[0].ValueFrom.SecretKeyRef.Name = secrets[0]
	spec.Volumes[0].Secret.SecretName = secrets[0]
	sidecar := func(name string) corev1.Container {
		c := spec.Containers[1]
		c.Name = name
		c.Ports = nil
		c.VolumeMounts = nil
		for i := range 10 {
			c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%02d", i), Value: "on"})
		}
		return c
	}
	spec.Containers = append(spec.Containers, sidecar("chat"), sidecar("recorder"))
	spec.InitContainers = []corev1.Container{sidecar("fetch-maps")}
	for i, secret := range secrets[1:] {
		switch i % 3 {
		case 0:
			name := fmt.Sprintf("secret-%d", i)
			spec.Volumes = append(spec.Volumes, secretVolume(name, secret))
			spec.Containers[2].VolumeMounts = append(spec.Containers[2].VolumeMounts,
				corev1.VolumeMount{Name: name, MountPath: "/var/run/" + name, ReadOnly: true})
		case 1:
			spec.Containers[3].Env = append(spec.Containers[3].Env, secretEnv(fmt.Sprintf("SECRET_%d", i), secret))
		case 2:
			spec.InitContainers[0].EnvFrom = append(spec.InitContainers[0].EnvFrom, corev1.EnvFromSource{
				SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}})
		}
	}
	return t
}

// hugeSession is a session at the CRD's limits of containers (32), init
// containers (32) and volumes (128), each container with 300 env vars, two
// ports and probes: what the policy walks, far beyond a realistic template.
func hugeSession() *gamesv1.GameSession {
	return podSession("huge", func(p *corev1.PodSpec) {
		container := func(name string) corev1.Container {
			c := corev1.Container{Name: name, Image: "registry.example.com/sidecar:1",
				Ports:          []corev1.ContainerPort{{Name: "a", ContainerPort: 8080}, {Name: "b", ContainerPort: 8081}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}},
				LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}},
			}
			for i := range 300 {
				c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%03d", i), Value: "on"})
			}
			return c
		}
		for i := 1; i < 32; i++ {
			p.Containers = append(p.Containers, container(fmt.Sprintf("sidecar-%d", i)))
		}
		for i := range 32 {
			p.InitContainers = append(p.InitContainers, container(fmt.Sprintf("init-%d", i)))
		}
		for i := range 128 {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: fmt.Sprintf("scratch-%d", i), VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
	})
}

// applyMatchmakerExample applies artifacts/examples/matchmaker-rbac.yaml to
// namespace, and removes its cluster-scoped policy when the test ends.
func (e *env) applyMatchmakerExample(namespace string) {
	e.t.Helper()
	objs, err := manifests.DecodeFiles("../../artifacts/examples/matchmaker-rbac.yaml")
	if err != nil {
		e.t.Fatal(err)
	}
	applier, err := manifests.NewApplier(adminConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	if err := applier.Apply(e.ctx, namespace, objs...); err != nil {
		e.t.Fatalf("applying matchmaker-rbac.yaml: %v", err)
	}
	admission := e.kube.AdmissionregistrationV1()
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = admission.ValidatingAdmissionPolicyBindings().Delete(ctx, matchmakerPolicy, metav1.DeleteOptions{})
		_ = admission.ValidatingAdmissionPolicies().Delete(ctx, matchmakerPolicy, metav1.DeleteOptions{})
	})
}

// TestAdmissionPolicyFollowsPodSecurityBaseline holds the policy's list of
// privileges to Pod Security admission itself: for each template, a pod of
// it in a namespace that enforces Baseline (a server-side dry run, as the
// admin) and a session of it written by a tenant that may not create pods (a
// dry run too) are refused alike, and the policy's message names the field.
// The templates touch every control of Baseline, each on both sides of its
// line where it has two.
func TestAdmissionPolicyFollowsPodSecurityBaseline(t *testing.T) {
	e := newEnv(t)
	ns := e.namespace()
	e.installAdmissionPolicies()
	namespace, err := e.kube.CoreV1().Namespaces().Get(e.ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	namespace.Labels["pod-security.kubernetes.io/enforce"] = "baseline"
	namespace.Labels["pod-security.kubernetes.io/enforce-version"] = "latest"
	if _, err := e.kube.CoreV1().Namespaces().Update(e.ctx, namespace, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	const tenant = "tenant-a"
	e.bind(ns, "writer", tenant, rbacv1.PolicyRule{APIGroups: []string{gamesv1.SchemeGroupVersion.Group},
		Resources: []string{"gamesessions"}, Verbs: []string{"create"}})
	e.waitAuthorized(tenant, nil, ns, access{"create", "gamesessions", "", true}, access{"create", "pods", "", false})
	asTenant := sessionsAs(ns, tenant)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	e.eventually("the policy enforced", func() (bool, error) {
		_, err := asTenant.Create(e.ctx, podSession("probe", func(p *corev1.PodSpec) { p.HostIPC = true }), dryRun)
		return apierrors.IsForbidden(err), fmt.Errorf("a dry run answered %v", err)
	})

	sc := func(p *corev1.PodSpec) *corev1.SecurityContext {
		if p.Containers[0].SecurityContext == nil {
			p.Containers[0].SecurityContext = &corev1.SecurityContext{}
		}
		return p.Containers[0].SecurityContext
	}
	podSC := func(p *corev1.PodSpec) *corev1.PodSecurityContext {
		if p.SecurityContext == nil {
			p.SecurityContext = &corev1.PodSecurityContext{}
		}
		return p.SecurityContext
	}
	apparmor := func(t corev1.AppArmorProfileType) *corev1.AppArmorProfile {
		p := &corev1.AppArmorProfile{Type: t}
		if t == corev1.AppArmorProfileTypeLocalhost {
			p.LocalhostProfile = ptr.To("arena")
		}
		return p
	}
	httpGet := func(host string) *corev1.HTTPGetAction {
		return &corev1.HTTPGetAction{Host: host, Path: "/live", Port: intstr.FromInt32(8080)}
	}
	cases := []struct {
		name string
		edit func(*corev1.PodTemplateSpec)
		// The fragment of the policy's message; "" for a template Baseline
		// allows.
		refused string
	}{
		{"hostIPC", func(t *corev1.PodTemplateSpec) { t.Spec.HostIPC = true }, "hostIPC"},
		{"hostPID", func(t *corev1.PodTemplateSpec) { t.Spec.HostPID = true }, "hostPID"},
		{"hostNetwork", func(t *corev1.PodTemplateSpec) { t.Spec.HostNetwork = true }, "hostNetwork"},
		{"hostPort", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 7777, HostPort: 7777, Protocol: corev1.ProtocolUDP}}
		}, `hostPort 7777 in container "game-server"`},
		{"containerPort", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 7777, Protocol: corev1.ProtocolUDP}}
		}, ""},
		{"privileged", func(t *corev1.PodTemplateSpec) { sc(&t.Spec).Privileged = ptr.To(true) }, `privileged container "game-server"`},
		{"unprivileged", func(t *corev1.PodTemplateSpec) { sc(&t.Spec).Privileged = ptr.To(false) }, ""},
		{"capability SYS_ADMIN", func(t *corev1.PodTemplateSpec) {
			sc(&t.Spec).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
		}, `capability SYS_ADMIN in container "game-server"`},
		{"capabilities of the default set", func(t *corev1.PodTemplateSpec) {
			sc(&t.Spec).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE", "CHOWN", "SYS_CHROOT"}, Drop: []corev1.Capability{"ALL"}}
		}, ""},
		{"hostPath", func(t *corev1.PodTemplateSpec) {
			t.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}}
		}, `hostPath volume "host"`},
		{"emptyDir", func(t *corev1.PodTemplateSpec) {
			t.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, ""},
		{"unsafe sysctl", func(t *corev1.PodTemplateSpec) {
			podSC(&t.Spec).Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}
		}, "sysctl kernel.msgmax"},
		{"safe sysctls", func(t *corev1.PodTemplateSpec) {
			podSC(&t.Spec).Sysctls = []corev1.Sysctl{{Name: "net.ipv4.tcp_keepalive_time", Value: "60"}, {Name: "net.ipv4.ip_local_port_range", Value: "1024 65535"}}
		}, ""},
		{"pod seccomp Unconfined", func(t *corev1.PodTemplateSpec) {
			podSC(&t.Spec).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, "seccomp profile Unconfined"},
		{"container seccomp Unconfined", func(t *corev1.PodTemplateSpec) {
			sc(&t.Spec).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, `seccomp profile Unconfined in container "game-server"`},
		{"seccomp RuntimeDefault", func(t *corev1.PodTemplateSpec) {
			podSC(&t.Spec).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
		}, ""},
		{"pod AppArmor Unconfined", func(t *corev1.PodTemplateSpec) {
			podSC(&t.Spec).AppArmorProfile = apparmor(corev1.AppArmorProfileTypeUnconfined)
		}, "AppArmor profile Unconfined"},
		{"container AppArmor Unconfined", func(t *corev1.PodTemplateSpec) {
			sc(&t.Spec).AppArmorProfile = apparmor(corev1.AppArmorProfileTypeUnconfined)
		}, `AppArmor profile Unconfined in container "game-server"`},
		{"AppArmor Localhost", func(t *corev1.PodTemplateSpec) {
			sc(&t.Spec).AppArmorProfile = apparmor(corev1.AppArmorProfileTypeLocalhost)
		}, ""},
		{"AppArmor annotation unconfined", func(t *corev1.PodTemplateSpec) {
			t.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/game-server": "unconfined"}
		}, "annotation container.apparmor.security.beta.kubernetes.io/game-server=unconfined"},
		{"AppArmor annotation runtime/default", func(t *corev1.PodTemplateSpec) {
			t.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/game-server": "runtime/default"}
		}, ""},
		{"pod SELinux type spc_t", func(t *corev1.PodTemplateSpec) {
			podSC(&t.Spec).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}, "SELinux options"},
		{"container SELinux user", func(t *corev1.PodTemplateSpec) {
			sc(&t.Spec).SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
		}, `SELinux options in container "game-server"`},
		{"SELinux type container_t and a level", func(t *corev1.PodTemplateSpec) {
			sc(&t.Spec).SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c123,c456"}
		}, ""},
		{"Windows HostProcess", func(t *corev1.PodTemplateSpec) {
			t.Spec.HostNetwork = true
			podSC(&t.Spec).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
		}, "Windows HostProcess"},
		// Baseline allows any procMount in a user namespace, and the API
		// server refuses Unmasked outside one: nothing to check.
		{"procMount Unmasked in a user namespace", func(t *corev1.PodTemplateSpec) {
			t.Spec.HostUsers = ptr.To(false)
			sc(&t.Spec).ProcMount = ptr.To(corev1.UnmaskedProcMount)
		}, ""},
		{"probe host", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: httpGet("169.254.169.254")}}
		}, `probe or hook host "169.254.169.254" in container "game-server"`},
		{"probe without host", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: httpGet("")}}
		}, ""},
		{"preStop host", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: httpGet("10.0.0.1")}}
		}, `probe or hook host "10.0.0.1" in container "game-server"`},
		{"init container capability", func(t *corev1.PodTemplateSpec) {
			t.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "registry.example.com/setup:1",
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}}}
		}, `capability NET_ADMIN in init container "setup"`},
		{"Restricted's concerns only", func(t *corev1.PodTemplateSpec) {
			sc(&t.Spec).AllowPrivilegeEscalation = ptr.To(true)
			sc(&t.Spec).RunAsUser = ptr.To[int64](0)
		}, ""},
	}
	for _, c := range cases {
		session := podSession("s", nil)
		c.edit(session.Spec.Template)
		pod := &corev1.Pod{ObjectMeta: *session.Spec.Template.ObjectMeta.DeepCopy(), Spec: *session.Spec.Template.Spec.DeepCopy()}
		pod.Name = "p"
		pod.Spec.Containers[0].Image = session.Spec.Image
		_, podErr := e.kube.CoreV1().Pods(ns).Create(e.ctx, pod, dryRun)
		if podErr != nil && !(apierrors.IsForbidden(podErr) && strings.Contains(podErr.Error(), "violates PodSecurity")) {
			t.Errorf("%s: the pod answered %v, want Pod Security's verdict: make the case a valid pod", c.name, podErr)
			continue
		}
		baselineRefuses := podErr != nil
		if baselineRefuses != (c.refused != "") {
			t.Errorf("%s: Pod Security Baseline refuses the pod: %v (%v), the case says %v", c.name, baselineRefuses, podErr, c.refused != "")
		}
		_, err := asTenant.Create(e.ctx, session, dryRun)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: a session Baseline allows refused: %v", c.name, err)
		case c.refused != "":
			refusedFor(t, c.name, err, "spec.template asks for ", c.refused, tenant+` may not create pods in namespace "`+ns+`"`)
		}
	}
}
