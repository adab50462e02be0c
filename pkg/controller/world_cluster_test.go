package controller

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The rest of the control plane, as far as the controller's world needs it:
// a garbage collector, and a kube-controller-manager stand-in
// (world_kcm_test.go) that keeps ReplicaSets and writes Deployment status. Both look at the server's current state, not at a cache,
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
	// Views, not copies: each item copies what it writes.
	deployments := listAs[*appsv1.Deployment](w.server.view(deploymentsResource))
	for _, s := range listAs[*gamesv1.GameSession](w.server.view(sessionsResource)) {
		if s.DeletionTimestamp == nil {
			continue
		}
		dependents := slices.DeleteFunc(slices.Clone(deployments), func(d *appsv1.Deployment) bool {
			return !ownedBy(d, s.UID)
		})
		// Its live profile, if any, is a dependent too (world_live_test.go).
		liveProfiles := w.liveProfilesOwnedBy(s.UID)
		switch {
		case slices.Contains(s.Finalizers, finalizerForeground) && len(dependents)+len(liveProfiles) > 0:
			for _, d := range dependents {
				if d.DeletionTimestamp == nil {
					items = append(items, w.gcDelete(d, "its owner "+s.Name+" is being deleted in the foreground"))
				}
			}
			for _, lp := range liveProfiles {
				items = append(items, work{
					what: fmt.Sprintf("gc: delete live profile %s, its owner %s is being deleted in the foreground", lp.Name, s.Name),
					do:   func() { w.gcDeleteLiveProfile(lp.Name, lp.UID) },
				})
			}
		case slices.Contains(s.Finalizers, finalizerOrphan) && len(dependents)+len(liveProfiles) > 0:
			for _, d := range dependents {
				items = append(items, w.gcOrphan(d, s.UID))
			}
			for _, lp := range liveProfiles {
				items = append(items, w.gcOrphanLiveProfile(lp, s.UID))
			}
		case slices.Contains(s.Finalizers, finalizerForeground):
			items = append(items, w.gcFinish(sessionsResource, s, finalizerForeground))
		case slices.Contains(s.Finalizers, finalizerOrphan):
			items = append(items, w.gcFinish(sessionsResource, s, finalizerOrphan))
		}
	}
	for _, d := range deployments {
		switch {
		case d.DeletionTimestamp != nil && slices.Contains(d.Finalizers, finalizerForeground) && len(w.replicaSetsOf(d)) > 0:
			for _, rs := range w.replicaSetsOf(d) {
				items = append(items, work{
					what: fmt.Sprintf("gc: delete replicaset %s and its %d pod(s), its deployment %s is being deleted in the foreground", rs.Name, rs.Status.Replicas, d.Name),
					do: func() {
						must(ignoreNotFound(w.server.delete(byGC, replicaSetsResource, rs.Name, metav1.DeletePropagationBackground)))
					},
				})
			}
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
	items = append(items, w.gcReplicaSetWork()...)
	if w.live.on {
		items = append(items, w.gcLiveWork()...)
	}
	// A ProfileRollout goes with its profile.
	for _, obj := range w.server.view(rolloutsResource) {
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
		if s, ok := w.server.objects[sessionsResource][ref.Name]; ok && s.GetUID() == ref.UID {
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
			d := copyOf(d)
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
			obj := copyOf(obj)
			obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == finalizer }))
			_, err := w.server.update(byGC, r, obj, true)
			must(err)
		},
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
