package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
	// RevisionOfAnnotation names the profile a revision was copied from:
	// its name, or "namespace/name" for a revision of another namespace's
	// profile. An annotation, not a label: profile names may be longer than
	// a label value may be.
	RevisionOfAnnotation = "games.example.com/revision-of"
	// RevisionNumberAnnotation numbers a profile's revisions in the order
	// they were made, 1, 2, 3 ..., as a Deployment's revision annotation
	// numbers its ReplicaSets: creation timestamps have a resolution of a
	// second, too coarse to tell which of two quick edits came last.
	RevisionNumberAnnotation = "games.example.com/revision-number"
)

// revisionOfIndex maps a profile ("namespace/name") to its revisions in the
// revision informer; mountedRevisionIndex maps a revision to the Deployments
// that mount it in the Deployment informer, and to the ReplicaSets that want
// pods and mount it in the ReplicaSet informer; scaledDownIndex maps a
// Deployment ("namespace/name") to its ReplicaSets scaled to zero that
// mount a revision, and replicaSetsOfIndex to all its ReplicaSets.
const (
	revisionOfIndex      = "revisionOf"
	mountedRevisionIndex = "mountedRevision"
	scaledDownIndex      = "scaledDown"
	replicaSetsOfIndex   = "replicaSetsOf"
)

// revisionExpectations hold what the controller did to revisions, and to the
// revisions its Deployments mount, that its caches do not show yet, the way
// the ReplicaSet controller's expectations hold its own pod creations: each
// entry is keyed by the object's UID (and a Deployment's generation) and ends
// when the cache shows the write, so no wall clock decides what the caches
// mean. Without them:
//   - a revision that stopped being current a moment after a session was
//     moved to it could be deleted before the Deployment cache shows the
//     Deployment that mounts it (mounts);
//   - a revision just deleted is still in the revision cache for a moment,
//     and a session could be moved to it (deleted).
//
// Either could leave pods mounting a revision that is gone. A restarted
// controller, whose caches start in sync, needs none of it.
// expectationTimeout bounds each entry, for the event that never comes (a
// Deployment deleted by others before the cache saw the write): past it, the
// controller goes by its caches again. An entry that ends hands back the
// revisions no entry holds any more, and its caller queues their profiles;
// one that expires is looked at again by the profile sync that found a
// revision kept by it, which asks to run again when the entry expires
// (mountPending): else a stale revision would wait for the next resync.
//
// A write's entry protects its Deployment, not its session: a session
// deleted with orphan propagation leaves the Deployment, and its pods,
// running. forgetSession keeps the entries of a deleted session's
// Deployment (detached), until the cache shows the Deployment or they
// expire, apart from the session's name so that a successor of that name
// neither sees them as its own writes nor ends them by its live reads.
//
// Revisions created are not tracked: a create answered AlreadyExists for a
// revision the cache does not hold yet is told from a foreign ConfigMap of
// that name by a live read (ensureRevision). An expectation could not be
// ended for a revision created and deleted before the cache saw either,
// which a relist of the cache never reports.
type revisionExpectations struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	deleted map[string]pendingRevision // "namespace/revision" → the revision deleted
	mounts  map[string][]pendingMount  // session key → the Deployment writes that mount a revision, oldest first
	// detached holds the writes of deleted sessions, by their Deployment's
	// key ("namespace/name", the session's).
	detached map[string][]pendingMount
	// byRevision counts the writes of mounts and detached by the revision
	// they mount; pruned is when timed-out writes were last dropped.
	byRevision map[string]revisionMounts
	pruned     time.Time
	writes     uint64 // writes numbered so far
	// left names the sessions whose Deployment left the cache: deleted, or
	// its managed-by label removed, which a filtered cache cannot tell
	// apart. It holds no revision; a session with nothing to mount looks
	// for such a Deployment with a live read.
	left map[string]struct{}
}

type pendingRevision struct {
	uid types.UID
	at  time.Time
	// done is set once the API server answered the delete (deleted, or
	// gone already): asking again before the cache shows it is a wasted
	// request.
	done bool
}

type pendingMount struct {
	write      uint64 // the write's number; 0 for what a live read found
	uid        types.UID
	generation int64
	// resourceVersion is the write's, once answered: a write that leaves
	// the generation as it was (labels put back) shows when the cache holds
	// that very version; an older one of the same generation predates it.
	// templateChange is set for a patch of the pod template: whatever the
	// cache shows at its generation or later has seen it, or replaced it.
	templateChange  bool
	resourceVersion string
	revision        string // "namespace/revision"
	hash            string // the profile content the write puts in the pod template
	at              time.Time
	// live marks what a live read found, not a write: a Deployment outside
	// the cache that mounts the revision.
	live bool
}

// revisionMounts are the pending writes that mount one revision: how many
// there are, and when the latest was recorded, so that they keep the
// revision expectationTimeout after it at the latest.
type revisionMounts struct {
	writes int
	latest time.Time
}

func newRevisionExpectations(clk clock.PassiveClock) *revisionExpectations {
	return &revisionExpectations{clock: clk, deleted: map[string]pendingRevision{},
		mounts: map[string][]pendingMount{}, detached: map[string][]pendingMount{},
		byRevision: map[string]revisionMounts{}, left: map[string]struct{}{}}
}

// deletedRevision records a revision the controller deletes, before the
// request.
func (e *revisionExpectations) deletedRevision(r *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deleted[r.Namespace+"/"+r.Name] = pendingRevision{uid: r.UID, at: e.clock.Now()}
}

// deleteDone records that the API server answered r's delete: deleted, or
// gone already.
func (e *revisionExpectations) deleteDone(r *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.deleted[r.Namespace+"/"+r.Name]; ok && d.uid == r.UID {
		d.done = true
		e.deleted[r.Namespace+"/"+r.Name] = d
	}
}

// deletedAlready reports whether the API server answered r's delete and the cache
// still shows r.
func (e *revisionExpectations) deletedAlready(r *corev1.ConfigMap) bool {
	e.mu.Lock()
	d, ok := e.deleted[r.Namespace+"/"+r.Name]
	e.mu.Unlock()
	return ok && d.done && d.uid == r.UID && e.deleting(r)
}

// deleteUnanswered reports whether the controller sent r's delete, and no
// answer came (a timeout, a 500): whether it was made, only a live read can
// tell.
func (e *revisionExpectations) deleteUnanswered(r *corev1.ConfigMap) bool {
	e.mu.Lock()
	d, ok := e.deleted[r.Namespace+"/"+r.Name]
	e.mu.Unlock()
	return ok && !d.done && d.uid == r.UID && e.deleting(r)
}

// notDeleted takes back deletedRevision: the API server refused the delete.
func (e *revisionExpectations) notDeleted(r *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.deleted[r.Namespace+"/"+r.Name]; ok && d.uid == r.UID {
		delete(e.deleted, r.Namespace+"/"+r.Name)
	}
}

// observed hears that the revision cache shows r.
func (e *revisionExpectations) observed(r *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := r.Namespace + "/" + r.Name
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

// deleting reports whether the controller deleted the revision of that UID
// and its cache still shows it.
func (e *revisionExpectations) deleting(r *corev1.ConfigMap) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := r.Namespace + "/" + r.Name
	d, ok := e.deleted[key]
	if ok && e.clock.Since(d.at) >= expectationTimeout {
		delete(e.deleted, key)
		return false
	}
	return ok && d.uid == r.UID
}

// mounting records, before the request, that the session's Deployment is
// being written to mount desired's revision: the Deployment of that UID ("" for
// a create) at that generation or later will mount it. Earlier writes not yet
// shown stay recorded: a later write refused (a create answered
// AlreadyExists) says nothing of them.
//
// It returns the write's number, for wrote.
func (e *revisionExpectations) mounting(sessionKey string, uid types.UID, generation int64, templateChange bool,
	desired *appsv1.Deployment) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writes++
	e.setMounts(e.mounts, sessionKey, append(slices.Clone(e.mounts[sessionKey]), pendingMount{write: e.writes, uid: uid,
		generation: generation, templateChange: templateChange,
		revision: desired.Namespace + "/" + mountedRevision(&desired.Spec.Template),
		hash:     desired.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation], at: e.clock.Now()}))
	return e.writes
}

// lastMount returns the revision ("namespace/name") and content hash that
// the session's latest Deployment write not yet in the cache mounts; ok is
// false when every write shows, the latest is past expectationTimeout, or
// the latest news is a live read.
//
// answered says whether the API server answered the write: one whose answer
// was lost may not have been made.
func (e *revisionExpectations) lastMount(sessionKey string) (revision, hash string, answered, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pending := e.mounts[sessionKey]
	if len(pending) == 0 {
		return "", "", false, false
	}
	last := pending[len(pending)-1]
	if last.live || e.clock.Since(last.at) >= expectationTimeout {
		return "", "", false, false
	}
	return last.revision, last.hash, last.resourceVersion != "", true
}

// wrote hears how the write that mounting announced last went. A write the
// API server refused made nothing to wait for; one it answered is waited for
// by the UID and generation it produced; one whose answer was lost (a
// timeout, a 500) may have been made, so it is waited for as announced, until
// the cache shows it or it expires.
//
// The write may be gone already: its watch event can come before its answer.
// It returns the revisions ("namespace/name") that no pending write holds
// any more, which may be stale now.
func (e *revisionExpectations) wrote(sessionKey string, write uint64, written *appsv1.Deployment, err error) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	pending := slices.Clone(e.mounts[sessionKey])
	i := slices.IndexFunc(pending, func(m pendingMount) bool { return m.write == write })
	if i < 0 {
		return nil
	}
	switch {
	case err == nil && written != nil:
		pending[i].uid, pending[i].generation, pending[i].resourceVersion = written.UID, written.Generation, written.ResourceVersion
		e.setMounts(e.mounts, sessionKey, pending)
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) ||
		apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		refused := pending[i]
		e.setMounts(e.mounts, sessionKey, slices.Delete(pending, i, i+1))
		return e.releasedLocked([]pendingMount{refused})
	}
	return nil
}

// deploymentObserved hears that the Deployment cache shows d: the writes it
// shows end, the session's and those a deleted session left (detached).
//
// It returns the revisions ("namespace/name") that no pending write holds
// any more, which may be stale now.
func (e *revisionExpectations) deploymentObserved(d *appsv1.Deployment) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := d.Namespace + "/" + d.Name
	delete(e.left, key)
	var ended []pendingMount
	for _, writes := range []map[string][]pendingMount{e.mounts, e.detached} {
		before := writes[key]
		if len(before) == 0 {
			continue
		}
		after := slices.DeleteFunc(slices.Clone(before), func(m pendingMount) bool {
			if m.seenIn(d) {
				ended = append(ended, m)
				return true
			}
			return false
		})
		e.setMounts(writes, key, after)
	}
	return e.releasedLocked(ended)
}

// seenIn reports whether the cached Deployment d shows the write m. It does
// when it holds the version the write produced, or a later generation; for a
// write whose answer was lost, the write's generation or later with the
// write's revision mounted, or any revision for a template patch (made and
// shown, or not made, or replaced). A Deployment of another UID shows
// nothing: the cache may show an older one, deleted since, that the write
// replaced.
func (m pendingMount) seenIn(d *appsv1.Deployment) bool {
	if m.uid != "" && m.uid != d.UID {
		return false
	}
	if m.resourceVersion != "" {
		return d.ResourceVersion == m.resourceVersion || d.Generation > m.generation
	}
	return d.Generation >= m.generation && (m.templateChange ||
		mountedRevision(&d.Spec.Template) == strings.TrimPrefix(m.revision, d.Namespace+"/"))
}

// releasedLocked returns the revisions of the writes ended that no pending
// write holds any more.
func (e *revisionExpectations) releasedLocked(ended []pendingMount) []string {
	var released []string
	for _, m := range ended {
		if _, held := e.byRevision[m.revision]; !held && !slices.Contains(released, m.revision) {
			released = append(released, m.revision)
		}
	}
	return released
}

// deploymentLeft hears that the session's Deployment left the cache.
func (e *revisionExpectations) deploymentLeft(sessionKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.left[sessionKey] = struct{}{}
}

// mayHaveLeft reports whether the session's Deployment left the cache, and
// neither the cache nor a live read has shown it since.
func (e *revisionExpectations) mayHaveLeft(sessionKey string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.left[sessionKey]
	return ok
}

// forgetSession hears that the session is gone. Its Deployment may not be:
// the garbage collector deletes it after the session, and not at all under
// orphan propagation. So the writes of it that the cache does not show yet
// stay (detached), each until the cache shows it or it expires, and hold
// their revisions meanwhile; only the session's name lets go of them, for a
// successor of that name. A Deployment leaving the cache ends nothing else:
// it may have left it only for a label a user removed, and that the
// controller's write has put back.
func (e *revisionExpectations) forgetSession(sessionKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.left, sessionKey)
	if pending := e.mounts[sessionKey]; len(pending) > 0 {
		e.setMounts(e.detached, sessionKey, append(slices.Clone(e.detached[sessionKey]), pending...))
		e.setMounts(e.mounts, sessionKey, nil)
	}
}

// pendingMountsLocked returns the revisions the session's pending entries mount.
func (e *revisionExpectations) pendingMountsLocked(sessionKey string) []string {
	var revisions []string
	for _, m := range e.mounts[sessionKey] {
		revisions = append(revisions, m.revision)
	}
	return revisions
}

// liveRead hears what a live (quorum) read found of the session's
// Deployment, nil for none: no write of the controller's is newer. A
// Deployment the session controls, or one that carries the managed-by label
// (orphaned by the session's deletion, its pods running on), keeps what it
// mounts held until the cache shows that version: the revision index
// protects it only from then on. None, or someone else's that the cache
// never shows, holds nothing. It returns the revisions ("namespace/name")
// the writes it replaces held.
//
// cached returns the resourceVersion the Deployment cache holds: asked
// under the lock that deploymentObserved takes, so that a version the cache
// received before is seen here, and one it receives after ends the entry.
func (e *revisionExpectations) liveRead(sessionKey string, live *appsv1.Deployment, ours bool, cached func() string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.left, sessionKey)
	held := e.pendingMountsLocked(sessionKey)
	var pending []pendingMount
	if live != nil && (ours || live.Labels[LabelManagedBy] == ManagedByValue) && cached() != live.ResourceVersion {
		if revision := mountedRevision(&live.Spec.Template); revision != "" {
			m := pendingMount{uid: live.UID, generation: live.Generation,
				resourceVersion: live.ResourceVersion, revision: live.Namespace + "/" + revision,
				hash: live.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation], at: e.clock.Now(), live: true}
			if last, ok := e.lastWrite(sessionKey); ok && ours && last.shownBy(live) {
				// What it shows is the controller's write, still on its way
				// to the cache: a move that keeps its place in the budget.
				m.live, m.at = false, last.at
			}
			pending = append(pending, m)
		}
	}
	e.setMounts(e.mounts, sessionKey, pending)
	return held
}

// lastWrite returns the session's latest pending write, if it is one.
func (e *revisionExpectations) lastWrite(sessionKey string) (pendingMount, bool) {
	pending := e.mounts[sessionKey]
	if len(pending) == 0 || pending[len(pending)-1].live {
		return pendingMount{}, false
	}
	return pending[len(pending)-1], true
}

// shownBy reports whether the Deployment d shows the write m and no newer
// spec: the version the write produced, or its generation with its revision
// mounted (for a write whose answer was lost, or whose Deployment's status
// the Deployment controller has written since: seed 99303926).
func (m pendingMount) shownBy(d *appsv1.Deployment) bool {
	if m.uid != "" && m.uid != d.UID {
		return false
	}
	if m.revision != d.Namespace+"/"+mountedRevision(&d.Spec.Template) {
		return false
	}
	return m.resourceVersion != "" && m.resourceVersion == d.ResourceVersion || m.generation == d.Generation
}

// setMounts replaces the pending writes of key in writes (mounts or
// detached), and keeps byRevision.
func (e *revisionExpectations) setMounts(writes map[string][]pendingMount, key string, pending []pendingMount) {
	for _, m := range writes[key] {
		mounts := e.byRevision[m.revision]
		if mounts.writes--; mounts.writes <= 0 {
			delete(e.byRevision, m.revision)
			continue
		}
		e.byRevision[m.revision] = mounts
	}
	for _, m := range pending {
		mounts := e.byRevision[m.revision]
		mounts.writes++
		if m.at.After(mounts.latest) {
			mounts.latest = m.at
		}
		e.byRevision[m.revision] = mounts
	}
	if len(pending) == 0 {
		delete(writes, key)
		return
	}
	writes[key] = pending
}

// mountPending reports whether a Deployment write that mounts the revision
// is not in the Deployment cache yet, and until when it holds the revision
// at the latest: the profile sync that keeps the revision for it looks
// again then, as no event may come. It costs a map lookup: the profile
// sync asks it of every stale revision while thousands of writes are in
// flight during a fan-out.
func (e *revisionExpectations) mountPending(namespace, name string) (until time.Time, pending bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	if now.Sub(e.pruned) >= expectationTimeout/10 {
		e.pruneLocked(now)
	}
	mounts, ok := e.byRevision[namespace+"/"+name]
	if !ok {
		return time.Time{}, false
	}
	if until = mounts.latest.Add(expectationTimeout); now.Before(until) {
		return until, true
	}
	// The latest write that holds it has expired, and so has every other.
	e.pruneLocked(now)
	return time.Time{}, false
}

// pruneLocked drops the writes past expectationTimeout.
func (e *revisionExpectations) pruneLocked(now time.Time) {
	e.pruned = now
	for _, writes := range []map[string][]pendingMount{e.mounts, e.detached} {
		for key, pending := range writes {
			e.setMounts(writes, key, slices.DeleteFunc(slices.Clone(pending), func(m pendingMount) bool {
				return now.Sub(m.at) >= expectationTimeout
			}))
		}
	}
}

// maxNameLength is the longest ConfigMap name (a DNS subdomain).
const maxNameLength = 253

// RevisionSelector selects the revisions this controller creates.
func RevisionSelector() string {
	return labels.SelectorFromSet(labels.Set{RevisionLabel: RevisionLabelValue}).String()
}

// RevisionName returns the name of the revision of profile with content hash
// hash, in the namespace of the sessions that mount it: the profile's name
// (for a profile of another namespace, profile is "namespace/name", and the
// slash becomes a dot), shortened if need be, a dash and the hash. It is
// always a valid ConfigMap name: the hash is lowercase hex, a namespace is a
// DNS label, and the shortened name is cut back to end in a letter or digit,
// as a DNS subdomain must before the dash. Two profiles whose names differ
// only past the cut, or as "a.b" and "a/b", share the revisions of equal
// content, which is harmless: equal hashes are equal content, and a
// revision is deleted only when no Deployment mounts it.
func RevisionName(profile, hash string) string {
	return revisionNamePrefix(profile, hash) + "-" + hash
}

// revisionNamePrefix is what comes before the dash and the hash in
// RevisionName.
func revisionNamePrefix(profile, hash string) string {
	prefix := strings.Replace(profile, "/", ".", 1)
	if limit := maxNameLength - len(hash) - 1; len(prefix) > limit {
		prefix = strings.TrimRight(prefix[:limit], "-.")
	}
	return prefix
}

// isRevisionName reports whether name is RevisionName(profile, hash)
// without building that name: a plan asks it of every member.
func isRevisionName(name, profile, hash string) bool {
	rest, ok := strings.CutPrefix(name, revisionNamePrefix(profile, hash))
	return ok && len(rest) == 1+len(hash) && rest[0] == '-' && rest[1:] == hash
}

// newRevision returns the revision of profile's current content, hash, in
// namespace: the profile's own, or that of sessions using it by grant (pods
// mount ConfigMaps of their own namespace only).
func newRevision(profile *corev1.ConfigMap, hash, namespace string) *corev1.ConfigMap {
	ref := refOfProfile(namespace, profile)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   namespace,
			Name:        RevisionName(ref, hash),
			Labels:      map[string]string{RevisionLabel: RevisionLabelValue, revisionHashLabel: hash},
			Annotations: map[string]string{RevisionOfAnnotation: ref},
		},
		Immutable:  ptr.To(true),
		Data:       profile.Data,
		BinaryData: profile.BinaryData,
	}
}

// revisionHashLabel on a revision holds its content hash. The key is the one
// the pod template's hash annotation has, so both name a content alike.
const revisionHashLabel = gamesv1.ProfileHashAnnotation

// isRevision reports whether a ConfigMap is one of the controller's
// revisions: labelled as one, and named as the revision of the profile and
// hash it claims. Only those are ever deleted.
func isRevision(cm *corev1.ConfigMap) bool {
	profile, hash := cm.Annotations[RevisionOfAnnotation], cm.Labels[revisionHashLabel]
	return cm.Labels[RevisionLabel] == RevisionLabelValue && profile != "" && hash != "" &&
		cm.Name == RevisionName(profile, hash)
}

// revisionOfIndexFunc indexes a revision by its profile.
func revisionOfIndexFunc(obj interface{}) ([]string, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || !isRevision(cm) {
		return nil, nil
	}
	return []string{revisionOf(cm)}, nil
}

// revisionOf is the key ("namespace/name") of the profile a revision was
// copied from.
func revisionOf(cm *corev1.ConfigMap) string {
	if ref := cm.Annotations[RevisionOfAnnotation]; strings.Contains(ref, "/") {
		return ref
	}
	return profileKey(cm.Namespace, cm.Annotations[RevisionOfAnnotation])
}

// staleRevisions returns the revisions of a profile that may be deleted.
// Those named in kept (the revision of its current content, and the stable
// one that new sessions start on during a rollout) and those a pod may mount
// (inUse) always stay; of the others, the keep newest (by revision number,
// then creation time, then name) stay for rollback.
func staleRevisions(revisions []*corev1.ConfigMap, kept []string, inUse func(*corev1.ConfigMap) bool, keep int) []*corev1.ConfigMap {
	revisions = slices.Clone(revisions)
	slices.SortFunc(revisions, func(a, b *corev1.ConfigMap) int {
		return cmp.Or(
			cmp.Compare(revisionNumber(b), revisionNumber(a)),
			b.CreationTimestamp.Compare(a.CreationTimestamp.Time),
			cmp.Compare(a.Name, b.Name),
		)
	})
	var stale []*corev1.ConfigMap
	for _, r := range revisions {
		switch {
		case slices.Contains(kept, r.Name) || inUse(r):
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
// ReplicaSet of the Deployment that wants pods does (the old ReplicaSet of a
// rollout that is paused or stuck keeps running pods of the previous
// template, and recreates one that is evicted). A ReplicaSet scaled to zero
// recreates nothing: its last pods are on their way out with the files they
// mounted, so its revision may go at once; a `kubectl rollout undo` to it
// would have the controller write its own template back anyway.

// deploymentMountIndexFunc indexes a Deployment by the revision its template
// mounts, as "namespace/revision".
func deploymentMountIndexFunc(obj interface{}) ([]string, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok || mountedRevision(&d.Spec.Template) == "" {
		return nil, nil
	}
	return []string{d.Namespace + "/" + mountedRevision(&d.Spec.Template)}, nil
}

// replicaSetMountIndexFunc indexes a ReplicaSet that wants pods by the
// revision its template mounts.
func replicaSetMountIndexFunc(obj interface{}) ([]string, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok || !replicaSetMounts(rs) {
		return nil, nil
	}
	return []string{rs.Namespace + "/" + mountedRevision(&rs.Spec.Template)}, nil
}

// scaledDownIndexFunc indexes a ReplicaSet scaled to zero that mounts a
// revision by the Deployment that controls it. Such a ReplicaSet holds its
// revision only while the Deployment is out of the cache
// (revisionsOutOfSight).
func scaledDownIndexFunc(obj interface{}) ([]string, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok || mountedRevision(&rs.Spec.Template) == "" || replicaSetMounts(rs) {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.Kind == "Deployment" {
		return []string{rs.Namespace + "/" + ref.Name}, nil
	}
	return nil, nil
}

// replicaSetsOfIndexFunc indexes a ReplicaSet by the Deployment that
// controls it. While the cache shows one, the Deployment may run outside
// the cache, its managed-by label removed (mayRunUncached).
func replicaSetsOfIndexFunc(obj interface{}) ([]string, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil && ref.Kind == "Deployment" {
		return []string{rs.Namespace + "/" + ref.Name}, nil
	}
	return nil, nil
}

// replicaSetMounts reports whether a ReplicaSet's pods may mount its
// template's revision: it wants pods.
func replicaSetMounts(rs *appsv1.ReplicaSet) bool {
	return mountedRevision(&rs.Spec.Template) != "" && ptr.Deref(rs.Spec.Replicas, 1) > 0
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
// tells which revision a ReplicaSet's pods mount and with which data of
// their Secrets and ConfigMaps, whether it has any and whose it is (name,
// UID, replica counts, the profile volume, the digest annotations of the
// referenced inputs, the controller's owner reference) and drops the rest,
// so that the ten old ReplicaSets a Deployment keeps by default cost the
// cache a few hundred bytes each, not a pod template each.
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
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil {
		slim.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	if v := findByName(rs.Spec.Template.Spec.Volumes, profileVolumeName); v != nil {
		slim.Spec.Template.Spec.Volumes = []corev1.Volume{*v}
	}
	for _, t := range (Informers{}).trackedInputs() {
		_, digest := t.kind.annotations()
		if value, ok := rs.Spec.Template.Annotations[digest]; ok {
			if slim.Spec.Template.Annotations == nil {
				slim.Spec.Template.Annotations = map[string]string{}
			}
			slim.Spec.Template.Annotations[digest] = value
		}
	}
	return slim, nil
}

// revisionAvailable reports whether the revision of profile's content hash
// is in the revision cache, and not one the controller has just deleted.
func (c *profileController) revisionAvailable(namespace, profile, hash string) bool {
	r, err := c.revisionLister.ConfigMaps(namespace).Get(RevisionName(profile, hash))
	return err == nil && isRevision(r) && !c.revisions.deleting(r)
}

// lastRevisionNumber is the highest number among the profile's cached
// revisions in namespace, 0 if none. Only the profile sync creates
// revisions, one profile at a time, so numbers are not handed out twice by
// one controller; the cache may lag by a create, which makes two revisions
// share a number, and then creation time and name order them.
func (c *caches) lastRevisionNumber(profile *corev1.ConfigMap, namespace string) int {
	objs, _ := c.revisionIndexer.ByIndex(revisionOfIndex, profileKey(profile.Namespace, profile.Name))
	last := 0
	for _, obj := range objs {
		if r := obj.(*corev1.ConfigMap); r.Namespace == namespace {
			last = max(last, revisionNumber(r))
		}
	}
	return last
}

// revisionNumber is a revision's RevisionNumberAnnotation, 0 if it has none
// (it predates them) or it does not parse.
func revisionNumber(r *corev1.ConfigMap) int {
	n, err := strconv.Atoi(r.Annotations[RevisionNumberAnnotation])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// revisionState is what the profile sync knows of the revision of a
// profile's current content: available to mount, on its way (created or
// deleted moments ago, reason ""), or not to be had, and why (reason and
// message, for the RevisionAvailable condition and an Event).
type revisionState struct {
	available       bool
	reason, message string
}

// ensureRevision creates the revision of profile's content, hash, in
// namespace (the profile's own, or one whose sessions use it by grant),
// unless the cache has it. Only the profile sync creates revisions, one profile at a
// time, so a content gets one create, not one per session. It returns an
// error only for what a retry may fix.
func (c *profileController) ensureRevision(ctx context.Context, profile *corev1.ConfigMap, hash, namespace string) (revisionState, error) {
	ref := refOfProfile(namespace, profile)
	name := RevisionName(ref, hash)
	if c.revisionAvailable(namespace, ref, hash) {
		return revisionState{available: true, reason: gamesv1.ReasonRevisionCreated,
			message: fmt.Sprintf(MessageRevisionAvailable, name)}, nil
	}
	if r, err := c.revisionLister.ConfigMaps(namespace).Get(name); err == nil && isRevision(r) {
		// Cached, but the controller sent its delete. Whether that was made
		// (an answer lost, a 500) only a live read can tell: if it was, the
		// delete event queues the profile and the revision is made again.
		live, err := c.kubeClient.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return revisionState{}, nil
		case err != nil:
			return revisionState{}, err
		case live.UID != r.UID:
			return revisionState{}, nil // deleted and made again: the cache catches up
		}
		c.revisions.notDeleted(r)
		// Available again: the sessions that a profile change left
		// waiting for it (profileFanOut) hear of it as of a new revision.
		c.fanOut.revisionCreated(profileKey(profile.Namespace, profile.Name))
		return revisionState{available: true, reason: gamesv1.ReasonRevisionCreated,
			message: fmt.Sprintf(MessageRevisionAvailable, name)}, nil
	}
	revision := newRevision(profile, hash, namespace)
	revision.Annotations[RevisionNumberAnnotation] = strconv.Itoa(c.lastRevisionNumber(profile, namespace) + 1)
	_, err := c.kubeClient.CoreV1().ConfigMaps(namespace).Create(ctx, revision, metav1.CreateOptions{FieldManager: Name})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Created profile revision", "revision", klog.KObj(revision))
		return revisionState{}, nil // its add event queues the profile again
	case apierrors.IsAlreadyExists(err):
		// The cache does not hold a revision of that name: either it is the
		// controller's own, created moments ago and not in the cache yet, or
		// a ConfigMap of someone else's without the revision label, which
		// the sessions must not mount. Only a live read can tell.
		existing, getErr := c.kubeClient.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(getErr):
			return revisionState{}, fmt.Errorf("revision %s: gone right after a create found it: %w", name, err) // retry
		case getErr != nil:
			return revisionState{}, getErr
		case isRevision(existing) && existing.Labels[revisionHashLabel] == hash:
			return revisionState{}, nil // the controller's own: its add event is on its way
		}
		// Retrying cannot help until it is deleted or renamed, which no
		// event reports: the periodic plan looks again.
		return revisionState{reason: gamesv1.ReasonRevisionNameTaken,
			message: fmt.Sprintf(MessageRevisionConflict, name, RevisionLabel)}, nil
	default:
		// A quota, an admission webhook, RBAC: the API server says which.
		return revisionState{reason: gamesv1.ReasonRevisionCreateFailed,
			message: fmt.Sprintf(MessageRevisionCreateFailed, name, err)}, err
	}
}

// deleteStaleRevisions deletes the revisions of a profile that no pod can
// mount, other than, in the namespaces that use it (consumes), those of the
// contents kept (the current and the stable one, while the profile exists)
// and the newest keep. In a namespace that no longer uses it (its grant
// revoked, its sessions gone), only what a pod may mount stays: the copies
// of a profile are not left behind where it is no longer granted. Each step
// of it is independent: a failed delete does not stop the others, and the
// errors are returned together.
//
// recheck is when the first of the revisions kept only for a Deployment
// write the cache does not show yet stops being kept by it, if the write
// has not shown by then: the profile is to be looked at again then, since
// a write that never shows sends no event.
func (c *profileController) deleteStaleRevisions(ctx context.Context, profileKey string, kept []string, keep int,
	consumes func(namespace string) bool) (recheck time.Time, err error) {
	objs, err := c.revisionIndexer.ByIndex(revisionOfIndex, profileKey)
	if err != nil {
		return time.Time{}, err
	}
	// A profile used by grant has revisions in each namespace that uses it,
	// and each namespace keeps its own history.
	byNamespace := map[string][]*corev1.ConfigMap{}
	for _, obj := range objs {
		r := obj.(*corev1.ConfigMap)
		byNamespace[r.Namespace] = append(byNamespace[r.Namespace], r)
	}
	var outOfSight *outOfSightRevisions
	later := func(at time.Time) {
		if !at.IsZero() && (recheck.IsZero() || at.Before(recheck)) {
			recheck = at
		}
	}
	inUse := func(r *corev1.ConfigMap) bool {
		inUse, pendingUntil := c.revisionInUse(r)
		later(pendingUntil)
		if inUse {
			return true
		}
		if outOfSight == nil {
			outOfSight = c.revisionsOutOfSight(profileKey)
		}
		if outOfSight.unaccounted[r.Namespace] {
			// No event may tell when the session is accounted for: its
			// status write, which queues no profile, or its Deployment's
			// return to the cache, which does.
			later(c.clock.Now().Add(replanInterval))
			return true
		}
		return outOfSight.revisions[r.Namespace+"/"+r.Name]
	}
	var stale []*corev1.ConfigMap
	for _, namespace := range slices.Sorted(maps.Keys(byNamespace)) {
		revisions := byNamespace[namespace]
		if !consumes(namespace) {
			stale = append(stale, staleRevisions(revisions, nil, inUse, 0)...)
			continue
		}
		ref := revisions[0].Annotations[RevisionOfAnnotation]
		keptNames := make([]string, 0, len(kept))
		for _, hash := range kept {
			keptNames = append(keptNames, RevisionName(ref, hash))
		}
		stale = append(stale, staleRevisions(revisions, keptNames, inUse, keep)...)
	}
	var errs []error
	for _, obj := range objs {
		if r := obj.(*corev1.ConfigMap); !slices.Contains(stale, r) && c.revisions.deleteUnanswered(r) {
			if err := c.keepRevisionOfLostDelete(ctx, profileKey, r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, r := range stale {
		if c.revisions.deletedAlready(r) {
			continue // its delete event is on its way
		}
		// Recorded before the request: a delete whose answer is lost may
		// have been made, and a session must not be moved to it meanwhile.
		c.revisions.deletedRevision(r)
		// The preconditions make sure it is the revision the cache showed.
		err := c.kubeClient.CoreV1().ConfigMaps(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &r.UID, ResourceVersion: &r.ResourceVersion},
		})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			c.revisions.deleteDone(r)
			klog.FromContext(ctx).V(2).Info("Deleted stale profile revision", "revision", klog.KObj(r))
		case apierrors.IsConflict(err) || apierrors.IsForbidden(err):
			// Refused: not deleted. A Conflict means it changed since the
			// cache showed it, and its update event queues the profile again.
			c.revisions.notDeleted(r)
			if apierrors.IsForbidden(err) {
				errs = append(errs, fmt.Errorf("deleting revision %s: %w", r.Name, err))
			}
		default:
			errs = append(errs, fmt.Errorf("deleting revision %s: %w", r.Name, err))
		}
	}
	return recheck, errors.Join(errs...)
}

// keepRevisionOfLostDelete settles a revision kept now whose delete was sent
// when it was stale, and never answered. Until the controller knows, no
// session may mount it, and the expectation's timeout, when it would be
// mountable again, sends no event: a live read decides now. Still there, it
// is available again, and the profile's sessions that wait for it hear of
// it as of a new revision; gone, its delete event is on its way.
func (c *profileController) keepRevisionOfLostDelete(ctx context.Context, profileKey string, r *corev1.ConfigMap) error {
	live, err := c.kubeClient.CoreV1().ConfigMaps(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading revision %s, whose delete was not answered: %w", r.Name, err)
	case live.UID != r.UID:
		return nil // deleted and made again: the cache catches up
	}
	c.revisions.notDeleted(r)
	c.fanOut.revisionCreated(profileKey)
	return nil
}

// outOfSightRevisions are the revisions the Deployments of a profile's
// sessions may mount while the Deployment cache does not show them.
type outOfSightRevisions struct {
	// revisions ("namespace/name") are those the sessions' status or the
	// Deployments' ReplicaSets name.
	revisions map[string]bool
	// unaccounted are the namespaces of sessions that may run a Deployment
	// nothing readable names: every revision of the profile there may be
	// mounted.
	unaccounted map[string]bool
}

// revisionsOutOfSight returns the revisions that the Deployments of the
// profile's sessions may mount while the Deployment cache does not show
// them: the one the session's status says it last ran, and those of the
// Deployment's ReplicaSets scaled to zero, which the ReplicaSet cache still
// shows (a ReplicaSet carries the pod template's managed-by label, not the
// Deployment's). Such a Deployment (its managed-by label removed by a user)
// may mount one still, its status written by no controller yet or its
// replicas zero, and the controller, which puts the label back, would find
// its revision gone.
//
// A session whose Deployment the cache does not show, and whose status no
// sync has written for its current spec (no condition, or an older
// generation), cannot be accounted for: it may be new, or its Deployment
// may have been created, then stripped of its label, and the status write
// and any ReplicaSet that would say so never made (a paused Deployment makes
// none), across a restart. Every revision of the profile in its namespace
// is kept until its sync has written a status. A new or edited session is
// accounted for by its next sync, within moments. What stays out of reach:
// a status written for the current spec before the create, and none after.
func (c *profileController) revisionsOutOfSight(profileKey string) *outOfSightRevisions {
	out := &outOfSightRevisions{revisions: map[string]bool{}, unaccounted: map[string]bool{}}
	for _, key := range c.sessionKeysOf(profileKey) {
		namespace, name, _ := cache.SplitMetaNamespaceKey(key)
		session, err := c.sessionLister.GameSessions(namespace).Get(name)
		if err != nil {
			continue
		}
		if _, err := c.deploymentLister.Deployments(namespace).Get(name); !apierrors.IsNotFound(err) {
			continue
		}
		if len(session.Status.Conditions) == 0 || session.Status.ObservedGeneration < session.Generation {
			out.unaccounted[namespace] = true
		}
		if session.Status.ProfileRevision != "" {
			out.revisions[namespace+"/"+session.Status.ProfileRevision] = true
		}
		scaledDown, _ := c.replicaSetIndexer.ByIndex(scaledDownIndex, key)
		for _, obj := range scaledDown {
			out.revisions[namespace+"/"+mountedRevision(&obj.(*appsv1.ReplicaSet).Spec.Template)] = true
		}
	}
	return out
}

// revisionInUse reports whether a pod of a managed Deployment may mount the
// revision: see above. An index error counts as in use. pendingUntil is set
// when nothing but Deployment writes the cache does not show yet hold it:
// when they stop delaying it, unless shown before.
func (c *profileController) revisionInUse(r *corev1.ConfigMap) (inUse bool, pendingUntil time.Time) {
	key := r.Namespace + "/" + r.Name
	for _, indexer := range []cache.Indexer{c.deploymentIndexer, c.replicaSetIndexer} {
		if users, err := indexer.IndexKeys(mountedRevisionIndex, key); err != nil || len(users) > 0 {
			return true, time.Time{}
		}
	}
	pendingUntil, pending := c.revisions.mountPending(r.Namespace, r.Name)
	return pending, pendingUntil
}
