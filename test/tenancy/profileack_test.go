package tenancy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/pkg/profileack"
)

// gameServerAckPolicy is the policy of artifacts/examples/game-server-ack-rbac.yaml
// that keeps a game server's ServiceAccount to acknowledgments.
const gameServerAckPolicy = "gamesession-game-server-ack-only"

// applyGameServerAckExample applies artifacts/examples/game-server-ack-rbac.yaml
// to namespace, and removes its cluster-scoped policy when the test ends.
func (e *env) applyGameServerAckExample(namespace string) {
	e.t.Helper()
	objs, err := manifests.DecodeFiles("../../artifacts/examples/game-server-ack-rbac.yaml")
	if err != nil {
		e.t.Fatal(err)
	}
	applier, err := manifests.NewApplier(adminConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	admission := e.kube.AdmissionregistrationV1()
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = admission.ValidatingAdmissionPolicyBindings().Delete(ctx, gameServerAckPolicy, metav1.DeleteOptions{})
		_ = admission.ValidatingAdmissionPolicies().Delete(ctx, gameServerAckPolicy, metav1.DeleteOptions{})
	})
	if err := applier.Apply(e.ctx, namespace, objs...); err != nil {
		e.t.Fatalf("applying game-server-ack-rbac.yaml: %v", err)
	}
	e.eventually("policy "+gameServerAckPolicy+" type-checked", func() (bool, error) {
		got, err := admission.ValidatingAdmissionPolicies().Get(e.ctx, gameServerAckPolicy, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Status.ObservedGeneration != got.Generation || got.Status.TypeChecking == nil {
			return false, fmt.Errorf("status %+v", got.Status)
		}
		for _, w := range got.Status.TypeChecking.ExpressionWarnings {
			e.t.Errorf("type checking of %s %s: %s", gameServerAckPolicy, w.FieldRef, w.Warning)
		}
		return true, nil
	})
}

// gameServerPod creates a pod that runs as the example's ServiceAccount. It
// need not run: a pod-bound token only needs the pod to exist.
func (e *env) gameServerPod(namespace, name string) *corev1.Pod {
	e.t.Helper()
	pod, err := e.kube.CoreV1().Pods(namespace).Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "arena"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "game-server",
			Containers:         []corev1.Container{{Name: "game-server", Image: "registry.example.com/arena-server:1.0.0"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create pod %s/%s: %v", namespace, name, err)
	}
	return pod
}

// clientOfToken returns a client that authenticates with a token of the
// TokenRequest API for ServiceAccount namespace/account, bound to pod (nil:
// to no object), as the token the kubelet projects into a pod is.
func (e *env) clientOfToken(namespace, account string, pod *corev1.Pod) kubernetes.Interface {
	e.t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := e.kube.CoreV1().ServiceAccounts(namespace).CreateToken(e.ctx, account, req, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("token of ServiceAccount %s/%s: %v", namespace, account, err)
	}
	cfg := cp.RESTConfig()
	cfg.BearerToken = tr.Status.Token
	cfg.QPS, cfg.Burst = -1, 0
	return kubernetes.NewForConfigOrDie(cfg)
}

// ackPatch is the body profileack.Acknowledge sends, for a dry run of it.
func ackPatch(value string) []byte {
	return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, profileack.Annotation, value)
}

// refusedByPolicy checks that err is policy's refusal, a 403, and that its
// message holds every part.
func refusedByPolicy(t *testing.T, what string, err error, policy string, parts ...string) {
	t.Helper()
	refusedWith(t, what, err, policy, http.StatusForbidden, parts...)
}

// refusedWith checks that err is policy's refusal with the HTTP status
// code, and that its message holds every part.
func refusedWith(t *testing.T, what string, err error, policy string, code int32, parts ...string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != code ||
		!strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") {
		t.Errorf("%s: %v, want a %d of %s", what, err, code, policy)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: refused with %q, which does not say %q", what, err.Error(), p)
		}
	}
	t.Logf("%s: %s", what, err)
}

// TestProfileAckOnlyOnTheTokensOwnPod: with artifacts/admission and the game
// server RBAC of artifacts/examples installed, a game server whose token is
// bound to its pod A (as the kubelet projects it) acknowledges a revision on
// A with profileack.Acknowledge, and only there:
//   - on A, an acknowledgment and a failure's are written and read back as
//     profileack.Parse reads them; the same one again, a no-op, passes;
//   - on B, the other pod of the same ServiceAccount, it is refused with a
//     403 whose message names the token's pod;
//   - a patch that sets the annotation on A along with a label, another
//     annotation or the spec is refused, naming what else changed, as is a
//     value over the policy's bound;
//   - the example's policy refuses A's token a label of B, and a token of
//     the ServiceAccount bound to no pod the annotation of B;
//   - the admin, whose token is bound to no pod, still sets the annotation
//     on B.
func TestProfileAckOnlyOnTheTokensOwnPod(t *testing.T) {
	e := newEnv(t)
	ns := e.namespace()
	begin := time.Now()
	e.installAdmissionPolicies()
	e.applyGameServerAckExample(ns)
	typeChecked := time.Since(begin)

	podA, podB := e.gameServerPod(ns, "game-a"), e.gameServerPod(ns, "game-b")
	gameServer := "system:serviceaccount:" + ns + ":game-server"
	e.waitAuthorized(gameServer, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}, ns,
		access{"patch", "pods", "", true}, access{"get", "pods", "", true}, access{"delete", "pods", "", false})
	asA := e.clientOfToken(ns, "game-server", podA)
	unbound := e.clientOfToken(ns, "game-server", nil)

	// The token is what the policy reads: its user carries pod A.
	review, err := asA.AuthenticationV1().SelfSubjectReviews().Create(e.ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != podA.Name ||
		review.Status.UserInfo.Username != gameServer {
		t.Fatalf("the token of pod A authenticates as %+v, want %s with pod-name %s", review.Status.UserInfo, gameServer, podA.Name)
	}

	// A policy is enforced once the API server's informer has it: wait for
	// the first refusal of each, by dry runs.
	dryRun := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	pods := asA.CoreV1().Pods(ns)
	e.eventually("both policies enforced", func() (bool, error) {
		_, ackErr := pods.Patch(e.ctx, podB.Name, types.MergePatchType, ackPatch("probe"), dryRun)
		_, labelErr := pods.Patch(e.ctx, podB.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`), dryRun)
		return apierrors.IsForbidden(ackErr) && apierrors.IsForbidden(labelErr),
			fmt.Errorf("dry runs answered %v and %v", ackErr, labelErr)
	})
	enforced := time.Since(begin)
	work := time.Now()

	annotationOf := func(pod string) (string, bool) {
		t.Helper()
		got, err := e.kube.CoreV1().Pods(ns).Get(e.ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels["tier"] != "" || got.Labels["probe"] != "" || got.Annotations["example.com/owner"] != "" || got.Spec.ActiveDeadlineSeconds != nil {
			t.Errorf("pod %s was changed by a refused write: labels %v, annotations %v, activeDeadlineSeconds %v",
				pod, got.Labels, got.Annotations, got.Spec.ActiveDeadlineSeconds)
		}
		value, ok := got.Annotations[profileack.Annotation]
		return value, ok
	}

	// A on its own pod: an acknowledgment, then a failure's.
	const revision = "arena-standard-5c7d9f8b"
	if err := profileack.Acknowledge(e.ctx, asA, ns, podA.Name, revision, nil); err != nil {
		t.Fatalf("pod A acknowledging on itself: %v", err)
	}
	if value, _ := annotationOf(podA.Name); value != revision {
		t.Errorf("pod A's %s = %q, want %q", profileack.Annotation, value, revision)
	}
	const next = "arena-standard-6e8f0a9c"
	if err := profileack.Acknowledge(e.ctx, asA, ns, podA.Name, next, errors.New(`map pool: unknown map "dust3"`)); err != nil {
		t.Fatalf("pod A acknowledging a failure on itself: %v", err)
	}
	value, _ := annotationOf(podA.Name)
	want := profileack.Ack{Revision: next, Failed: true, Message: `map pool: unknown map "dust3"`}
	if ack, ok := profileack.Parse(value); !ok || ack != want {
		t.Errorf("pod A's %s = %q, parsed %+v %v; want %+v", profileack.Annotation, value, ack, ok, want)
	}
	// After a restart, a game server acknowledges the same again: nothing
	// changes, and that passes both policies.
	if err := profileack.Acknowledge(e.ctx, asA, ns, podA.Name, next, errors.New(`map pool: unknown map "dust3"`)); err != nil {
		t.Errorf("pod A repeating its acknowledgment: %v", err)
	}

	// A on pod B.
	err = profileack.Acknowledge(e.ctx, asA, ns, podB.Name, revision, nil)
	refusedByPolicy(t, "pod A acknowledging on pod B", err, profileAckPolicy,
		"the token of pod "+ns+"/"+podA.Name, "not on pod "+ns+"/"+podB.Name, "patch pod "+podA.Name)
	if value, ok := annotationOf(podB.Name); ok {
		t.Errorf("pod B's %s = %q after a refused write, want none", profileack.Annotation, value)
	}

	// A on itself, with more than the annotation.
	for _, c := range []struct{ what, patch, changes string }{
		{"a label", `{"metadata":{"labels":{"tier":"gold"},"annotations":{%q:%q}}}`, "also changes labels"},
		{"another annotation", `{"metadata":{"annotations":{"example.com/owner":"tenant-a",%q:%q}}}`, "also changes annotation example.com/owner"},
		{"the spec", `{"spec":{"activeDeadlineSeconds":60},"metadata":{"annotations":{%q:%q}}}`, "also changes spec"},
	} {
		_, err := pods.Patch(e.ctx, podA.Name, types.MergePatchType, fmt.Appendf(nil, c.patch, profileack.Annotation, revision), metav1.PatchOptions{})
		refusedByPolicy(t, "pod A acknowledging on itself with "+c.what, err, profileAckPolicy,
			c.changes, "merge patch of the annotation alone")
	}
	_, err = pods.Patch(e.ctx, podA.Name, types.MergePatchType,
		ackPatch(revision+" failed: "+strings.Repeat("x", 3000)), metav1.PatchOptions{})
	refusedByPolicy(t, "pod A acknowledging on itself with 3 KB", err, profileAckPolicy, "at most 2048 characters")
	if value, _ := annotationOf(podA.Name); value != profileack.Value(next, errors.New(`map pool: unknown map "dust3"`)) {
		t.Errorf("pod A's %s = %q after refused writes, want its failure still", profileack.Annotation, value)
	}

	// What the example's policy adds: no other write by the game server's
	// ServiceAccount, with whatever token.
	_, err = pods.Patch(e.ctx, podB.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"gold"}}}`), metav1.PatchOptions{})
	refusedByPolicy(t, "pod A labelling pod B", err, gameServerAckPolicy, "changes labels of pod "+ns+"/"+podB.Name)
	err = profileack.Acknowledge(e.ctx, unbound, ns, podB.Name, revision, nil)
	refusedByPolicy(t, "a token bound to no pod acknowledging on pod B", err, gameServerAckPolicy,
		"with a token bound to that pod", "changes annotations of pod "+ns+"/"+podB.Name)

	// The admin, whose token is bound to no pod, is not judged.
	if err := profileack.Acknowledge(e.ctx, e.kube, ns, podB.Name, revision, nil); err != nil {
		t.Errorf("the admin acknowledging on pod B: %v", err)
	}
	if value, _ := annotationOf(podB.Name); value != revision {
		t.Errorf("pod B's %s = %q after the admin's write, want %q", profileack.Annotation, value, revision)
	}
	t.Logf("policies type-checked after %s, enforced after %s; the cases took %s", typeChecked, enforced, time.Since(work))
}
