package integration

import (
	"fmt"
	"maps"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
)

// Scenario 2: a session gets its Deployment, kwok runs the pods, and the
// session reports Ready with its ready replicas.
func TestSessionGetsReadyDeployment(t *testing.T) {
	e := newEnv(t)
	profile := e.createProfile("arena", map[string]string{"server.cfg": "max_players=16"}, true)
	e.startController()
	session := e.createSession(newSession("arena-1", "arena", 2))

	hash := controller.ProfileHash(profile)
	d := e.waitForDeploymentHash("arena-1", hash)
	if !metav1.IsControlledBy(d, session) {
		t.Errorf("Deployment owners = %v, want controller reference to GameSession %s", d.OwnerReferences, session.UID)
	}
	wantLabels := map[string]string{
		"app.kubernetes.io/name":       "gamesession",
		"app.kubernetes.io/instance":   "arena-1",
		"app.kubernetes.io/managed-by": "gamesession-controller",
	}
	for k, v := range wantLabels {
		if d.Labels[k] != v || d.Spec.Template.Labels[k] != v {
			t.Errorf("label %s: Deployment %q, pod template %q, want %q", k, d.Labels[k], d.Spec.Template.Labels[k], v)
		}
	}
	// The pods mount the immutable revision of the profile's content, never
	// the live profile, whose edits would reach running pods unrolled.
	revision := controller.RevisionName("arena", hash)
	if len(d.Spec.Template.Spec.Volumes) != 1 || d.Spec.Template.Spec.Volumes[0].ConfigMap == nil ||
		d.Spec.Template.Spec.Volumes[0].ConfigMap.Name != revision {
		t.Errorf("volumes = %+v, want the arena profile's revision %s", d.Spec.Template.Spec.Volumes, revision)
	}
	// kwok starts pods without mounting anything: a kubelet would not.
	if cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, revision, metav1.GetOptions{}); err != nil {
		t.Errorf("the revision the pods mount: %v", err)
	} else if !maps.Equal(cm.Data, profile.Data) {
		t.Errorf("revision %s holds %v, want the profile's data %v", revision, cm.Data, profile.Data)
	}
	mounts := d.Spec.Template.Spec.Containers[0].VolumeMounts
	if len(mounts) != 1 || !mounts[0].ReadOnly || mounts[0].MountPath != controller.ProfileMountPath {
		t.Errorf("volume mounts = %+v, want the profile read-only at %s", mounts, controller.ProfileMountPath)
	}

	s := e.waitForReady("arena-1")
	if s.Status.ProfileHash != hash || s.Status.ProfileRevision != revision || s.Status.ObservedGeneration != s.Generation {
		t.Errorf("status profileHash=%q profileRevision=%q observedGeneration=%d, want %q, %q and %d",
			s.Status.ProfileHash, s.Status.ProfileRevision, s.Status.ObservedGeneration, hash, revision, s.Generation)
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: s.Status.Selector})
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			running++
		}
	}
	if running != 2 {
		t.Errorf("%d running pods selected by status.selector %q, want 2", running, s.Status.Selector)
	}
}

// Scenario 8: the scale subresource (what `kubectl scale` uses) changes the
// session's replicas and so the Deployment's.
func TestScaleSubresource(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"k": "v"}, true)
	e.startController()
	e.createSession(newSession("scaled", "arena", 1))
	e.waitForReady("scaled")

	dyn := dynamic.NewForConfigOrDie(adminConfig())
	gvr := schema.GroupVersionResource{Group: "games.example.com", Version: "v1", Resource: "gamesessions"}
	sessions := dyn.Resource(gvr).Namespace(e.ns)
	if _, err := sessions.Patch(e.ctx, "scaled", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatalf("patch scale: %v", err)
	}
	e.eventually("Deployment scaled to 3", func() (bool, error) {
		d, err := e.deployment("scaled")
		if err != nil {
			return false, err
		}
		return ptr.Deref(d.Spec.Replicas, 0) == 3, fmt.Errorf("replicas %d", ptr.Deref(d.Spec.Replicas, 0))
	})
	s := e.waitForReady("scaled")
	scale, err := sessions.Get(e.ctx, "scaled", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatalf("get scale: %v", err)
	}
	replicas, _, _ := unstructured.NestedInt64(scale.Object, "status", "replicas")
	selector, _, _ := unstructured.NestedString(scale.Object, "status", "selector")
	if replicas != 3 || selector != s.Status.Selector || selector == "" {
		t.Errorf("scale status replicas=%d selector=%q, want 3 and %q", replicas, selector, s.Status.Selector)
	}
}

// Scenario 9: deleting a session removes its Deployment through the garbage
// collector (the ownerReference), with no finalizer involved.
func TestDeleteSessionGarbageCollectsDeployment(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"k": "v"}, true)
	e.startController()
	s := e.createSession(newSession("doomed", "arena", 1))
	e.waitForReady("doomed")
	if got := e.session("doomed").Finalizers; len(got) != 0 {
		t.Errorf("finalizers = %v, want none", got)
	}
	if err := e.game.GamesV1().GameSessions(e.ns).Delete(e.ctx, s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("Deployment garbage-collected", func() (bool, error) {
		_, err := e.deployment("doomed")
		return apierrors.IsNotFound(err), err
	})
}

// Scenario 10: a Deployment with the session's name that the session does not
// control is left alone and reported, with and without the managed-by label
// (without it the controller's filtered cache never even sees it).
func TestForeignDeploymentLeftAlone(t *testing.T) {
	for _, labelled := range []bool{false, true} {
		t.Run(fmt.Sprintf("managed-by label %v", labelled), func(t *testing.T) {
			e := newEnv(t)
			e.createProfile("arena", map[string]string{"k": "v"}, true)
			foreign := foreignDeployment("taken", labelled)
			foreign, err := e.kube.AppsV1().Deployments(e.ns).Create(e.ctx, foreign, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			e.startController()
			e.createSession(newSession("taken", "arena", 1))
			e.waitForCondition("taken", gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentNotControlled)
			e.waitForWarning("taken", gamesv1.ReasonDeploymentNotControlled)
			d, err := e.deployment("taken")
			if err != nil {
				t.Fatal(err)
			}
			if d.Generation != foreign.Generation || len(d.OwnerReferences) != 0 ||
				d.Spec.Template.Spec.Containers[0].Image != "example.com/someone-else:1" {
				t.Errorf("foreign Deployment was modified: generation %d->%d, owners %v", foreign.Generation, d.Generation, d.OwnerReferences)
			}
		})
	}
}

func foreignDeployment(name string, managedByLabel bool) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	if managedByLabel {
		labels[controller.LabelManagedBy] = controller.ManagedByValue
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/someone-else:1"}}},
			},
		},
	}
}
