package deploy

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

// runAsChartServiceAccount runs the controller binary on this machine as the
// chart's Deployment runs it in a pod: the container's arguments and
// environment, and the token of the chart's ServiceAccount, so with exactly
// the chart's RBAC. It must take the Lease, then reconcile a GameSession in
// sessionNamespace, roll it on a profile edit and record the rollout in the
// profile's ProfileRollout, and log no "forbidden".
//
// kwok pods run no containers, so a pod of the chart reporting Ready would
// prove nothing about the image or its permissions. This proves the
// arguments and the permissions, not the image.
func runAsChartServiceAccount(t *testing.T, namespace, sessionNamespace string, d *appsv1.Deployment, rendered []*unstructured.Unstructured) {
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(adminConfig())
	games := clientset.NewForConfigOrDie(adminConfig())
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want the controller alone", len(pod.Containers))
	}
	env := resolveEnv(t, pod.Containers[0], namespace)
	args := localArgs(t, pod.Containers[0].Args, env, namespace)

	waitForAuthorizer(t, kube, namespace, pod.ServiceAccountName, rendered, sessionNamespace)
	saConfig, err := cp.ServiceAccountConfig(ctx, namespace, pod.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, "--kubeconfig="+testutil.WriteKubeconfig(t, saConfig))
	var environ []string
	for name, value := range env {
		environ = append(environ, name+"="+value)
	}
	t.Logf("running the controller with %q, environment %q", args, environ)
	p := testutil.StartController(t, controllerBinary(t), "controller-"+namespace, environ, args...)

	// The Lease, where the binary in a pod would put it.
	opts := parseArgs(t, args)
	start := time.Now()
	eventually(t, "the controller to take the Lease", func(ctx context.Context) (bool, error) {
		lease, err := kube.CoordinationV1().Leases(namespace).Get(ctx, opts.LeaderElectionID, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		holder, identity := ptr.Deref(lease.Spec.HolderIdentity, ""), p.Identity()
		return identity != "" && holder == identity, fmt.Errorf("holder %q, the controller is %q", holder, identity)
	})
	t.Logf("the controller took the Lease after %s", time.Since(start).Round(time.Millisecond))
	eventually(t, "the controller to be ready", func(ctx context.Context) (bool, error) {
		code, body := testutil.HTTPGet(ctx, p.HealthAddr, "/readyz")
		return code == http.StatusOK, fmt.Errorf("/readyz: %d %s", code, body)
	})

	// A profile the controller's --profile-selector matches, and a session
	// on it.
	selector, err := labels.ConvertSelectorToLabelsMap(opts.ProfileSelector)
	if err != nil {
		t.Fatalf("--profile-selector %q: %v", opts.ProfileSelector, err)
	}
	profile := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "arena-standard", Labels: selector},
		Data:       map[string]string{"game.cfg": "maxPlayers=16"},
	}
	profile, err = kube.CoreV1().ConfigMaps(sessionNamespace).Create(ctx, profile, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	session := testutil.GameSession("arena-1", profile.Name)
	if _, err := games.GamesV1().GameSessions(sessionNamespace).Create(ctx, session, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	first := waitForProfileHash(t, kube, sessionNamespace, session.Name, "")
	t.Logf("the session's Deployment appeared after %s", time.Since(start).Round(time.Millisecond))

	profile.Data["game.cfg"] = "maxPlayers=32"
	if _, err := kube.CoreV1().ConfigMaps(sessionNamespace).Update(ctx, profile, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	second := waitForProfileHash(t, kube, sessionNamespace, session.Name, first)
	t.Logf("the profile edit rolled the Deployment after %s", time.Since(start).Round(time.Millisecond))
	// The profile's rollout state, which takes a create of its ProfileRollout
	// and writes of its status. Nothing runs the Deployment here (no
	// kube-controller-manager), so the rollout is not complete: the test
	// asks for the edit's target only.
	eventually(t, "the ProfileRollout to record the edit", func(ctx context.Context) (bool, error) {
		r, err := games.GamesV1().ProfileRollouts(sessionNamespace).Get(ctx, profile.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.TargetHash == second && r.Status.Phase != "", fmt.Errorf("target %q, phase %q", r.Status.TargetHash, r.Status.Phase)
	})

	// Stopped first, so that the log holds everything, such as the Events
	// the controller posts asynchronously.
	p.Stop(30 * time.Second)
	if lines := p.LogLines(forbiddenRE); len(lines) > 0 {
		t.Errorf("the controller was refused requests with the chart's RBAC:\n%s", strings.Join(lines, "\n"))
	}
}

var forbiddenRE = regexp.MustCompile(`(?i)forbidden`)

// waitForProfileHash waits until the session's Deployment has a profile hash
// other than not, and returns it.
func waitForProfileHash(t *testing.T, kube kubernetes.Interface, namespace, name, not string) string {
	t.Helper()
	var hash string
	eventually(t, fmt.Sprintf("Deployment %s/%s with a profile hash other than %q", namespace, name, not), func(ctx context.Context) (bool, error) {
		d, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		hash = d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
		return hash != "" && hash != not, fmt.Errorf("profile hash %q", hash)
	})
	return hash
}

// resolveEnv gives the container's environment the values the kubelet would,
// for a pod in namespace. A source the chart does not use fails the test.
func resolveEnv(t *testing.T, c corev1.Container, namespace string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = namespace
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			limit, ok := c.Resources.Limits[corev1.ResourceMemory]
			if !ok {
				t.Fatalf("env %s refers to limits.memory, which the container does not set", e.Name)
			}
			env[e.Name] = fmt.Sprint(limit.Value())
		default:
			t.Fatalf("env %s: the test does not resolve %+v", e.Name, e.ValueFrom)
		}
	}
	return env
}

// localArgs turns the container's arguments into those of a process on this
// machine: $(VAR) expanded as the kubelet does, and without the bind
// addresses, which testutil.StartController sets to free loopback ports. In a
// pod the binary finds its namespace, and puts the Lease there, in the
// ServiceAccount's namespace file; here --leader-election-namespace says it,
// unless the chart does.
func localArgs(t *testing.T, containerArgs []string, env map[string]string, namespace string) []string {
	t.Helper()
	var args []string
	dropped := 0
	leaseNamespace := false
	for _, arg := range containerArgs {
		for name, value := range env {
			arg = strings.ReplaceAll(arg, "$("+name+")", value)
		}
		if strings.Contains(arg, "$(") {
			t.Fatalf("argument %q refers to a variable the container does not define", arg)
		}
		flagName, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		switch flagName {
		case "metrics-bind-address", "health-probe-bind-address":
			dropped++
			continue
		case "leader-election-namespace":
			leaseNamespace = true
		}
		args = append(args, arg)
	}
	if dropped != 2 {
		t.Fatalf("the container's arguments %q do not set both --metrics-bind-address and --health-probe-bind-address", containerArgs)
	}
	if !leaseNamespace {
		args = append(args, "--leader-election-namespace="+namespace)
	}
	return args
}

// waitForAuthorizer waits until the API server's authorizer grants the
// ServiceAccount every rule of the rendered Roles (in their namespaces) and
// ClusterRoles (in sessionNamespace). RBAC objects reach the authorizer
// through its informers a moment after they are created; a controller started
// before that would be refused requests no rule refuses.
func waitForAuthorizer(t *testing.T, kube kubernetes.Interface, namespace, serviceAccount string, rendered []*unstructured.Unstructured, sessionNamespace string) {
	t.Helper()
	var attributes []authorizationv1.ResourceAttributes
	for _, obj := range rendered {
		if kind := obj.GetKind(); kind != "Role" && kind != "ClusterRole" {
			continue
		}
		var role rbacv1.Role // a ClusterRole's rules have the same shape
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
			t.Fatal(err)
		}
		ns := role.Namespace
		if obj.GetKind() == "ClusterRole" {
			ns = sessionNamespace
		}
		for _, rule := range role.Rules {
			attributes = append(attributes, ruleAttributes(rule, ns)...)
		}
	}
	if len(attributes) == 0 {
		t.Fatal("the chart renders no RBAC rules")
	}
	eventually(t, "the authorizer to grant the chart's RBAC", func(ctx context.Context) (bool, error) {
		for _, a := range attributes {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				// What the token authenticator makes of the ServiceAccount.
				User:               "system:serviceaccount:" + namespace + ":" + serviceAccount,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
				ResourceAttributes: &a,
			}}
			review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !review.Status.Allowed {
				return false, fmt.Errorf("%+v not allowed: %s", a, review.Status.Reason)
			}
		}
		return true, nil
	})
}

// ruleAttributes lists every request a policy rule grants in namespace.
func ruleAttributes(rule rbacv1.PolicyRule, namespace string) []authorizationv1.ResourceAttributes {
	names := rule.ResourceNames
	if len(names) == 0 {
		names = []string{""}
	}
	var attributes []authorizationv1.ResourceAttributes
	for _, group := range rule.APIGroups {
		for _, res := range rule.Resources {
			resource, subresource, _ := strings.Cut(res, "/")
			for _, verb := range rule.Verbs {
				for _, name := range names {
					attributes = append(attributes, authorizationv1.ResourceAttributes{
						Namespace: namespace, Verb: verb, Group: group, Resource: resource, Subresource: subresource, Name: name,
					})
				}
			}
		}
	}
	return attributes
}

var controllerBuild struct {
	once sync.Once
	path string
	err  error
}

// controllerBinary builds cmd/gamesession-controller once per test binary, in
// the controller's own module (so with its dependency versions, not this
// module's), into the control plane's directory, which is removed with it.
func controllerBinary(t *testing.T) string {
	t.Helper()
	controllerBuild.once.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			controllerBuild.err = err
			return
		}
		controllerBuild.path = filepath.Join(cp.Dir(), "gamesession-controller")
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", controllerBuild.path, "./cmd/gamesession-controller")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			controllerBuild.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		t.Logf("built the controller in %s", time.Since(start).Round(time.Millisecond))
	})
	if controllerBuild.err != nil {
		t.Fatal(controllerBuild.err)
	}
	return controllerBuild.path
}
