package controller

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

func TestClusterBudgetMovingAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newMoveLedger(clk, 2, 0)
	for _, key := range []string{"ns/a", "ns/b"} {
		if ok, _ := b.admit(key, move{kind: profileMove, to: "h1"}, unlimited); !ok {
			t.Fatalf("%s refused with room left", key)
		}
	}
	for _, key := range []string{"ns/c", "ns/d"} {
		if ok, wake := b.admit(key, move{kind: profileMove, to: "h1"}, unlimited); ok || len(wake.now) > 0 || wake.later != "" {
			t.Fatalf("%s: granted %v, wake %+v; want refused, no wake while two move", key, ok, wake)
		}
	}
	if ok, _ := b.admit("ns/a", move{kind: profileMove, to: "h1"}, unlimited); !ok {
		t.Error("a move granted before is granted again")
	}
	if ok, _ := b.admit("ns/a", move{kind: profileMove, to: "h2"}, unlimited); !ok {
		t.Error("a moving session's next move takes its own place, and was refused")
	}
	if wake := b.release("ns/b"); !slices.Equal(wake.now, []string{"ns/c"}) {
		t.Errorf("release woke %v, want the first waiting, ns/c", wake.now)
	}
	if ok, _ := b.admit("ns/d", move{kind: profileMove, to: "h1"}, unlimited); ok {
		t.Error("ns/d took the place woken for ns/c")
	}
	if ok, _ := b.admit("ns/c", move{kind: profileMove, to: "h1"}, unlimited); !ok {
		t.Error("ns/c refused the place it was woken for")
	}
	if wake := b.forget("ns/d"); len(wake.now) > 0 {
		t.Errorf("forgetting a waiting session woke %v", wake.now)
	}
	if moving, waiting := b.counts(); moving != 2 || waiting != 0 {
		t.Errorf("counts: %d moving, %d waiting; want 2, 0", moving, waiting)
	}
}

func TestClusterBudgetPerMinuteWakesLater(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newMoveLedger(clk, 0, 2)
	b.admit("ns/a", move{kind: profileMove, to: "h"}, unlimited)
	clk.Step(10 * time.Second)
	b.admit("ns/b", move{kind: profileMove, to: "h"}, unlimited)
	ok, wake := b.admit("ns/c", move{kind: profileMove, to: "h"}, unlimited)
	if ok || wake.later != "ns/c" || wake.after != 50*time.Second {
		t.Fatalf("third move in a minute: granted %v, wake %+v; want refused, ns/c woken in 50s", ok, wake)
	}
	b.release("ns/a") // Ready: frees no start within the minute
	if ok, _ := b.admit("ns/c", move{kind: profileMove, to: "h"}, unlimited); ok {
		t.Error("a release made room in the budget per minute")
	}
	clk.Step(50 * time.Second)
	if ok, _ := b.admit("ns/c", move{kind: profileMove, to: "h"}, unlimited); !ok {
		t.Error("refused a minute after the first start")
	}
}

// A switch of delivery with the same content is a move of its own: it
// restarts the game servers, and counts in the budget per minute, where a
// retried write of the same move does not.
func TestClusterBudgetPerMinuteCountsASwitchOfDelivery(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newMoveLedger(clk, 0, 2)
	if ok, _ := b.admit("ns/a", move{kind: profileMove, to: "h", live: true}, unlimited); !ok {
		t.Fatal("the switch to live refused")
	}
	if ok, _ := b.admit("ns/a", move{kind: profileMove, to: "h"}, unlimited); !ok {
		t.Fatal("the switch back refused")
	}
	if ok, _ := b.admit("ns/b", move{kind: profileMove, to: "h"}, unlimited); ok {
		t.Error("a third move started within the minute: the switch back was taken for the switch under way")
	}
}

// A move granted again (its write refused by a conflict, retried later)
// starts when it is written again: the minute counts from then.
func TestClusterBudgetPerMinuteCountsFromTheRetriedWrite(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newMoveLedger(clk, 0, 1)
	if ok, _ := b.admit("ns/a", move{kind: profileMove, to: "h"}, unlimited); !ok {
		t.Fatal("first move refused")
	}
	clk.Step(1400 * time.Millisecond) // the write failed; its retry
	if ok, _ := b.admit("ns/a", move{kind: profileMove, to: "h"}, unlimited); !ok {
		t.Fatal("the retried write's move refused")
	}
	b.release("ns/a")
	clk.Step(time.Minute - time.Second)
	if ok, _ := b.admit("ns/b", move{kind: profileMove, to: "h"}, unlimited); ok {
		t.Error("a second move started within a minute of the retried write")
	}
	clk.Step(time.Second)
	if ok, _ := b.admit("ns/b", move{kind: profileMove, to: "h"}, unlimited); !ok {
		t.Error("refused a minute after the retried write")
	}
}

func TestClusterBudgetSeedCountsAsStarted(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newMoveLedger(clk, 3, 3)
	// Both found rolling, and both started now (seedLedger: their starts
	// recorded so, or not recorded at all).
	b.seed(map[string]move{"ns/a": {kind: seededMove, to: "h"}, "ns/b": {kind: seededMove, to: "h"}}, []moveStarted{{at: clk.Now(), namespace: "ns"}, {at: clk.Now(), namespace: "ns"}})
	if ok, _ := b.admit("ns/c", move{kind: profileMove, to: "h"}, unlimited); !ok {
		t.Fatal("refused with one place left")
	}
	if ok, _ := b.admit("ns/d", move{kind: profileMove, to: "h"}, unlimited); ok {
		t.Error("granted past the seeded moves")
	}
	b.release("ns/a")
	if ok, _ := b.admit("ns/d", move{kind: profileMove, to: "h"}, unlimited); ok {
		t.Error("a seeded move counts as started this minute: no fourth start")
	}
	clk.Step(time.Minute)
	if ok, _ := b.admit("ns/b", move{kind: profileMove, to: "h2"}, unlimited); ok {
		t.Error("a session found rolling moved without a place of its own")
	}
	b.release("ns/c")
	if ok, _ := b.admit("ns/b", move{kind: profileMove, to: "h2"}, unlimited); !ok {
		t.Error("a session found rolling refused a free place")
	}
	if unlimited := newMoveLedger(clk, 0, 0); unlimited.limited() {
		t.Error("a budget of zeros limits")
	}
}

// A move whose Deployment the cache does not show holds its place: the
// cache holds only labelled Deployments, and learns of one written through
// a live read late or never. A live read ends the move, when the Deployment
// is Ready or gone. Seed 67517 of the sequences: the second session moved
// while the first one's Deployment, missing from the cache, still rolled.
func TestBudgetMoveOutsideTheCacheHoldsItsPlace(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 2, nil)
	newHash := ProfileHash(profile)
	moved := moveUnderABudgetOfOne(ctx, f)
	// The move rolls on the server; the cache never shows it (its label
	// was removed, say).
	if rolledProfileHash(moved, "classic") != newHash || f.c.state.moves.movingTo("arena/s0") != newHash {
		t.Fatalf("s0 runs %q and is moving to %q in the budget, want the move to %q granted",
			rolledProfileHash(moved, "classic"), f.c.state.moves.movingTo("arena/s0"), newHash)
	}
	f.deleteCached(moved)
	drainQueue(f.c.sessions.queue)

	// The sync reads it (the create that follows finds the name taken and
	// reads it again) and keeps the place; s1 waits.
	f.expectKube(getDeployment(testNamespace, "s0"), createDeployment(testNamespace, "s0"), getDeployment(testNamespace, "s0"))
	f.run(ctx, "arena/s0")
	if got := f.c.state.moves.movingTo("arena/s0"); got != newHash {
		t.Fatalf("a move whose Deployment the cache does not show lost its place (moving to %q)", got)
	}
	f.expectGame(updateSessionStatus(testNamespace, "s1"))
	_, game := f.run(ctx, "arena/s1")
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonWaitingForClusterBudget)
	f.observe(game...)

	// Ready on the server: the next read ends the move and wakes s1.
	ready := moved.DeepCopy()
	ready.Status.ObservedGeneration = ready.Generation
	if err := f.kubeClient.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), ready, testNamespace); err != nil {
		t.Fatal(err)
	}
	drainQueue(f.c.sessions.queue)
	f.expectKube(getDeployment(testNamespace, "s0"), createDeployment(testNamespace, "s0"), getDeployment(testNamespace, "s0"))
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	f.run(ctx, "arena/s0")
	if got := f.c.state.moves.movingTo("arena/s0"); got != "" {
		t.Errorf("s0 still moves to %q in the budget, its Deployment Ready", got)
	}
	if woken := drainQueue(f.c.sessions.queue); !slices.Contains(woken, "arena/s1") {
		t.Errorf("the place freed woke %v, want arena/s1", woken)
	}

	// s1 moves; its Deployment is deleted: a read that finds none ends the
	// move, and the Deployment created in its place is no move.
	f.expectKube(writeDeployment(testNamespace, "s1"))
	f.expectGame(updateSessionStatus(testNamespace, "s1"))
	_, game = f.run(ctx, "arena/s1")
	f.observe(game...)
	if got := f.c.state.moves.movingTo("arena/s1"); got != newHash {
		t.Fatalf("s1 moving to %q in the budget, want %q", got, newHash)
	}
	f.deleteCached(f.storedDeployment(testNamespace, "s1"))
	if err := f.kubeClient.Tracker().Delete(appsv1.SchemeGroupVersion.WithResource("deployments"), testNamespace, "s1"); err != nil {
		t.Fatal(err)
	}
	f.expectKube(getDeployment(testNamespace, "s1"), createDeployment(testNamespace, "s1"))
	f.expectGame(updateSessionStatus(testNamespace, "s1"))
	f.run(ctx, "arena/s1")
	if moving, _ := f.c.state.moves.counts(); moving != 0 {
		t.Errorf("%d sessions moving in the budget, want none: s1's Deployment is gone", moving)
	}
}

// A new leader counts the moves its predecessor started within the last
// minute, as their Deployments record them, completed or not: with a budget
// of 3 a minute, two moves now Ready and one still rolling (its start not
// recorded: as good as now) leave no room until the oldest is a minute old.
// The move it then starts records its own start.
func TestSeedBudgetCountsTheMovesOfTheLastMinute(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	oldProfile := newProfile(testNamespace, "classic", classicData)
	oldHash := ProfileHash(oldProfile)
	profile := withData(oldProfile, map[string]string{"game.cfg": "new"})
	newHash := ProfileHash(profile)
	objects := []runtime.Object{profile}
	for name, ago := range map[string]time.Duration{"s0": 20 * time.Second, "s1": 10 * time.Second} {
		s := settled(newSession(testNamespace, name, "classic"), newHash)
		d := apiServerDeployment(s, newHash)
		d.Annotations[gamesv1.MoveStartsAnnotation] = clk.Now().Add(-ago).Format(time.RFC3339Nano)
		objects = append(objects, s, d)
	}
	rolling := settled(newSession(testNamespace, "s3", "classic"), newHash)
	d := apiServerDeployment(rolling, newHash)
	d.Status.ReadyReplicas = 0
	objects = append(objects, rolling, d)
	waiting := settled(newSession(testNamespace, "s2", "classic"), oldHash)
	objects = append(objects, waiting, apiServerDeployment(waiting, oldHash))
	f := newFixtureWithOptions(ctx, t, Options{MaxMovesPerMinute: 3, Clock: clk}, objects...)
	f.c.sessions.seedLedger()

	f.expectGame(updateSessionStatus(testNamespace, "s2"))
	_, game := f.run(ctx, "arena/s2")
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonWaitingForClusterBudget)
	f.observe(game...)

	clk.Step(40 * time.Second)
	f.expectKube(writeDeployment(testNamespace, "s2"))
	f.expectGame(updateSessionStatus(testNamespace, "s2"))
	f.run(ctx, "arena/s2")
	moved := f.storedDeployment(testNamespace, "s2")
	if got := rolledProfileHash(moved, "classic"); got != newHash {
		t.Fatalf("s2 runs %q a minute after the first start, want %q", got, newHash)
	}
	if got, want := moved.Annotations[gamesv1.MoveStartsAnnotation], clk.Now().Format(time.RFC3339Nano); got != want {
		t.Errorf("the move records its start as %q, want %q", got, want)
	}
	if got := moved.Annotations["deployment.kubernetes.io/revision"]; got != "1" {
		t.Errorf("the move dropped another annotation of the Deployment (revision %q)", got)
	}
}

// The annotation keeps the starts within the minute, at most as many as the
// budget allows in one, oldest first.
func TestMoveStartsKeepsTheLastMinute(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newMoveLedger(clk, 0, 2)
	at := func(ago time.Duration) string { return clk.Now().Add(-ago).Format(time.RFC3339Nano) }
	for _, tc := range []struct{ previous, want string }{
		{"", at(0)},
		{at(time.Minute), at(0)},
		{at(30*time.Second) + ",not a time", at(30*time.Second) + "," + at(0)},
		{at(50*time.Second) + "," + at(20*time.Second), at(20*time.Second) + "," + at(0)},
	} {
		if got := b.moveStarts(tc.previous, clk.Now()); got != tc.want {
			t.Errorf("moveStarts(%q) = %q, want %q", tc.previous, got, tc.want)
		}
	}
}

// movingTo returns what the session moves to in the ledger, "" if nothing.
func (l *moveLedger) movingTo(key string) string {
	m, _ := l.moveOf(key)
	return m.to
}

// One ledger holds every kind of move: an input move takes a cluster place
// like a profile move, and a failed input move gives its cluster place back
// but keeps its profile's, as a brake.
func TestLedgerCountsEveryKindOfMove(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	l := newMoveLedger(clk, 2, 0)
	rotation := func(to string) move { return move{kind: inputMove, to: to, profile: "arena/classic"} }
	if ok, _ := l.admit("arena/a", move{kind: profileMove, to: "h2"}, unlimited); !ok {
		t.Fatal("a profile move refused in an empty ledger")
	}
	if ok, _ := l.admit("arena/b", rotation("s2"), 2); !ok {
		t.Fatal("an input move refused with a cluster place and a profile place free")
	}
	if ok, _ := l.admit("arena/c", rotation("s2"), 2); ok {
		t.Fatal("an input move granted past the cluster's 2 moving: the kinds are counted apart")
	}
	// b fails: its cluster place goes to c, which then holds the profile's
	// second place.
	if wake := l.stall("arena/b"); !slices.Equal(wake.now, []string{"arena/c"}) {
		t.Fatalf("the failed input move woke %v, want arena/c", wake.now)
	}
	if ok, _ := l.admit("arena/c", rotation("s2"), 2); !ok {
		t.Fatal("arena/c refused the place it was woken for")
	}
	if ok, _ := l.admit("arena/d", rotation("s2"), 2); ok {
		t.Error("a third input move granted under max-rolling 2: the failed one keeps its place")
	}
	// The fix moves b again, in the profile place it holds, once the
	// cluster has room.
	l.release("arena/a")
	if ok, _ := l.admit("arena/b", rotation("s3"), 2); !ok {
		t.Error("the failed session refused its move to the fix")
	}
	if moving, _ := l.counts(); moving != 2 {
		t.Errorf("%d moving in the cluster, want 2 (b and c)", moving)
	}
}

// A paced profile's max-rolling is one count over both kinds of move: a
// move to new content takes a place an input move then cannot, and the
// other way round; the end of either wakes those waiting for a place.
// Without cluster limits an unpaced profile's move is not recorded.
func TestLedgerHoldsOneMaxRollingForEveryKindOfMove(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	l := newMoveLedger(clk, 0, 0)
	const classic = "arena/classic"
	content := move{kind: profileMove, to: "h2", profile: classic}
	rotation := move{kind: inputMove, to: "s2", profile: classic}
	if ok, _ := l.admit("arena/a", content, 1); !ok {
		t.Fatal("a move to new content refused in an empty ledger")
	}
	if ok, _ := l.admit("arena/b", rotation, 1); ok {
		t.Fatal("an input move granted while a move to new content has the one place")
	}
	if !l.profileFull("arena/b", rotation, 1) || l.profileFull("arena/a", rotation, 1) {
		t.Error("profileFull does not tell the session without a place from the one with it")
	}
	if wake := l.release("arena/a"); !slices.Equal(wake.now, []string{"arena/b"}) {
		t.Fatalf("the end of the move to new content woke %v, want arena/b", wake.now)
	}
	if ok, _ := l.admit("arena/b", rotation, 1); !ok {
		t.Fatal("the input move refused the place it was woken for")
	}
	if ok, _ := l.admit("arena/a", content, 1); ok {
		t.Fatal("a move to new content granted while an input move has the one place")
	}
	if moving, _, waiting := l.inputsOf(classic); moving != 1 || waiting != 1 {
		t.Errorf("inputsOf: %d input moves, %d waiting, want 1 and 1", moving, waiting)
	}
	if ok, _ := l.admit("arena/u", move{kind: profileMove, to: "h9"}, unlimited); !ok {
		t.Fatal("an unpaced move refused")
	}
	if _, ok := l.moveOf("arena/u"); ok {
		t.Error("an unpaced move recorded without a limit to keep")
	}
}

// A session found rolling at a restart holds a place of its profile, to
// keep max-rolling on the safe side, but may have rolled for its own spec:
// a move of it needs a place like any other's, not the one it was found in
// (seed 99775510: two found rolling under max-rolling 1, and the second
// restarted for its Secrets beside the first).
func TestLedgerSeededMoveGivesNoPlaceToMoveIn(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	l := newMoveLedger(clk, 0, 0)
	const classic = "arena/classic"
	l.seed(map[string]move{
		"arena/a": {kind: seededMove, to: "h1", profile: classic},
		"arena/b": {kind: seededMove, to: "h1", profile: classic},
	}, nil)
	rotation := move{kind: inputMove, to: "s2", profile: classic}
	if ok, _ := l.admit("arena/b", rotation, 1); ok {
		t.Fatal("a session found rolling moved in its place beside another found rolling, under max-rolling 1")
	}
	if wake := l.release("arena/a"); !slices.Equal(wake.now, []string{"arena/b"}) {
		t.Fatalf("the end of the other's rollout woke %v, want arena/b", wake.now)
	}
	if ok, _ := l.admit("arena/b", rotation, 1); ok {
		t.Fatal("the session moved beside its own rollout found at the start, under max-rolling 1")
	}
	l.release("arena/b")
	if ok, _ := l.admit("arena/b", rotation, 1); !ok {
		t.Error("the move refused in an empty ledger")
	}
}

// A rotation of a Secret shared by every session goes through the
// cluster-wide budget like a profile edit, and each move records its start
// for a new leader's budget per minute (issue 30: rotations skipped it).
func TestSecretRotationTakesTheClusterBudget(t *testing.T) {
	w := newSecretWorldWithOptions(t, Options{MaxMovingSessions: 1, MaxMovesPerMinute: 10}, "blue-2", "blue-3")
	for _, name := range []string{"blue-1", "blue-2", "blue-3"} {
		w.complete(t, name, false)
	}
	w.rotate(t, "blue", "two")
	moved := func() []string { return slices.Sorted(maps.Keys(w.syncAll(t))) }
	first := moved()
	if len(first) != 1 {
		t.Fatalf("a budget of 1 moving session moved %v", first)
	}
	if d := w.f.storedDeployment(testNamespace, first[0]); d.Annotations[gamesv1.MoveStartsAnnotation] == "" {
		t.Errorf("the rotation's move of %s records no start", first[0])
	}
	if again := moved(); len(again) != 0 {
		t.Fatalf("with %v rolling, a second pass moved %v", first, again)
	}
	w.complete(t, first[0], false)
	drainQueue(w.f.c.sessions.queue)
	second := moved()
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("%s Ready, the next pass moved %v, want one other session", first[0], second)
	}
}

// A move the ledger granted whose write was then refused (a conflict) leaves
// the ledger recording a move the Deployment does not run, while it still
// rolls the session's move before. That rollout restarts game servers: the
// place is kept until it ends, not given to the next session (seed
// 99837506: two sessions moving under a budget of one).
func TestMoveOvertakenKeepsItsPlaceWhileTheDeploymentRolls(t *testing.T) {
	w := newSecretWorldWithOptions(t, Options{MaxMovingSessions: 1}, "blue-2")
	for _, s := range w.all() {
		w.complete(t, s.Name, false)
	}
	w.rotate(t, "blue", "two")
	moved := slices.Sorted(maps.Keys(w.syncAll(t)))
	if len(moved) != 1 {
		t.Fatalf("a budget of 1 moving session moved %v", moved)
	}
	key := testNamespace + "/" + moved[0]
	m, _ := w.f.c.sessions.moves.moveOf(key)
	// Granted again, to newer data, and the write refused.
	refused := m
	refused.to = "newer data"
	if ok, _ := w.f.c.sessions.moves.admit(key, refused, unlimited); !ok {
		t.Fatal("the moving session refused a move in its own place")
	}
	w.sync(t, key)
	if _, ok := w.f.c.sessions.moves.moveOf(key); !ok {
		t.Fatal("the move ended while its Deployment still rolls the data before")
	}
	if again := slices.Sorted(maps.Keys(w.syncAll(t))); len(again) != 0 {
		t.Fatalf("with %s rolling, the budget of 1 moved %v too", moved[0], again)
	}
	w.complete(t, moved[0], false)
	w.sync(t, key)
	if _, ok := w.f.c.sessions.moves.moveOf(key); ok {
		t.Error("the move outlived the end of the Deployment's rollout")
	}
}

// A restart keeps a paced profile's max-rolling: the new ledger counts the
// Deployments still rolling in their profile's places (issue 30, bug 1:
// the input pacer's places were lost, and max-rolling more started). A
// Deployment rolling for another reason counts too, until it is Ready or
// fails: what a restart cannot tell, it counts on the safe side.
func TestLedgerRestartKeepsTheProfilePlaces(t *testing.T) {
	w := newSecretWorld(t, "blue-2", "blue-3")
	for _, s := range w.all() {
		w.complete(t, s.Name, false)
	}
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "1"}
	w.f.setCached(w.profile)
	w.rotate(t, "blue", "two")
	moved := func() []string { return slices.Sorted(maps.Keys(w.syncAll(t))) }
	first := moved()
	if len(first) != 1 {
		t.Fatalf("max-rolling 1 moved %v", first)
	}

	w.f.c.setMoves(newMoveLedger(w.f.c.sessions.clock, 0, 0))
	w.f.c.sessions.seedLedger()
	if after := moved(); len(after) != 0 {
		t.Fatalf("after a restart, with %v still rolling, max-rolling 1 moved %v", first, after)
	}
	w.complete(t, first[0], false)
	if next := moved(); len(next) != 1 || next[0] == first[0] {
		t.Fatalf("%s Ready, moved %v, want one other session", first[0], next)
	}
}

// A halt holds every kind of move of the profile: while its rollout is
// halted on its current content, a rotation restarts none of its sessions.
// The halt is read from the ProfileRollout too, as a new leader finds it
// before its first plan.
func TestSecretRotationHeldByTheProfilesHalt(t *testing.T) {
	w := newSecretWorld(t, "blue-2")
	for _, s := range w.all() {
		w.complete(t, s.Name, false)
	}
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "2", rollout.AnnotationMaxFailed: "0"}
	w.f.setCached(w.profile)
	halted := &gamesv1.ProfileRollout{
		ObjectMeta: metav1.ObjectMeta{Name: w.profile.Name, Namespace: testNamespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(w.profile, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}},
		Status: gamesv1.ProfileRolloutStatus{HaltedHash: ProfileHash(w.profile)},
	}
	w.f.setCached(halted)
	w.rotate(t, "blue", "two")
	if moved := slices.Sorted(maps.Keys(w.syncAll(t))); len(moved) != 0 {
		t.Fatalf("the profile's rollout halted, and the rotation moved %v", moved)
	}
	// The halt is of the profile's earlier content: the rotation goes on.
	released := halted.DeepCopy()
	released.Status.HaltedHash = "0123456789abcdef0123"
	w.f.setCached(released)
	if moved := slices.Sorted(maps.Keys(w.syncAll(t))); len(moved) != 2 {
		t.Fatalf("no halt of the current content, max-rolling 2, the rotation moved %v", moved)
	}
}

// A rotation that breaks game servers stops like a bad profile edit: with
// max-failed 0, one failed move (ProgressDeadlineExceeded) holds the others;
// new data move the failed one again, and the rotation goes on.
func TestSecretRotationBrakesOnFailedMoves(t *testing.T) {
	w := newSecretWorld(t, "blue-2", "blue-3", "blue-4")
	for _, s := range w.all() {
		w.complete(t, s.Name, false)
	}
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "2", rollout.AnnotationMaxFailed: "0"}
	w.f.setCached(w.profile)
	w.rotate(t, "blue", "broken")
	moved := func() []string { return slices.Sorted(maps.Keys(w.syncAll(t))) }
	first := moved()
	if len(first) != 2 {
		t.Fatalf("max-rolling 2 moved %v", first)
	}
	w.complete(t, first[0], false)
	failed := w.f.storedDeployment(testNamespace, first[1]).DeepCopy()
	failed.Status.ObservedGeneration = failed.Generation
	failed.Status.ReadyReplicas, failed.Status.AvailableReplicas = 0, 0
	failed.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing,
		Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	w.f.setCached(failed)
	if braked := moved(); len(braked) != 0 {
		t.Fatalf("one move failed under max-failed 0, and the rotation went on: moved %v", braked)
	}
	// The profile's plan records it, and says so once.
	_, ctx := ktesting.NewTestContext(t)
	w.f.events()
	pp := w.f.c.profiles.planRollout(ctx, w.profile, ProfileHash(w.profile), revisionState{available: true}, nil)
	status := rolloutStatus(w.profile, pp, nil, metav1.Now())
	if want := (gamesv1.InputRolloutStatus{MovingSessions: 1, FailedSessions: 1, WaitingSessions: 2, Halted: true}); status.Inputs == nil || !reflect.DeepEqual(*status.Inputs, want) {
		t.Errorf("ProfileRollout status.inputs %+v, want %+v", status.Inputs, want)
	}
	if events := w.f.events(); !slices.ContainsFunc(events, func(e string) bool {
		return strings.HasPrefix(e, "Warning "+EventReasonInputsHalted)
	}) {
		t.Errorf("the brake on input moves was not announced: events %q", events)
	}
	w.rotate(t, "blue", "fixed")
	fixed := moved()
	if !slices.Contains(fixed, first[1]) {
		t.Fatalf("the fix moved %v, want the failed %s among them", fixed, first[1])
	}
}

// A session whose input move failed, and which then names another profile,
// leaves the places of its old profile: it no longer counts among that
// profile's max-rolling, and its ProfileRollout hears of it at once, not at
// the next resync (seed 99219757).
func TestFailedInputMoveLeavesTheProfileItsSessionLeft(t *testing.T) {
	w, moved := failedRotationUnderMaxRollingOne(t)
	w.sync(t, testNamespace+"/"+moved)
	classic := profileKey(testNamespace, "classic")
	if moving, stalled, _ := w.f.c.sessions.moves.inputsOf(classic); moving != 1 || stalled != 1 {
		t.Fatalf("the failed move: %d moving, %d failed in the ledger, want 1 and 1", moving, stalled)
	}

	var session *gamesv1.GameSession
	for _, s := range w.all() {
		if s.Name == moved {
			session = s.DeepCopy()
		}
	}
	session.Spec.ProfileRef = "other"
	w.f.setCached(session)
	emptyProfileQueue(w)
	w.sync(t, sessionKey(session))
	if moving, stalled, _ := w.f.c.sessions.moves.inputsOf(classic); moving != 0 || stalled != 0 {
		t.Errorf("the session left the profile: %d moving, %d failed still count among its max-rolling", moving, stalled)
	}
	if _, ok := w.f.c.sessions.moves.moveOf(sessionKey(session)); ok {
		t.Error("a failed move, its profile left, still holds a place")
	}
	if !profileQueued(t, w, classic) {
		t.Error("the profile the session left was not asked for a plan: its ProfileRollout counts the move until a resync")
	}
}

// A failed input move holds its place of max-rolling against other input
// moves (the brake), not against the profile's moves to new content, which
// the plan paces with a brake of its own: the rollout of a profile edit is
// not held by a failed rotation of a session it does not move first (seed
// 99880284: a canary held for good by a rotation that failed on another
// session).
func TestFailedInputMoveHoldsBackNoMoveToNewContent(t *testing.T) {
	w, first := oneRotationUnderMaxRollingOne(t)
	w.complete(t, first, false)
	w.sync(t, testNamespace+"/"+first)
	moved := slices.Sorted(maps.Keys(w.syncAll(t)))
	if len(moved) != 1 || moved[0] == first {
		t.Fatalf("%s Ready, the rotation moved %v next, want the other reader", first, moved)
	}
	second := moved[0]
	w.complete(t, second, true)
	cached, err := w.f.c.caches.deploymentLister.Deployments(testNamespace).Get(second)
	if err != nil {
		t.Fatal(err)
	}
	failed := cached.DeepCopy()
	failed.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing,
		Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	w.f.setCached(failed)
	w.sync(t, testNamespace+"/"+second)
	classic := profileKey(testNamespace, "classic")
	if _, stalled, _ := w.f.c.sessions.moves.inputsOf(classic); stalled != 1 {
		t.Fatalf("the failed move of %s: %d failed in the ledger, want 1", second, stalled)
	}

	w.profile = w.profile.DeepCopy()
	w.profile.Data = map[string]string{"game.cfg": "mode=classic\nmaxPlayers=64\n"}
	w.profile.ResourceVersion = bumpVersion(w.profile.ResourceVersion)
	w.f.setCached(w.profile)
	if pp := w.plan(t); len(pp.plan.Admitted) != 1 || pp.plan.Admitted[0] == memberName(testNamespace, testNamespace+"/"+second) {
		t.Fatalf("the plan admits %v, want one session other than the failed %s", pp.plan.Admitted, second)
	}
	var movedToContent []string
	for _, s := range w.all() {
		w.sync(t, sessionKey(s))
		if w.f.storedDeployment(testNamespace, s.Name).Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == ProfileHash(w.profile) {
			movedToContent = append(movedToContent, s.Name)
		}
	}
	if len(movedToContent) != 1 || movedToContent[0] == second {
		t.Fatalf("under max-rolling 1, %v moved to the new content, want the session the plan admitted", movedToContent)
	}
	if _, stalled, _ := w.f.c.sessions.moves.inputsOf(classic); stalled != 1 {
		t.Errorf("the failed input move of %s no longer holds back the other input moves", second)
	}
}

// A deleted session's move frees its profile's place, and its ProfileRollout
// hears of it at once, not at the next resync (seed 99419688).
func TestDeletedSessionLeavesItsProfilesPlace(t *testing.T) {
	w, moved := oneRotationUnderMaxRollingOne(t)
	classic := profileKey(testNamespace, "classic")
	if moving, _, _ := w.f.c.sessions.moves.inputsOf(classic); moving != 1 {
		t.Fatalf("%d moves of the profile in the ledger, want 1", moving)
	}
	for _, s := range w.all() {
		if s.Name == moved {
			w.f.deleteCached(s)
		}
	}
	emptyProfileQueue(w)
	w.sync(t, testNamespace+"/"+moved)
	if moving, _, _ := w.f.c.sessions.moves.inputsOf(classic); moving != 0 {
		t.Errorf("the deleted session's move still counts among the profile's max-rolling (%d)", moving)
	}
	if !profileQueued(t, w, classic) {
		t.Error("the profile of a deleted session's move was not asked for a plan: its ProfileRollout counts the move until a resync")
	}
}

// oneRotationUnderMaxRollingOne is a Secret world whose two readers of
// Secret blue run it Ready, under max-rolling 1, after a rotation of blue:
// one of them moved, the one it returns.
func oneRotationUnderMaxRollingOne(t *testing.T) (*inputWorld, string) {
	t.Helper()
	w := newSecretWorld(t, "blue-2")
	for _, s := range w.all() {
		w.complete(t, s.Name, false)
	}
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "1"}
	w.f.setCached(w.profile)
	w.rotate(t, "blue", "two")
	moved := slices.Sorted(maps.Keys(w.syncAll(t)))
	if len(moved) != 1 {
		t.Fatalf("max-rolling 1 moved %v", moved)
	}
	return w, moved[0]
}

// failedRotationUnderMaxRollingOne is oneRotationUnderMaxRollingOne whose
// moved session's Deployment then failed, as the cache shows it.
func failedRotationUnderMaxRollingOne(t *testing.T) (*inputWorld, string) {
	t.Helper()
	w, moved := oneRotationUnderMaxRollingOne(t)
	w.complete(t, moved, true)
	failed, err := w.f.c.caches.deploymentLister.Deployments(testNamespace).Get(moved)
	if err != nil {
		t.Fatal(err)
	}
	failed = failed.DeepCopy()
	failed.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing,
		Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	w.f.setCached(failed)
	return w, moved
}

// emptyProfileQueue empties the profile queue once the plans asked for so
// far have come: they come planInterval after they are asked for.
func emptyProfileQueue(w *inputWorld) {
	time.Sleep(2 * planInterval)
	drainQueue(w.f.c.profiles.queue)
}

// profileQueued reports whether the profile is queued within ten seconds.
func profileQueued(t *testing.T, w *inputWorld, key string) bool {
	_, ctx := ktesting.NewTestContext(t)
	return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return slices.Contains(drainQueue(w.f.c.profiles.queue), key), nil
	}) == nil
}

// A rotation of a session that waits for its turn in its profile's paced
// rollout rides along with that move: its game servers restart once, not
// once for the Secret and again for the profile.
func TestSecretRotationRidesWithTheProfilesMove(t *testing.T) {
	w := newSecretWorld(t, "blue-2")
	for _, s := range w.all() {
		w.complete(t, s.Name, false)
	}
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "1"}
	w.profile.Data = map[string]string{"game.cfg": "v1"}
	w.profile.ResourceVersion = bumpVersion(w.profile.ResourceVersion)
	w.f.setCached(w.profile)
	w.rotate(t, "blue", "two")
	if moved := slices.Sorted(maps.Keys(w.syncAll(t))); len(moved) != 0 {
		t.Errorf("before the profile's plan gave anyone a turn, the rotation restarted %v", moved)
	}
}

// A moving session whose Deployment is deleted, by a controller that may not
// get Deployments: the read that would tell whether the move ended is
// refused, so the move keeps its place, and the sync goes on to create the
// Deployment again instead of failing on the refused read for good (seen in
// the RBAC test without get on Deployments).
func TestMoveOfADeletedDeploymentWithoutGetKeepsItsPlaceAndRecreates(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, profile, _ := rolloutFixture(ctx, t, 1, nil)
	newHash := ProfileHash(profile)
	f.deleteCached(moveUnderABudgetOfOne(ctx, f))
	if err := f.kubeClient.Tracker().Delete(appsv1.SchemeGroupVersion.WithResource("deployments"), testNamespace, "s0"); err != nil {
		t.Fatal(err)
	}
	f.kubeClient.PrependReactor("get", "deployments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(appsv1.Resource("deployments"), "s0", errors.New("no get"))
	})
	drainQueue(f.c.sessions.queue)

	f.expectKube(getDeployment(testNamespace, "s0"), createDeployment(testNamespace, "s0"))
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	if _, _, err := f.runWithError(ctx, "arena/s0"); err != nil {
		t.Fatalf("sync failed on the refused read: %v", err)
	}
	if got := f.c.state.moves.movingTo("arena/s0"); got != newHash {
		t.Errorf("the move's place went with the refused read (moving to %q)", got)
	}
}

// moveUnderABudgetOfOne gives the fixture's ledger a budget of one moving
// session, syncs s0, which moves to the profile's new content, and returns
// its Deployment as the server has it.
func moveUnderABudgetOfOne(ctx context.Context, f *fixture) *appsv1.Deployment {
	f.c.setMoves(newMoveLedger(f.c.sessions.clock, 1, 0))
	f.expectKube(writeDeployment(testNamespace, "s0"))
	f.expectGame(updateSessionStatus(testNamespace, "s0"))
	_, game := f.run(ctx, "arena/s0")
	f.observe(game...)
	return f.storedDeployment(testNamespace, "s0")
}

// The event of a Deployment whose move ends (Ready) is the controller's
// own write's, and would go to the status lane, behind the very sessions
// that wait for the place its sync frees: it goes to the first lane.
func TestDeploymentThatEndsAMoveIsSyncedInTheFirstLane(t *testing.T) {
	w := newSecretWorldWithOptions(t, Options{MaxMovingSessions: 1}, "blue-2")
	for _, name := range []string{"blue-1", "blue-2"} {
		w.complete(t, name, false)
	}
	w.rotate(t, "blue", "two")
	moved := slices.Sorted(maps.Keys(w.syncAll(t)))
	if len(moved) != 1 {
		t.Fatalf("a budget of 1 moved %v", moved)
	}
	drainQueue(w.f.c.sessions.queue)
	key := testNamespace + "/" + moved[0]
	written := w.f.storedDeployment(testNamespace, moved[0])
	for _, tc := range []struct {
		name      string
		completed bool
		want      lane
	}{
		{"still rolling", false, statusLane},
		{"Ready", true, firstLane},
	} {
		next := written.DeepCopy()
		// The move's write awaited, as it is until a sync sees the cache
		// show it (the fixture's syncs saw it already).
		w.f.c.state.expectations.expect(key, next)
		next.ResourceVersion = bumpVersion(written.ResourceVersion)
		next.Status.ObservedGeneration = next.Generation
		replicas := ptr.Deref(next.Spec.Replicas, 1)
		next.Status.Replicas, next.Status.UpdatedReplicas, next.Status.ReadyReplicas, next.Status.AvailableReplicas = 2*replicas, 0, replicas, replicas
		if tc.completed {
			next.Status.Replicas, next.Status.UpdatedReplicas = replicas, replicas
		}
		w.f.c.sessions.updateDeployment(written, next)
		keys, from := drain(t, w.f.c.sessions.queue, w.f.c.sessions.lanes)
		if i := slices.Index(keys, key); i < 0 || from[i] != tc.want {
			t.Errorf("%s: the Deployment's own status event queued %v from lanes %v, want %s from lane %v", tc.name, keys, from, key, tc.want)
		}
	}
}
