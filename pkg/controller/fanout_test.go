package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

const testDelay = 10 * time.Second

// delayFixture is profileFixture with a profile-change delay on a fake clock.
func delayFixture(ctx context.Context, t *testing.T) (*fixture, *clocktesting.FakeClock) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	f := newFixtureWithOptions(ctx, t, Options{ProfileChangeDelay: testDelay, Clock: clock},
		newSession(testNamespace, "s1", "classic"),
		newSession(testNamespace, "s2", "classic"),
		newSession(testNamespace, "s3", "hardcore"),
	)
	return f, clock
}

// waitForQueueLen waits for delayed keys to land: the queue moves them over on
// a goroutine of its own once the fake clock has passed their time.
func waitForQueueLen(ctx context.Context, t *testing.T, c *Controller, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.sessions.queue.Len() >= n, nil
	})
	if err != nil {
		t.Fatalf("queue holds %d keys, want %d: %v", c.sessions.queue.Len(), n, err)
	}
}

// A burst of edits within the delay is one fan-out, after the delay, of the
// profile's sessions; the next edit after it starts another.
func TestFanOutCoalescesEditsWithinTheDelay(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, clock := delayFixture(ctx, t)
	classic := newProfile(testNamespace, "classic", map[string]string{"game.cfg": "v0"})

	latest := classic
	for i := range 3 {
		next := withData(latest, map[string]string{"game.cfg": fmt.Sprintf("edit %d", i)})
		f.setCached(next)
		f.c.profiles.updateProfile(latest, next)
		latest = next
		clock.Step(testDelay / 4)
	}
	if n := f.c.sessions.queue.Len(); n != 0 {
		t.Errorf("%d sessions queued before the delay passed", n)
	}
	// One announcement, for the edit that started the rollout.
	f.expectEvents(fmt.Sprintf("Normal %s "+MessageProfileFanOut, EventReasonProfileFanOut,
		ProfileHash(withData(classic, map[string]string{"game.cfg": "edit 0"})), 2))

	clock.Step(testDelay / 4)
	waitForQueueLen(ctx, t, f.c, 2)
	expectQueue(t, f.c, "arena/s1", "arena/s2")

	next := withData(latest, map[string]string{"game.cfg": "later"})
	f.setCached(next)
	f.c.profiles.updateProfile(latest, next)
	f.expectEvents("Normal " + EventReasonProfileFanOut)
	clock.Step(testDelay)
	waitForQueueLen(ctx, t, f.c, 2)
	expectQueue(t, f.c, "arena/s1", "arena/s2")
}

// While a profile change waits out its delay, a session that syncs for another
// reason (its Deployment's status changed) does not roll the new data ahead of
// the fan-out; a session whose spec changed rolls the new data along with the
// spec, so its game servers restart once, not twice.
func TestFanOutDelayHoldsBackOnlyProfileOnlyWrites(t *testing.T) {
	oldProfile := newProfile(testNamespace, "classic", classicData)
	newProfileData := withData(oldProfile, map[string]string{"game.cfg": "new"})
	for _, tc := range []struct {
		name      string
		edit      func(s *gamesv1.GameSession)
		wantWrite bool
	}{
		{name: "unrelated sync", edit: func(*gamesv1.GameSession) {}},
		{name: "image changed", edit: func(s *gamesv1.GameSession) { s.Spec.Image = "registry.example.com/arena:2.0" }, wantWrite: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			clock := clocktesting.NewFakeClock(time.Now())
			session := settled(newSession(testNamespace, "arena-1", "classic"), ProfileHash(oldProfile))
			edited := session.DeepCopy()
			tc.edit(edited)
			f := newFixtureWithOptions(ctx, t, Options{ProfileChangeDelay: testDelay, Clock: clock},
				edited, newProfileData, apiServerDeployment(session, ProfileHash(oldProfile)))
			f.c.profiles.updateProfile(oldProfile, newProfileData)
			f.events()

			if !tc.wantWrite {
				// No Deployment write; the status says the session moves
				// once the delay is over, never that it runs the current
				// content.
				f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
				_, game := f.run(ctx, sessionKey(edited))
				c := expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
					gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonWaitingForTurn)
				if want := fmt.Sprintf(MessageChangeDelayed, RevisionName("classic", ProfileHash(oldProfile)),
					RevisionName("classic", ProfileHash(newProfileData))); c.Message != want {
					t.Errorf("message %q, want %q", c.Message, want)
				}
				return
			}
			// The session was queued by the fan-out too, so its status waits
			// behind the other sessions' Deployments (see the next test).
			f.expectKube(writeDeployment(testNamespace, "arena-1"))
			kube, _ := f.run(ctx, sessionKey(edited))
			f.observe(kube...)
			f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
			_, game := f.run(ctx, sessionKey(edited))
			f.observe(game...)
			d := f.storedDeployment(testNamespace, "arena-1")
			if got, want := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation], ProfileHash(newProfileData); got != want {
				t.Errorf("the spec change rolled profile hash %q, want the new %q", got, want)
			}
			// When the delay is over, the fan-out's sync finds nothing to roll.
			clock.Step(testDelay)
			waitForQueueLen(ctx, t, f.c, 1)
			drainQueue(f.c.sessions.queue)
			f.run(ctx, sessionKey(edited))
		})
	}
}

// A fan-out writes every Deployment before any status: the first sync of each
// session writes its Deployment and queues the session again, behind the
// others.
func TestFanOutWritesDeploymentsBeforeStatuses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	oldProfile := newProfile(testNamespace, "classic", classicData)
	newProfileData := withData(oldProfile, map[string]string{"game.cfg": "new"})
	f := newFixture(ctx, t, newProfileData)
	for i := range 3 {
		s := settled(newSession(testNamespace, fmt.Sprintf("s%d", i), "classic"), ProfileHash(oldProfile))
		d := apiServerDeployment(s, ProfileHash(oldProfile))
		f.setCached(s)
		f.setCached(d)
		if err := f.kubeClient.Tracker().Add(d); err != nil {
			t.Fatal(err)
		}
		if err := f.gameClient.Tracker().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	f.c.profiles.updateProfile(oldProfile, newProfileData)
	f.events()

	var order []string
	for _, a := range syncQueueInOrder(ctx, f) {
		order = append(order, a.GetVerb()+" "+a.GetResource().Resource)
	}
	want := []string{
		"update deployments", "update deployments", "update deployments",
		"update gamesessions", "update gamesessions", "update gamesessions",
	}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("requests in order: got %q, want %q", order, want)
	}
}

// A sync that would only write a status while another session's Deployment
// waits to be written leaves the status to the status lane; the status
// lane's sync writes it once nothing else waits.
func TestStatusWritesWaitForDeploymentWrites(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	profile := newProfile(testNamespace, "classic", classicData)
	hash := ProfileHash(profile)
	f := newFixture(ctx, t, profile)
	f.cacheRevisionOf(profile)
	// scaled-down: its Deployment lost a ready replica, so only its status
	// changes. rescaled: its spec changed, so its Deployment is written.
	scaledDown := settled(newSession(testNamespace, "scaled-down", "classic"), hash)
	lagging := apiServerDeployment(scaledDown, hash)
	lagging.Status.ReadyReplicas--
	rescaled := settled(newSession(testNamespace, "rescaled", "classic"), hash)
	rescaled.Spec.Replicas = ptr.To[int32](5)
	rescaled.Generation++
	for _, obj := range []runtime.Object{scaledDown, lagging, rescaled, apiServerDeployment(settled(newSession(testNamespace, "rescaled", "classic"), hash), hash)} {
		f.setCached(obj)
		tracker := f.kubeClient.Tracker()
		if _, ok := obj.(*gamesv1.GameSession); ok {
			tracker = f.gameClient.Tracker()
		}
		if err := tracker.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	f.c.sessions.queue.Add(testNamespace + "/scaled-down")
	f.c.sessions.queue.Add(testNamespace + "/rescaled")

	var order []string
	for _, a := range syncQueueInOrder(ctx, f) {
		order = append(order, a.GetVerb()+" "+a.GetResource().Resource+" "+actionName(a))
	}
	// rescaled's sync is the last of the first lane: nothing waits behind
	// it, so it writes its status at once.
	want := []string{
		"update deployments rescaled", "update gamesessions rescaled", "update gamesessions scaled-down",
	}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("requests in order: got %q, want %q", order, want)
	}
}

// An edit that joins a held rollout queues the profile's sessions again for
// the end of the delay: one that synced meanwhile for a spec change rolled
// the first edit's data, and one that took up the profile meanwhile was not
// queued at all. Both must end up with the latest data.
func TestFanOutJoinedEditRequeuesForTheRestOfTheDelay(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	sessions := []string{"arena/s1"}
	queued := map[string]time.Duration{}
	f := newProfileFanOut(clock, testDelay,
		func(string) []string { return sessions },
		func(key string, d time.Duration) { queued[key] = d })

	if n, started := f.profileChanged("arena/classic", true); n != 1 || !started {
		t.Fatalf("first edit: %d sessions, started %v; want 1, true", n, started)
	}
	if queued["arena/s1"] != testDelay {
		t.Errorf("first edit queued s1 after %v, want %v", queued["arena/s1"], testDelay)
	}

	clock.Step(testDelay / 4)
	sessions = append(sessions, "arena/s2") // s2 now references the profile too
	if n, started := f.profileChanged("arena/classic", true); n != 2 || started {
		t.Fatalf("joined edit: %d sessions, started %v; want 2, false", n, started)
	}
	for _, key := range sessions {
		if got, want := queued[key], testDelay*3/4; got != want {
			t.Errorf("joined edit queued %s after %v, want %v (the rest of the delay)", key, got, want)
		}
		if !f.takeRolling(key) {
			t.Errorf("%s is not marked as rolling", key)
		}
	}
}

// A plan requested more than planInterval (recordInterval, unpaced) after
// the profile's last sync began is made at once; one requested sooner waits
// for the rest of the interval.
func TestRequestPlanWaitsOnlyForTheRestOfTheInterval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		unpaced  bool
		interval time.Duration
	}{
		{"paced", false, planInterval},
		{"unpaced", true, recordInterval},
	} {
		t.Run(tc.name, func(t *testing.T) { testRequestPlanInterval(t, tc.unpaced, tc.interval) })
	}
}

func testRequestPlanInterval(t *testing.T, unpaced bool, interval time.Duration) {
	_, ctx := ktesting.NewTestContext(t)
	clock := clocktesting.NewFakeClock(time.Unix(10000, 0))
	profile := newProfile(testNamespace, "classic", classicData)
	f := newFixtureWithOptions(ctx, t, Options{Clock: clock}, profile)
	key := profileKey(profile.Namespace, profile.Name)
	f.c.state.plans.set(key, &profilePlan{hash: ProfileHash(profile), unpaced: unpaced})
	f.c.state.plans.started(key, clock.Now())

	clock.Step(interval / 5)
	f.c.sessions.requestPlan(profile)
	if n := f.c.profiles.queue.Len(); n != 0 {
		t.Fatalf("a request within the interval queued the profile at once (%d queued)", n)
	}
	clock.Step(interval - interval/5 - time.Millisecond)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return f.c.profiles.queue.Len() > 0, nil
	}); err == nil {
		t.Fatal("the profile was queued before the interval since its last plan was over")
	}
	clock.Step(time.Millisecond)
	// The delaying queue's loop sets its timer from a clock read it made
	// before: a step between the two puts the timer that much later (seen
	// once in CI, on a loaded machine). A later time is still past the
	// interval, so the wait steps on, a tenth of the interval at a time.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if f.c.profiles.queue.Len() > 0 {
			return true, nil
		}
		clock.Step(interval / 10)
		return false, nil
	}); err != nil {
		t.Fatal("the profile was not queued once the interval since its last plan was over")
	}
	key, _ = f.c.profiles.queue.Get()
	f.c.profiles.queue.Done(key)

	clock.Step(2 * interval)
	f.c.sessions.requestPlan(profile)
	if n := f.c.profiles.queue.Len(); n != 1 {
		t.Errorf("a request long after the last plan: %d queued, want 1 at once", n)
	}
}

// syncQueueInOrder syncs the session queue's keys in the order the queue hands
// them out, each write reaching the caches before the next sync, until the
// queue is empty, and returns the writes in order.
func syncQueueInOrder(ctx context.Context, f *fixture) []core.Action {
	f.t.Helper()
	var writes []core.Action
	for f.c.sessions.queue.Len() > 0 {
		key, _ := f.c.sessions.queue.Get()
		f.kubeClient.ClearActions()
		f.gameClient.ClearActions()
		if err := f.c.sessions.syncHandler(ctx, key); err != nil {
			f.t.Fatalf("sync %s: %v", key, err)
		}
		f.c.sessions.queue.Done(key)
		actions := filterInformerActions(append(f.kubeClient.Actions(), f.gameClient.Actions()...))
		writes = append(writes, actions...)
		f.observe(actions...)
	}
	return writes
}
