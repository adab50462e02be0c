package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// A revision is an immutable copy of one content of a profile, and what the
// Deployments mount: never the live profile. The kubelet rewrites the files of
// a mounted ConfigMap in running pods within about a minute of an edit, so a
// Deployment mounting the profile itself would run the new content before its
// rollout reached it, and with the old content gone, could not roll back. A
// revision never changes; a Deployment's pods read exactly what its hash
// annotation says, and a pod recreated after its profile was deleted still
// finds its revision.
//
// Revisions are named after their profile and content hash, so one content is
// one revision, whoever asks for it and however often: editing a profile back
// to an earlier content goes back to that revision. The controller creates
// them (the profile sync, once per content) and deletes them (the same sync,
// once no pod of a managed Deployment can mount them, and they are not among
// the newest --revision-history-limit of the profile's other revisions; none
// are kept for a profile that is gone). They carry no owner reference:
// owned by the profile, they would go with it and strand running pods; owned
// by the Deployments that mount them, one revision shared by 7,340 sessions
// would carry 7,340 owner references, more than an object may hold.

// Labels and annotations of profile revisions.
const (
	// RevisionLabel marks a ConfigMap as a profile revision. The revision
	// informer is filtered on it, and the profile informer's objects are
	// checked for it, so a revision is never taken for a profile.
	RevisionLabel      = "games.example.com/profile-revision"
	RevisionLabelValue = "true"
	// RevisionOfAnnotation names the profile a revision was copied from. An
	// annotation, not a label: profile names may be longer than a label
	// value may be.
	RevisionOfAnnotation = "games.example.com/revision-of"
)

// revisionOfIndex maps a profile ("namespace/name") to its revisions in the
// revision informer; mountedRevisionIndex maps a revision to the Deployments
// that mount it in the Deployment informer.
const (
	revisionOfIndex      = "revisionOf"
	mountedRevisionIndex = "mountedRevision"
)

// revisionExpectations hold what the controller did to revisions and to the
// revisions its Deployments mount that its caches do not show yet, the way
// the ReplicaSet controller's expectations hold its own pod creations: each
// entry is keyed by the object's UID (and a Deployment's generation) and
// ends when the cache shows the write, so no wall clock decides what the
// caches mean. Without them:
//   - a revision that stopped being current a moment after a session was
//     moved to it could be deleted before the Deployment cache shows the
//     Deployment that mounts it (pendingMounts);
//   - a revision just deleted is still in the revision cache for a moment,
//     and a session could be moved to it (deleted);
//   - a create answered AlreadyExists could not tell the controller's own
//     revision, not yet in the cache, from someone else's ConfigMap of that
//     name (created).
//
// Either of the first two could leave pods mounting a revision that is gone.
// A restarted controller, whose caches start in sync, needs none of it.
// expectationTimeout bounds each entry, for the event that never comes (an
// object created and deleted by others before the cache saw it): past it,
// the controller goes by its caches again.
type revisionExpectations struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	created map[string]pendingRevision // "namespace/revision" → the revision created
	deleted map[string]pendingRevision // "namespace/revision" → the revision deleted
	mounts  map[string]pendingMount    // session key → the Deployment written to mount a revision
}

type pendingRevision struct {
	uid types.UID
	at  time.Time
}

type pendingMount struct {
	uid        types.UID
	generation int64
	revision   string // "namespace/revision"
	at         time.Time
}

func newRevisionExpectations(clk clock.PassiveClock) *revisionExpectations {
	return &revisionExpectations{clock: clk, created: map[string]pendingRevision{},
		deleted: map[string]pendingRevision{}, mounts: map[string]pendingMount{}}
}

// createdRevision records a revision the controller created.
func (e *revisionExpectations) createdRevision(r *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := r.Namespace + "/" + r.Name
	delete(e.deleted, key)
	e.created[key] = pendingRevision{uid: r.UID, at: e.clock.Now()}
}

// deletedRevision records a revision the controller deleted (or found gone).
func (e *revisionExpectations) deletedRevision(r *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deleted[r.Namespace+"/"+r.Name] = pendingRevision{uid: r.UID, at: e.clock.Now()}
}

// observed hears that the revision cache shows r.
func (e *revisionExpectations) observed(r *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := r.Namespace + "/" + r.Name
	delete(e.created, key)
	if d, ok := e.deleted[key]; ok && d.uid != r.UID {
		delete(e.deleted, key) // another revision of that name: not the one deleted
	}
}

// gone hears that the revision cache no longer shows r.
func (e *revisionExpectations) gone(r *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := r.Namespace + "/" + r.Name
	if d, ok := e.deleted[key]; ok && d.uid == r.UID {
		delete(e.deleted, key)
	}
}

// creating reports whether the controller created the revision and its cache
// does not show it yet.
func (e *revisionExpectations) creating(namespace, name string) bool {
	return e.pending(e.created, namespace+"/"+name, "")
}

// deleting reports whether the controller deleted the revision of that UID
// and its cache still shows it.
func (e *revisionExpectations) deleting(r *corev1.ConfigMap) bool {
	return e.pending(e.deleted, r.Namespace+"/"+r.Name, r.UID)
}

func (e *revisionExpectations) pending(entries map[string]pendingRevision, key string, uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := entries[key]
	switch {
	case !ok:
		return false
	case e.clock.Since(p.at) >= expectationTimeout:
		delete(entries, key)
		return false
	}
	return uid == "" || p.uid == uid
}

// mounting records that the session's Deployment was written, as written, to
// mount a revision.
func (e *revisionExpectations) mounting(sessionKey string, written *appsv1.Deployment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mounts[sessionKey] = pendingMount{uid: written.UID, generation: written.Generation,
		revision: written.Namespace + "/" + mountedRevision(&written.Spec.Template), at: e.clock.Now()}
}

// deploymentObserved hears that the Deployment cache shows d: a mount it
// shows, or a Deployment that replaced the one written, ends the wait.
func (e *revisionExpectations) deploymentObserved(d *appsv1.Deployment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := d.Namespace + "/" + d.Name
	if m, ok := e.mounts[key]; ok && (m.uid != d.UID || d.Generation >= m.generation) {
		delete(e.mounts, key)
	}
}

// deploymentGone hears that the Deployment cache no longer shows d.
func (e *revisionExpectations) deploymentGone(d *appsv1.Deployment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := d.Namespace + "/" + d.Name
	if m, ok := e.mounts[key]; ok && m.uid == d.UID {
		delete(e.mounts, key)
	}
}

// mountPending reports whether a Deployment written to mount the revision
// is not in the Deployment cache with that mount yet.
func (e *revisionExpectations) mountPending(namespace, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	revision := namespace + "/" + name
	for key, m := range e.mounts {
		if e.clock.Since(m.at) >= expectationTimeout {
			delete(e.mounts, key)
			continue
		}
		if m.revision == revision {
			return true
		}
	}
	return false
}

// maxNameLength is the longest ConfigMap name (a DNS subdomain).
const maxNameLength = 253

// RevisionSelector selects the revisions this controller creates.
func RevisionSelector() string {
	return labels.SelectorFromSet(labels.Set{RevisionLabel: RevisionLabelValue}).String()
}

// RevisionName returns the name of the revision of profile with content hash
// hash: the profile's name, shortened if need be, a dash and the hash. It is
// always a valid ConfigMap name: the hash is lowercase hex, and the shortened
// name is cut back to end in a letter or digit, as a DNS subdomain must
// before the dash. Two profiles whose long names differ only past the cut
// share the revisions of equal content, which is harmless: equal hashes are
// equal content, and a revision is deleted only when no Deployment mounts it.
func RevisionName(profile, hash string) string {
	prefix := profile
	if limit := maxNameLength - len(hash) - 1; len(prefix) > limit {
		prefix = strings.TrimRight(prefix[:limit], "-.")
	}
	return prefix + "-" + hash
}

// newRevision returns the revision of profile's current content, hash.
func newRevision(profile *corev1.ConfigMap, hash string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   profile.Namespace,
			Name:        RevisionName(profile.Name, hash),
			Labels:      map[string]string{RevisionLabel: RevisionLabelValue, labelProfileHash: hash},
			Annotations: map[string]string{RevisionOfAnnotation: profile.Name},
		},
		Immutable:  ptr.To(true),
		Data:       profile.Data,
		BinaryData: profile.BinaryData,
	}
}

// labelProfileHash on a revision holds its content hash.
const labelProfileHash = gamesv1.ProfileHashAnnotation

// isRevision reports whether a ConfigMap is one of the controller's
// revisions: labelled as one, and named as the revision of the profile and
// hash it claims. Only those are ever deleted.
func isRevision(cm *corev1.ConfigMap) bool {
	profile, hash := cm.Annotations[RevisionOfAnnotation], cm.Labels[labelProfileHash]
	return cm.Labels[RevisionLabel] == RevisionLabelValue && profile != "" && hash != "" &&
		cm.Name == RevisionName(profile, hash)
}

// revisionOfIndexFunc indexes a revision by its profile.
func revisionOfIndexFunc(obj interface{}) ([]string, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || !isRevision(cm) {
		return nil, nil
	}
	return []string{profileKey(cm.Namespace, cm.Annotations[RevisionOfAnnotation])}, nil
}

// staleRevisions returns the revisions of a profile that may be deleted. The
// revision of its current content (currentName, "" if the profile is gone)
// and those a pod may mount (inUse) always stay; of the others, the keep
// newest (by creation time, then name) stay for rollback.
func staleRevisions(revisions []*corev1.ConfigMap, currentName string, inUse func(*corev1.ConfigMap) bool, keep int) []*corev1.ConfigMap {
	revisions = slices.Clone(revisions)
	slices.SortFunc(revisions, func(a, b *corev1.ConfigMap) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	var stale []*corev1.ConfigMap
	for _, r := range revisions {
		switch {
		case r.Name == currentName || inUse(r):
		case keep > 0:
			keep--
		default:
			stale = append(stale, r)
		}
	}
	return stale
}

// A revision is in use while a pod of a managed Deployment can mount it: the
// Deployment's template mounts it (its pods, and any it creates), or a
// ReplicaSet of the Deployment with pods, or about to have some, does (the
// old ReplicaSet of a rollout that is paused or stuck keeps running pods of
// the previous template). A ReplicaSet scaled to zero has no pods to
// recreate, so its revision may go; a `kubectl rollout undo` to it would
// have the controller write its own template back anyway.

// deploymentMountIndexFunc indexes a Deployment by the revision its template
// mounts, as "namespace/revision".
func deploymentMountIndexFunc(obj interface{}) ([]string, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok || mountedRevision(&d.Spec.Template) == "" {
		return nil, nil
	}
	return []string{d.Namespace + "/" + mountedRevision(&d.Spec.Template)}, nil
}

// replicaSetMountIndexFunc indexes a ReplicaSet that has or wants pods by the
// revision its template mounts.
func replicaSetMountIndexFunc(obj interface{}) ([]string, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok || !replicaSetMounts(rs) {
		return nil, nil
	}
	return []string{rs.Namespace + "/" + mountedRevision(&rs.Spec.Template)}, nil
}

// replicaSetMounts reports whether a ReplicaSet's pods may mount its
// template's revision: it has pods, or wants some.
func replicaSetMounts(rs *appsv1.ReplicaSet) bool {
	return mountedRevision(&rs.Spec.Template) != "" && (ptr.Deref(rs.Spec.Replicas, 1) > 0 || rs.Status.Replicas > 0)
}

// mountedRevision is the ConfigMap the template's profile volume mounts,
// "" if none.
func mountedRevision(t *corev1.PodTemplateSpec) string {
	v := findByName(t.Spec.Volumes, profileVolumeName)
	if v == nil || v.ConfigMap == nil {
		return ""
	}
	return v.ConfigMap.Name
}

// SlimReplicaSet is the transform of the ReplicaSet informer: it keeps what
// tells which revision a ReplicaSet's pods mount and whether it has any
// (name, UID, replica counts, the profile volume) and drops the rest, so
// that the ten old ReplicaSets a Deployment keeps by default cost the cache
// a few hundred bytes each, not a pod template each.
func SlimReplicaSet(obj interface{}) (interface{}, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return obj, nil // a tombstone: DeletedFinalStateUnknown holds an object already slimmed
	}
	slim := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         rs.Namespace,
			Name:              rs.Name,
			UID:               rs.UID,
			ResourceVersion:   rs.ResourceVersion,
			Generation:        rs.Generation,
			DeletionTimestamp: rs.DeletionTimestamp,
		},
		Spec:   appsv1.ReplicaSetSpec{Replicas: rs.Spec.Replicas},
		Status: appsv1.ReplicaSetStatus{Replicas: rs.Status.Replicas},
	}
	if v := findByName(rs.Spec.Template.Spec.Volumes, profileVolumeName); v != nil {
		slim.Spec.Template.Spec.Volumes = []corev1.Volume{*v}
	}
	return slim, nil
}

// revisionAvailable reports whether the revision of profile's content hash
// is in the revision cache, and not one the controller has just deleted.
func (c *Controller) revisionAvailable(namespace, profile, hash string) bool {
	r, err := c.revisionLister.ConfigMaps(namespace).Get(RevisionName(profile, hash))
	return err == nil && isRevision(r) && !c.revisions.deleting(r)
}

// revisionState is what the profile sync knows of the revision of a
// profile's current content: available to mount, on its way (created or
// deleted moments ago, reason ""), or not to be had, and why (reason and
// message, for the RevisionAvailable condition and an Event).
type revisionState struct {
	available       bool
	reason, message string
}

// ensureRevision creates the revision of profile's content, hash, unless the
// cache has it. Only the profile sync creates revisions, one profile at a
// time, so a content gets one create, not one per session. It returns an
// error only for what a retry may fix.
func (c *Controller) ensureRevision(ctx context.Context, profile *corev1.ConfigMap, hash string) (revisionState, error) {
	name := RevisionName(profile.Name, hash)
	if c.revisionAvailable(profile.Namespace, profile.Name, hash) {
		return revisionState{available: true, reason: gamesv1.ReasonRevisionCreated,
			message: fmt.Sprintf(MessageRevisionAvailable, name)}, nil
	}
	if c.revisions.creating(profile.Namespace, name) {
		return revisionState{}, nil // its add event queues the profile again
	}
	if r, err := c.revisionLister.ConfigMaps(profile.Namespace).Get(name); err == nil && isRevision(r) {
		return revisionState{}, nil // just deleted: its delete event queues the profile, and then it is created again
	}
	revision := newRevision(profile, hash)
	created, err := c.kubeClient.CoreV1().ConfigMaps(profile.Namespace).Create(ctx, revision, metav1.CreateOptions{FieldManager: Name})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Created profile revision", "revision", klog.KObj(revision))
		c.revisions.createdRevision(created)
		return revisionState{}, nil
	case apierrors.IsAlreadyExists(err):
		// Not in the revision cache, not created by the controller moments
		// ago: a ConfigMap of that name without the revision label, which
		// the sessions must not mount. Retrying cannot help; the periodic
		// plan looks again.
		return revisionState{reason: gamesv1.ReasonRevisionNameTaken,
			message: fmt.Sprintf(MessageRevisionConflict, name, RevisionLabel)}, nil
	default:
		// A quota, an admission webhook, RBAC: the API server says which.
		return revisionState{reason: gamesv1.ReasonRevisionCreateFailed,
			message: fmt.Sprintf(MessageRevisionCreateFailed, name, err)}, err
	}
}

// deleteStaleRevisions deletes the revisions of a profile that no pod can
// mount, other than the current one (current, "" if the profile is gone)
// and the newest keep. Each step of it is independent: a failed delete does
// not stop the others, and the errors are returned together.
func (c *Controller) deleteStaleRevisions(ctx context.Context, namespace, profileKey, current string, keep int) error {
	objs, err := c.revisionIndexer.ByIndex(revisionOfIndex, profileKey)
	if err != nil {
		return err
	}
	revisions := make([]*corev1.ConfigMap, 0, len(objs))
	for _, obj := range objs {
		revisions = append(revisions, obj.(*corev1.ConfigMap))
	}
	var errs []error
	for _, r := range staleRevisions(revisions, current, c.revisionInUse, keep) {
		// The preconditions make sure it is the revision the cache showed.
		err := c.kubeClient.CoreV1().ConfigMaps(namespace).Delete(ctx, r.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &r.UID, ResourceVersion: &r.ResourceVersion},
		})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			c.revisions.deletedRevision(r)
			klog.FromContext(ctx).V(2).Info("Deleted stale profile revision", "revision", klog.KObj(r))
		case apierrors.IsConflict(err):
			// It changed since the cache showed it: not deleted, and its
			// update event queues the profile again.
		default:
			errs = append(errs, fmt.Errorf("deleting revision %s: %w", r.Name, err))
		}
	}
	return errors.Join(errs...)
}

// revisionInUse reports whether a pod of a managed Deployment may mount the
// revision: see above. An index error counts as in use.
func (c *Controller) revisionInUse(r *corev1.ConfigMap) bool {
	key := r.Namespace + "/" + r.Name
	for _, indexer := range []cache.Indexer{c.deploymentIndexer, c.replicaSetIndexer} {
		if users, err := indexer.IndexKeys(mountedRevisionIndex, key); err != nil || len(users) > 0 {
			return true
		}
	}
	return c.revisions.mountPending(r.Namespace, r.Name) || c.revisions.creating(r.Namespace, r.Name)
}
