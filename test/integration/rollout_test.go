package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// brokenData is the profile content whose pods never become Ready: the
// project's kwok stage hack/kwok/pod-never-ready.yaml matches its hash.
var brokenData = map[string]string{"game.cfg": "crash-on-start"}

// The kwok stages name the broken content by its hash: if the hash function
// changed, the canary test would roll a content whose pods get Ready (and the
// slow stage would make broken pods Ready after all).
func TestKwokStageHashIsTheBrokenProfile(t *testing.T) {
	for _, file := range []string{"pod-never-ready.yaml", "pod-sim-slow-ready.yaml"} {
		stage, err := os.ReadFile("../../hack/kwok/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(stage), "'"+dataHash(brokenData)+"'") {
			t.Errorf("hack/kwok/%s does not name %s, the hash of %v", file, dataHash(brokenData), brokenData)
		}
	}
}

func dataHash(data map[string]string) string {
	return controller.ProfileHash(&corev1.ConfigMap{Data: data})
}

// revisions returns the names of the profile's revisions on the server.
func (e *env) revisions(profile string) []string {
	e.t.Helper()
	list, err := e.kube.CoreV1().ConfigMaps(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: controller.RevisionSelector()})
	if err != nil {
		e.t.Fatalf("listing revisions: %v", err)
	}
	var names []string
	for _, cm := range list.Items {
		if cm.Annotations[controller.RevisionOfAnnotation] == profile {
			names = append(names, cm.Name)
		}
	}
	slices.Sort(names)
	return names
}

func revisionNames(profile string, hashes ...string) []string {
	var names []string
	for _, h := range hashes {
		names = append(names, controller.RevisionName(profile, h))
	}
	slices.Sort(names)
	return names
}

// mountedRevision is the ConfigMap a Deployment's profile volume mounts.
func mountedRevision(d *appsv1.Deployment) string {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "profile" && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// rollTo edits the profile's data and waits until every named session's
// Deployment runs its revision and is Ready.
func (e *env) rollTo(profile string, data map[string]string, sessions ...string) {
	e.t.Helper()
	e.updateProfile(profile, func(cm *corev1.ConfigMap) { cm.Data = data })
	for _, name := range sessions {
		d := e.waitForDeploymentHash(name, dataHash(data))
		if got, want := mountedRevision(d), controller.RevisionName(profile, dataHash(data)); got != want {
			e.t.Fatalf("Deployment %s mounts %q, want the revision %q", name, got, want)
		}
		e.waitForReady(name)
	}
}

// A profile edit makes one immutable revision, which the Deployments mount;
// older ones are kept up to the history limit, those in use always; an edit
// back reuses the old revision; and a deleted profile leaves every session on
// a revision that still exists, so its pods can be recreated.
func TestRolloutRevisions(t *testing.T) {
	e := newEnv(t)
	e.startController(func(o *app.Options) { o.RevisionHistoryLimit = 2 })
	content := func(i int) map[string]string { return map[string]string{"game.cfg": fmt.Sprintf("v%d", i)} }
	e.createProfile("classic", content(0), true)
	sessions := []string{"a", "b"}
	for _, name := range sessions {
		e.createSession(newSession(name, "classic", 1))
		e.waitForReady(name)
	}
	first, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, controller.RevisionName("classic", dataHash(content(0))), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the first revision: %v", err)
	}
	if !ptr.Deref(first.Immutable, false) || !maps.Equal(first.Data, content(0)) {
		t.Errorf("revision %s: immutable %v, data %v; want an immutable copy of %v", first.Name, first.Immutable, first.Data, content(0))
	}
	if d, _ := e.deployment("a"); mountedRevision(d) != first.Name {
		t.Errorf("Deployment a mounts %q, want %q", mountedRevision(d), first.Name)
	}

	e.rollTo("classic", content(1), sessions...)
	if got, want := e.revisions("classic"), revisionNames("classic", dataHash(content(0)), dataHash(content(1))); !slices.Equal(got, want) {
		t.Errorf("after one edit, revisions %v, want %v (the previous one kept)", got, want)
	}
	for i := 2; i <= 4; i++ {
		e.rollTo("classic", content(i), sessions...)
	}
	// In use: v4. Kept for rollback: the 2 newest others, v3 and v2.
	want := revisionNames("classic", dataHash(content(4)), dataHash(content(3)), dataHash(content(2)))
	e.eventually(fmt.Sprintf("revisions %v", want), func() (bool, error) {
		got := e.revisions("classic")
		return slices.Equal(got, want), fmt.Errorf("revisions %v", got)
	})

	// Back to v3: its revision, not a new one.
	v3, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, controller.RevisionName("classic", dataHash(content(3))), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.rollTo("classic", content(3), sessions...)
	again, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, v3.Name, metav1.GetOptions{})
	if err != nil || again.UID != v3.UID {
		t.Errorf("editing back to v3 replaced its revision (err %v)", err)
	}
	if got := e.revisions("classic"); !slices.Equal(got, want) {
		t.Errorf("after editing back, revisions %v, want %v", got, want)
	}

	// The profile goes; the sessions stay on v3, whose revision stays.
	before, _ := e.deployment("a")
	if err := e.kube.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, "classic", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitForCondition("a", gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound)
	after, _ := e.deployment("a")
	if after.Generation != before.Generation || mountedRevision(after) != v3.Name {
		t.Errorf("the profile's deletion changed Deployment a: generation %d → %d, mounts %q", before.Generation, after.Generation, mountedRevision(after))
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=a"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods of a: %v (%d)", err, len(pods.Items))
	}
	old := pods.Items[0]
	if err := e.kube.CoreV1().Pods(e.ns).Delete(e.ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	e.eventually("a replacement pod of a, Ready, whose revision exists", func() (bool, error) {
		pods, err := e.kube.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=a"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.UID == old.UID || p.DeletionTimestamp != nil {
				continue
			}
			revision := ""
			for _, v := range p.Spec.Volumes {
				if v.Name == "profile" && v.ConfigMap != nil {
					revision = v.ConfigMap.Name
				}
			}
			if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, revision, metav1.GetOptions{}); err != nil {
				return false, fmt.Errorf("pod %s mounts %q: %w", p.Name, revision, err)
			}
			return podReady(&p), fmt.Errorf("pod %s not Ready", p.Name)
		}
		return false, fmt.Errorf("no replacement pod yet")
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rolloutWatch follows every Deployment of the namespace through a watch and
// records, at each event, how many run the target hash without being
// complete: the sessions "moved and not Ready" that a budget bounds.
type rolloutWatch struct {
	mu          sync.Mutex
	target      string
	deployments map[string]*appsv1.Deployment
	maxRolling  int
}

func (e *env) watchRollout(target string) *rolloutWatch {
	e.t.Helper()
	rw := &rolloutWatch{target: target, deployments: map[string]*appsv1.Deployment{}}
	e.followDeployments(func(d *appsv1.Deployment) { rw.deployments[d.Name] = d }, func(d *appsv1.Deployment) {
		rw.mu.Lock()
		rw.deployments[d.Name] = d
		rw.maxRolling = max(rw.maxRolling, rw.rollingLocked())
		rw.mu.Unlock()
	})
	return rw
}

// followDeployments lists the namespace's Deployments and hands each to
// listed, then watches from that list's resourceVersion, so that no change
// falls between the two, and hands the Deployment of each event to changed,
// in a goroutine of its own, until the test ends.
func (e *env) followDeployments(listed, changed func(*appsv1.Deployment)) {
	e.t.Helper()
	list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := e.kube.AppsV1().Deployments(e.ns).Watch(e.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range list.Items {
		listed(&list.Items[i])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type != watch.Error {
				changed(d)
			}
		}
	}()
	e.t.Cleanup(func() { w.Stop(); <-done })
}

func (rw *rolloutWatch) rollingLocked() int {
	n := 0
	for _, d := range rw.deployments {
		if d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == rw.target && !deploymentComplete(d) {
			n++
		}
	}
	return n
}

func deploymentComplete(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.ReadyReplicas == want
}

func (rw *rolloutWatch) result() (maxRolling int) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.maxRolling
}

func sessionName(i int) string { return fmt.Sprintf("s%03d", i) }

// rolloutTimeout bounds the waits on whole rollouts of many sessions: 200
// sessions paced 20 at a time took 75 s here with other tests running on
// the 2 cores.
const rolloutTimeout = 4 * time.Minute

// eventuallyWithin is env.eventually with its own bound.
func (e *env) eventuallyWithin(timeout time.Duration, what string, cond func() (bool, error)) {
	e.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		e.t.Fatalf("timed out after %v waiting for %s (last error: %v)", timeout, what, last)
	}
}

// createReadySessions creates n sessions of the profile and waits until all
// are Ready, and returns their Deployments' generations.
func (e *env) createReadySessions(profile string, n int) map[string]int64 {
	e.t.Helper()
	for i := range n {
		e.createSession(newSession(sessionName(i), profile, 1))
	}
	generations := map[string]int64{}
	e.eventuallyWithin(rolloutTimeout, fmt.Sprintf("%d Ready sessions", n), func() (bool, error) {
		list, err := e.game.GamesV1().GameSessions(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, s := range list.Items {
			if meta.IsStatusConditionTrue(s.Status.Conditions, gamesv1.ConditionReady) {
				ready++
			}
		}
		return ready == n, fmt.Errorf("%d of %d Ready", ready, n)
	})
	list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range list.Items {
		generations[d.Name] = d.Generation
	}
	return generations
}

// waitAllOn waits until every Deployment of the namespace runs hash and is
// complete, and returns their generations.
func (e *env) waitAllOn(hash string, n int) map[string]int64 {
	e.t.Helper()
	generations := map[string]int64{}
	e.eventuallyWithin(rolloutTimeout, fmt.Sprintf("%d Deployments on %s, complete", n, hash), func() (bool, error) {
		list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		done := 0
		for _, d := range list.Items {
			generations[d.Name] = d.Generation
			if d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == hash && deploymentComplete(&d) {
				done++
			}
		}
		return done == n, fmt.Errorf("%d of %d done", done, n)
	})
	return generations
}

// profileEvents returns the reasons of the Events on the profile.
func (e *env) profileEvents(profile string) []string {
	e.t.Helper()
	events, err := e.kube.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + profile})
	if err != nil {
		e.t.Fatal(err)
	}
	var reasons []string
	for _, ev := range events.Items {
		reasons = append(reasons, ev.Reason)
	}
	return reasons
}

func (e *env) waitForProfileEvent(profile, reason string) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("Event %s on profile %s", reason, profile), func() (bool, error) {
		reasons := e.profileEvents(profile)
		return slices.Contains(reasons, reason), fmt.Errorf("events %v", reasons)
	})
}

// A budget of 10% over 200 sessions: at no moment, as a watch sees the
// Deployments, are more than 20 moved and not Ready; all converge, each
// Deployment written once for the change.
func TestRolloutBudget(t *testing.T) {
	const sessions = 200
	e := newEnv(t)
	e.startController()
	e.createProfile("classic", map[string]string{"game.cfg": "v0"}, true)
	e.updateProfile("classic", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationMaxRolling: "10%"}
	})
	before := e.createReadySessions("classic", sessions)

	next := map[string]string{"game.cfg": "v1"}
	rw := e.watchRollout(dataHash(next))
	start := time.Now()
	e.updateProfile("classic", func(cm *corev1.ConfigMap) { cm.Data = next })
	after := e.waitAllOn(dataHash(next), sessions)
	t.Logf("%d sessions rolled with a budget of 10%% in %v; at most %d moved and not Ready at once",
		sessions, time.Since(start).Round(100*time.Millisecond), rw.result())

	if got := rw.result(); got > sessions/10 || got == 0 {
		t.Errorf("at most %d sessions were moved and not Ready at once, want 1 to %d", got, sessions/10)
	}
	for name, g := range after {
		if g != before[name]+1 {
			t.Errorf("Deployment %s: generation %d → %d, want one write", name, before[name], g)
		}
	}
	e.waitForProfileEvent("classic", controller.EventReasonRolloutCompleted)
	for _, reason := range []string{controller.EventReasonRolloutStarted, controller.EventReasonRolloutAdvanced} {
		if !slices.Contains(e.profileEvents("classic"), reason) {
			t.Errorf("no %s Event on the profile: %v", reason, e.profileEvents("classic"))
		}
	}
}

// A canary that fails halts the rollout: exactly the canary moves; the
// others keep their revision and stay Ready; a session created meanwhile
// starts on the old revision; an Event and the sessions' condition say so.
// Editing the profile back moves the canary back, and the rollout completes.
func TestRolloutCanaryHaltsAndRollsBack(t *testing.T) {
	const sessions = 6
	e := newEnv(t)
	e.startController()
	good := map[string]string{"game.cfg": "v0"}
	e.createProfile("classic", good, true)
	e.updateProfile("classic", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationCanary: "1", rollout.AnnotationMaxFailed: "0"}
	})
	e.createReadySessions("classic", sessions)
	// The Deployment controller's default deadline is 10 minutes; the
	// sessions' own setting shortens it.
	for i := range sessions {
		e.setProgressDeadline(sessionName(i), "5")
	}

	e.updateProfile("classic", func(cm *corev1.ConfigMap) { cm.Data = brokenData })
	canary := sessionName(0)
	e.waitForDeploymentHash(canary, dataHash(brokenData))
	e.waitForProfileEvent("classic", controller.EventReasonRolloutHalted)
	for i := 1; i < sessions; i++ {
		s := e.waitForCondition(sessionName(i), gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonRolloutHalted)
		if !meta.IsStatusConditionTrue(s.Status.Conditions, gamesv1.ConditionReady) {
			t.Errorf("session %s is not Ready while it waits", s.Name)
		}
		if d, _ := e.deployment(s.Name); d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] != dataHash(good) {
			t.Errorf("session %s moved during a halted rollout", s.Name)
		}
	}
	late := "zz-late"
	e.createSession(newSession(late, "classic", 1))
	d := e.waitForDeploymentHash(late, dataHash(good))
	if got, want := mountedRevision(d), controller.RevisionName("classic", dataHash(good)); got != want {
		t.Errorf("a session created during the halt mounts %q, want %q", got, want)
	}

	e.updateProfile("classic", func(cm *corev1.ConfigMap) { cm.Data = good })
	e.waitAllOn(dataHash(good), sessions+1)
	for i := range sessions {
		e.waitForCondition(sessionName(i), gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)
	}
}

// A paused rollout moves nobody; resumed, it completes.
func TestRolloutPauseAndResume(t *testing.T) {
	const sessions = 4
	e := newEnv(t)
	e.startController()
	e.createProfile("classic", map[string]string{"game.cfg": "v0"}, true)
	e.updateProfile("classic", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationPaused: "true", rollout.AnnotationMaxRolling: "1"}
	})
	before := e.createReadySessions("classic", sessions)

	next := map[string]string{"game.cfg": "v1"}
	e.updateProfile("classic", func(cm *corev1.ConfigMap) { cm.Data = next })
	for i := range sessions {
		e.waitForCondition(sessionName(i), gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonRolloutPaused)
	}
	e.waitForProfileEvent("classic", controller.EventReasonRolloutPaused)
	for i := range sessions {
		if d, _ := e.deployment(sessionName(i)); d.Generation != before[sessionName(i)] {
			t.Errorf("Deployment %s written during the pause", d.Name)
		}
	}

	e.updateProfile("classic", func(cm *corev1.ConfigMap) { delete(cm.Annotations, rollout.AnnotationPaused) })
	after := e.waitAllOn(dataHash(next), sessions)
	for name, g := range after {
		if g != before[name]+1 {
			t.Errorf("Deployment %s: generation %d → %d, want one write", name, before[name], g)
		}
	}
	e.waitForProfileEvent("classic", controller.EventReasonRolloutResumed)
}
