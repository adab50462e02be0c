package controller

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"k8s.io/utils/ptr"
)

// The rest of the control plane, as far as the controller's world needs it:
// a garbage collector and a kube-controller-manager stand-in that writes
// Deployment status. Both look at the server's current state, not at a cache,
// and each item of their work is one step of a sequence, so they lag behind
// the changes that cause it by as many steps as the sequence chooses.

// work is one thing an actor of the world would do next.
type work struct {
	what string
	do   func()
}

// gcWork returns what the garbage collector would do now.
func (w *world) gcWork() []work {
	var items []work
	deployments := w.server.deployments()
	for _, s := range w.server.sessions() {
		if s.DeletionTimestamp == nil {
			continue
		}
		dependents := slices.DeleteFunc(slices.Clone(deployments), func(d *appsv1.Deployment) bool {
			return !ownedBy(d, s.UID)
		})
		switch {
		case slices.Contains(s.Finalizers, finalizerForeground) && len(dependents) > 0:
			for _, d := range dependents {
				if d.DeletionTimestamp == nil {
					items = append(items, w.gcDelete(d, "its owner "+s.Name+" is being deleted in the foreground"))
				}
			}
		case slices.Contains(s.Finalizers, finalizerOrphan) && len(dependents) > 0:
			for _, d := range dependents {
				items = append(items, w.gcOrphan(d, s.UID))
			}
		case slices.Contains(s.Finalizers, finalizerForeground):
			items = append(items, w.gcFinish(sessionsResource, s, finalizerForeground))
		case slices.Contains(s.Finalizers, finalizerOrphan):
			items = append(items, w.gcFinish(sessionsResource, s, finalizerOrphan))
		}
	}
	for _, d := range deployments {
		switch {
		case d.DeletionTimestamp != nil:
			for _, f := range []string{finalizerForeground, finalizerOrphan} {
				if slices.Contains(d.Finalizers, f) {
					items = append(items, w.gcFinish(deploymentsResource, d, f))
				}
			}
		case len(d.OwnerReferences) > 0 && w.ownersGone(d):
			items = append(items, w.gcDelete(d, "its owner is gone"))
		}
	}
	// A ProfileRollout goes with its profile.
	for _, obj := range w.server.list(rolloutsResource) {
		r := obj.(*gamesv1.ProfileRollout)
		if p := w.server.profile(r.Name); len(r.OwnerReferences) == 1 && (p == nil || p.UID != r.OwnerReferences[0].UID) {
			items = append(items, work{
				what: fmt.Sprintf("gc: delete profilerollout %s (%s), its profile is gone", r.Name, r.UID),
				do: func() {
					must(ignoreNotFound(w.server.delete(byGC, rolloutsResource, r.Name, metav1.DeletePropagationBackground)))
				},
			})
		}
	}
	return items
}

func (w *world) ownersGone(d *appsv1.Deployment) bool {
	for _, ref := range d.OwnerReferences {
		if s := w.server.session(ref.Name); s != nil && s.UID == ref.UID {
			return false
		}
	}
	return true
}

func ownedBy(d *appsv1.Deployment, uid types.UID) bool {
	return slices.ContainsFunc(d.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == uid })
}

func (w *world) gcDelete(d *appsv1.Deployment, why string) work {
	return work{
		what: fmt.Sprintf("gc: delete deployment %s (%s), %s", d.Name, d.UID, why),
		do: func() {
			must(ignoreNotFound(w.server.delete(byGC, deploymentsResource, d.Name, metav1.DeletePropagationBackground)))
		},
	}
}

func (w *world) gcOrphan(d *appsv1.Deployment, owner types.UID) work {
	return work{
		what: fmt.Sprintf("gc: orphan deployment %s, removing its reference to %s", d.Name, owner),
		do: func() {
			d.OwnerReferences = slices.DeleteFunc(d.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == owner })
			_, err := w.server.update(byGC, deploymentsResource, d, true)
			must(err)
		},
	}
}

func (w *world) gcFinish(r apiResource, obj object, finalizer string) work {
	return work{
		what: fmt.Sprintf("gc: remove finalizer %s from %s %s", finalizer, r, obj.GetName()),
		do: func() {
			obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == finalizer }))
			_, err := w.server.update(byGC, r, obj, true)
			must(err)
		},
	}
}

// kcmWork returns the Deployments whose status the Deployment controller
// would write now: it observes each new generation, and rolls out and readies
// the replicas, in one step or, unless the world is settling, in two.
func (w *world) kcmWork(settling bool) []work {
	var items []work
	for _, d := range w.server.deployments() {
		if d.DeletionTimestamp != nil || equality.Semantic.DeepEqual(d.Status, rolledOut(d)) {
			continue
		}
		next := rolledOut(d)
		if !settling && w.rng.IntN(2) == 0 {
			want := ptr.Deref(d.Spec.Replicas, 1)
			next.UpdatedReplicas = w.rng.Int32N(want + 1)
			next.ReadyReplicas = w.rng.Int32N(want + 1)
			next.AvailableReplicas = next.ReadyReplicas
			if equality.Semantic.DeepEqual(next, d.Status) {
				next = rolledOut(d)
			}
		}
		items = append(items, work{
			what: fmt.Sprintf("kcm: deployment %s status: generation %d, %d/%d updated, %d ready",
				d.Name, next.ObservedGeneration, next.UpdatedReplicas, next.Replicas, next.ReadyReplicas),
			do: func() {
				d.Status = next
				_, err := w.server.updateStatus(byKCM, deploymentsResource, d, true)
				must(err)
			},
		})
	}
	return items
}

// rolledOut is the status of a Deployment that is fully rolled out and ready.
func rolledOut(d *appsv1.Deployment) appsv1.DeploymentStatus {
	want := ptr.Deref(d.Spec.Replicas, 1)
	return appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation,
		Replicas:           want,
		UpdatedReplicas:    want,
		ReadyReplicas:      want,
		AvailableReplicas:  want,
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
