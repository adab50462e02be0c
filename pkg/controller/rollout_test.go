package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

func createConfigMap(namespace, name string) wantAction {
	return wantAction{verb: "create", resource: "configmaps", namespace: namespace, name: name}
}

func deleteConfigMap(namespace, name string) wantAction {
	return wantAction{verb: "delete", resource: "configmaps", namespace: namespace, name: name}
}

// rolloutFixture has n sessions of profile classic, s0…s(n-1), settled on
// the profile's old content, and the profile with new content and the given
// rollout annotations. The new revision is in the cache.
func rolloutFixture(ctx context.Context, t *testing.T, n int, annotations map[string]string) (*fixture, *corev1.ConfigMap, string) {
	return rolloutFixtureWithOptions(ctx, t, Options{}, n, annotations)
}

// rolloutFixtureWithOptions is rolloutFixture with the controller's options.
func rolloutFixtureWithOptions(ctx context.Context, t *testing.T, opts Options, n int, annotations map[string]string) (*fixture, *corev1.ConfigMap, string) {
	oldProfile := newProfile(testNamespace, "classic", classicData)
	oldHash := ProfileHash(oldProfile)
	profile := withData(oldProfile, map[string]string{"game.cfg": "new"})
	profile.Annotations = annotations
	objects := []runtime.Object{profile}
	for i := range n {
		s := settled(newSession(testNamespace, fmt.Sprintf("s%d", i), "classic"), oldHash)
		objects = append(objects, s, apiServerDeployment(s, oldHash))
	}
	f := newFixtureWithOptions(ctx, t, opts, objects...)
	f.cacheRevisionOf(oldProfile)
	return f, profile, oldHash
}

// A paced rollout moves only the sessions its plan admits; the others keep
// their revision, say why once in their status, and cost nothing more.
func TestPacedRolloutMovesOnlyAdmittedSessions(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 3, map[string]string{rollout.AnnotationMaxRolling: "1"})
	newHash := ProfileHash(profile)

	// Before any plan, a session waits: it cannot know its turn, and says
	// so.
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	_, game := f.run(ctx, "arena/s0")
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonWaitingForTurn)
	f.observe(game...)
	if n := f.c.profiles.queue.Len(); n != 1 {
		t.Fatalf("profile queue holds %d keys, want the profile", n)
	}

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.expectEvents("Normal " + EventReasonRolloutStarted)
	// The plan queues every session not on the new revision: the admitted
	// one to move, the others to report that they wait.
	expectQueue(t, f.c, "arena/s0", "arena/s1", "arena/s2")

	f.expectKube(writeDeployment(testNamespace, "s0"))
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	kube, game := f.run(ctx, "arena/s0")
	f.observe(kube...)
	f.observe(game...)
	if d := f.storedDeployment(testNamespace, "s0"); rolledProfileHash(d, "classic") != newHash {
		t.Errorf("s0 runs %q, want the new revision", rolledProfileHash(d, "classic"))
	}

	for _, name := range []string{"s1", "s2"} {
		f.expectGame(updateSessionStatus(testNamespace, name)) // and no Deployment write
		_, game := f.run(ctx, "arena/"+name)
		status := objectOf[*gamesv1.GameSession](t, game[0]).Status
		c := expectCondition(t, status.Conditions, gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonWaitingForTurn)
		if want := fmt.Sprintf(MessageWaitingForTurn, RevisionName("classic", oldHash), "classic", RevisionName("classic", newHash)); c.Message != want {
			t.Errorf("%s: message %q, want %q", name, c.Message, want)
		}
		if status.ProfileRevision != RevisionName("classic", oldHash) {
			t.Errorf("%s: status.profileRevision %q, want the old revision", name, status.ProfileRevision)
		}
		f.observe(game...)
		// Waiting costs no more writes.
		f.run(ctx, "arena/"+name)
	}
}

// A session whose revision is not in the cache yet keeps its Deployment,
// says that it waits for the revision (never that it runs the current
// content) and asks the profile sync for it; the profile sync creates it
// once.
func TestSessionWaitsForItsRevision(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 1, nil)
	revision := newRevision(profile, ProfileHash(profile), profile.Namespace)
	f.deleteCached(revision)

	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	_, game := f.run(ctx, "arena/s0")
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonRevisionPending)
	if n := f.c.profiles.queue.Len(); n != 1 {
		t.Fatalf("profile queue holds %d keys, want the profile", n)
	}
	// While the revision is on its way, the rollout is recorded with its
	// new target.
	f.expectKube(createConfigMap(testNamespace, revision.Name))
	f.expectRolloutWrite(testNamespace, "classic")
	kube := f.runProfile(ctx, "arena/classic")
	created := objectOf[*corev1.ConfigMap](t, kube[0])
	if created.Immutable == nil || !*created.Immutable || ProfileHash(created) != ProfileHash(profile) {
		t.Errorf("created revision: immutable %v, hash %s; want an immutable copy of the profile", created.Immutable, ProfileHash(created))
	}
}

// The profile sync deletes the revisions no Deployment mounts beyond the
// history limit, and never one in use.
func TestProfileSyncDeletesStaleRevisions(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 1, nil)
	f.c.profiles.revisionHistoryLimit = 1
	// Two older contents, unused: the older one goes, the newer one stays
	// as the one revision of history besides the current and the used.
	base := lastTransition.Time
	for i, content := range []string{"older", "old"} {
		r := newRevision(withData(profile, map[string]string{"game.cfg": content}), ProfileHash(withData(profile, map[string]string{"game.cfg": content})), profile.Namespace)
		r.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(-10+i) * time.Minute))
		f.setCached(r)
	}
	older := RevisionName("classic", ProfileHash(withData(profile, map[string]string{"game.cfg": "older"})))
	f.expectKube(deleteConfigMap(testNamespace, older))
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.events()

	// The used revision (s0 runs oldHash) is never deleted, even with no
	// history kept.
	f.c.profiles.revisionHistoryLimit = 0
	f.deleteCached(newRevisionByName(older))
	old := RevisionName("classic", ProfileHash(withData(profile, map[string]string{"game.cfg": "old"})))
	f.expectKube(deleteConfigMap(testNamespace, old))
	f.runProfile(ctx, "arena/classic")
	if !f.c.profiles.revisionAvailable(testNamespace, "classic", oldHash) {
		t.Errorf("the revision in use, %s, left the cache", RevisionName("classic", oldHash))
	}
}

func newRevisionByName(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name,
		Labels: map[string]string{RevisionLabel: RevisionLabelValue}}}
}

// When the brake halts a rollout, a session created meanwhile starts on the
// revision the others run, not on the failing one.
func TestNewSessionDuringHaltedRolloutStartsOnStableRevision(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, oldHash := rolloutFixture(ctx, t, 3, map[string]string{
		rollout.AnnotationCanary: "1", rollout.AnnotationMaxFailed: "0",
	})
	newHash := ProfileHash(profile)
	// s0, the canary, moved and failed.
	s0 := f.storedDeployment(testNamespace, "s0").DeepCopy()
	failed := apiServerDeployment(settled(newSession(testNamespace, "s0", "classic"), newHash), newHash)
	failed.Status.Conditions = []appsv1.DeploymentCondition{{
		Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
	}}
	failed.Status.ReadyReplicas, failed.Status.UpdatedReplicas = 0, 0
	failed.ResourceVersion = s0.ResourceVersion
	f.setCached(failed)

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.expectEvents("Normal "+EventReasonRolloutStarted, "Warning "+EventReasonRolloutHalted)
	pp := f.c.state.plans.latest("arena/classic")
	if pp == nil || pp.hash != newHash || pp.plan.Phase != rollout.PhaseHalted || pp.plan.StableHash != oldHash {
		t.Fatalf("plan: %+v, want halted with stable revision %s", pp, oldHash)
	}

	late := newSession(testNamespace, "late", "classic")
	f.setCached(late)
	if err := f.gameClient.Tracker().Add(late); err != nil {
		t.Fatal(err)
	}
	f.expectKube(createDeployment(testNamespace, "late"))
	f.expectGame(updateSessionStatus(testNamespace, "late"))
	kube, game := f.run(ctx, "arena/late")
	created := objectOf[*appsv1.Deployment](t, kube[0])
	if got := rolledProfileHash(created, "classic"); got != oldHash {
		t.Errorf("the new session starts on %q, want the stable %q", got, oldHash)
	}
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonRolloutHalted)
}

// A session created before its profile's first plan waits for it; the plan
// queues it, though it is no member (it has no Deployment yet), and it gets
// its Deployment.
func TestNewSessionWaitingForThePlanIsQueuedByIt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	profile := newProfile(testNamespace, "classic", classicData)
	profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "10%"}
	session := newSession(testNamespace, "first", "classic")
	f := newFixture(ctx, t, profile, session)

	f.expectGame(updateSessionStatus(testNamespace, "first")) // profile found; nothing to create yet
	_, game := f.run(ctx, sessionKey(session))
	f.observe(game...)
	drainQueue(f.c.sessions.queue)

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	expectQueue(t, f.c, sessionKey(session))
	f.expectKube(createDeployment(testNamespace, "first"))
	f.expectGame(updateSessionStatus(testNamespace, "first"))
	f.run(ctx, sessionKey(session))
}

// A completed rollout announces nothing more: sessions that become Ready
// afterwards, or a later plan of the same content, are no progress.
func TestAnnounceNothingAfterCompletion(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(ctx, t)
	profile := newProfile(testNamespace, "classic", classicData)
	plan := func(phase rollout.Phase, ready int) *profilePlan {
		return &profilePlan{hash: ProfileHash(profile), plan: rollout.Plan{Phase: phase, Total: 10, Moved: 10, Ready: ready}}
	}
	f.c.profiles.announce(profile, nil, plan(rollout.PhaseRolling, 4), plan(rollout.PhaseComplete, 5))
	f.c.profiles.announce(profile, nil, plan(rollout.PhaseComplete, 5), plan(rollout.PhaseComplete, 10))
	f.expectEvents(fmt.Sprintf("Normal %s Rolled revision %s out to all 10 sessions (0 failed)",
		EventReasonRolloutCompleted, RevisionName("classic", ProfileHash(profile))))
}

// The example: a profile edited on Sunday afternoon, with a window on
// Mondays from 03:00 to 04:00 and max-defer 2h. The rollout's start is kept
// rounded up to the second, and max-defer counts only the window's open
// time from it: when Monday's window opens, the idle session moves and the
// busy one keeps its match, until the third Monday's window opens.
func TestBusySessionMaxDeferCountsTheOpenWindow(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sunday := time.Date(2026, 11, 29, 15, 0, 0, 400*int(time.Millisecond), time.UTC)
	clk := clocktesting.NewFakeClock(sunday)
	f, profile, oldHash := rolloutFixtureWithOptions(ctx, t, Options{Clock: clk}, 2, map[string]string{
		rollout.AnnotationWindow: "Mon 03:00-04:00", rollout.AnnotationMaxDefer: "2h"})
	s0, err := f.c.caches.sessionLister.GameSessions(testNamespace).Get("s0")
	if err != nil {
		t.Fatal(err)
	}
	s0 = s0.DeepCopy()
	s0.Labels = map[string]string{gamesv1.BusyLabel: gamesv1.BusyLabelValue}
	f.setCached(s0)

	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.events()
	stored, err := f.c.caches.rolloutLister.ProfileRollouts(testNamespace).Get("classic")
	if err != nil {
		t.Fatal(err)
	}
	// Rounded down, the start would count 400 ms the rollout did not run.
	if start, want := stored.Status.StartTime, sunday.Truncate(time.Second).Add(time.Second); start == nil || !start.Time.Equal(want) {
		t.Errorf("status.startTime %v, want %v, the start rounded up to the second", start, want)
	}

	clk.SetTime(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	f.expectRolloutWrite(testNamespace, "classic")
	f.runProfile(ctx, "arena/classic")
	f.events()

	f.expectGame(updateSessionStatus(testNamespace, "s0")) // and no Deployment write
	_, game := f.run(ctx, "arena/s0")
	c := expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonSessionBusy)
	if want := fmt.Sprintf(MessageBusyUntilInWindow, "2026-12-14T03:00:00Z", 2*time.Hour, "Mon 03:00-04:00"); !strings.Contains(c.Message, want) {
		t.Errorf("s0 says %q, want it to end with %q", c.Message, want)
	}
	if d := f.storedDeployment(testNamespace, "s0"); rolledProfileHash(d, "classic") != oldHash {
		t.Errorf("busy s0 runs %q, want the old revision", rolledProfileHash(d, "classic"))
	}

	f.expectKube(writeDeployment(testNamespace, "s1"))
	f.expectGame(updateSessionStatus(testNamespace, "s1"))
	f.run(ctx, "arena/s1")
	if d := f.storedDeployment(testNamespace, "s1"); rolledProfileHash(d, "classic") != ProfileHash(profile) {
		t.Errorf("idle s1 runs %q, want the new revision", rolledProfileHash(d, "classic"))
	}
}
