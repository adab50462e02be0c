package integration

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// podWatch follows every pod of the namespace through one watch and records
// when each was first seen ending (a deletion timestamp, or gone), by
// session: a restarted game server is a pod of its session that ends.
type podWatch struct {
	mu    sync.Mutex
	ended map[string]map[types.UID]time.Time // session → pod UID → when it started ending
	done  chan struct{}
}

func (e *env) watchPods() *podWatch {
	e.t.Helper()
	list, err := e.kube.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := e.kube.CoreV1().Pods(e.ns).Watch(e.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	pw := &podWatch{ended: map[string]map[types.UID]time.Time{}, done: make(chan struct{})}
	go func() {
		defer close(pw.done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || (ev.Type != watch.Deleted && p.DeletionTimestamp == nil) {
				continue
			}
			session := p.Labels[controller.LabelInstance]
			pw.mu.Lock()
			if pw.ended[session] == nil {
				pw.ended[session] = map[types.UID]time.Time{}
			}
			if _, seen := pw.ended[session][p.UID]; !seen {
				pw.ended[session][p.UID] = time.Now()
			}
			pw.mu.Unlock()
		}
	}()
	e.t.Cleanup(func() { w.Stop(); <-pw.done })
	return pw
}

// firstEnd returns when the first pod of the session started ending, and
// whether one did.
func (pw *podWatch) firstEnd(session string) (time.Time, bool) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var first time.Time
	for _, at := range pw.ended[session] {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// waitForEnd waits until a pod of the session is seen ending, and returns
// when it first was.
func (pw *podWatch) waitForEnd(e *env, session string) time.Time {
	e.t.Helper()
	var at time.Time
	e.eventually("a pod of "+session+" ending", func() (bool, error) {
		var ended bool
		at, ended = pw.firstEnd(session)
		return ended, nil
	})
	return at
}

// waitForReadyOn waits until the session reports running the profile
// content hash, Ready: a status that describes the move, not the state
// before it.
func (e *env) waitForReadyOn(name, hash string) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("GameSession %s Ready on %s", name, hash), func() (bool, error) {
		s, err := e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
		return s.Status.ProfileHash == hash && ready != nil && ready.Status == metav1.ConditionTrue &&
				s.Status.ReadyReplicas == ptr.Deref(s.Spec.Replicas, 1),
			fmt.Errorf("profile hash %s, Ready %v", s.Status.ProfileHash, ready)
	})
}

// setBusy sets or removes a session's busy label, as a matchmaker does.
func (e *env) setBusy(name string, busy bool) time.Time {
	e.t.Helper()
	value := `"` + gamesv1.BusyLabelValue + `"`
	if !busy {
		value = "null"
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, gamesv1.BusyLabel, value)
	if _, err := e.game.GamesV1().GameSessions(e.ns).Patch(e.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("labelling %s busy=%v: %v", name, busy, err)
	}
	return time.Now()
}

func (e *env) deploymentGeneration(name string) int64 {
	e.t.Helper()
	d, err := e.deployment(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return d.Generation
}

// Busy sessions are never restarted by a rollout while idle ones move: their
// pods are watched throughout, and none ends before the session turns idle
// or max-defer passes. The rollout shows them deferred in its status, an
// Event and each session's condition; a session moves once idle; a
// max-defer added to the policy moves the last one, busy as it is.
func TestBusySessionsWaitForIdleOrMaxDefer(t *testing.T) {
	e := newEnv(t)
	e.startController()
	e.createProfile("arena", content("v0"), true)
	names := []string{"a", "b", "c", "d", "e"}
	for _, name := range names {
		e.createSession(newSession(name, "arena", 2))
	}
	for _, name := range names {
		e.waitForReady(name)
	}
	busy := []string{"b", "d"}
	for _, name := range busy {
		e.setBusy(name, true)
	}
	generations := map[string]int64{}
	for _, name := range busy {
		generations[name] = e.deploymentGeneration(name)
	}
	pods := e.watchPods()

	next := content("v1")
	e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = next })
	for _, name := range []string{"a", "c", "e"} {
		e.waitForReadyOn(name, dataHash(next))
	}
	for _, name := range busy {
		s := e.waitForCondition(name, gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonSessionBusy)
		t.Logf("%s: %s", name, meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate).Message)
	}
	r := e.waitForRollout("arena", "2 busy sessions deferred", func(r *gamesv1.ProfileRollout) error {
		if r.Status.TargetHash != dataHash(next) || r.Status.DeferredSessions != 2 || r.Status.MovedSessions != 3 {
			return fmt.Errorf("target %s, moved %d, deferred %d", r.Status.TargetHash, r.Status.MovedSessions, r.Status.DeferredSessions)
		}
		return nil
	})
	t.Logf("ProfileRollout: %s", r.Status.Message)
	e.waitForProfileEvent("arena", controller.EventReasonRolloutDeferred)
	for _, name := range busy {
		if g := e.deploymentGeneration(name); g != generations[name] {
			t.Errorf("busy session %s: Deployment generation %d → %d while busy", name, generations[name], g)
		}
		if at, ended := pods.firstEnd(name); ended {
			t.Errorf("busy session %s: a pod started ending at %v while busy", name, at.Format(time.RFC3339Nano))
		}
	}

	// b turns idle: it moves, by its own event, with no other change.
	idleAt := e.setBusy("b", false)
	e.waitForReadyOn("b", dataHash(next))
	if at := pods.waitForEnd(e, "b"); at.Before(idleAt) {
		t.Errorf("session b: first pod end at %v, before it turned idle at %v", at, idleAt)
	}
	if at, ended := pods.firstEnd("d"); ended {
		t.Errorf("busy session d: a pod started ending at %v", at)
	}

	// A max-defer shorter than the rollout's age moves d, busy as it is.
	deferredAt := time.Now()
	e.updateProfile("arena", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationMaxDefer: "1s"}
	})
	e.waitForReadyOn("d", dataHash(next))
	if at := pods.waitForEnd(e, "d"); at.Before(deferredAt) {
		t.Errorf("session d: first pod end at %v, before max-defer was set at %v", at, deferredAt)
	}
	e.waitForRollout("arena", "the rollout complete", rolloutComplete(dataHash(next)))
}

// nextWindow returns a window of one hour that opens at the next minute, at
// least 20 s away, in UTC: a rollout started now waits for it.
func nextWindow(now time.Time) (spec string, opens time.Time) {
	opens = now.UTC().Truncate(time.Minute).Add(time.Minute)
	if opens.Sub(now) < 20*time.Second {
		opens = opens.Add(time.Minute)
	}
	closes := opens.Add(time.Hour)
	return fmt.Sprintf("%s-%s UTC", opens.Format("15:04"), closes.Format("15:04")), opens
}

// A closed maintenance window holds every move, says when it opens, and
// survives a restart of the controller; its opening resumes the rollout.
func TestMaintenanceWindowHoldsThenResumes(t *testing.T) {
	e := newEnv(t)
	rc := e.startController()
	e.createProfile("arena", content("v0"), true)
	names := []string{"a", "b", "c"}
	for _, name := range names {
		e.createSession(newSession(name, "arena", 1))
	}
	for _, name := range names {
		e.waitForReady(name)
	}
	generations := map[string]int64{}
	for _, name := range names {
		generations[name] = e.deploymentGeneration(name)
	}
	window, opens := nextWindow(time.Now())
	next := content("v1")
	e.updateProfile("arena", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationWindow: window}
		cm.Data = next
	})
	r := e.waitForRollout("arena", "the rollout waiting for its window", func(r *gamesv1.ProfileRollout) error {
		if err := rolloutIs(gamesv1.RolloutPhaseWaiting, dataHash(next))(r); err != nil {
			return err
		}
		if r.Status.ResumeTime == nil || !r.Status.ResumeTime.Time.Equal(opens) {
			return fmt.Errorf("resumeTime %v, want %v", r.Status.ResumeTime, opens)
		}
		return nil
	})
	t.Logf("window %q: %s", window, r.Status.Message)
	e.waitForCondition("a", gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonOutsideWindow)
	e.waitForProfileEvent("arena", controller.EventReasonRolloutWaiting)

	// A restart while the window is closed: the new process holds too.
	rc.stop(t)
	e.startController()
	e.waitForRollout("arena", "the rollout still waiting after a restart", rolloutIs(gamesv1.RolloutPhaseWaiting, dataHash(next)))

	for _, name := range names {
		d := e.waitForDeploymentHash(name, dataHash(next))
		if now := time.Now(); now.Before(opens) {
			t.Errorf("Deployment %s moved at %v, before its window opened at %v", name, now, opens)
		}
		if d.Generation != generations[name]+1 {
			t.Errorf("Deployment %s: generation %d → %d, want one write for the move", name, generations[name], d.Generation)
		}
	}
	e.waitForRollout("arena", "the rollout complete once the window opened", rolloutComplete(dataHash(next)))
	e.waitForProfileEvent("arena", controller.EventReasonRolloutResumed)
}

// budgetWatch follows every Deployment of the namespace and records the
// most moving at once (on its profile's target, not complete), and the move
// times, across profiles.
type budgetWatch struct {
	mu        sync.Mutex
	targets   map[string]string // Deployment → the hash its move goes to
	moving    map[string]bool
	moves     []time.Time
	maxMoving int
}

func (e *env) watchBudget(targets map[string]string) *budgetWatch {
	e.t.Helper()
	bw := &budgetWatch{targets: targets, moving: map[string]bool{}}
	hashes := map[string]string{}
	e.followDeployments(func(d *appsv1.Deployment) {
		hashes[d.Name] = d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	},
		func(d *appsv1.Deployment) {
			hash := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
			bw.mu.Lock()
			defer bw.mu.Unlock()
			if hash != hashes[d.Name] && hash == bw.targets[d.Name] {
				bw.moves = append(bw.moves, time.Now())
			}
			hashes[d.Name] = hash
			bw.moving[d.Name] = hash == bw.targets[d.Name] && !deploymentComplete(d)
			n := 0
			for _, m := range bw.moving {
				if m {
					n++
				}
			}
			bw.maxMoving = max(bw.maxMoving, n)
		})
	return bw
}

// mostMovesWithin returns the most moves the watch saw start within any
// span of d.
func (bw *budgetWatch) mostMovesWithin(d time.Duration) int {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	most := 0
	for i, start := range bw.moves {
		n := 0
		for _, t := range bw.moves[i:] {
			if t.Sub(start) < d {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// The cluster-wide budget holds across three profiles edited at once: at
// no moment, as a watch of the Deployments sees them, are more than three
// sessions of all profiles moving; every session gets there; the sessions
// that wait say why.
func TestClusterBudgetAcrossProfiles(t *testing.T) {
	const perProfile, maxMoving = 6, 3
	e := newEnv(t)
	e.startController(func(o *app.Options) { o.MaxMovingSessions, o.MaxMovesPerMinute = maxMoving, 0 })
	profiles := []string{"arena", "duel", "siege"}
	targets := map[string]string{}
	for _, p := range profiles {
		e.createProfile(p, content(p+"-v0"), true)
		for i := range perProfile {
			name := fmt.Sprintf("%s-%d", p, i)
			e.createSession(newSession(name, p, 1))
			targets[name] = dataHash(content(p + "-v1"))
		}
	}
	for name := range targets {
		e.waitForReady(name)
	}
	bw := e.watchBudget(targets)
	start := time.Now()
	for _, p := range profiles {
		e.updateProfile(p, func(cm *corev1.ConfigMap) { cm.Data = content(p + "-v1") })
	}
	sawWaiting := false
	e.eventuallyWithin(rolloutTimeout, "every session moved and Ready", func() (bool, error) {
		list, err := e.game.GamesV1().GameSessions(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		done := 0
		for _, s := range list.Items {
			c := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
			sawWaiting = sawWaiting || c != nil && c.Reason == gamesv1.ReasonWaitingForClusterBudget
			if s.Status.ProfileHash == targets[s.Name] && meta.IsStatusConditionTrue(s.Status.Conditions, gamesv1.ConditionReady) &&
				s.Status.ObservedGeneration == s.Generation {
				done++
			}
		}
		return done == len(targets), fmt.Errorf("%d of %d done", done, len(targets))
	})
	for _, p := range profiles {
		e.waitForRollout(p, "the rollout complete", rolloutComplete(dataHash(content(p+"-v1"))))
	}
	bw.mu.Lock()
	most, moves := bw.maxMoving, len(bw.moves)
	bw.mu.Unlock()
	t.Logf("%d sessions of 3 profiles moved in %v, at most %d moving at once (budget %d)",
		len(targets), time.Since(start).Round(100*time.Millisecond), most, maxMoving)
	if most > maxMoving || most == 0 {
		t.Errorf("at most %d sessions were moving at once, want 1 to %d", most, maxMoving)
	}
	if moves != len(targets) {
		t.Errorf("the watch saw %d moves, want one per session (%d)", moves, len(targets))
	}
	if !sawWaiting {
		t.Errorf("no session ever reported %s", gamesv1.ReasonWaitingForClusterBudget)
	}
}

// The budget per minute: of six moves with a budget of four a minute, the
// last two start a minute after the first, woken without polling.
func TestClusterBudgetPerMinute(t *testing.T) {
	const sessions, perMinute = 6, 4
	e := newEnv(t)
	e.startController(func(o *app.Options) { o.MaxMovingSessions, o.MaxMovesPerMinute = 0, perMinute })
	e.createProfile("arena", content("v0"), true)
	targets := map[string]string{}
	for i := range sessions {
		e.createSession(newSession(sessionName(i), "arena", 1))
		targets[sessionName(i)] = dataHash(content("v1"))
	}
	for name := range targets {
		e.waitForReady(name)
	}
	bw := e.watchBudget(targets)
	e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v1") })
	e.waitAllOn(dataHash(content("v1")), sessions)
	// A second less than a minute: the watch sees each move a little after
	// the controller started it, not always by the same little.
	if most := bw.mostMovesWithin(time.Minute - time.Second); most > perMinute {
		t.Errorf("%d moves started within 59s, want at most %d", most, perMinute)
	}
	bw.mu.Lock()
	defer bw.mu.Unlock()
	if len(bw.moves) != sessions {
		t.Fatalf("the watch saw %d moves, want %d", len(bw.moves), sessions)
	}
	slices.SortFunc(bw.moves, func(a, b time.Time) int { return a.Compare(b) })
	gap := bw.moves[perMinute].Sub(bw.moves[0])
	t.Logf("move %d started %v after the first", perMinute+1, gap.Round(100*time.Millisecond))
	if gap < time.Minute-time.Second || gap > 2*time.Minute {
		t.Errorf("move %d started %v after the first, want about a minute", perMinute+1, gap)
	}
}

// Within a session of several replicas, the game server that is busy goes
// last: it marks its pod with the pod deletion cost, which the ReplicaSet
// controller honours when the Deployment scales the old ReplicaSet down.
// That is the drain pattern of docs/rollouts.md: the pod template's preStop
// and grace period reach every replaced pod (TestPodTemplateFieldClassesReachPods).
func TestBusyPodIsReplacedLast(t *testing.T) {
	e := newEnv(t)
	e.startController()
	e.createProfile("arena", content("v0"), true)
	s := newSession("a", "arena", 3)
	s.Spec.Strategy = &appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
	e.createSession(s)
	e.waitForReady("a")
	pods, err := e.kube.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=a"})
	if err != nil || len(pods.Items) != 3 {
		t.Fatalf("pods of a: %d, %v", len(pods.Items), err)
	}
	busyPod := pods.Items[1].Name
	patch := `{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"1000"}}}`
	if _, err := e.kube.CoreV1().Pods(e.ns).Patch(e.ctx, busyPod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := e.kube.CoreV1().Pods(e.ns).Watch(e.ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=a"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v1") })

	old := map[string]bool{}
	for _, p := range pods.Items {
		old[p.Name] = true
	}
	var order []string
	timeout := time.After(rolloutTimeout)
	for len(order) < len(old) {
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !old[p.Name] || slices.Contains(order, p.Name) || (ev.Type != watch.Deleted && p.DeletionTimestamp == nil) {
				continue
			}
			order = append(order, p.Name)
		case <-timeout:
			t.Fatalf("timed out after %v: old pods ended in order %v", rolloutTimeout, order)
		}
	}
	t.Logf("old pods ended in order %v; the busy one is %s", order, busyPod)
	if order[len(order)-1] != busyPod {
		t.Errorf("old pods ended in order %v, want the busy pod %s last", order, busyPod)
	}
}

// The matchmaker's rights of artifacts/examples/matchmaker-rbac.yaml: its
// ServiceAccount marks a session of its namespace busy and idle, and the
// admission policy refuses any other change it tries; it cannot touch a
// session of another namespace.
func TestMatchmakerMayOnlyFlipBusy(t *testing.T) {
	e := newEnv(t)
	objs, err := manifests.DecodeFiles("../../artifacts/examples/matchmaker-rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	applier, err := manifests.NewApplier(adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := applier.Apply(e.ctx, e.ns, objs...); err != nil {
		t.Fatalf("applying matchmaker-rbac.yaml: %v", err)
	}
	e.createProfile("arena", content("v0"), true)
	e.createSession(newSession("a", "arena", 1))
	otherNS := controlplane.CreateNamespace(t, e.kube)
	if _, err := e.game.GamesV1().GameSessions(otherNS).Create(e.ctx, newSession("b", "arena", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg, err := cp.ServiceAccountConfig(e.ctx, e.ns, "matchmaker")
	if err != nil {
		t.Fatal(err)
	}
	matchmaker := clientset.NewForConfigOrDie(cfg).GamesV1()
	patch := func(ns, name, body string) error {
		_, err := matchmaker.GameSessions(ns).Patch(e.ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	busy := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, gamesv1.BusyLabel)
	idle := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, gamesv1.BusyLabel)
	if err := patch(e.ns, "a", busy); err != nil {
		t.Fatalf("the matchmaker marking a session busy: %v", err)
	}
	if err := patch(e.ns, "a", idle); err != nil {
		t.Fatalf("the matchmaker marking a session idle: %v", err)
	}
	if err := patch(otherNS, "b", busy); !apierrors.IsForbidden(err) {
		t.Errorf("the matchmaker marking a session of another namespace busy: %v, want Forbidden", err)
	}
	// The policy may take a moment to be served after its create: wait for
	// the first refusal, then check each. Every probe changes something (a
	// label value of its own): a patch that changes nothing passes any
	// policy, since the object equals the old one.
	probe := 0
	e.eventuallyWithin(rolloutTimeout, "the admission policy refusing the matchmaker a label change", func() (bool, error) {
		probe++
		err := patch(e.ns, "a", fmt.Sprintf(`{"metadata":{"labels":{"probe":"p%d"}}}`, probe))
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), fmt.Errorf("patch answered %v", err)
	})
	refusals := map[string]string{
		"spec":        fmt.Sprintf(`{"spec":{"replicas":%d}}`, ptr.Deref(e.session("a").Spec.Replicas, 1)+1),
		"labels":      `{"metadata":{"labels":{"tier":"gold"}}}`,
		"annotations": `{"metadata":{"annotations":{"note":"x"}}}`,
	}
	for what, body := range refusals {
		err := patch(e.ns, "a", body)
		if err == nil || !strings.Contains(err.Error(), "may change only the label "+gamesv1.BusyLabel) {
			t.Errorf("the matchmaker changing the session's %s: %v, want a refusal naming the busy label", what, err)
		}
	}
	if err := patch(e.ns, "a", busy); err != nil {
		t.Errorf("the matchmaker marking a session busy under the policy: %v", err)
	}
	if s := e.session("a"); !isBusyLabelled(s) || ptr.Deref(s.Spec.Replicas, 1) != 1 {
		t.Errorf("session a: labels %v, replicas %d; want busy, and the spec as it was", s.Labels, ptr.Deref(s.Spec.Replicas, 1))
	}
}

func isBusyLabelled(s *gamesv1.GameSession) bool {
	return s.Labels[gamesv1.BusyLabel] == gamesv1.BusyLabelValue
}
