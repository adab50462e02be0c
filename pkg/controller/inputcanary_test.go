package controller

import (
	"fmt"
	"maps"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

func TestDecideInputCanaries(t *testing.T) {
	blue := inputObject{kind: "Secret", key: "arena/blue"}
	green := inputObject{kind: "ConfigMap", key: "arena/green"}
	reads := func(objects ...inputObject) []inputRead {
		var out []inputRead
		for _, o := range objects {
			out = append(out, inputRead{object: o, digest: o.key + "-d"})
		}
		return out
	}
	members := []canaryMember{
		{name: "a", reads: reads(green), settled: true},
		{name: "b", reads: reads(blue, green)},
		{name: "c", reads: reads(blue), failed: true},
		{name: "d", reads: reads(blue, green), settled: true},
	}
	got := decideInputCanaries(2, members)
	want := map[inputObject]inputCanary{
		// Each object's canaries are its own first readers, not the
		// profile's first sessions: a does not read blue.
		blue:  {digest: "arena/blue-d", members: []string{"b", "c"}, moving: 2, failed: "c"},
		green: {digest: "arena/green-d", members: []string{"a", "b"}, moving: 1},
	}
	if !sameInputCanaries(got, want) {
		t.Errorf("canaries %+v, want %+v", got, want)
	}
	// A reader past the canaries neither holds it up nor fails it.
	if got := decideInputCanaries(1, members); got[blue].failed != "" || !slices.Equal(got[blue].members, []string{"b"}) {
		t.Errorf("one canary: blue's is %+v, want b alone, not failed", got[blue])
	}
	// No canary: every object is planned, and passed.
	for object, c := range decideInputCanaries(0, members) {
		if !c.passed() || len(c.members) != 0 {
			t.Errorf("canary 0: %v has %+v", object, c)
		}
	}
	if got := decideInputCanaries(2, nil); got == nil {
		t.Errorf("a profile without readers has a nil plan of canaries: its sessions would wait for one forever")
	}
}

// The canaries decided from the readers pickCanaryMembers keeps are those
// decided from every reader: random readers of a few objects, shuffled, each
// settled or failed at random, under canaries of 0 to 4.
func TestPickCanaryMembersKeepsWhatDecidesTheCanaries(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	objects := []inputObject{{kind: "Secret", key: "arena/blue"}, {kind: "Secret", key: "arena/green"},
		{kind: "ConfigMap", key: "arena/red"}, {kind: "ConfigMap", key: "tenant/blue"}}
	for round := range 2000 {
		n := rng.IntN(5)
		var readers []readingMember
		status := map[string][2]bool{}
		for i := range rng.IntN(30) {
			r := readingMember{name: fmt.Sprintf("s%02d", i)}
			for _, o := range objects {
				if rng.IntN(3) == 0 {
					r.reads = append(r.reads, inputRead{object: o, digest: fmt.Sprint(rng.IntN(2))})
				}
			}
			if len(r.reads) > 0 {
				readers = append(readers, r)
			}
			failed := rng.IntN(5) == 0
			status[r.name] = [2]bool{!failed && rng.IntN(2) == 0, failed}
		}
		rng.Shuffle(len(readers), func(i, j int) { readers[i], readers[j] = readers[j], readers[i] })
		// Every reader in name order, as the plan took them before.
		var every []canaryMember
		for _, r := range slices.SortedFunc(slices.Values(readers), func(a, b readingMember) int { return strings.Compare(a.name, b.name) }) {
			every = append(every, canaryMember{name: r.name, reads: r.reads, settled: status[r.name][0], failed: status[r.name][1]})
		}
		picked := pickCanaryMembers(readers, n, func(r readingMember) (bool, bool) { return status[r.name][0], status[r.name][1] })
		if want, got := decideInputCanaries(n, every), decideInputCanaries(n, picked); !sameInputCanaries(got, want) {
			t.Fatalf("round %d, canary %d: from the %d readers kept %+v, from all %d %+v", round, n, len(picked), got, len(every), want)
		}
	}
}

// canaryWorld is the Secret world with blue-1..blue-4 reading Secret blue,
// every Deployment Ready, and a policy of one canary that lets three move.
func canaryWorld(t *testing.T) *inputWorld {
	t.Helper()
	w := newSecretWorld(t, "blue-2", "blue-3", "blue-4")
	for _, s := range w.all() {
		w.complete(t, s.Name, false)
	}
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationCanary: "1", rollout.AnnotationMaxRolling: "3"}
	w.f.setCached(w.profile)
	return w
}

// plan runs the profile's plan, as a profile sync would.
func (w *inputWorld) plan(t *testing.T) *profilePlan {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	return w.f.c.profiles.planRollout(ctx, w.profile, ProfileHash(w.profile), revisionState{available: true}, nil)
}

// A rotation under a policy with a canary moves the first reader of the
// Secret, in name order, and the others once it runs the new data Ready.
func TestSecretRotationMovesItsCanaryFirst(t *testing.T) {
	w := canaryWorld(t)
	w.plan(t)
	w.rotate(t, "blue", "two")
	moved := func() []string { return slices.Sorted(maps.Keys(w.syncAll(t))) }
	if early := moved(); len(early) != 0 {
		t.Fatalf("before a plan saw the new data, the rotation moved %v", early)
	}
	w.plan(t)
	if canary := moved(); !slices.Equal(canary, []string{"blue-1"}) {
		t.Fatalf("the canary of the rotation: moved %v, want blue-1 alone", canary)
	}
	if again := moved(); len(again) != 0 {
		t.Fatalf("with the canary not Ready, the rotation moved %v", again)
	}
	pp := w.plan(t)
	if c := pp.inputs.Canaries; len(c) != 1 || c[0].Name != "blue" || c[0].MovingSessions != 1 || !slices.Equal(c[0].Sessions, []string{"blue-1"}) {
		t.Errorf("the ProfileRollout's record of the canary: %+v", c)
	}
	w.complete(t, "blue-1", false)
	pp = w.plan(t)
	if len(pp.inputs.Canaries) != 0 {
		t.Errorf("the canary passed, and the record still shows %+v", pp.inputs.Canaries)
	}
	rest := moved()
	if !slices.Equal(rest, []string{"blue-2", "blue-3", "blue-4"}) {
		t.Fatalf("the canary Ready, moved %v, want blue-2..4", rest)
	}
	// green-1 reads another Secret: its rotation has its own canary, itself.
	for _, name := range rest {
		w.complete(t, name, false)
	}
	w.syncAll(t) // their syncs free their places
	w.rotate(t, "green", "two")
	w.plan(t)
	if green := moved(); !slices.Equal(green, []string{"green-1"}) {
		t.Errorf("green's rotation moved %v, want its only reader", green)
	}
}

// A canary that fails on the new data halts the rotation: no other reader
// moves, and the ProfileRollout says which canary failed. New data moves
// the canary again, and once it is Ready the others follow.
func TestSecretRotationWhoseCanaryFailsHalts(t *testing.T) {
	w := canaryWorld(t)
	w.plan(t)
	w.rotate(t, "blue", "broken")
	w.plan(t)
	moved := func() []string { return slices.Sorted(maps.Keys(w.syncAll(t))) }
	if canary := moved(); !slices.Equal(canary, []string{"blue-1"}) {
		t.Fatalf("the canary of the rotation: moved %v, want blue-1 alone", canary)
	}
	failed := w.f.storedDeployment(testNamespace, "blue-1").DeepCopy()
	failed.Status.ObservedGeneration = failed.Generation
	failed.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing,
		Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}
	w.f.setCached(failed)
	pp := w.plan(t)
	if c := pp.inputs.Canaries; len(c) != 1 || c[0].Failed != "blue-1" {
		t.Errorf("a failed canary: status.inputs %+v", pp.inputs)
	}
	if events := w.f.events(); !slices.ContainsFunc(events, func(e string) bool {
		return strings.HasPrefix(e, "Warning "+EventReasonInputCanaryFailed+" The canary blue-1 of the new data of Secret "+testNamespace+"/blue failed")
	}) {
		t.Errorf("the failed canary was not announced: events %q", events)
	}
	if held := moved(); len(held) != 0 {
		t.Fatalf("the canary failed, and the rotation moved %v", held)
	}
	w.rotate(t, "blue", "fixed")
	w.plan(t)
	if canary := moved(); !slices.Equal(canary, []string{"blue-1"}) {
		t.Fatalf("the fix moved %v, want the canary alone", canary)
	}
	w.complete(t, "blue-1", false)
	w.plan(t)
	if rest := moved(); !slices.Equal(rest, []string{"blue-2", "blue-3", "blue-4"}) {
		t.Fatalf("the fixed canary Ready, moved %v, want blue-2..4", rest)
	}
}

// Whatever keeps a rotation's move waiting (here a paused profile, or a
// Secret the session reads gone from the cache), the session asks for a plan
// when the latest one has not picked the canaries of the new data: the
// ProfileRollout names every rotation under way at once, not at the next
// resync.
func TestRotationWaitingForAnyReasonAsksForTheCanariesPlan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		apply func(w *inputWorld)
	}{
		{"paused", func(w *inputWorld) {
			w.profile = w.profile.DeepCopy()
			w.profile.Annotations[rollout.AnnotationPaused] = "true"
			w.f.setCached(w.profile)
		}},
		{"another Secret gone", func(w *inputWorld) {
			// blue-1 runs with Secret grey too, which then goes.
			grey := cachedSecret(t, testDigestKey, labelledSecret("grey", map[string]string{"token": "one"}))
			w.f.setCached(grey)
			s, err := w.f.c.sessions.sessionLister.GameSessions(testNamespace).Get("blue-1")
			if err != nil {
				t.Fatal(err)
			}
			s = s.DeepCopy()
			s.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "grey"}}}}
			w.f.setCached(s)
			w.syncAll(t)
			w.complete(t, "blue-1", false)
			w.f.deleteCached(grey)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := canaryWorld(t)
			tc.apply(w)
			w.plan(t)
			w.rotate(t, "blue", "two")
			c := w.f.c.sessions
			session, err := c.sessionLister.GameSessions(testNamespace).Get("blue-1")
			if err != nil {
				t.Fatal(err)
			}
			profile, refusal, deployment, err := c.readInputs(session)
			if err != nil {
				t.Fatal(err)
			}
			v := c.view(session, profile, refusal, deployment, nil)
			d := decideSession(v)
			if d.inputs.wait == nil || d.inputs.move != nil {
				t.Fatalf("the rotation did not wait: %+v", d.inputs)
			}
			if want := profileKey(testNamespace, w.profile.Name); d.inputs.requestPlan != want {
				t.Errorf("a rotation that waits (%s) asks for a plan of %q, want %q", d.inputs.wait.reason, d.inputs.requestPlan, want)
			}
		})
	}
}

// One plan can admit a session's move to new content and let a rotation's
// canary go. Under max-rolling 1 the ledger holds the one place for both
// kinds: the first to ask takes it, the other waits its turn, and the end of
// the first move wakes it.
func TestRotationAndRolloutShareTheProfilesMaxRolling(t *testing.T) {
	w := canaryWorldWithNewContent(t)
	moved := func() []string { return slices.Sorted(maps.Keys(w.syncAll(t))) }
	if canary := moved(); !slices.Equal(canary, []string{"blue-1"}) {
		t.Fatalf("the content's canary moved %v, want blue-1", canary)
	}
	w.complete(t, "blue-1", false)
	if pp := w.plan(t); !slices.Equal(pp.plan.Admitted, []string{"blue-2"}) {
		t.Fatalf("past the canary the plan admits %v, want blue-2", pp.plan.Admitted)
	}
	w.rotate(t, "blue", "two")
	// The plan picks blue-1 as the rotation's canary, and still admits blue-2.
	w.plan(t)
	drainQueue(w.f.c.sessions.queue)
	kube, game := w.sync(t, sessionKey(w.blue))
	w.f.observe(append(kube, game...)...)
	if m, ok := w.f.c.sessions.moves.moveOf(sessionKey(w.blue)); !ok || m.kind != inputMove {
		t.Fatalf("the rotation's canary blue-1 has no place: %+v", m)
	}
	blue2 := sessionKey(w.extra[0])
	kube, game = w.sync(t, blue2)
	w.f.observe(append(kube, game...)...)
	if got := w.f.storedDeployment(testNamespace, "blue-2").Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; got == ProfileHash(w.profile) {
		t.Fatal("blue-2 moved to the new content while the rotation's canary has the one place")
	}
	// It waited for its turn before, and says so still.
	stored, err := w.f.gameClient.Tracker().Get(gamesv1.SchemeGroupVersion.WithResource("gamesessions"), testNamespace, "blue-2")
	if err != nil {
		t.Fatal(err)
	}
	expectCondition(t, stored.(*gamesv1.GameSession).Status.Conditions, gamesv1.ConditionProfileUpToDate,
		metav1.ConditionFalse, gamesv1.ReasonWaitingForTurn)

	// The canary's move ends: the place goes to blue-2, which takes it.
	drainQueue(w.f.c.sessions.queue)
	w.complete(t, "blue-1", false)
	w.sync(t, sessionKey(w.blue))
	if woken := drainQueue(w.f.c.sessions.queue); !slices.Contains(woken, blue2) {
		t.Fatalf("the end of the canary's move woke %v, want blue-2 among them", woken)
	}
	kube, game = w.sync(t, blue2)
	w.f.observe(append(kube, game...)...)
	if got := w.f.storedDeployment(testNamespace, "blue-2").Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; got != ProfileHash(w.profile) {
		t.Fatalf("blue-2 did not take the place the canary left: runs %q", got)
	}
}

// A plan keeps no place for the moves it admits: a place is taken by a
// move, not by an admission. While the revision of the new content cannot
// be had (a quota refuses it), the session the plan admits cannot move, and
// the rotation's canary moves (seed 99436407).
func TestRotationTakesThePlaceOfAnAdmissionWithoutItsRevision(t *testing.T) {
	w := canaryWorldWithNewContent(t)
	if canary := slices.Sorted(maps.Keys(w.syncAll(t))); !slices.Equal(canary, []string{"blue-1"}) {
		t.Fatalf("the content's canary moved %v, want blue-1", canary)
	}
	w.complete(t, "blue-1", false)
	w.rotate(t, "blue", "two")
	_, ctx := ktesting.NewTestContext(t)
	unavailable := revisionState{reason: gamesv1.ReasonRevisionCreateFailed, message: "exceeded quota"}
	if pp := w.f.c.profiles.planRollout(ctx, w.profile, ProfileHash(w.profile), unavailable, nil); !slices.Equal(pp.plan.Admitted, []string{"blue-2"}) {
		t.Fatalf("the plan admits %v, want blue-2", pp.plan.Admitted)
	}
	kube, game := w.sync(t, sessionKey(w.blue))
	w.f.observe(append(kube, game...)...)
	for _, a := range kube {
		if a.GetVerb() == "update" && a.GetResource().Resource == "deployments" {
			return
		}
	}
	t.Error("the rotation's canary waits for a place kept for a move whose revision cannot be had")
}

// A rotation whose object goes (deleted, or its label removed) before its
// canary passed is over: a reader that finds the latest plan still naming
// its canary asks for a plan, even when nothing else of it changed, and the
// plan names it no longer. Before, the ProfileRollout kept naming it until
// an idle resync rewrote it: the plan had run just before the cache showed
// the delete (seed 99772718).
func TestRotationOfAnObjectGoneAsksForAPlan(t *testing.T) {
	w := canaryWorld(t)
	w.plan(t)
	w.rotate(t, "blue", "two")
	blue := inputObject{kind: "Secret", key: testNamespace + "/blue"}
	if pp := w.plan(t); pp.inputCanaries[blue].digest == "" {
		t.Fatalf("the plan picked no canary for the rotation of blue: %v", pp.inputCanaries)
	}
	gone := cachedSecretNamed(t, w.f.c, "blue")
	w.f.deleteCached(gone)
	w.f.c.sessions.inputEventHandlers(w.f.c.caches.inputs[0]).OnDelete(gone)
	reader := sessionKey(w.extra[0])
	kube, game := w.sync(t, reader) // its status says why its change waits
	w.f.observe(append(kube, game...)...)
	emptyProfileQueue(w)
	w.sync(t, reader)
	if classic := profileKey(testNamespace, "classic"); !profileQueued(t, w, classic) {
		t.Fatal("a reader of the object gone did not ask for a plan: the ProfileRollout names the canary of a rotation that is over")
	}
	if pp := w.plan(t); pp.inputCanaries[blue].digest != "" {
		t.Errorf("the plan after the object went has a canary for it: %v", pp.inputCanaries)
	}
}

// canaryWorldWithNewContent is a canaryWorld whose profile, under canary 1
// and max-rolling 1, has new content, planned once.
func canaryWorldWithNewContent(t *testing.T) *inputWorld {
	t.Helper()
	w := canaryWorld(t)
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationCanary: "1", rollout.AnnotationMaxRolling: "1"}
	w.profile.Data = map[string]string{"game.cfg": "mode=classic\nmaxPlayers=64\n"}
	w.profile.ResourceVersion = bumpVersion(w.profile.ResourceVersion)
	w.f.setCached(w.profile)
	w.plan(t)
	return w
}

// BenchmarkRotationCanaryPlan is what the canary of rotations adds to a
// profile's plan at the reference scale: 7,340 sessions of one profile, each
// reading one labelled Secret. One op plans the profile under each policy,
// with a canary and without, in the same run, so one run gives the ratio.
func BenchmarkRotationCanaryPlan(b *testing.B) {
	// Thousands of syncs set the scene: their logs would fill the benchmark's.
	ctx := klog.NewContext(b.Context(), logr.Discard())
	profile := newProfile(testNamespace, "classic", classicData)
	objects := []runtime.Object{profile, cachedSecret(b, testDigestKey, labelledSecret("blue", map[string]string{"token": "one"}))}
	var sessions []*gamesv1.GameSession
	for i := range benchSessions {
		s := withSecretVolume(newSession(testNamespace, fmt.Sprintf("session-%05d", i), "classic"), "blue")
		sessions = append(sessions, s)
		objects = append(objects, s)
	}
	f := newFixtureWithOptions(ctx, b, Options{}, objects...)
	for _, s := range sessions {
		f.kubeClient.ClearActions()
		f.gameClient.ClearActions()
		if err := f.c.sessions.syncHandler(ctx, sessionKey(s)); err != nil {
			b.Fatal(err)
		}
		f.observe(append(filterInformerActions(f.kubeClient.Actions()), filterInformerActions(f.gameClient.Actions())...)...)
		f.events() // the recorder's buffer is small: a full one blocks the next sync
	}
	// Every session runs the Secret's data, Ready: each canary has passed.
	for _, s := range sessions {
		d := f.storedDeployment(testNamespace, s.Name).DeepCopy()
		replicas := ptr.Deref(d.Spec.Replicas, 1)
		d.Status.ObservedGeneration = d.Generation
		d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = replicas, replicas, replicas, replicas
		f.setCached(d)
	}
	withPolicy := func(annotations map[string]string) *corev1.ConfigMap {
		p := profile.DeepCopy()
		p.Annotations = annotations
		return p
	}
	plain := withPolicy(map[string]string{rollout.AnnotationMaxRolling: "10%"})
	canary := withPolicy(map[string]string{rollout.AnnotationMaxRolling: "10%", rollout.AnnotationCanary: "1%"})
	hash := ProfileHash(profile)
	plan := func(p *corev1.ConfigMap) (time.Duration, *profilePlan) {
		f.setCached(p)
		goruntime.GC()
		start := time.Now()
		pp := f.c.profiles.planRollout(ctx, p, hash, revisionState{available: true}, nil)
		return time.Since(start), pp
	}
	var plainTime, canaryTime time.Duration
	plans := 0
	for b.Loop() {
		d, pp := plan(plain)
		if pp.plan.Total != benchSessions || pp.inputCanaries != nil {
			b.Fatalf("a plan without a canary: %d members, canaries %v", pp.plan.Total, pp.inputCanaries != nil)
		}
		plainTime += d
		d, pp = plan(canary)
		if c := pp.inputCanaries[inputObject{kind: "Secret", key: testNamespace + "/blue"}]; len(c.members) != benchSessions/100+1 || !c.passed() {
			b.Fatalf("the canary of Secret blue: %+v", c)
		}
		canaryTime += d
		plans++
	}
	plainMs := plainTime.Seconds() * 1000 / float64(plans)
	canaryMs := canaryTime.Seconds() * 1000 / float64(plans)
	b.ReportMetric(plainMs, "plain-ms/plan")
	b.ReportMetric(canaryMs, "canary-ms/plan")
	b.ReportMetric(canaryMs/plainMs, "canary/plain-ratio")
	b.Logf("%d plans of %d sessions each way: without a canary %.1f ms, with the canary of rotations %.1f ms, ratio %.2fx",
		plans, benchSessions, plainMs, canaryMs, canaryMs/plainMs)
}
