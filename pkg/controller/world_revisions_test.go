package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Profile revisions in the world. Deployments mount an immutable copy of
// their profile's content, a revision, never the profile itself. The
// controller's profile sync creates the revision of a profile's current
// content and deletes those nothing needs any more; users may delete one too.
// The world serves those requests (world_clients_test.go routes them here),
// keeps revisions in a resource of their own that shares the ConfigMaps' name
// space (world_server_test.go), and checks:
//   - at each create, that the revision is well formed and copies what the
//     controller's profile cache shows;
//   - at each delete, that it is conditional, of a revision, and that no
//     Deployment on the server mounts the revision;
//   - at rest (checkRevisionsAtRest), that every mounted revision exists, and
//     that each profile keeps no more revisions than those mounted, its
//     current one and the history limit.

// The revision contract: labels, annotation and name of a revision.
const (
	worldRevisionLabel        = "games.example.com/profile-revision"
	worldRevisionLabelValue   = "true"
	worldRevisionHashLabel    = "games.example.com/profile-hash"
	worldRevisionOfAnnotation = "games.example.com/revision-of"
	// worldRevisionHistoryLimit is the controller's RevisionHistoryLimit in
	// a sequence: small, so that revisions are deleted often.
	worldRevisionHistoryLimit = 1
)

// worldRevisionName is the name of the revision of a profile's content that
// the world's sessions of namespace mount, the profile given by name or as
// they refer to it: "pf-x-<hash>"; for the platform's profile, the
// platform's own revision "pf-z-<hash>" in its namespace, and in the
// sessions' namespace, which uses it as platform/pf-z, the copy
// "platform.pf-z-<hash>".
func worldRevisionName(namespace, profile, hash string) string {
	name := profileNameOf(profile)
	if home := worldNamespaceOf(name); home != namespace {
		return revisionNameOf(home+"/"+name, hash)
	}
	return revisionNameOf(name, hash)
}

// revisionNameOf is the name of a revision as its revision-of annotation
// names the profile: "pf-z-<hash>" for the platform's own revision of pf-z,
// "platform.pf-z-<hash>" for the copy of it in the sessions' namespace.
// Profile names of the world are short, so the name is never shortened.
func revisionNameOf(ref, hash string) string {
	return strings.Replace(ref, "/", ".", 1) + "-" + hash
}

// revisionDeletion is who deleted a revision of some name last.
type revisionDeletion struct {
	by   author
	step int
	// raced is set for a controller deletion while a Deployment on the
	// server mounted the revision, but the controller's cache did not show
	// that Deployment mounting it yet (see checkRevisionDeleted).
	raced bool
}

// mountedConfigMap returns the name of the ConfigMap a Deployment's profile
// volume mounts, or "".
func mountedConfigMap(d *appsv1.Deployment) string {
	if d == nil {
		return ""
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == worldProfileVolume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// mountsRevision reports whether d mounts the revision of profile with
// content hash, and says so in its annotation.
func mountsRevision(d *appsv1.Deployment, profile, hash string) bool {
	return d != nil && d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == hash &&
		mountedConfigMap(d) == worldRevisionName(d.Namespace, profile, hash)
}

// ---- The controller's requests ----

func (w *world) createRevision(a core.CreateAction) (bool, runtime.Object, error) {
	cm := a.GetObject().(*corev1.ConfigMap)
	w.checkRevisionCreate(cm)
	if w.revisionQuota {
		w.quotaRefused[cm.Name] = true
		err := injectedError(faultForbidden, revisionsResource, cm.Name)
		w.logf("  → CREATE revision %s: quota: %v", cm.Name, err)
		return true, nil, err
	}
	if f, faulty := w.takeFault("createRevision"); faulty {
		w.logf("  → CREATE revision %s: injected %s", cm.Name, f)
		return true, nil, injectedError(f, revisionsResource, cm.Name)
	}
	f, faulty := w.takeFault("create")
	if faulty && f != faultLostResponse {
		w.logf("  → CREATE revision %s: injected %s", cm.Name, f)
		return true, nil, injectedError(f, revisionsResource, cm.Name)
	}
	created, err := w.server.create(byController, revisionsResource, cm)
	if apierrors.IsAlreadyExists(err) {
		w.lastRevisionCreate = cm.Name
	}
	if err != nil {
		w.logf("  → CREATE revision %s: %v", cm.Name, err)
		return true, nil, err
	}
	w.logf("  → CREATE revision %s: %s, rv %s", cm.Name, created.GetUID(), created.GetResourceVersion())
	if faulty {
		w.logf("    (answered: injected %s)", f)
		return true, nil, injectedError(f, revisionsResource, cm.Name)
	}
	delete(w.deletedLately, cm.Name)
	return true, created, nil
}

func (w *world) deleteRevision(a core.DeleteAction) (bool, runtime.Object, error) {
	name, pre := a.GetName(), a.GetDeleteOptions().Preconditions
	if pre == nil || pre.UID == nil || pre.ResourceVersion == nil {
		w.violate("revision-delete-unconditional", "Delete of ConfigMap %s without UID and resourceVersion preconditions (%+v): "+
			"it could delete a ConfigMap other than the revision the controller's cache showed", name, pre)
	}
	if w.server.profile(name) != nil {
		w.violate("non-revision-deleted", "Delete of ConfigMap %s, a profile, not a revision", name)
		return true, nil, fmt.Errorf("harness: refused to delete profile %s", name)
	}
	if c := w.caches[revisionsResource].revision(name); c == nil {
		w.violate("non-revision-deleted", "Delete of ConfigMap %s, which the controller's revision cache does not hold", name)
	}
	var uid *types.UID
	var rv *string
	if pre != nil {
		uid, rv = pre.UID, pre.ResourceVersion
	}
	// The controller takes the revision as deleted from the moment it sends
	// the request, unless the answer is a refusal (a Conflict).
	w.deletedLately[name] = ptr.Deref(uid, "")
	f, faulty := w.takeFault("delete")
	if faulty && f != faultLostResponse {
		w.logf("  → DELETE revision %s: injected %s", name, f)
		if f == faultConflict {
			delete(w.deletedLately, name)
		}
		return true, nil, injectedError(f, revisionsResource, name)
	}
	cur := w.server.revision(name)
	conditions := fmt.Sprintf("uid %s, rv %s", ptr.Deref(uid, ""), ptr.Deref(rv, ""))
	if err := w.server.deleteIf(byController, revisionsResource, name, uid, rv); err != nil {
		w.logf("  → DELETE revision %s (%s): %v", name, conditions, err)
		if apierrors.IsConflict(err) {
			delete(w.deletedLately, name)
		}
		return true, nil, err
	}
	w.logf("  → DELETE revision %s (%s): deleted", name, conditions)
	w.checkRevisionDeleted(cur)
	if faulty {
		w.logf("    (answered: injected %s)", f)
		return true, nil, injectedError(f, revisionsResource, name)
	}
	return true, nil, nil
}

// ---- Checked at each request ----

// checkRevisionCreate checks a revision the controller creates: well formed,
// and the copy of its profile's content as the controller's cache shows it.
func (w *world) checkRevisionCreate(cm *corev1.ConfigMap) {
	profile, hash := cm.Annotations[worldRevisionOfAnnotation], cm.Labels[worldRevisionHashLabel]
	var wrong []string
	if cm.Namespace != worldNamespaceOf(cm.Name) {
		wrong = append(wrong, fmt.Sprintf("namespace %q", cm.Namespace))
	}
	if cm.Labels[worldRevisionLabel] != worldRevisionLabelValue {
		wrong = append(wrong, fmt.Sprintf("label %s=%q", worldRevisionLabel, cm.Labels[worldRevisionLabel]))
	}
	if cm.Labels[gamesv1.ProfileLabel] != "" {
		wrong = append(wrong, "carries the profile label")
	}
	if profile == "" || hash == "" || cm.Name != revisionNameOf(profile, hash) {
		wrong = append(wrong, fmt.Sprintf("named %q for profile %q and hash %q", cm.Name, profile, hash))
	}
	if !ptr.Deref(cm.Immutable, false) {
		wrong = append(wrong, "not immutable")
	}
	if got := ProfileHash(cm); got != hash {
		wrong = append(wrong, fmt.Sprintf("content hash %s, labelled %s", got, hash))
	}
	if len(cm.OwnerReferences) > 0 {
		wrong = append(wrong, fmt.Sprintf("owner references %v", cm.OwnerReferences))
	}
	if len(wrong) > 0 {
		w.violate("revision-malformed", "Create of revision %s: %s", cm.Name, strings.Join(wrong, "; "))
	}
	w.checkRevisionGranted(cm)
	cached := w.caches[profilesResource].profile(profileNameOf(profile))
	if cached == nil || ProfileHash(cached) != hash {
		current := "no such profile"
		if cached != nil {
			current = "its content hash is " + ProfileHash(cached)
		}
		w.violate("revision-not-current", "Create of revision %s of profile %s with hash %s, but the controller's profile cache shows %s",
			cm.Name, profile, hash, current)
	}
	// Recreating a revision the cache still holds is a wasted request,
	// unless the controller itself deleted it and its cache lags behind.
	if del, ok := w.revisionDeletions[cm.Name]; w.caches[revisionsResource].revision(cm.Name) != nil && (!ok || del.by != byController) {
		w.violate("revision-recreated", "Create of revision %s, which the controller's revision cache holds already", cm.Name)
	}
}

// checkRevisionDeleted is told of each revision the controller deleted: no
// Deployment on the server may mount it. One the controller's cache showed
// mounting it is a violation. One the cache did not show so (a write of the
// controller's not yet received, a Deployment outside the label filter) is
// the race deleteStaleRevisions documents: the controller cannot know of it.
// It is logged, and the sessions must heal it (checkRevisionsAtRest).
func (w *world) checkRevisionDeleted(rev *corev1.ConfigMap) {
	deletion := revisionDeletion{by: byController, step: w.step}
	for _, d := range w.server.deployments() {
		if mountedConfigMap(d) != rev.Name {
			continue
		}
		cached := w.caches[deploymentsResource].deployment(d.Name)
		if cached != nil && cached.UID == d.UID && mountedConfigMap(cached) == rev.Name {
			w.violate("revision-deleted-while-mounted", "Delete of revision %s, which Deployment %s (%s, rv %s) mounts, as the controller's cache shows (rv %s)",
				rev.Name, d.Name, d.UID, d.ResourceVersion, cached.ResourceVersion)
			continue
		}
		shown := "no Deployment of that name"
		if cached != nil {
			shown = fmt.Sprintf("%s (rv %s) mounting %q", cached.UID, cached.ResourceVersion, mountedConfigMap(cached))
		}
		w.logf("  race: revision %s deleted while Deployment %s (%s, rv %s, written by %s) mounts it; the controller's cache shows %s",
			rev.Name, d.Name, d.UID, d.ResourceVersion, w.lastWriter[d.Name], shown)
		deletion.raced = true
		w.races++
	}
	// Pods of ReplicaSets, old ones of a paused or stuck rollout included.
	for _, rs := range w.server.replicaSets() {
		if mountedRevision(&rs.Spec.Template) != rev.Name || !replicaSetHasPods(rs) {
			continue
		}
		obj := w.caches[replicaSetsResource].cached(worldNamespaceOf(rs.Name) + "/" + rs.Name)
		if cached, ok := obj.(*appsv1.ReplicaSet); ok && cached.UID == rs.UID && replicaSetHasPods(cached) &&
			mountedRevision(&cached.Spec.Template) == rev.Name {
			w.violate("revision-deleted-while-mounted", "Delete of revision %s, which %d pod(s) of ReplicaSet %s mount (it wants %d), as the controller's cache shows (%d, wants %d)",
				rev.Name, rs.Status.Replicas, rs.Name, ptr.Deref(rs.Spec.Replicas, 1), cached.Status.Replicas, ptr.Deref(cached.Spec.Replicas, 1))
			continue
		}
		w.logf("  race: revision %s deleted while %d pod(s) of ReplicaSet %s (%s) mount it (it wants %d); the controller's cache does not show that",
			rev.Name, rs.Status.Replicas, rs.Name, rs.UID, ptr.Deref(rs.Spec.Replicas, 1))
		deletion.raced = true
		w.races++
	}
	w.revisionDeletions[rev.Name] = deletion
}

// noteRevisionChange is told of each server change of a revision.
func (w *world) noteRevisionChange(ch change) {
	switch {
	case ch.old != nil && ch.new != nil:
		w.violate("revision-updated", "revision %s was changed by %s (rv %s→%s): revisions are immutable and never updated",
			ch.new.GetName(), ch.author, ch.old.GetResourceVersion(), ch.new.GetResourceVersion())
	case ch.new != nil:
		w.everRevision[ch.new.GetName()] = true
		delete(w.revisionDeletions, ch.new.GetName())
	}
}

// ---- A user ----

// deleteRevisionByUser deletes a revision, mounted or not: the controller
// must recreate the current one, and a session whose revision is gone moves
// to the current one.
func (w *world) deleteRevisionByUser() bool {
	revisions := w.server.revisions()
	if len(revisions) == 0 {
		return false
	}
	r := pick(w, revisions)
	must(w.server.delete(byUser, revisionsResource, r.Name, metav1.DeletePropagationBackground))
	w.revisionDeletions[r.Name] = revisionDeletion{by: byUser, step: w.step}
	w.logf("user: delete revision %s (%s)", r.Name, r.UID)
	return true
}

// ---- Checked at rest ----

// checkSessionRevision checks, at rest, a session whose labelled profile
// exists and whose Deployment it controls and may write, and which
// deploymentMismatches found mounting the revision of the profile's current
// content: that revision exists with exactly that content, and the status
// says the session runs it.
func (w *world) checkSessionRevision(s *gamesv1.GameSession, profile *corev1.ConfigMap) {
	hash := ProfileHash(profile)
	name := worldRevisionName(s.Namespace, profile.Name, hash)
	del := w.revisionDeletions[name]
	switch r := w.server.revision(name); {
	case r == nil && w.revisionQuota && (del.by == byUser || del.raced):
		// A user deleted it, or the controller did in the race that
		// checkRevisionDeleted logs (healed by creating it again), and the
		// quota refuses its re-creation: its ProfileRollout must say so
		// (checkRolloutsAtRest).
		if ro := w.rolloutOf(profile); ro == nil || rolloutBlockedReason(ro) != gamesv1.ReasonRevisionUnavailable {
			w.violate("rollout-silent", "GameSession %s: revision %s of profile %s is gone and cannot be created, but its ProfileRollout does not say so",
				s.Name, name, profile.Name)
		}
	case r == nil:
		w.violate("revision-missing", "GameSession %s: revision %s of profile %s does not exist%s", s.Name, name, profile.Name, w.describeDeletion(name))
	case !equality.Semantic.DeepEqual(r.Data, profile.Data) || !equality.Semantic.DeepEqual(r.BinaryData, profile.BinaryData):
		w.violate("revision-content", "revision %s holds data %v, but profile %s holds %v", name, r.Data, profile.Name, profile.Data)
	}
	if s.Status.ProfileRevision != name {
		w.violate("condition-lie", "GameSession %s: status.profileRevision is %q, want %q", s.Name, s.Status.ProfileRevision, name)
	}
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	if !conditionIs(upToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent) {
		w.violate("condition-lie", "GameSession %s: its Deployment runs revision %s, current for profile %s, but ProfileUpToDate is %s",
			s.Name, name, profile.Name, describeCondition(upToDate))
	}
}

// revisionsOutOfSight returns the revisions of the profile that the
// controller keeps for sessions whose Deployments are outside its cache
// (none, or its managed-by label removed), as revisionsOutOfSight keeps
// them: the revision a session's status names, and those its ReplicaSets
// scaled to zero mount, as the Deployment may mount them still or roll
// back to one (seeds 99414033, 99439428); and whether one of those
// sessions has a status of an earlier spec, or none, which keeps every
// revision of its namespace (seed 99922090).
func (w *world) revisionsOutOfSight(profile string) (outOfSight map[string]bool, unaccounted bool) {
	outOfSight = map[string]bool{}
	for _, s := range w.server.sessions() {
		// The revisions of annotation "pf-z" are the platform's own, in its
		// namespace, for its sessions; those of "platform/pf-z" are copies
		// in the world's.
		if revisionNamespace := worldNamespaceOf(revisionNameOf(profile, "")); s.Namespace != revisionNamespace ||
			!uses(s, profileNameOf(profile)) && profile != worldPlatformRef {
			continue
		}
		if d := w.server.deployment(s.Name); d != nil && d.Labels[worldManagedByLabel] == worldManagedByValue {
			continue
		}
		if len(s.Status.Conditions) == 0 || s.Status.ObservedGeneration < s.Generation {
			unaccounted = true
		}
		outOfSight[s.Status.ProfileRevision] = true
		for _, rs := range w.server.replicaSets() {
			if ref := metav1.GetControllerOf(rs); ref != nil && ref.Name == s.Name &&
				rs.Labels[worldManagedByLabel] == worldManagedByValue && ptr.Deref(rs.Spec.Replicas, 1) == 0 {
				outOfSight[mountedRevision(&rs.Spec.Template)] = true
			}
		}
	}
	return outOfSight, unaccounted
}

// checkRevisionsAtRest checks every revision on the server, and every
// revision a Deployment the controller can see mounts.
func (w *world) checkRevisionsAtRest() {
	revisions := w.server.revisions()
	byProfile := map[string][]string{}
	for _, r := range revisions {
		profile, hash := r.Annotations[worldRevisionOfAnnotation], r.Labels[worldRevisionHashLabel]
		if r.Name != revisionNameOf(profile, hash) || ProfileHash(r) != hash || !ptr.Deref(r.Immutable, false) ||
			r.Labels[worldRevisionLabel] != worldRevisionLabelValue {
			w.violate("revision-malformed", "revision %s (profile %q, hash %q, content hash %s, immutable %t)",
				r.Name, profile, hash, ProfileHash(r), ptr.Deref(r.Immutable, false))
		}
		byProfile[profile] = append(byProfile[profile], r.Name)
	}

	mounted := map[string][]string{} // revision name → Deployments and ReplicaSets with pods mounting it
	for _, d := range w.server.deployments() {
		if name := mountedConfigMap(d); name != "" {
			mounted[name] = append(mounted[name], d.Name)
		}
	}
	for _, rs := range w.server.replicaSets() {
		if name := mountedRevision(&rs.Spec.Template); name != "" && replicaSetHasPods(rs) {
			mounted[name] = append(mounted[name], "replicaset "+rs.Name)
			del, deleted := w.revisionDeletions[name]
			// A deletion in the race checkRevisionDeleted logs (the
			// ReplicaSet not yet in the controller's cache) is the
			// documented window; pods of a stuck rollout cannot heal it.
			if rs.Labels[worldManagedByLabel] == worldManagedByValue && w.everRevision[name] && w.server.revision(name) == nil &&
				(!deleted || (del.by != byUser && !del.raced)) {
				w.violate("revision-missing", "%d pod(s) of ReplicaSet %s mount revision %s, which does not exist%s",
					rs.Status.Replicas, rs.Name, name, w.describeDeletion(name))
			}
		}
	}
	// A mounted revision exists. Deployments outside the controller's label
	// filter are not its to know of (the documented limit of
	// deleteStaleRevisions); a revision a user deleted is gone for good
	// unless it is current, and so is one deleted in that race while the
	// quota refuses to create it again; the sessions of a current one are
	// checked by checkSessionRevision.
	for _, d := range w.server.deployments() {
		name := mountedConfigMap(d)
		if d.Labels[worldManagedByLabel] != worldManagedByValue || !w.everRevision[name] || w.server.revision(name) != nil {
			continue
		}
		if del, ok := w.revisionDeletions[name]; ok && (del.by == byUser || del.raced && w.revisionQuota) {
			continue
		}
		w.violate("revision-missing", "Deployment %s (%s, controller %s) mounts revision %s, which does not exist%s",
			d.Name, d.UID, describeController(d), name, w.describeDeletion(name))
	}

	// Each profile keeps the revisions mounted, its current one and at most
	// the history limit of others; in the sessions' namespace, the copies of
	// the platform's profile while it is granted there, and only those
	// mounted while it is not.
	for _, profile := range slices.Sorted(maps.Keys(byProfile)) {
		names := byProfile[profile]
		outOfSight, unaccounted := w.revisionsOutOfSight(profile)
		if profile == worldPlatformRef && !w.grantedOnServer() {
			for _, name := range names {
				if len(mounted[name]) == 0 && !outOfSight[name] {
					w.violate("revision-left-ungranted", "revision %s of %s stays in namespace %s, which no grant permits and no pod mounts it from",
						name, profile, worldNamespace)
				}
			}
			continue
		}
		if unaccounted {
			// A session outside the cache whose status does not say what
			// its Deployment mounts keeps every revision of its namespace.
			w.covered["revisions kept for a session out of sight"]++
			continue
		}
		inUse := 0
		for _, name := range names {
			if len(mounted[name]) > 0 || outOfSight[name] {
				inUse++
			}
		}
		current := 1 // whether or not the profile exists (and has one)
		// The stable revision, which new sessions start on during a
		// rollout, stays too.
		if p := w.server.profile(profileNameOf(profile)); p != nil {
			if r := w.rolloutOf(p); r != nil && r.Status.StableHash != "" && r.Status.StableHash != ProfileHash(p) &&
				len(mounted[revisionNameOf(profile, r.Status.StableHash)]) == 0 {
				current++
			}
		}
		if limit := inUse + current + worldRevisionHistoryLimit; len(names) > limit {
			w.violate("revisions-kept", "profile %s has %d revisions %v: %d mounted, %d current, history limit %d",
				profile, len(names), names, inUse, current, worldRevisionHistoryLimit)
		}
	}
}

func (w *world) describeDeletion(name string) string {
	del, ok := w.revisionDeletions[name]
	if !ok {
		return ""
	}
	raced := ""
	if del.raced {
		raced = ", in the race of a Deployment write the controller's cache did not show"
	}
	return fmt.Sprintf(" (deleted by %s at step %d%s)", del.by, del.step, raced)
}
