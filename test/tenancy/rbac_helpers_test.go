package tenancy

import (
	"context"
	"fmt"
	"slices"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
)

// revokedVerb is one verb taken out of the artifacts' ClusterRole.
type revokedVerb struct{ group, resource, verb string }

// controllerIdentity creates a ServiceAccount bound, cluster-wide, to
// artifacts/rbac/clusterrole.yaml less the revoked verbs, waits until the
// authorizer applies it, and returns a config that authenticates as it.
func (e *env) controllerIdentity(revoked ...revokedVerb) *rest.Config {
	e.t.Helper()
	objs, err := manifests.DecodeFiles("../../artifacts/rbac/clusterrole.yaml")
	if err != nil {
		e.t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, role); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range revoked {
		role.Rules = testutil.RevokeVerb(role.Rules, r.group, r.resource, r.verb)
	}
	ns := e.namespace()
	const account = "gamesession-controller"
	if _, err := e.kube.CoreV1().ServiceAccounts(ns).Create(e.ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	role.Name = ns + "-controller"
	role.ResourceVersion = ""
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: account}},
	}
	rbac := e.kube.RbacV1()
	if _, err := rbac.ClusterRoles().Create(e.ctx, role, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	// The Role of the controller's own namespace (its Secret digest key,
	// and the Lease), bound there: the account's namespace plays it.
	objs, err = manifests.DecodeFiles("../../artifacts/rbac/leader-election-role.yaml")
	if err != nil {
		e.t.Fatal(err)
	}
	own := &rbacv1.Role{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, own); err != nil {
		e.t.Fatal(err)
	}
	own.Namespace = ns
	if _, err := rbac.Roles(ns).Create(e.ctx, own, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(e.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: own.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: own.Name},
		Subjects:   binding.Subjects,
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.ownNamespace = ns
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rbac.ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	})
	// What the token authenticator makes of the account.
	user := "system:serviceaccount:" + ns + ":" + account
	allowed := func(r revokedVerb) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: r.verb, Group: r.group, Resource: r.resource},
		}}
		sar, err := e.kube.AuthorizationV1().SubjectAccessReviews().Create(e.ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}
	e.eventually("the authorizer to apply the controller's ClusterRole", func() (bool, error) {
		for _, r := range []revokedVerb{{"gateway.networking.k8s.io", "referencegrants", "list"},
			{"gateway.networking.k8s.io", "referencegrants", "watch"}, {"", "configmaps", "create"},
			{"", "secrets", "watch"}} {
			ok, err := allowed(r)
			if err != nil {
				return false, err
			}
			if want := !slices.Contains(revoked, r); ok != want {
				return false, fmt.Errorf("%s %s allowed=%v, want %v", r.verb, r.resource, ok, want)
			}
		}
		return true, nil
	})
	cfg, err := cp.ServiceAccountConfig(e.ctx, ns, account)
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg
}
