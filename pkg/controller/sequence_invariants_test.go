package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// What must hold of the controller. Some invariants are checked as the
// controller makes each request (what it may write, and when); the others
// once the world has settled (what the cluster looks like at rest).
//
// The expectations are written out here from the README, not taken from the
// controller's code: a test that asked NewDeployment what to expect would
// agree with any bug in it.

// Labels and names of the README's contract.
const (
	worldManagedByLabel   = "app.kubernetes.io/managed-by"
	worldManagedByValue   = "gamesession-controller"
	worldGameServer       = "game-server"
	worldProfileVolume    = "profile"
	worldProfileMountPath = "/etc/gamesession/profile"
)

// violation is an invariant that did not hold.
type violation struct {
	invariant string
	step      int
	message   string
}

func (w *world) violate(invariant, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.logf("!!! %s: %s", invariant, msg)
	w.violations = append(w.violations, violation{invariant: invariant, step: w.step, message: msg})
}

// ---- Checked at each request ----

func (w *world) checkControllerCreate(d *appsv1.Deployment) {
	s := w.caches[sessionsResource].session(d.Name)
	switch {
	case s == nil:
		w.violate("create-without-session", "Create of Deployment %s, but the controller's cache holds no GameSession of that name", d.Name)
		return
	case s.DeletionTimestamp != nil:
		w.violate("create-while-deleting", "Create of Deployment %s for GameSession %s (%s), whose deletion the controller's cache already shows",
			d.Name, s.Name, s.UID)
	case !controlledBy(d, s.UID):
		w.violate("create-not-controlled", "Create of Deployment %s not controlled by the cached GameSession %s (%s): owners %v",
			d.Name, s.Name, s.UID, d.OwnerReferences)
	}
	if w.cachedProfileOf(s) == nil {
		w.violate("write-without-profile", "Create of Deployment %s while its profile %s is missing from the controller's cache, or not granted",
			d.Name, s.Spec.ProfileRef)
	}
}

// checkControllerGet allows a live read of a Deployment right after its
// Create answered AlreadyExists, or for a session whose cached status
// describes a Deployment the cache does not show, whose Deployment the
// controller sent a write for, whose Deployment left the cache, whose
// Deployment's ReplicaSets the cache shows (one that lost its label, looked
// for without a create when the session has nothing to mount; a restarted
// controller knows it only by its ReplicaSets), whose cached status was
// written for an earlier spec (a Deployment may have been made since), or
// whose last write was answered 500 (applied or not, only a live read tells).
func (w *world) checkControllerGet(name string) {
	afterCreate := w.lastCreate.name == name && w.lastCreate.alreadyExists
	s := w.caches[sessionsResource].session(name)
	deployments := w.caches[deploymentsResource]
	lostFromCache := deployments.deployment(name) == nil && s != nil &&
		(s.Status.ProfileHash != "" || s.Status.Replicas > 0 || w.controllerTried[name] || deployments.everHeld[worldKeyOf(name)] ||
			w.replicaSetCachedOf(name) || s.Status.ObservedGeneration > 0 && s.Status.ObservedGeneration < s.Generation)
	if !afterCreate && !lostFromCache && !w.writeUnanswered[name] {
		w.violate("unexpected-request", "GET of Deployment %s other than right after a Create answered AlreadyExists, "+
			"after a write answered 500, or of a Deployment its session's status describes and the cache does not show: "+
			"syncs read the caches", name)
	}
	w.lastCreate = lastCreate{}
	delete(w.writeUnanswered, name)
}

// replicaSetCachedOf reports whether the controller's ReplicaSet cache holds
// a ReplicaSet that a Deployment of that name controls.
func (w *world) replicaSetCachedOf(name string) bool {
	return slices.ContainsFunc(w.caches[replicaSetsResource].indexer.List(), func(obj interface{}) bool {
		rs := obj.(*appsv1.ReplicaSet)
		ref := metav1.GetControllerOfNoCopy(rs)
		return rs.Namespace == worldNamespaceOf(name) && ref != nil && ref.Kind == "Deployment" && ref.Name == name
	})
}

// noteControllerWrite is told of each controller write that changed a
// Deployment (before is nil for a create).
func (w *world) noteControllerWrite(before, after *appsv1.Deployment) {
	name := after.Name
	w.syncWrote = true
	if before != nil {
		s := w.caches[sessionsResource].session(name)
		switch {
		case s == nil:
			w.violate("foreign-modified", "Patch changed Deployment %s, but the controller's cache holds no GameSession %s", name, name)
		case !controlledBy(before, s.UID):
			w.violate("foreign-modified", "Patch changed Deployment %s (%s), which GameSession %s (%s) does not control: its controller was %s",
				name, before.UID, s.Name, s.UID, describeController(before))
		case w.cachedProfileOf(s) == nil && !(worldDeliversLive(before, name) && worldDeliversLive(after, name)) &&
			(mountedConfigMap(after) != mountedConfigMap(before) || w.caches[revisionsResource].revision(mountedConfigMap(before)) == nil):
			// Without its profile, a session's spec is applied only with
			// the revision its Deployment mounts, while that revision exists.
			w.violate("write-without-profile", "Patch changed Deployment %s while its profile %s is missing from the controller's cache, "+
				"and it mounted %q, now %q, which the revision cache does not show", name, s.Spec.ProfileRef,
				mountedConfigMap(before), mountedConfigMap(after))
		}
	}
	// A session moves to a revision only once its cache holds it: the
	// revision exists then, or did moments ago. (A live session mounts its
	// live profile.)
	if name := mountedConfigMap(after); name != mountedConfigMap(before) && w.caches[revisionsResource].revision(name) == nil &&
		!worldDeliversLive(after, after.Name) {
		w.violate("mounts-uncached-revision", "Deployment %s written to mount %q, which the controller's revision cache does not hold (it mounted %q)",
			after.Name, name, mountedConfigMap(before))
	}
	w.checkMove(before, after)
	w.checkInputsWrite(before, after)
	w.checkKeyRestart(before, after)
	if w.live.on {
		w.checkSwitch(before, after)
		w.checkLiveRestart(before, after)
	}
	if !w.spendKeyRecord(before, after) {
		w.spendCredits(after)
	}
}

// ---- Checked at rest ----

func (w *world) checkAtRest() {
	for _, s := range w.server.sessions() {
		if s.DeletionTimestamp != nil {
			w.violate("stuck", "GameSession %s is still being deleted after the garbage collector finished", s.Name)
			continue
		}
		profile := w.serverProfileOf(s)
		if profile != nil && profile.Labels[gamesv1.ProfileLabel] != gamesv1.ProfileLabelValue {
			profile = nil
		}
		if d := w.server.deployment(s.Name); w.liveAtRest(s, profile, d) {
			w.checkLiveSessionAtRest(s, profile, d)
		} else {
			w.checkSessionAtRest(s, profile, d)
		}
		w.noteTenancyAtRest(s, w.server.deployment(s.Name))
	}
	for _, d := range w.server.deployments() {
		if want, ok := w.nonOwned[d.UID]; ok {
			if got := nonOwnedOf(d); got != want {
				w.violate("non-owned-lost", "Deployment %s: fields another writer set were changed: want %+v, have %+v", d.Name, want, got)
			}
		}
	}
	w.checkRevisionsAtRest()
	w.checkRolloutsAtRest()
	w.checkInputsAtRest()
	for _, c := range w.caches {
		if keys := c.mutated(); len(keys) > 0 {
			w.violate("cache-mutated", "the controller modified objects in its %s cache: %v", c.resource, keys)
		}
	}
}

func (w *world) checkSessionAtRest(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment) {
	ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
	resolved := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileResolved)
	if s.Status.ObservedGeneration != s.Generation {
		w.violate("condition-lie", "GameSession %s: status.observedGeneration is %d, metadata.generation %d",
			s.Name, s.Status.ObservedGeneration, s.Generation)
	}
	missing := gamesv1.ReasonProfileNotFound
	if crossNamespace(s) && !w.grantedOnServer() {
		missing = gamesv1.ReasonReferenceNotPermitted
	}
	if profile == nil && !conditionIs(resolved, metav1.ConditionFalse, missing) {
		w.violate("profile-missing-status", "GameSession %s: profile %s is missing or not granted, but ProfileResolved is %s",
			s.Name, s.Spec.ProfileRef, describeCondition(resolved))
	}
	if profile != nil && conditionIs(resolved, metav1.ConditionFalse, "") {
		w.violate("condition-lie", "GameSession %s: profile %s exists, but ProfileResolved is %s",
			s.Name, s.Spec.ProfileRef, describeCondition(resolved))
	}

	switch {
	case d != nil && !controlledBy(d, s.UID):
		// Someone else's Deployment: the session can only say so. Without a
		// profile it does not try to create its own, and so cannot know of
		// one outside its label-filtered cache.
		unseen := d.Labels[worldManagedByLabel] != worldManagedByValue
		waiting := profile == nil && unseen && conditionIs(ready, metav1.ConditionFalse, gamesv1.ReasonWaitingForProfile)
		// Nor with a profile whose revision it waits for.
		waiting = waiting || profile != nil && unseen && (conditionIs(ready, metav1.ConditionFalse, gamesv1.ReasonRevisionUnavailable) ||
			conditionIs(ready, metav1.ConditionFalse, gamesv1.ReasonRevisionPending))
		if !waiting && !conditionIs(ready, metav1.ConditionFalse, gamesv1.ReasonDeploymentNotControlled) {
			w.violate("condition-lie", "GameSession %s: Deployment %s is not controlled by it (controller %s), but Ready is %s",
				s.Name, d.Name, describeController(d), describeCondition(ready))
		}

	case profile != nil && d != nil && displacingContainer(s, d) != "":
		// The one owned field the controller does not put back, as decided
		// in docs/reliability.md: another container (a renamed game server)
		// declares the game server's ports, so the controller adds no second
		// container on them, leaves the Deployment as it is, and says so.
		if !conditionIs(ready, metav1.ConditionFalse, gamesv1.ReasonContainerConflict) && !w.noRevisionToMount(s, profile, d) {
			w.violate("condition-lie", "GameSession %s: container %s of Deployment %s declares the game server's ports, but Ready is %s",
				s.Name, displacingContainer(s, d), d.Name, describeCondition(ready))
		}
		w.checkStatusDescribes(s, d, resolved)
		w.checkUpToDateClaim(s, profile, d)

	case profile == nil:
		// Nothing to hold the Deployment to: it is left as it was.
		mismatches := deploymentMismatches(s, "", d)
		if conditionIs(ready, metav1.ConditionTrue, "") && (d == nil || len(mismatches) > 0 || !rolledOutAndReady(d)) {
			w.violate("condition-lie", "GameSession %s: Ready=True, but its Deployment %s", s.Name, describeDeployment(d, mismatches))
		}

	case w.heldAtRest(s, profile, d):
		// Its profile's rollout keeps it on the revision it runs, or, with
		// none yet, without a Deployment; everything else is as for any.
		w.checkUpToDateClaim(s, profile, d)
		if d == nil {
			return
		}
		if w.noRevisionToMount(s, profile, d) {
			// Its Deployment mounts no revision of the profile that exists
			// (or is outside the cache), and the current one cannot be
			// created: the controller has nothing to write it with, and
			// leaves it as it is.
			if mismatches := deploymentMismatches(s, "", d); conditionIs(ready, metav1.ConditionTrue, "") && (len(mismatches) > 0 || !rolledOutAndReady(d)) {
				w.violate("condition-lie", "GameSession %s: Ready is %s, but its Deployment, waiting for a revision to mount, %s",
					s.Name, describeCondition(ready), describeDeployment(d, mismatches))
			}
			return
		}
		mismatches := deploymentMismatches(s, "", d)
		if len(mismatches) > 0 {
			w.violate("deployment-mismatch", "GameSession %s (%s, generation %d), held by the rollout of profile %s: Deployment %s",
				s.Name, s.UID, s.Generation, profile.Name, describeDeployment(d, mismatches))
		}
		if isTrue := conditionIs(ready, metav1.ConditionTrue, ""); isTrue != (len(mismatches) == 0 && rolledOutAndReady(d)) {
			w.violate("condition-lie", "GameSession %s: Ready is %s, but the Deployment %s (status %s)",
				s.Name, describeCondition(ready), describeDeployment(d, mismatches), replicaCounts(d))
		}
		w.checkStatusDescribes(s, d, resolved)

	case d != nil && d.Labels[worldManagedByLabel] != worldManagedByValue && w.noRevisionToMount(s, profile, d):
		// Its Deployment is outside the controller's cache, and it has no
		// revision to create one with, which is what would find it: it can
		// only say what it waits for.
		if conditionIs(ready, metav1.ConditionTrue, "") {
			w.violate("condition-lie", "GameSession %s: Ready is %s, but it waits for a revision to mount", s.Name, describeCondition(ready))
		}

	default:
		wantHash := ProfileHash(profile)
		mismatches := deploymentMismatches(s, wantHash, d)
		if d == nil || len(mismatches) > 0 {
			w.violate("deployment-mismatch", "GameSession %s (%s, generation %d), profile %s (hash %s): Deployment %s; the session's Ready is %s",
				s.Name, s.UID, s.Generation, profile.Name, wantHash, describeDeployment(d, mismatches), describeCondition(ready))
		}
		if !conditionIs(resolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved) {
			w.violate("condition-lie", "GameSession %s: profile %s exists and nothing blocks the session, but ProfileResolved is %s",
				s.Name, profile.Name, describeCondition(resolved))
		}
		if d == nil {
			return
		}
		complete := len(mismatches) == 0 && rolledOutAndReady(d)
		if isTrue := conditionIs(ready, metav1.ConditionTrue, ""); isTrue != complete {
			w.violate("condition-lie", "GameSession %s: Ready is %s, but the Deployment %s (status %s)",
				s.Name, describeCondition(ready), describeDeployment(d, mismatches), replicaCounts(d))
		}
		w.checkStatusDescribes(s, d, resolved)
		w.checkSessionRevision(s, profile)
	}
}

// noRevisionToMount reports whether a session held at rest waits for its
// profile's current revision with nothing else to mount: its Deployment is
// outside the controller's cache, or mounts no existing revision of the
// profile that its annotation names.
func (w *world) noRevisionToMount(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment) bool {
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	if !conditionIs(upToDate, metav1.ConditionFalse, gamesv1.ReasonRevisionUnavailable) &&
		!conditionIs(upToDate, metav1.ConditionFalse, gamesv1.ReasonRevisionPending) {
		return false
	}
	hash := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	return d.Labels[worldManagedByLabel] != worldManagedByValue || w.server.revision(worldRevisionName(d.Namespace, profile.Name, hash)) == nil
}

// checkUpToDateClaim checks that a session whose Deployment the controller
// leaves as it is claims ProfileUpToDate only if the Deployment runs the
// profile's current revision.
func (w *world) checkUpToDateClaim(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment) {
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	if hash := ProfileHash(profile); conditionIs(upToDate, metav1.ConditionTrue, "") && !mountsRevision(d, profile.Name, hash) {
		w.violate("condition-lie", "GameSession %s: ProfileUpToDate is %s, but Deployment %s mounts %q, not revision %s of profile %s",
			s.Name, describeCondition(upToDate), d.Name, mountedConfigMap(d), worldRevisionName(d.Namespace, profile.Name, hash), profile.Name)
	}
}

// checkStatusDescribes checks that the status describes the session's own
// Deployment: its profile hash, when the status says the profile is rolled in,
// the revision it mounts, and its replica counts.
func (w *world) checkStatusDescribes(s *gamesv1.GameSession, d *appsv1.Deployment, resolved *metav1.Condition) {
	hash := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	if conditionIs(resolved, metav1.ConditionTrue, "") && s.Status.ProfileHash != hash {
		w.violate("condition-lie", "GameSession %s: ProfileResolved=True with status.profileHash %q, but the Deployment's annotation is %q",
			s.Name, s.Status.ProfileHash, hash)
	}
	// The revision it runs: the one its volume mounts, if its annotation
	// names the same content; else none is known.
	revision := ""
	if mountsRevision(d, s.Spec.ProfileRef, hash) {
		revision = worldRevisionName(d.Namespace, s.Spec.ProfileRef, hash)
	}
	if s.Status.ProfileRevision != revision {
		w.violate("condition-lie", "GameSession %s: status.profileRevision is %q, but the Deployment runs %q (mounts %q, annotation %q)",
			s.Name, s.Status.ProfileRevision, revision, mountedConfigMap(d), hash)
	}
	if s.Status.Replicas != d.Status.Replicas || s.Status.ReadyReplicas != d.Status.ReadyReplicas {
		w.violate("condition-lie", "GameSession %s: status says %d replicas, %d ready; the Deployment has %d, %d ready",
			s.Name, s.Status.Replicas, s.Status.ReadyReplicas, d.Status.Replicas, d.Status.ReadyReplicas)
	}
}

// displacingContainer returns the name of a container of d, other than the
// game server, that declares one of the session's ports, or "".
func displacingContainer(s *gamesv1.GameSession, d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == worldGameServer {
			continue
		}
		for _, p := range c.Ports {
			if slices.ContainsFunc(s.Spec.Ports, func(q gamesv1.GameServerPort) bool {
				return p.ContainerPort == q.ContainerPort && p.Protocol == q.Protocol
			}) {
				return c.Name
			}
		}
	}
	return ""
}

// deploymentMismatches compares the fields the controller owns with the
// session's spec; wantHash "" skips the profile hash, and then wants the
// volume to mount the revision of whatever hash the Deployment carries.
func deploymentMismatches(s *gamesv1.GameSession, wantHash string, d *appsv1.Deployment) []string {
	if d == nil {
		return nil
	}
	var m []string
	if !controlledBy(d, s.UID) {
		m = append(m, "is not controlled by the session, but by "+describeController(d))
	}
	for _, l := range [][2]string{
		{"app.kubernetes.io/name", "gamesession"}, {"app.kubernetes.io/instance", s.Name}, {worldManagedByLabel, worldManagedByValue},
	} {
		if got := d.Labels[l[0]]; got != l[1] {
			m = append(m, fmt.Sprintf("label %s=%q, want %q", l[0], got, l[1]))
		}
	}
	if got, want := ptr.Deref(d.Spec.Replicas, 1), ptr.Deref(s.Spec.Replicas, 1); got != want {
		m = append(m, fmt.Sprintf("replicas %d, want %d", got, want))
	}
	if got := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; wantHash != "" && got != wantHash {
		m = append(m, fmt.Sprintf("profile hash %q, want %q", got, wantHash))
	}
	var gameServers []corev1.Container
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == worldGameServer {
			gameServers = append(gameServers, c)
		}
	}
	if len(gameServers) != 1 {
		return append(m, fmt.Sprintf("has %d containers named %s", len(gameServers), worldGameServer))
	}
	c := gameServers[0]
	if c.Image != s.Spec.Image {
		m = append(m, fmt.Sprintf("image %q, want %q", c.Image, s.Spec.Image))
	}
	var wantPorts []corev1.ContainerPort
	for _, p := range s.Spec.Ports {
		wantPorts = append(wantPorts, corev1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: p.Protocol})
	}
	// Semantic equality holds an empty list equal to none.
	if !equality.Semantic.DeepEqual(c.Ports, wantPorts) {
		m = append(m, fmt.Sprintf("ports %v, want %v", c.Ports, wantPorts))
	}
	if !equality.Semantic.DeepEqual(c.Resources.Requests, s.Spec.Resources.Requests) ||
		!equality.Semantic.DeepEqual(c.Resources.Limits, s.Spec.Resources.Limits) {
		m = append(m, fmt.Sprintf("resources %s, want %s", describeResources(c.Resources.Requests, c.Resources.Limits),
			describeResources(s.Spec.Resources.Requests, s.Spec.Resources.Limits)))
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		mounted = mounted || vm.Name == worldProfileVolume && vm.MountPath == worldProfileMountPath && vm.ReadOnly
	}
	if !mounted {
		m = append(m, fmt.Sprintf("no read-only mount of volume %s at %s: %v", worldProfileVolume, worldProfileMountPath, c.VolumeMounts))
	}
	profileVolume := ""
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == worldProfileVolume && v.ConfigMap != nil {
			profileVolume = v.ConfigMap.Name
		}
	}
	if d.Spec.Template.Labels[worldDeliveryLabel] == "live" {
		// Delivered live: the session's live profile, and no content in
		// the template (world_live_test.go).
		if got := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; got != "" {
			m = append(m, fmt.Sprintf("delivers live, but carries profile hash %q", got))
		}
		if want := worldLiveProfileName(s.Name); profileVolume != want {
			m = append(m, fmt.Sprintf("profile volume names ConfigMap %q, want the live profile %q", profileVolume, want))
		}
		return m
	}
	// The immutable revision of the content, never the live profile.
	hash := wantHash
	if hash == "" {
		hash = d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	}
	if want := worldRevisionName(s.Namespace, s.Spec.ProfileRef, hash); profileVolume != want {
		m = append(m, fmt.Sprintf("profile volume names ConfigMap %q, want revision %q", profileVolume, want))
	}
	return m
}

func rolledOutAndReady(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation &&
		d.Status.Replicas == want && d.Status.UpdatedReplicas == want && d.Status.ReadyReplicas == want
}

func controlledBy(d *appsv1.Deployment, uid types.UID) bool {
	ref := metav1.GetControllerOf(d)
	return ref != nil && ref.UID == uid && ref.Kind == "GameSession" && ref.APIVersion == gamesv1.SchemeGroupVersion.String()
}

// nonOwnedFields are the fields of a Deployment that the world sets and the
// controller must leave alone.
type nonOwnedFields struct {
	note        string
	restartedAt string
	paused      bool
}

const worldNoteAnnotation = "world.example.com/note"

func nonOwnedOf(d *appsv1.Deployment) nonOwnedFields {
	return nonOwnedFields{note: d.Annotations[worldNoteAnnotation], restartedAt: d.Spec.Template.Annotations[restartedAtAnnotation], paused: d.Spec.Paused}
}

// checkIdle runs an informer resync of the settled world: every session
// syncs, and so does every profile sync that follows within planInterval,
// and none may make a request. The exception is a session whose name is
// taken by a Deployment outside the controller's label-filtered cache, which
// only a Create answered AlreadyExists and a live read can find.
func (w *world) checkIdle() {
	w.logf("idle: resync every cache")
	clear(w.requestsBy)
	w.call(func() {
		for _, c := range w.caches {
			c.resync()
		}
	})
	for i := 0; ; i++ {
		if i > 100 {
			w.violate("stuck", "an idle resync does not drain the queues")
			return
		}
		ok := true
		switch {
		case w.queue.hasReady():
			ok = w.sync()
		case w.profileQueue.hasReady():
			ok = w.syncProfile()
		default:
			next, waiting := w.profileQueue.nextWaiting()
			if !waiting || next.Sub(w.clock.Now()) > planInterval {
				ok = false
				break
			}
			w.advance(next.Sub(w.clock.Now()))
		}
		if !ok {
			break
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.requestsBy)) {
		if w.quotaRefused[name] && w.revisionQuota {
			continue // the profile sync retries the create the quota refuses
		}
		if w.everRevision[name] {
			w.violate("idle-requests", "the profile syncs after an idle resync made %d request(s) of revision %s", w.requestsBy[name], name)
			continue
		}
		if d := w.server.deployment(name); d != nil && d.Labels[worldManagedByLabel] != worldManagedByValue {
			continue
		}
		w.violate("idle-requests", "an idle resync of GameSession %s made %d request(s)", name, w.requestsBy[name])
	}
}

// ---- Descriptions for the messages ----

func conditionIs(c *metav1.Condition, status metav1.ConditionStatus, reason string) bool {
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason)
}

func describeCondition(c *metav1.Condition) string {
	if c == nil {
		return "missing"
	}
	return fmt.Sprintf("%s/%s (%q)", c.Status, c.Reason, c.Message)
}

func describeController(d *appsv1.Deployment) string {
	if ref := metav1.GetControllerOf(d); ref != nil {
		return fmt.Sprintf("%s %s (%s)", ref.Kind, ref.Name, ref.UID)
	}
	return "nobody"
}

func describeDeployment(d *appsv1.Deployment, mismatches []string) string {
	switch {
	case d == nil:
		return "does not exist"
	case len(mismatches) > 0:
		return fmt.Sprintf("%s (%s, rv %s): %s", d.Name, d.UID, d.ResourceVersion, strings.Join(mismatches, "; "))
	case !rolledOutAndReady(d):
		return fmt.Sprintf("%s matches the spec but is not rolled out and ready", d.Name)
	}
	return fmt.Sprintf("%s matches the spec and is rolled out and ready", d.Name)
}

func describeStatus(s *gamesv1.GameSessionStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, " [gen %d, %d/%d ready, hash %q", s.ObservedGeneration, s.ReadyReplicas, s.Replicas, s.ProfileHash)
	for _, c := range s.Conditions {
		fmt.Fprintf(&b, ", %s=%s/%s", c.Type, c.Status, c.Reason)
		if c.Reason == gamesv1.ReasonDeliveryFailed || c.Reason == gamesv1.ReasonDeliveryPending {
			// Live delivery: the counts, or the refusal, are the news.
			fmt.Fprintf(&b, " (%q)", c.Message)
		}
	}
	b.WriteString("]")
	return b.String()
}

func replicaCounts(d *appsv1.Deployment) string {
	return fmt.Sprintf("generation %d observed %d, %d replicas, %d updated, %d ready",
		d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas)
}
