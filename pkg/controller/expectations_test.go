package controller

import (
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

func deploymentAt(uid types.UID, generation int64) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: uid, Generation: generation}}
}

func TestWriteExpectations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cached *appsv1.Deployment
		after  time.Duration
		want   bool
		// kept: satisfied, but an older version of the Deployment that
		// the cache shows later still waits.
		kept bool
	}{
		{name: "cache behind the write", cached: deploymentAt("a", 2), want: false},
		{name: "cache shows the write", cached: deploymentAt("a", 3), want: true},
		{name: "cache beyond the write", cached: deploymentAt("a", 4), want: true},
		{name: "Deployment replaced", cached: deploymentAt("b", 1), want: true},
		{name: "Deployment not in the cache", cached: nil, want: true, kept: true},
		{name: "event lost", cached: deploymentAt("a", 2), after: expectationTimeout, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakePassiveClock(time.Now())
			e := newWriteExpectations(clock)
			e.expect("arena/s1", deploymentAt("a", 3))
			clock.SetTime(clock.Now().Add(tc.after))
			if got := e.satisfied("arena/s1", tc.cached); got != tc.want {
				t.Errorf("satisfied = %v, want %v", got, tc.want)
			}
			if tc.kept && e.satisfied("arena/s1", deploymentAt("a", 2)) {
				t.Error("the cache shows an older version after holding none, and the sync goes on as if it showed the write")
			}
			// Once satisfied, forgotten: the next sync is not held.
			if tc.want && !tc.kept && !e.satisfied("arena/s1", deploymentAt("a", 1)) {
				t.Error("a satisfied expectation was kept")
			}
			if !e.satisfied("arena/other", deploymentAt("a", 1)) {
				t.Error("a session without expectations was held")
			}
		})
	}
}

func liveProfileAt(resourceVersion string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "s1-live-profile", ResourceVersion: resourceVersion}}
}

// A write of a live profile is awaited while the cache shows what it
// replaced: the version it was made on, or nothing for a create.
func TestLiveWriteExpectations(t *testing.T) {
	serverError := apierrors.NewInternalError(errors.New("etcd timeout"))
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "s1-live-profile", errors.New("changed"))
	for _, tc := range []struct {
		name   string
		from   string // "" for a create
		answer *corev1.ConfigMap
		err    error
		cached *corev1.ConfigMap
		after  time.Duration
		want   bool
	}{
		{name: "update, cache behind", from: "7", answer: liveProfileAt("9"), cached: liveProfileAt("7"), want: true},
		{name: "update, cache shows it", from: "7", answer: liveProfileAt("9"), cached: liveProfileAt("9")},
		{name: "update, deleted since", from: "7", answer: liveProfileAt("9"), cached: nil},
		{name: "create, cache behind", answer: liveProfileAt("9"), cached: nil, want: true},
		{name: "create, cache shows it", answer: liveProfileAt("9"), cached: liveProfileAt("9")},
		{name: "write that changed nothing", from: "7", answer: liveProfileAt("7"), cached: liveProfileAt("7")},
		{name: "refused", from: "7", err: conflict, cached: liveProfileAt("7")},
		{name: "unanswered", from: "7", err: serverError, cached: liveProfileAt("7"), want: true},
		{name: "event lost", from: "7", answer: liveProfileAt("9"), cached: liveProfileAt("7"), after: expectationTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktesting.NewFakePassiveClock(time.Now())
			e := newWriteExpectations(clock)
			e.expectLive("arena/s1", tc.from)
			e.answeredLive("arena/s1", tc.from, tc.answer, tc.err)
			clock.SetTime(clock.Now().Add(tc.after))
			if got := e.liveAwaited("arena/s1", tc.cached); got != tc.want {
				t.Errorf("awaited = %v, want %v", got, tc.want)
			}
			if got := e.unansweredLive("arena/s1", tc.cached); got != (tc.err == serverError) {
				t.Errorf("unanswered = %v, want %v", got, tc.err == serverError)
			}
			if e.liveAwaited("arena/other", nil) {
				t.Error("a session without a live write was held")
			}
		})
	}
}

// An event of the live profile shows the write, or what came after it;
// a resync of the version the write replaced does not.
func TestLiveWriteObserved(t *testing.T) {
	e := newWriteExpectations(clock.RealClock{})
	e.expectLive("arena/s1", "")
	e.liveObserved("arena/s1", liveProfileAt("9"), true)
	if e.liveAwaited("arena/s1", nil) {
		t.Error("a create whose live profile the cache received, then lost to a delete, is awaited still")
	}
	e.expectLive("arena/s1", "7")
	e.liveObserved("arena/s1", liveProfileAt("7"), false)
	if !e.liveAwaited("arena/s1", liveProfileAt("7")) {
		t.Error("a resync of the version the write replaced passed for the write")
	}
}

// An unanswered live write is settled by a live read: the version it was
// made on, it did not apply; a later one, or none, the cache is behind, and
// its event comes.
func TestConfirmUnansweredLiveWrite(t *testing.T) {
	serverError := apierrors.NewInternalError(errors.New("etcd timeout"))
	for _, tc := range []struct {
		name string
		live *corev1.ConfigMap
		want bool
	}{
		{name: "not applied", live: liveProfileAt("7"), want: false},
		{name: "applied", live: liveProfileAt("9"), want: true},
		{name: "deleted", live: nil, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newWriteExpectations(clock.RealClock{})
			e.expectLive("arena/s1", "7")
			e.answeredLive("arena/s1", "7", nil, serverError)
			e.confirmLive("arena/s1", tc.live)
			if got := e.liveAwaited("arena/s1", liveProfileAt("7")); got != tc.want {
				t.Errorf("awaited = %v, want %v", got, tc.want)
			}
		})
	}
}

// The fan-out's status pass comes right after the Deployment write, usually
// before the cache has it: it waits for the watch event instead of patching
// the Deployment again.
func TestSyncWaitsForTheCacheToShowItsWrite(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	oldProfile := newProfile(testNamespace, "classic", classicData)
	newData := withData(oldProfile, map[string]string{"game.cfg": "new"})
	session := settled(newSession(testNamespace, "arena-1", "classic"), ProfileHash(oldProfile))
	f := newFixture(ctx, t, session, newData, apiServerDeployment(session, ProfileHash(oldProfile)))

	f.expectKube(writeDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	kube, game := f.run(ctx, sessionKey(session))
	f.observe(game...)
	f.events()

	f.run(ctx, sessionKey(session)) // the cache is stale: no request at all
	f.observe(kube...)
	f.run(ctx, sessionKey(session)) // caught up: in order
}

// The watch event of a Deployment write may come before the write's answer:
// the controller must know it as its own by then, so that its handler queues
// a status write only (updateDeployment), and forget it if the write fails.
func TestWriteExpectsItsGenerationBeforeTheAnswer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	oldProfile := newProfile(testNamespace, "classic", classicData)
	newData := withData(oldProfile, map[string]string{"game.cfg": "new"})
	session := settled(newSession(testNamespace, "arena-1", "classic"), ProfileHash(oldProfile))
	observed := apiServerDeployment(session, ProfileHash(oldProfile))
	f := newFixture(ctx, t, session, newData, observed)
	key := sessionKey(session)
	next := deploymentAt(observed.UID, observed.Generation+1)

	var ownDuringWrite bool
	f.kubeClient.PrependReactor("update", "deployments", func(core.Action) (bool, runtime.Object, error) {
		ownDuringWrite = f.c.state.expectations.awaits(key, next)
		return false, nil, nil
	})
	f.expectKube(writeDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	f.run(ctx, key)
	if !ownDuringWrite {
		t.Error("while the write was under way, its generation was not expected: an early watch event of it would queue a full sync")
	}

	// A write refused leaves no expectation behind to hold the next sync.
	f = newFixture(ctx, t, session, newData, observed)
	f.kubeClient.PrependReactor("update", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "arena-1", errors.New("changed"))
	})
	f.expectKube(writeDeployment(testNamespace, "arena-1"))
	if _, _, err := f.runSync(ctx, key, f.c.sessions.syncHandler); err == nil {
		t.Fatal("the sync of a refused write reported no error")
	}
	if f.c.state.expectations.awaits(key, next) || !f.c.state.expectations.satisfied(key, observed) {
		t.Error("a refused write left its expectation behind")
	}

	// A write answered with a server error may have applied: its
	// expectation stays, and the next sync, on a cache that still shows the
	// Deployment it was made from, asks the API server. Here the write did
	// not apply: the Deployment is as it was, and the sync writes it again.
	f = newFixture(ctx, t, session, newData, observed)
	failed := false
	f.kubeClient.PrependReactor("update", "deployments", func(core.Action) (bool, runtime.Object, error) {
		if failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	})
	f.expectKube(writeDeployment(testNamespace, "arena-1"))
	if _, _, err := f.runSync(ctx, key, f.c.sessions.syncHandler); err == nil {
		t.Fatal("the sync of a write answered 500 reported no error")
	}
	if !f.c.state.expectations.awaits(key, next) || !f.c.state.expectations.unconfirmed(key, observed) {
		t.Error("a write answered 500 left no unconfirmed expectation: a sync on the cache from before it would take the Deployment for unmoved")
	}
	f.expectKube(getDeployment(testNamespace, "arena-1"), writeDeployment(testNamespace, "arena-1"))
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	f.run(ctx, key)
}

// A write answered with a server error that did apply: the live read finds
// the Deployment changed since, and the sync waits for the cache to show it
// rather than decide on the copy from before the write.
func TestUnconfirmedWriteWaitsForTheCache(t *testing.T) {
	e := newWriteExpectations(clock.RealClock{})
	before := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "d1", Generation: 3, ResourceVersion: "10"}}
	e.expectGeneration("ns/s", "d1", 4)
	e.unanswered("ns/s", "d1", 4, "10")
	if !e.unconfirmed("ns/s", before) {
		t.Fatal("the cache shows the Deployment the write was made from: unconfirmed")
	}
	applied := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "d1", Generation: 4, ResourceVersion: "11"}}
	e.confirm("ns/s", applied)
	if e.unconfirmed("ns/s", before) || e.satisfied("ns/s", before) {
		t.Error("the write applied: the sync must wait for the cache to show it")
	}
	if !e.satisfied("ns/s", applied) {
		t.Error("the cache shows the write: satisfied")
	}

	// Not applied, the Deployment is unchanged: the expectation goes.
	e.expectGeneration("ns/s", "d1", 4)
	e.unanswered("ns/s", "d1", 4, "10")
	e.confirm("ns/s", before)
	if !e.satisfied("ns/s", before) || e.awaits("ns/s", applied) {
		t.Error("the write did not apply: nothing to wait for")
	}
	// The cache moved past the version the write was made from, to one of
	// the generation before the write's (another writer's label): the
	// write did not apply, or it would come first.
	e.expectGeneration("ns/s", "d1", 4)
	e.unanswered("ns/s", "d1", 4, "10")
	relabelled := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "d1", Generation: 3, ResourceVersion: "12"}}
	if e.unconfirmed("ns/s", relabelled) || !e.satisfied("ns/s", relabelled) {
		t.Error("the cache moved past the write's version without it: nothing to wait for")
	}
	// Gone: nothing to wait for either.
	e.expectGeneration("ns/s", "d1", 4)
	e.unanswered("ns/s", "d1", 4, "10")
	e.confirm("ns/s", nil)
	if !e.satisfied("ns/s", before) {
		t.Error("the Deployment is gone: nothing to wait for")
	}
}

func TestStatusEchoes(t *testing.T) {
	session := func(resourceVersion string, status gamesv1.GameSessionStatus) *gamesv1.GameSession {
		return &gamesv1.GameSession{
			ObjectMeta: metav1.ObjectMeta{Namespace: "arena", Name: "s1", UID: "a", ResourceVersion: resourceVersion, Generation: 2,
				Labels: map[string]string{"team": "red"}},
			Status: status,
		}
	}
	// The status the sync writes carries a time of nanoseconds; the echo
	// brings it back in seconds.
	now := time.Date(2026, 12, 6, 12, 0, 0, 123456789, time.UTC)
	written := gamesv1.GameSessionStatus{ObservedGeneration: 2, ProfileHash: "h2", Conditions: []metav1.Condition{{
		Type: gamesv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.NewTime(now)}}}
	echoed := *written.DeepCopy()
	echoed.Conditions[0].LastTransitionTime = metav1.NewTime(now.Truncate(time.Second))
	before := session("10", gamesv1.GameSessionStatus{ObservedGeneration: 2, ProfileHash: "h1"})
	echo := session("11", echoed)

	for _, tc := range []struct {
		name     string
		between  func(e *statusEchoes)
		old, new *gamesv1.GameSession
		want     bool
	}{
		{name: "the write's own event", old: before, new: echo, want: true},
		{name: "a resync of the copy before the write", old: before, new: before},
		{name: "an update of another copy", old: session("9", before.Status), new: before},
		{name: "a sync in between read the copy before the write", between: func(e *statusEchoes) { e.syncing("arena/s1") },
			old: before, new: echo},
		{name: "the write failed", between: func(e *statusEchoes) { e.withdraw("arena/s1", "10") }, old: before, new: echo},
		{name: "the session deleted", between: func(e *statusEchoes) { e.forget("arena/s1") }, old: before, new: echo},
		{name: "a relist that also brings a spec change", old: before, new: func() *gamesv1.GameSession {
			s := echo.DeepCopy()
			s.Generation = 3
			return s
		}()},
		{name: "a relist that also brings a label", old: before, new: func() *gamesv1.GameSession {
			s := echo.DeepCopy()
			s.Labels = map[string]string{"team": "blue"}
			return s
		}()},
		{name: "a relist that brings another status", old: before, new: func() *gamesv1.GameSession {
			s := echo.DeepCopy()
			s.Status.ProfileHash = "h3"
			return s
		}()},
		{name: "a session recreated under the name", old: before, new: func() *gamesv1.GameSession {
			s := echo.DeepCopy()
			s.UID = "b"
			return s
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStatusEchoes()
			e.expect("arena/s1", before, &written, "arena/lobby")
			if tc.between != nil {
				tc.between(e)
			}
			planProfile, got := e.echoed("arena/s1", tc.old, tc.new)
			if got != tc.want {
				t.Fatalf("echoed = %v, want %v", got, tc.want)
			}
			if got && planProfile != "arena/lobby" {
				t.Errorf("the echo asks for a plan of %q, want arena/lobby", planProfile)
			}
			// An event on the copy the write was made on ends the record:
			// the next event syncs.
			if tc.old.ResourceVersion == "10" && tc.new.ResourceVersion != "10" {
				if _, again := e.echoed("arena/s1", tc.old, tc.new); again {
					t.Error("one write's record served two events")
				}
			}
		})
	}
}
