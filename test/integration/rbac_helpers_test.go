package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
)

const rbacDir = "../../artifacts/rbac/"

// controllerRBAC is the RBAC of artifacts/rbac, decoded as the API types so
// tests can take single verbs out of it.
type controllerRBAC struct {
	clusterRole        *rbacv1.ClusterRole
	clusterRoleBinding *rbacv1.ClusterRoleBinding
	leaseRole          *rbacv1.Role
	leaseRoleBinding   *rbacv1.RoleBinding
}

// loadControllerRBAC decodes artifacts/rbac.
func loadControllerRBAC(t testing.TB) *controllerRBAC {
	t.Helper()
	objs, err := manifests.DecodeFiles(
		rbacDir+"clusterrole.yaml", rbacDir+"clusterrole-binding.yaml",
		rbacDir+"leader-election-role.yaml", rbacDir+"leader-election-role-binding.yaml")
	if err != nil {
		t.Fatalf("decoding the RBAC artifacts: %v", err)
	}
	r := &controllerRBAC{
		clusterRole:        &rbacv1.ClusterRole{},
		clusterRoleBinding: &rbacv1.ClusterRoleBinding{},
		leaseRole:          &rbacv1.Role{},
		leaseRoleBinding:   &rbacv1.RoleBinding{},
	}
	for i, into := range []any{r.clusterRole, r.clusterRoleBinding, r.leaseRole, r.leaseRoleBinding} {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(objs[i].Object, into, true); err != nil {
			t.Fatalf("decoding %s %s: %v", objs[i].GetKind(), objs[i].GetName(), err)
		}
	}
	return r
}

// bindTo rebinds the roles to the service account ns/serviceAccount. The
// artifacts bind gamesession-system's account; the namespaced objects move to
// ns, and the cluster-scoped ones get names of their own so that parallel
// tests never share (or delete) each other's.
func (r *controllerRBAC) bindTo(t testing.TB, ns, serviceAccount string) {
	t.Helper()
	unique := ns + "-" + r.clusterRole.Name
	r.clusterRole.Name = unique
	r.clusterRoleBinding.Name = unique
	r.clusterRoleBinding.RoleRef.Name = unique
	r.leaseRole.Namespace = ns
	r.leaseRoleBinding.Namespace = ns
	for _, subjects := range [][]rbacv1.Subject{r.clusterRoleBinding.Subjects, r.leaseRoleBinding.Subjects} {
		if len(subjects) != 1 || subjects[0].Kind != rbacv1.ServiceAccountKind {
			t.Fatalf("RBAC artifacts: want one ServiceAccount subject per binding, got %+v", subjects)
		}
		subjects[0].Namespace, subjects[0].Name = ns, serviceAccount
	}
}

// grantedVerb is one verb of one rule: the unit of permission the RBAC
// tests take away.
type grantedVerb struct {
	role     string // "ClusterRole" or "Role"
	group    string
	resource string // with subresource, e.g. "gamesessions/status"
	name     string // the rule's resourceName, if it names one
	verb     string
}

func (g grantedVerb) String() string { return g.role + " " + g.verb + " " + g.resource }

// grants lists every verb the roles grant, one per resource and verb.
func (r *controllerRBAC) grants() []grantedVerb {
	var all []grantedVerb
	add := func(role string, rules []rbacv1.PolicyRule) {
		for _, rule := range rules {
			name := ""
			if len(rule.ResourceNames) > 0 {
				name = rule.ResourceNames[0]
			}
			for _, group := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, verb := range rule.Verbs {
						all = append(all, grantedVerb{role, group, res, name, verb})
					}
				}
			}
		}
	}
	add("ClusterRole", r.clusterRole.Rules)
	add("Role", r.leaseRole.Rules)
	return all
}

// revoke takes one verb away, leaving every other grant as it was: a rule
// naming several resources or verbs is split rather than dropped.
func (r *controllerRBAC) revoke(g grantedVerb) {
	rules := &r.clusterRole.Rules
	if g.role == "Role" {
		rules = &r.leaseRole.Rules
	}
	*rules = testutil.RevokeVerb(*rules, g.group, g.resource, g.verb)
}

// applyRBAC creates the roles and bindings, and deletes the cluster-scoped ones
// when the test ends (the namespace takes the others with it).
func (e *env) applyRBAC(r *controllerRBAC) {
	e.t.Helper()
	e.applyClusterRBAC(r)
	e.applyNamespaceRBAC(r)
}

// applyClusterRBAC creates the ClusterRole and its binding: what the
// controller manages.
func (e *env) applyClusterRBAC(r *controllerRBAC) {
	e.t.Helper()
	rbac := e.kube.RbacV1()
	if _, err := rbac.ClusterRoles().Create(e.ctx, r.clusterRole, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create ClusterRole: %v", err)
	}
	e.t.Cleanup(func() { e.deleteClusterScoped("ClusterRole", r.clusterRole.Name, rbac.ClusterRoles().Delete) })
	if _, err := rbac.ClusterRoleBindings().Create(e.ctx, r.clusterRoleBinding, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create ClusterRoleBinding: %v", err)
	}
	e.t.Cleanup(func() {
		e.deleteClusterScoped("ClusterRoleBinding", r.clusterRoleBinding.Name, rbac.ClusterRoleBindings().Delete)
	})
}

// applyNamespaceRBAC creates the Role of the controller's own namespace and
// its binding: the leader election Lease and the Secret digest key.
func (e *env) applyNamespaceRBAC(r *controllerRBAC) {
	e.t.Helper()
	rbac := e.kube.RbacV1()
	if _, err := rbac.Roles(e.ns).Create(e.ctx, r.leaseRole, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create Role: %v", err)
	}
	if _, err := rbac.RoleBindings(e.ns).Create(e.ctx, r.leaseRoleBinding, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create RoleBinding: %v", err)
	}
}

func (e *env) deleteClusterScoped(kind, name string, del func(context.Context, string, metav1.DeleteOptions) error) {
	// t.Context is already cancelled when cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := del(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("delete %s %s: %v", kind, name, err)
	}
}

// serviceAccountConfig creates a ServiceAccount in the test's namespace and
// returns a config that authenticates as it, with what RBAC grants it and
// nothing more.
func (e *env) serviceAccountConfig(name string) *rest.Config {
	e.t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.kube.CoreV1().ServiceAccounts(e.ns).Create(e.ctx, sa, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create ServiceAccount: %v", err)
	}
	cfg, err := cp.ServiceAccountConfig(e.ctx, e.ns, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// waitForAuthorizer waits until the API server's authorizer allows the
// service account exactly what r grants and denies it each verb in denied.
// RBAC objects reach the authorizer through its informers, a moment after
// they are created; a controller started before that would see a 403 that
// no rule caused.
func (e *env) waitForAuthorizer(serviceAccount string, r *controllerRBAC, denied ...grantedVerb) {
	e.t.Helper()
	// What the API server's token authenticator makes of a service account.
	user := "system:serviceaccount:" + e.ns + ":" + serviceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + e.ns, "system:authenticated"}
	check := func(g grantedVerb, want bool) (bool, error) {
		resource, subresource, _ := strings.Cut(g.resource, "/")
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: e.ns, Verb: g.verb, Group: g.group,
				Resource: resource, Subresource: subresource, Name: g.name,
			},
		}}
		sar, err := e.kube.AuthorizationV1().SubjectAccessReviews().Create(e.ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return sar.Status.Allowed == want, fmt.Errorf("%s: allowed=%v, want %v", g, sar.Status.Allowed, want)
	}
	e.eventually("the authorizer to apply the test's RBAC", func() (bool, error) {
		for _, g := range r.grants() {
			if ok, err := check(g, true); !ok {
				return false, err
			}
		}
		for _, g := range denied {
			if ok, err := check(g, false); !ok {
				return false, err
			}
		}
		return true, nil
	})
}
