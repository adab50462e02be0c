package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// The cases of issue 16 at the level of one sync each. The sequence harness
// (sequence_test.go) and test/integration replay them among other events.

// oldReplicaSet is the ReplicaSet of a Deployment's previous template,
// controlled by the Deployment, which mounts revision and still runs
// replicas pods.
func oldReplicaSet(d *appsv1.Deployment, revision string, replicas int32) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: d.Namespace, Name: d.Name + "-old", UID: types.UID(d.Name + "-old"), ResourceVersion: "5",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
		},
		Spec:   appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas), Template: *d.Spec.Template.DeepCopy()},
		Status: appsv1.ReplicaSetStatus{Replicas: replicas},
	}
	rs.Spec.Template.Spec.Volumes[0].ConfigMap.Name = revision
	slim, _ := SlimReplicaSet(rs)
	return slim.(*appsv1.ReplicaSet)
}

// Case 1: a revision stays while the pods of an old ReplicaSet mount it,
// though no Deployment's template does and no history is kept: a paused or
// stuck rollout still runs them, and a pod of theirs that is evicted must
// find its revision.
func TestRevisionStaysWhileAnOldReplicaSetHasPods(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 1, nil)
	f.c.profiles.revisionHistoryLimit = 0
	newHash := ProfileHash(profile)
	oldRevision := RevisionName("classic", oldHash)
	// s0 moved to the new revision; its old ReplicaSet still has 1 pod.
	moved := apiServerDeployment(settled(newSession(testNamespace, "s0", "classic"), newHash), newHash)
	f.setCached(moved)
	f.setCached(oldReplicaSet(moved, oldRevision, 1))

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic") // no delete
	f.events()

	// Scaled to zero, its revision goes.
	f.setCached(oldReplicaSet(moved, oldRevision, 0))
	f.expectKube(deleteConfigMap(testNamespace, oldRevision))
	f.runProfile(ctx, "arena/classic")
}

// A ReplicaSet scaled to zero recreates no pod, so it stops keeping its
// revision at once, and hands its profile to the profile sync.
func TestReplicaSetScaledDownQueuesItsProfile(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, _, oldHash := rolloutFixture(ctx, t, 1, nil)
	d := f.storedDeployment(testNamespace, "s0")
	before := oldReplicaSet(d, RevisionName("classic", oldHash), 1)
	after := before.DeepCopy()
	after.Spec.Replicas = ptr.To[int32](0)
	if replicaSetMounts(after) {
		t.Error("a ReplicaSet scaled to zero, its last pod on its way out, still counts as mounting")
	}
	drainQueue(f.c.profiles.queue)
	f.c.profiles.updateReplicaSet(before, after)
	if got := waitForProfileKeys(f.c); len(got) != 1 || got[0] != "arena/classic" {
		t.Errorf("profile queue %v, want the profile of the revision", got)
	}
}

// A Deployment whose managed-by label a user removed is out of the cache.
// Scaled to zero, and its session's status naming no revision (no
// controller wrote it yet), only its ReplicaSet, which the cache still shows
// (it carries the pod template's labels), tells which revision it mounts:
// that revision stays until the Deployment is back in the cache, which
// queues the profile to look again.
func TestRevisionStaysForAScaledDownDeploymentOutOfTheCache(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 1, nil)
	f.c.profiles.revisionHistoryLimit = 0
	oldRevision := RevisionName("classic", oldHash)
	d := f.storedDeployment(testNamespace, "s0")
	d.Spec.Replicas = ptr.To[int32](0)
	f.deleteCached(d)
	session := newSession(testNamespace, "s0", "classic")
	session.Spec.Replicas = ptr.To[int32](0)
	f.setCached(session)
	f.setCached(oldReplicaSet(d, oldRevision, 0))

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic") // no delete
	f.events()

	// The label is back, and the Deployment moved on.
	moved := apiServerDeployment(session, ProfileHash(profile))
	f.setCached(moved)
	drainQueue(f.c.profiles.queue)
	f.c.sessions.addDeployment(moved)
	if got := waitForProfileKeys(f.c); len(got) != 1 || got[0] != "arena/classic" {
		t.Fatalf("profile queue %v once the Deployment is back, want the profile of its old revision", got)
	}
	f.expectKube(deleteConfigMap(testNamespace, oldRevision))
	f.expectRolloutWrite(testNamespace, "classic") // one member now
	f.runProfile(ctx, "arena/classic")
}

// A Deployment created paused (so without a ReplicaSet) and then stripped
// of its managed-by label, whose session's status no sync has written for
// its current spec, is out of every cache: nothing readable names the
// revision it mounts. Until the session's sync has written a status, every
// revision of its profile in its namespace stays (seeds 20000011, 91011707).
func TestRevisionStaysForAnUnaccountedSession(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, _, oldHash := rolloutFixture(ctx, t, 1, nil)
	f.c.profiles.revisionHistoryLimit = 0
	oldRevision := RevisionName("classic", oldHash)
	f.deleteCached(f.storedDeployment(testNamespace, "s0"))
	session := newSession(testNamespace, "s0", "classic")
	session.Generation = 2
	session.Status.ObservedGeneration = 1 // written for the spec before
	session.Status.Conditions = []metav1.Condition{{Type: gamesv1.ConditionReady, Status: metav1.ConditionFalse, Reason: gamesv1.ReasonRevisionPending}}
	f.setCached(session)

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic") // no delete
	f.events()

	// The session's sync wrote a status for its spec, naming no revision:
	// it runs none.
	session = session.DeepCopy()
	session.Status.ObservedGeneration = 2
	f.setCached(session)
	f.expectKube(deleteConfigMap(testNamespace, oldRevision))
	f.runProfile(ctx, "arena/classic")
}

// The same Deployment, running, seen by a restarted controller while its
// profile's current revision is missing: the session has nothing to mount
// and no status that names its Deployment, and the controller has not seen
// the Deployment leave the cache. Its ReplicaSets, which the cache shows,
// tell that it may run: the session looks for it, and its status describes
// the game servers that run, not none.
func TestSyncNothingToMountFindsItsDeploymentByItsReplicaSets(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, oldHash, d := uncachedDeploymentWithNothingToMount(ctx, t)
	f.setCached(oldReplicaSet(d, RevisionName("classic", oldHash), 1))
	f.setCached(newSession(testNamespace, "s0", "classic")) // no status written yet

	f.expectKube(getDeployment(testNamespace, "s0"))
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	_, game := f.run(ctx, "arena/s0")
	status := objectOf[*gamesv1.GameSession](t, game[0]).Status
	if status.ProfileHash != oldHash || status.ProfileRevision != RevisionName("classic", oldHash) {
		t.Errorf("status says profile hash %q, revision %q; want those the Deployment runs, %q", status.ProfileHash, status.ProfileRevision, oldHash)
	}
	if status.Replicas != d.Status.Replicas || status.ReadyReplicas != d.Status.ReadyReplicas {
		t.Errorf("status says %d replicas, %d ready; the Deployment has %d, %d", status.Replicas, status.ReadyReplicas,
			d.Status.Replicas, d.Status.ReadyReplicas)
	}
}

// uncachedDeploymentWithNothingToMount is a rolloutFixture of one session,
// s0, whose profile's current revision is missing, and whose Deployment, on
// the old content, lost its managed-by label and so left the cache.
func uncachedDeploymentWithNothingToMount(ctx context.Context, t *testing.T) (*fixture, string, *appsv1.Deployment) {
	t.Helper()
	f, profile, oldHash := rolloutFixture(ctx, t, 1, nil)
	f.deleteCached(newRevision(profile, ProfileHash(profile), profile.Namespace))
	d := f.storedDeployment(testNamespace, "s0")
	f.deleteCached(d)
	delete(d.Labels, LabelManagedBy)
	if err := f.kubeClient.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), d, testNamespace); err != nil {
		t.Fatal(err)
	}
	return f, oldHash, d
}

// The same Deployment without a ReplicaSet (paused before it made one), its
// session's status written for an earlier spec that had no Deployment: the
// status tells nothing of a Deployment created since, so the session looks
// for it rather than report none, which would let its revision be deleted
// under it (seed 99169144).
func TestSyncWithAStatusOfAnEarlierSpecLooksForItsDeployment(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, oldHash, _ := uncachedDeploymentWithNothingToMount(ctx, t)
	session := newSession(testNamespace, "s0", "classic")
	session.Generation = 3
	session.Status.ObservedGeneration = 2 // no Deployment then: no hash, no replicas
	session.Status.Conditions = []metav1.Condition{{Type: gamesv1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: gamesv1.ReasonDeploymentDeleting, ObservedGeneration: 2}}
	f.setCached(session)

	f.expectKube(getDeployment(testNamespace, "s0"))
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	_, game := f.run(ctx, "arena/s0")
	status := objectOf[*gamesv1.GameSession](t, game[0]).Status
	if status.ProfileHash != oldHash || status.ProfileRevision != RevisionName("classic", oldHash) {
		t.Errorf("status says profile hash %q, revision %q; want those the Deployment runs, %q", status.ProfileHash, status.ProfileRevision, oldHash)
	}
}

// The same, when the ReplicaSet arrives after the session's last sync (the
// restarted controller synced it before kube-controller-manager made one):
// its arrival queues the session, which would otherwise look for its
// Deployment only at the next resync (seed 92169787). A ReplicaSet of a
// Deployment the cache shows queues nothing: that Deployment's own events do.
func TestReplicaSetOfAnUncachedDeploymentQueuesItsSession(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, _, oldHash := rolloutFixture(ctx, t, 2, nil)
	uncached := f.storedDeployment(testNamespace, "s0")
	f.deleteCached(uncached)
	cached := f.storedDeployment(testNamespace, "s1")
	drainQueue(f.c.sessions.queue)

	handlers := f.c.eventHandlers().replicaSets
	handlers.OnAdd(oldReplicaSet(cached, RevisionName("classic", oldHash), 1), false)
	if got := drainQueue(f.c.sessions.queue); len(got) != 0 {
		t.Errorf("session queue %v after a ReplicaSet of a cached Deployment arrived, want nothing", got)
	}
	handlers.OnAdd(oldReplicaSet(uncached, RevisionName("classic", oldHash), 1), false)
	if got := drainQueue(f.c.sessions.queue); !slices.Equal(got, []string{"arena/s0"}) {
		t.Errorf("session queue %v after a ReplicaSet of a Deployment outside the cache arrived, want [arena/s0]", got)
	}
}

// waitForProfileKeys returns the profile keys queued, including those
// queued for after planInterval, waiting up to 20 planIntervals for one.
func waitForProfileKeys(c *Controller) []string {
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*planInterval, true,
		func(context.Context) (bool, error) { return c.profiles.queue.Len() > 0, nil })
	return drainQueue(c.profiles.queue)
}

// Case 2: a fix-forward does not halt on the previous generation's
// ProgressDeadlineExceeded, which the Deployment still carries until the
// Deployment controller observes the new generation.
func TestStaleProgressDeadlineIsNoFailure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 3, map[string]string{
		rollout.AnnotationCanary: "1", rollout.AnnotationMaxFailed: "0",
	})
	fixed := ProfileHash(profile)
	canary := apiServerDeployment(settled(newSession(testNamespace, "s0", "classic"), fixed), fixed)
	canary.Generation = 3 // moved to the fixed content; not yet observed
	canary.Status.ObservedGeneration = 2
	canary.Status.ReadyReplicas, canary.Status.UpdatedReplicas = 0, 0
	canary.Status.Conditions = []appsv1.DeploymentCondition{{
		Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
	}}
	f.setCached(canary)

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.expectEvents("Normal " + EventReasonRolloutStarted)
	if pp := f.c.state.plans.latest("arena/classic"); pp.plan.Phase != rollout.PhaseCanary || pp.plan.Failed != 0 {
		t.Errorf("plan %s with %d failed, want the canary phase and no failure", pp.plan.Phase, pp.plan.Failed)
	}
}

// The same for a move back to earlier data of a Secret: the Deployment
// controller keeps the timed-out condition naming the ReplicaSet of the data
// that failed, which mounts the same revision, while the ReplicaSet of the
// earlier data, which exists already, scales up. That is no failure of the
// move back; a timed-out condition naming the ReplicaSet of the data the
// template runs is.
func TestStaleProgressDeadlineOfOtherSecretDataIsNoFailure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 1, nil)
	hash := ProfileHash(profile)
	d := apiServerDeployment(settled(newSession(testNamespace, "s0", "classic"), hash), hash)
	d.Spec.Template.Annotations[gamesv1.SecretsAnnotation] = "blue"
	d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation] = "earlier"
	d.Status.ObservedGeneration = d.Generation
	d.Status.ReadyReplicas = 0
	broken := oldReplicaSet(d, RevisionName("classic", hash), 1)
	raw := broken.DeepCopy()
	raw.Spec.Template.Annotations = map[string]string{gamesv1.SecretsHashAnnotation: "failed", "kept": "no"}
	slim, _ := SlimReplicaSet(raw)
	broken = slim.(*appsv1.ReplicaSet)
	if got := broken.Spec.Template.Annotations; len(got) != 1 || got[gamesv1.SecretsHashAnnotation] != "failed" {
		t.Fatalf("the slim ReplicaSet keeps the template annotations %v, want the Secrets' digest only", got)
	}
	f.setCached(broken)
	d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
		Reason: "ProgressDeadlineExceeded", Message: fmt.Sprintf("ReplicaSet %q has timed out progressing.", broken.Name)}}
	if f.c.caches.progressDeadlineExceeded(d) {
		t.Error("a move back to earlier Secret data reads as failed on the timed-out condition of the data that failed")
	}
	onFailed := d.DeepCopy()
	onFailed.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation] = "failed"
	if !f.c.caches.progressDeadlineExceeded(onFailed) {
		t.Error("a Deployment timed out on the data its template runs does not read as failed")
	}
}

// Case 3: a session that is not on its profile's content asks for a plan,
// even after the rollout completed: a completed plan is not final.
func TestSessionOffTargetAsksForAPlanAfterCompletion(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 2, map[string]string{rollout.AnnotationMaxRolling: "1"})
	f.c.profiles.revisionHistoryLimit = 5
	hash := ProfileHash(profile)
	for _, name := range []string{"s0", "s1"} {
		f.setCached(apiServerDeployment(settled(newSession(testNamespace, name, "classic"), hash), hash))
	}
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.events()
	if pp := f.c.state.plans.latest("arena/classic"); !pp.plan.Settled {
		t.Fatalf("plan %+v, want it settled", pp.plan)
	}
	// s1's Deployment comes back on the old content (it left the cache and
	// returned, say).
	f.setCached(f.storedDeployment(testNamespace, "s1"))
	drainQueue(f.c.profiles.queue)
	f.expectGame(updateSessionStatus(testNamespace, "s1"))
	f.run(ctx, "arena/s1")
	if got := waitForProfileKeys(f.c); len(got) != 1 {
		t.Errorf("profile queue %v after the sync of a session off its target, want its profile", got)
	}
	// The next plan admits it.
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	if pp := f.c.state.plans.latest("arena/classic"); !pp.plan.Admits("s1") {
		t.Errorf("plan %+v does not admit s1", pp.plan)
	}
}

// Case 4: a revision that cannot be created is reported with the API
// server's reason, on the ProfileRollout and as an Event; the sessions say
// they wait for it; and the other steps of the profile sync still run.
func TestRevisionCreateFailureIsReportedAndCleanupStillRuns(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 1, nil)
	f.c.profiles.revisionHistoryLimit = 0
	f.deleteCached(newRevision(profile, ProfileHash(profile), profile.Namespace))
	stale := newRevision(withData(profile, map[string]string{"game.cfg": "older"}), ProfileHash(withData(profile, map[string]string{"game.cfg": "older"})), profile.Namespace)
	f.setCached(stale)
	quota := apierrors.NewForbidden(corev1.Resource("configmaps"), RevisionName("classic", ProfileHash(profile)),
		errors.New("exceeded quota: cm-quota, requested: count/configmaps=1, used: count/configmaps=5, limited: count/configmaps=5"))
	f.kubeClient.PrependReactor("create", "configmaps", func(core.Action) (bool, runtime.Object, error) { return true, nil, quota })

	f.expectKube(createConfigMap(testNamespace, RevisionName("classic", ProfileHash(profile))), deleteConfigMap(testNamespace, stale.Name))
	f.expectRolloutWrite(testNamespace, "classic")
	kube, game, err := f.runSync(ctx, "arena/classic", f.c.profiles.syncProfile)
	if err == nil {
		t.Error("the profile sync succeeded; want the create error, for a retry")
	}
	_ = kube
	f.observe(game...)
	events := f.events()
	if len(events) != 2 || !strings.HasPrefix(events[0], "Warning "+gamesv1.ReasonRevisionCreateFailed) || !strings.Contains(events[0], "exceeded quota") {
		t.Errorf("events %q, want one Warning %s quoting the API server", events, gamesv1.ReasonRevisionCreateFailed)
	}
	r, err := f.c.caches.rolloutLister.ProfileRollouts(testNamespace).Get("classic")
	if err != nil {
		t.Fatal(err)
	}
	c := expectCondition(t, r.Status.Conditions, gamesv1.ConditionRevisionAvailable, metav1.ConditionFalse, gamesv1.ReasonRevisionCreateFailed)
	if !strings.Contains(c.Message, "exceeded quota") {
		t.Errorf("RevisionAvailable message %q lacks the API server's reason", c.Message)
	}
	expectCondition(t, r.Status.Conditions, gamesv1.ConditionStalled, metav1.ConditionTrue, gamesv1.ReasonRevisionCreateFailed)

	// The session keeps its revision and says why, never RevisionCurrent.
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	_, game = f.run(ctx, "arena/s0")
	status := objectOf[*gamesv1.GameSession](t, game[0]).Status
	c = expectCondition(t, status.Conditions, gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonRevisionUnavailable)
	if !strings.Contains(c.Message, "exceeded quota") {
		t.Errorf("ProfileUpToDate message %q lacks the API server's reason", c.Message)
	}
	if status.ProfileRevision != RevisionName("classic", oldHash) {
		t.Errorf("status.profileRevision %q, want the revision it runs", status.ProfileRevision)
	}
}

// A ConfigMap of the revision's name that is not a revision is reported as
// such, and is no error to retry.
func TestRevisionNameTakenIsReported(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 1, nil)
	name := RevisionName("classic", ProfileHash(profile))
	f.deleteCached(newRevision(profile, ProfileHash(profile), profile.Namespace))
	if err := f.kubeClient.Tracker().Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name}}); err != nil {
		t.Fatal(err)
	}
	// The create answers AlreadyExists; a live read tells a foreign
	// ConfigMap from the controller's own revision not cached yet.
	f.expectKube(createConfigMap(testNamespace, name),
		wantAction{verb: "get", resource: "configmaps", namespace: testNamespace, name: name})
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	events := f.events()
	if want := fmt.Sprintf("Warning %s "+MessageRevisionConflict, gamesv1.ReasonRevisionNameTaken, name, RevisionLabel); len(events) == 0 || events[0] != want {
		t.Errorf("events %q, want first %q", events, want)
	}
	r, _ := f.c.caches.rolloutLister.ProfileRollouts(testNamespace).Get("classic")
	expectCondition(t, r.Status.Conditions, gamesv1.ConditionRevisionAvailable, metav1.ConditionFalse, gamesv1.ReasonRevisionNameTaken)
}

// Case 5: the plan holds for the policy it was made with. A session that
// syncs after the profile was paused, before the next plan, does not move.
func TestPolicyChangeInvalidatesThePlan(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 3, map[string]string{rollout.AnnotationMaxRolling: "3"})
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.events()
	if pp := f.c.state.plans.latest("arena/classic"); !pp.plan.Admits("s1") {
		t.Fatalf("plan %+v does not admit s1", pp.plan)
	}
	paused := profile.DeepCopy()
	paused.Annotations = map[string]string{rollout.AnnotationMaxRolling: "3", rollout.AnnotationPaused: "true"}
	paused.ResourceVersion = bumpVersion(profile.ResourceVersion)
	f.setCached(paused)

	f.expectGame(updateSessionStatus(testNamespace, "s1")) // no Deployment write
	_, game := f.run(ctx, "arena/s1")
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonWaitingForTurn)
	if got := rolledProfileHash(f.storedDeployment(testNamespace, "s1"), "classic"); got != oldHash {
		t.Errorf("s1 runs %q, want the old content", got)
	}
}

// A halt is remembered in the ProfileRollout: a plan after the failed
// session went (deleted, say), or after a restart, is still halted.
func TestHaltHoldsWithoutTheFailures(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 3, map[string]string{
		rollout.AnnotationCanary: "1", rollout.AnnotationMaxFailed: "0",
	})
	hash := ProfileHash(profile)
	stored := newProfileRollout(profile)
	stored.ResourceVersion = "7"
	stored.Status = gamesv1.ProfileRolloutStatus{TargetHash: hash, HaltedHash: hash, StableHash: oldHash,
		Phase: gamesv1.RolloutPhaseHalted}
	f.setCached(stored)
	if err := f.gameClient.Tracker().Add(stored); err != nil {
		t.Fatal(err)
	}

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	pp := f.c.state.plans.latest("arena/classic")
	if pp.plan.Phase != rollout.PhaseHalted || len(pp.plan.Admitted) > 0 {
		t.Errorf("plan %s admitting %v, want halted", pp.plan.Phase, pp.plan.Admitted)
	}
	r, _ := f.c.caches.rolloutLister.ProfileRollouts(testNamespace).Get("classic")
	if r.Status.HaltedHash != hash || r.Status.Phase != gamesv1.RolloutPhaseHalted {
		t.Errorf("ProfileRollout halted %q in phase %s, want the halt kept", r.Status.HaltedHash, r.Status.Phase)
	}
	expectCondition(t, r.Status.Conditions, gamesv1.ConditionStalled, metav1.ConditionTrue, gamesv1.ReasonRolloutHalted)
}

// A session whose profileRef changes to a profile whose rollout is halted
// starts on that profile's stable revision, not on the failing one.
func TestProfileRefChangeToAHaltedProfileStartsOnStable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 2, map[string]string{
		rollout.AnnotationCanary: "1", rollout.AnnotationMaxFailed: "0",
	})
	hash := ProfileHash(profile)
	failed := apiServerDeployment(settled(newSession(testNamespace, "s0", "classic"), hash), hash)
	failed.Status.ReadyReplicas, failed.Status.UpdatedReplicas = 0, 0
	failed.Status.Conditions = []appsv1.DeploymentCondition{{
		Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
	}}
	f.setCached(failed)
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.events()

	// gs-x ran profile "other"; it now references classic.
	other := newProfile(testNamespace, "other", map[string]string{"game.cfg": "other"})
	f.setCached(other)
	switched := newSession(testNamespace, "gs-x", "other")
	d := apiServerDeployment(settled(switched, ProfileHash(other)), ProfileHash(other))
	switched.Spec.ProfileRef = "classic"
	switched.Generation = 2
	f.setCached(switched)
	f.setCached(d)
	if err := f.kubeClient.Tracker().Add(d); err != nil {
		t.Fatal(err)
	}
	if err := f.gameClient.Tracker().Add(switched); err != nil {
		t.Fatal(err)
	}
	f.expectKube(writeDeployment(testNamespace, "gs-x"))
	f.expectGame(updateSessionStatus(testNamespace, "gs-x"))
	f.run(ctx, "arena/gs-x")
	if got := rolledProfileHash(f.storedDeployment(testNamespace, "gs-x"), "classic"); got != oldHash {
		t.Errorf("gs-x runs %q, want the stable %q", got, oldHash)
	}
}

// A Conflict on a revision delete leaves the revision as the cache shows
// it: available to mount, not taken for deleted.
func TestRevisionDeleteConflictIsNotADelete(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 1, nil)
	f.c.profiles.revisionHistoryLimit = 0
	olderProfile := withData(profile, map[string]string{"game.cfg": "older"})
	stale := newRevision(olderProfile, ProfileHash(olderProfile), olderProfile.Namespace)
	stale.UID, stale.ResourceVersion = "stale-uid", "3"
	f.setCached(stale)
	f.kubeClient.PrependReactor("delete", "configmaps", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), stale.Name, errors.New("precondition failed"))
	})
	f.expectKube(deleteConfigMap(testNamespace, stale.Name))
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	if !f.c.profiles.revisionAvailable(testNamespace, "classic", ProfileHash(olderProfile)) {
		t.Error("a revision whose delete was refused with a Conflict is taken for deleted")
	}
}

// A revision whose delete went unanswered (a 500) and that is kept again
// by the next profile sync is read live: still there, it may be mounted at
// once, not only when the expectation of its delete times out, which no
// event announces (seed 99120355).
func TestRevisionKeptAfterAnUnansweredDeleteIsReadAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 1, nil)
	f.c.profiles.revisionHistoryLimit = 0
	olderProfile := withData(profile, map[string]string{"game.cfg": "older"})
	stale := newRevision(olderProfile, ProfileHash(olderProfile), olderProfile.Namespace)
	stale.UID, stale.ResourceVersion = "stale-uid", "3"
	f.setCached(stale)
	if err := f.kubeClient.Tracker().Add(stale); err != nil {
		t.Fatal(err)
	}
	f.kubeClient.PrependReactor("delete", "configmaps", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("injected"))
	})
	f.expectKube(deleteConfigMap(testNamespace, stale.Name))
	f.expectRolloutWrite(testNamespace, "classic")
	if _, _, err := f.runSync(ctx, "arena/classic", f.c.profiles.syncProfile); err == nil {
		t.Fatal("a delete answered 500 was not retried")
	}
	if f.c.profiles.revisionAvailable(testNamespace, "classic", ProfileHash(olderProfile)) {
		t.Fatal("a revision whose delete may have been made is available to mount")
	}

	f.c.profiles.revisionHistoryLimit = 10 // kept now
	f.expectKube(wantAction{verb: "get", resource: "configmaps", namespace: testNamespace, name: stale.Name})
	f.runProfile(ctx, "arena/classic")
	if !f.c.profiles.revisionAvailable(testNamespace, "classic", ProfileHash(olderProfile)) {
		t.Error("a revision kept, that a live read finds after its unanswered delete, is not available to mount")
	}
}

// The ProfileRollout is written per rollout step, not per session: the
// sessions moving one by one within a tenth write nothing.
func TestRolloutStatusIsWrittenPerStep(t *testing.T) {
	base := &gamesv1.ProfileRolloutStatus{TargetHash: "h", Phase: gamesv1.RolloutPhaseRolling,
		TotalSessions: 100, MovedSessions: 31, ReadySessions: 20}
	for _, tc := range []struct {
		name string
		edit func(*gamesv1.ProfileRolloutStatus)
		want bool
	}{
		{"nothing", func(*gamesv1.ProfileRolloutStatus) {}, false},
		{"a session moved within the tenth", func(s *gamesv1.ProfileRolloutStatus) { s.MovedSessions = 39 }, false},
		{"a session Ready within the tenth", func(s *gamesv1.ProfileRolloutStatus) { s.ReadySessions = 29 }, false},
		{"moved past a tenth", func(s *gamesv1.ProfileRolloutStatus) { s.MovedSessions = 40 }, true},
		{"a session failed", func(s *gamesv1.ProfileRolloutStatus) { s.FailedSessions = 1 }, true},
		{"a session joined", func(s *gamesv1.ProfileRolloutStatus) { s.TotalSessions = 101 }, false},
		{"a tenth joined", func(s *gamesv1.ProfileRolloutStatus) { s.TotalSessions = 111 }, true},
		{"phase", func(s *gamesv1.ProfileRolloutStatus) { s.Phase = gamesv1.RolloutPhaseHalted }, true},
		{"blocked", func(s *gamesv1.ProfileRolloutStatus) { s.Blocked = []gamesv1.BlockedSession{{Name: "s1"}} }, true},
		{"sessions wait for the cluster's budget", func(s *gamesv1.ProfileRolloutStatus) {
			s.ClusterBudget = &gamesv1.ClusterBudgetWait{WaitingSessions: 3, Namespaces: []gamesv1.NamespaceShare{{Namespace: "arena", WaitingSessions: 3}}}
		}, true},
	} {
		next := base.DeepCopy()
		tc.edit(next)
		if got := rolloutStepped(base, next); got != tc.want {
			t.Errorf("%s: stepped %v, want %v", tc.name, got, tc.want)
		}
	}

	waiting := base.DeepCopy()
	waiting.ClusterBudget = &gamesv1.ClusterBudgetWait{WaitingSessions: 35, Namespaces: []gamesv1.NamespaceShare{
		{Namespace: "arena", WaitingSessions: 35, HeldPlaces: 4, FairShare: 2}}}
	for _, tc := range []struct {
		name string
		edit func(*gamesv1.ClusterBudgetWait)
		want bool
	}{
		{"one fewer waits", func(b *gamesv1.ClusterBudgetWait) { b.WaitingSessions, b.Namespaces[0].WaitingSessions = 34, 34 }, false},
		{"a place more held", func(b *gamesv1.ClusterBudgetWait) { b.Namespaces[0].HeldPlaces = 5 }, false},
		{"a tenth fewer wait", func(b *gamesv1.ClusterBudgetWait) { b.WaitingSessions, b.Namespaces[0].WaitingSessions = 19, 19 }, true},
		{"another namespace shares it", func(b *gamesv1.ClusterBudgetWait) {
			b.Namespaces = append(b.Namespaces, gamesv1.NamespaceShare{Namespace: "tenant-b", HeldPlaces: 3, FairShare: 2})
		}, true},
	} {
		next := waiting.DeepCopy()
		tc.edit(next.ClusterBudget)
		if got := rolloutStepped(waiting, next); got != tc.want {
			t.Errorf("cluster budget, %s: stepped %v, want %v", tc.name, got, tc.want)
		}
	}
	if next := waiting.DeepCopy(); !rolloutStepped(waiting, func() *gamesv1.ProfileRolloutStatus { next.ClusterBudget = nil; return next }()) {
		t.Error("the last waiting session gone is no step")
	}
}

// A paused Deployment that holds the canary is reported on the rollout, by
// name, and the sessions waiting on it say so: never a silent
// WaitingForTurn.
func TestBlockedCanaryIsReportedByName(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 3, map[string]string{rollout.AnnotationCanary: "1"})
	hash := ProfileHash(profile)
	canary := apiServerDeployment(settled(newSession(testNamespace, "s0", "classic"), hash), hash)
	canary.Spec.Paused = true
	canary.Status.ReadyReplicas, canary.Status.UpdatedReplicas = 0, 0
	f.setCached(canary)

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.expectEvents("Warning "+EventReasonRolloutBlocked, "Normal "+EventReasonRolloutStarted)
	r, _ := f.c.caches.rolloutLister.ProfileRollouts(testNamespace).Get("classic")
	if len(r.Status.Blocked) != 1 || r.Status.Blocked[0] != (gamesv1.BlockedSession{Name: "s0", Reason: gamesv1.ReasonDeploymentPaused}) {
		t.Errorf("blocked %v, want s0 (%s)", r.Status.Blocked, gamesv1.ReasonDeploymentPaused)
	}
	stalled := meta.FindStatusCondition(r.Status.Conditions, gamesv1.ConditionStalled)
	if stalled == nil || stalled.Reason != gamesv1.ReasonSessionsBlocked || !strings.Contains(stalled.Message, "s0 (DeploymentPaused)") {
		t.Errorf("Stalled %+v, want SessionsBlocked naming s0", stalled)
	}

	f.expectGame(updateSessionStatus(testNamespace, "s1"))
	_, game := f.run(ctx, "arena/s1")
	c := expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonRolloutBlocked)
	if !strings.Contains(c.Message, "s0 (DeploymentPaused)") {
		t.Errorf("message %q does not name the session that holds the rollout up", c.Message)
	}
}

// A create answered AlreadyExists for the controller's own revision, not in
// the cache yet, is no conflict; and a revision created and deleted before
// the cache saw either is created again by the next sync: nothing waits for
// an event that a relist would never report.
func TestOwnRevisionNotCachedYetIsNoConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 1, nil)
	revision := newRevision(profile, ProfileHash(profile), profile.Namespace)
	f.deleteCached(revision)
	if err := f.kubeClient.Tracker().Add(revision); err != nil {
		t.Fatal(err)
	}
	f.expectKube(createConfigMap(testNamespace, revision.Name),
		wantAction{verb: "get", resource: "configmaps", namespace: testNamespace, name: revision.Name})
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning") {
			t.Errorf("event %q for the controller's own revision", e)
		}
	}

	// Gone before the cache ever showed it: created again.
	if err := f.kubeClient.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("configmaps"), testNamespace, revision.Name); err != nil {
		t.Fatal(err)
	}
	f.expectKube(createConfigMap(testNamespace, revision.Name))
	f.runProfile(ctx, "arena/classic")
}

// Removing the brake's annotations does not release a halt: the sessions of
// a now unpaced profile keep their revision until the content changes.
func TestHaltHoldsWhenThePolicyIsRemoved(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 2, nil) // unpaced: no annotations
	hash := ProfileHash(profile)
	stored := newProfileRollout(profile)
	stored.ResourceVersion = "7"
	stored.Status = gamesv1.ProfileRolloutStatus{TargetHash: hash, HaltedHash: hash, StableHash: oldHash,
		Phase: gamesv1.RolloutPhaseHalted}
	f.setCached(stored)
	if err := f.gameClient.Tracker().Add(stored); err != nil {
		t.Fatal(err)
	}
	// Before any plan (a restart), the stored halt holds already.
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	f.run(ctx, "arena/s0")

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.expectGame(updateSessionStatus(testNamespace, "s1")) // no Deployment write
	_, game := f.run(ctx, "arena/s1")
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonRolloutHalted)
	if got := rolledProfileHash(f.storedDeployment(testNamespace, "s1"), "classic"); got != oldHash {
		t.Errorf("s1 runs %q, want the old content", got)
	}
}
