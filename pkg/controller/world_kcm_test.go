package controller

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The kube-controller-manager stand-in: the Deployment controller, as far as
// the controller's world needs it. It looks at the server, never at a
// cache, and each item of its work is one step of a sequence, so what it
// does lags behind the change that causes it. Like the real one it:
//   - keeps one ReplicaSet per pod template (named after the Deployment and
//     a hash of the template, labelled with the template's labels, so the
//     controller's ReplicaSet informer, filtered on managed-by, sees those
//     of its Deployments), and creates the one of a new template;
//   - scales the new ReplicaSet to spec.replicas and the old ones down only
//     once the new one is available: a template whose pods never become
//     Ready keeps the old pods running;
//   - rolls nothing out while spec.paused is set;
//   - writes the Deployment's status: observedGeneration (which lags the
//     generation until it has observed it), replicas, updatedReplicas,
//     readyReplicas, and the Progressing condition, reset on each new
//     template and False with ProgressDeadlineExceeded once a template's
//     pods have not all become available within the deadline.
//
// Pods are counts: a ReplicaSet's status.replicas are pods that mount its
// template's revision; readyReplicas those Ready. The pods of a template
// that delivers live are objects, which game servers acknowledge on
// (world_live_test.go). A template is "broken"
// when it mounts a revision of content the world declares broken (see
// world.broken): its pods never become Ready.

// kcmProgressDeadline is the progress deadline of the world's Deployment
// controller, whatever spec.progressDeadlineSeconds says: the sequences'
// time is short, so the world's deadline is too.
const kcmProgressDeadline = 5 * time.Second

const podTemplateHashLabel = appsv1.DefaultDeploymentUniqueLabelKey

// templateHash is the pod-template-hash of a template: the real controller
// hashes the template without that label.
func templateHash(t *corev1.PodTemplateSpec) string {
	t = t.DeepCopy()
	delete(t.Labels, podTemplateHashLabel)
	b, err := json.Marshal(t)
	must(err)
	h := fnv.New32a()
	h.Write(b)
	return fmt.Sprintf("%08x", h.Sum32())
}

// replicaSetsOf returns the ReplicaSets on the server that d controls.
func (w *world) replicaSetsOf(d *appsv1.Deployment) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range listAs[*appsv1.ReplicaSet](w.server.view(replicaSetsResource)) {
		if ref := metav1.GetControllerOf(rs); ref != nil && ref.UID == d.UID {
			out = append(out, rs)
		}
	}
	return out
}

// brokenTemplate reports whether pods of the template never become Ready:
// it mounts a revision of content the world declares broken.
func (w *world) brokenTemplate(t *corev1.PodTemplateSpec) bool {
	name := mountedRevision(t)
	for hash := range w.broken {
		if strings.HasSuffix(name, "-"+hash) {
			return true
		}
	}
	return false
}

// kcmWork returns what the Deployment controller would do now.
func (w *world) kcmWork() []work {
	var items []work
	byOwner := map[types.UID][]*appsv1.ReplicaSet{}
	for _, rs := range listAs[*appsv1.ReplicaSet](w.server.view(replicaSetsResource)) {
		if ref := metav1.GetControllerOf(rs); ref != nil {
			byOwner[ref.UID] = append(byOwner[ref.UID], rs)
		}
	}
	// Views, not copies: each item copies what it writes.
	for _, d := range listAs[*appsv1.Deployment](w.server.view(deploymentsResource)) {
		if d.DeletionTimestamp != nil {
			continue
		}
		items = append(items, w.kcmDeploymentWork(d, byOwner[d.UID])...)
	}
	if w.live.on {
		items = append(items, w.kubeletWork()...)
	}
	return items
}

// templateHashOf is templateHash of a Deployment's template, remembered by
// UID and generation (a new template is a new generation).
func (w *world) templateHashOf(d *appsv1.Deployment) string {
	key := fmt.Sprintf("%s/%d", d.UID, d.Generation)
	if h, ok := w.templateHashes[key]; ok {
		return h
	}
	h := templateHash(&d.Spec.Template)
	w.templateHashes[key] = h
	return h
}

func (w *world) kcmDeploymentWork(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) []work {
	var items []work
	want := ptr.Deref(d.Spec.Replicas, 1)
	hash := w.templateHashOf(d)
	var newRS *appsv1.ReplicaSet
	var old []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rs.Labels[podTemplateHashLabel] == hash {
			newRS = rs
		} else {
			old = append(old, rs)
		}
	}
	if d.Spec.Paused {
		w.covered["paused deployment"]++
	} else {
		switch {
		case newRS == nil:
			items = append(items, w.kcmCreateReplicaSet(d, hash))
		case ptr.Deref(newRS.Spec.Replicas, 1) != want:
			items = append(items, w.kcmScale(newRS, want, "the new ReplicaSet of deployment "+d.Name))
		}
		available := newRS != nil && ptr.Deref(newRS.Spec.Replicas, 1) == want &&
			newRS.Status.Replicas == want && newRS.Status.ReadyReplicas == want
		for _, rs := range old {
			if !available && replicaSetHasPods(rs) {
				w.covered["old pods kept"]++
			}
			if available && ptr.Deref(rs.Spec.Replicas, 1) > 0 {
				items = append(items, w.kcmScale(rs, 0, "an old ReplicaSet of deployment "+d.Name+", the new one being available"))
			}
		}
	}
	// The pods of each ReplicaSet (whatever the Deployment: the
	// ReplicaSet controller does not care about a pause); those of a live
	// template are objects (world_live_test.go).
	for _, rs := range rss {
		if w.live.on && isLiveTemplate(&rs.Spec.Template) {
			items = append(items, w.kcmLivePods(rs)...)
		} else if item, ok := w.kcmPods(rs); ok {
			items = append(items, item)
		}
	}
	if next := w.kcmStatus(d, newRS, rss); !equality.Semantic.DeepEqual(next, d.Status) {
		items = append(items, work{
			what: fmt.Sprintf("kcm: deployment %s status: generation %d, %d/%d updated, %d ready, %s",
				d.Name, next.ObservedGeneration, next.UpdatedReplicas, next.Replicas, next.ReadyReplicas, describeProgressing(next)),
			do: func() {
				d := copyOf(d)
				d.Status = next
				_, err := w.server.updateStatus(byKCM, deploymentsResource, d, true)
				must(err)
			},
		})
	}
	return items
}

func (w *world) kcmCreateReplicaSet(d *appsv1.Deployment, hash string) work {
	template := d.Spec.Template.DeepCopy()
	if template.Labels == nil {
		template.Labels = map[string]string{}
	}
	template.Labels[podTemplateHashLabel] = hash
	selector := d.Spec.Selector.DeepCopy()
	if selector.MatchLabels == nil {
		selector.MatchLabels = map[string]string{}
	}
	selector.MatchLabels[podTemplateHashLabel] = hash
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:      d.Name + "-" + hash,
			Namespace: d.Namespace,
			Labels:    template.Labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(ptr.Deref(d.Spec.Replicas, 1)), Selector: selector, Template: *template},
	}
	return work{
		what: fmt.Sprintf("kcm: create replicaset %s of deployment %s (%d replicas, mounts %q)",
			rs.Name, d.Name, *rs.Spec.Replicas, mountedRevision(template)),
		do: func() {
			if w.server.get(replicaSetsResource, rs.Name) != nil {
				// A ReplicaSet of the name whose Deployment was deleted
				// and recreated: the GC deletes it first.
				return
			}
			_, err := w.server.create(byKCM, replicaSetsResource, rs)
			must(err)
			// Like the real one, it starts the new ReplicaSet's progress
			// clock as it creates it: a timed-out condition of an earlier
			// ReplicaSet stays only for a template whose ReplicaSet existed
			// already (a rollback).
			cur := w.server.deployment(d.Name)
			if cur == nil || cur.UID != d.UID {
				return
			}
			if cond := progressingOf(cur.Status); cond != nil && cond.Reason == "ProgressDeadlineExceeded" {
				cur = copyOf(cur)
				now := metav1.NewTime(w.clock.Now())
				cond := progressingOf(cur.Status)
				*cond = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
					Reason: "NewReplicaSetCreated", Message: fmt.Sprintf("Created new replica set %q", rs.Name),
					LastUpdateTime: now, LastTransitionTime: now}
				_, err := w.server.updateStatus(byKCM, deploymentsResource, cur, false)
				must(err)
				w.covered["progress deadline reset by a new ReplicaSet"]++
			}
		},
	}
}

func (w *world) kcmScale(rs *appsv1.ReplicaSet, to int32, why string) work {
	return work{
		what: fmt.Sprintf("kcm: scale replicaset %s to %d, %s", rs.Name, to, why),
		do: func() {
			rs := copyOf(rs)
			rs.Spec.Replicas = ptr.To(to)
			_, err := w.server.update(byKCM, replicaSetsResource, rs, true)
			must(err)
		},
	}
}

// kcmPods is the ReplicaSet controller and the kubelet: pods are created or
// deleted to match spec.replicas, and then become Ready, unless the
// template is broken.
func (w *world) kcmPods(rs *appsv1.ReplicaSet) (work, bool) {
	want := ptr.Deref(rs.Spec.Replicas, 1)
	next := rs.Status
	next.ObservedGeneration = rs.Generation
	switch {
	case rs.Status.Replicas != want:
		next.Replicas = want
		next.ReadyReplicas = min(rs.Status.ReadyReplicas, want)
	case rs.Status.ReadyReplicas < want && !w.brokenTemplate(&rs.Spec.Template):
		next.ReadyReplicas = want
	}
	next.AvailableReplicas = next.ReadyReplicas
	next.FullyLabeledReplicas = next.Replicas
	if equality.Semantic.DeepEqual(next, rs.Status) {
		return work{}, false
	}
	return work{
		what: fmt.Sprintf("kcm: replicaset %s has %d pod(s), %d ready", rs.Name, next.Replicas, next.ReadyReplicas),
		do: func() {
			rs := copyOf(rs)
			rs.Status = next
			_, err := w.server.updateStatus(byKCM, replicaSetsResource, rs, true)
			must(err)
		},
	}, true
}

// kcmStatus is the Deployment status the Deployment controller would write
// now.
func (w *world) kcmStatus(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, rss []*appsv1.ReplicaSet) appsv1.DeploymentStatus {
	want := ptr.Deref(d.Spec.Replicas, 1)
	next := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Conditions: slices.Clone(d.Status.Conditions)}
	for _, rs := range rss {
		next.Replicas += rs.Status.Replicas
		next.ReadyReplicas += rs.Status.ReadyReplicas
	}
	next.AvailableReplicas = next.ReadyReplicas
	next.UnavailableReplicas = max(0, want-next.AvailableReplicas)
	if newRS != nil {
		next.UpdatedReplicas = newRS.Status.Replicas
	}
	now := metav1.NewTime(w.clock.Now())
	cur := progressingOf(d.Status)
	replace := func(status corev1.ConditionStatus, reason string) {
		var message string
		if reason == "ProgressDeadlineExceeded" && newRS != nil {
			message = fmt.Sprintf("ReplicaSet %q has timed out progressing.", newRS.Name)
		}
		next.Conditions = slices.DeleteFunc(next.Conditions, func(c appsv1.DeploymentCondition) bool { return c.Type == appsv1.DeploymentProgressing })
		next.Conditions = append(next.Conditions, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: status,
			Reason: reason, Message: message, LastUpdateTime: now, LastTransitionTime: now})
	}
	set := func(status corev1.ConditionStatus, reason string) {
		if cur == nil || cur.Status != status || cur.Reason != reason {
			replace(status, reason)
		}
	}
	complete := newRS != nil && next.UpdatedReplicas == want && next.Replicas == want && next.AvailableReplicas == want
	progressed := next.UpdatedReplicas > d.Status.UpdatedReplicas || next.ReadyReplicas > d.Status.ReadyReplicas
	// The real controller resets a timed-out condition when it creates the
	// ReplicaSet of a new template (kcmCreateReplicaSet), not when the
	// template's ReplicaSet exists already (a rollback): then the
	// condition, and its message naming the ReplicaSet that timed out,
	// stay until the new one makes progress, though the new generation is
	// recorded as observed. So does the world's, whenever it names another
	// ReplicaSet than the new one.
	staleTimeout := cur != nil && cur.Reason == "ProgressDeadlineExceeded" && newRS != nil &&
		timedOutReplicaSet(cur.Message) != newRS.Name
	switch {
	case d.Spec.Paused:
		set(corev1.ConditionUnknown, "DeploymentPaused")
	case complete:
		set(corev1.ConditionTrue, "NewReplicaSetAvailable")
	case staleTimeout && progressed:
		replace(corev1.ConditionTrue, "ReplicaSetUpdated")
	case staleTimeout:
		w.covered["stale progress deadline kept"]++
	case d.Status.ObservedGeneration < d.Generation || cur == nil || cur.Reason == "DeploymentPaused" || cur.Reason == "NewReplicaSetAvailable":
		// A new generation (or a resume) starts the progress clock again,
		// whatever the last template's fate was.
		replace(corev1.ConditionTrue, "ReplicaSetUpdated")
	case cur.Status == corev1.ConditionFalse:
		// Exceeded stays until a new generation.
	case progressed:
		replace(corev1.ConditionTrue, "ReplicaSetUpdated")
	case !w.clock.Now().Before(cur.LastUpdateTime.Add(kcmProgressDeadline)):
		set(corev1.ConditionFalse, "ProgressDeadlineExceeded")
		w.covered["progress deadline exceeded"]++
	}
	if equality.Semantic.DeepEqual(next.Conditions, d.Status.Conditions) {
		next.Conditions = d.Status.Conditions
	}
	return next
}

func progressingOf(s appsv1.DeploymentStatus) *appsv1.DeploymentCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == appsv1.DeploymentProgressing {
			return &s.Conditions[i]
		}
	}
	return nil
}

func describeProgressing(s appsv1.DeploymentStatus) string {
	if c := progressingOf(s); c != nil {
		return fmt.Sprintf("Progressing=%s/%s", c.Status, c.Reason)
	}
	return "no Progressing condition"
}

// kcmNextDeadline returns when the next progress deadline of a Deployment
// that is still progressing passes, so that a settling world can let that
// time pass.
func (w *world) kcmNextDeadline() (time.Time, bool) {
	var next time.Time
	for _, d := range listAs[*appsv1.Deployment](w.server.view(deploymentsResource)) {
		c := progressingOf(d.Status)
		if d.DeletionTimestamp != nil || d.Spec.Paused || c == nil || c.Status != corev1.ConditionTrue || c.Reason == "NewReplicaSetAvailable" {
			continue
		}
		if at := c.LastUpdateTime.Add(kcmProgressDeadline); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, !next.IsZero()
}

// gcReplicaSetWork returns the garbage collector's work on ReplicaSets: those
// whose Deployment is gone are deleted, with their pods.
func (w *world) gcReplicaSetWork() []work {
	var items []work
	deployments := map[string]*appsv1.Deployment{}
	for _, d := range listAs[*appsv1.Deployment](w.server.view(deploymentsResource)) {
		deployments[string(d.UID)] = d
	}
	for _, rs := range listAs[*appsv1.ReplicaSet](w.server.view(replicaSetsResource)) {
		ref := metav1.GetControllerOf(rs)
		if ref != nil && deployments[string(ref.UID)] != nil {
			continue
		}
		items = append(items, work{
			what: fmt.Sprintf("gc: delete replicaset %s (%s) and its %d pod(s), its deployment is gone", rs.Name, rs.UID, rs.Status.Replicas),
			do: func() {
				must(ignoreNotFound(w.server.delete(byGC, replicaSetsResource, rs.Name, metav1.DeletePropagationBackground)))
			},
		})
	}
	return items
}

// ---- A user ----

// pauseDeployment sets or clears spec.paused on a Deployment, as a user
// does to hold its rollout: a field the controller does not own.
func (w *world) pauseDeployment() bool {
	d := w.someDeployment()
	if d == nil {
		return false
	}
	d.Spec.Paused = !d.Spec.Paused
	if updated := w.userUpdateDeployment(d, fmt.Sprintf("set paused %t", d.Spec.Paused)); updated != nil {
		w.nonOwned[updated.UID] = nonOwnedOf(updated)
	}
	return true
}
