package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/profileack"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// gameServers acts as the game servers of live sessions, since kwok runs no
// containers and its pods mount no files: it reads the revision each
// session's live profile holds (what the kubelet would put in the pods'
// .revision file) and, after a delay, acknowledges it on each running pod
// of the session, as profileack.Follow would. Each session's answer is
// set by answer; it records when each session was first seen holding a
// revision and when all its pods acknowledged it.
type gameServers struct {
	e     *env
	delay time.Duration

	mu     sync.Mutex
	answer map[string]func(revision string) (ack bool, err error) // by session; nil: apply every revision
	seen   map[string]time.Time                                   // "session revision" → first seen delivered
	acked  map[string]time.Time                                   // "session revision" → every pod acknowledged
}

func (e *env) actAsGameServers(delay time.Duration) *gameServers {
	g := &gameServers{e: e, delay: delay, answer: map[string]func(string) (bool, error){},
		seen: map[string]time.Time{}, acked: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			g.round(ctx)
			return false, nil
		})
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return g
}

// answerFor sets how a session's game servers answer a revision: applied
// (nil error), refused (an error), or never (ack false).
func (g *gameServers) answerFor(session string, answer func(revision string) (bool, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answer[session] = answer
}

func (g *gameServers) round(ctx context.Context) {
	e := g.e
	profiles, err := e.kube.CoreV1().ConfigMaps(e.ns).List(ctx, metav1.ListOptions{LabelSelector: controller.LiveProfileSelector()})
	if err != nil {
		return
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: controller.LivePodSelector()})
	if err != nil {
		return
	}
	revisionOf := map[string]string{}
	for _, cm := range profiles.Items {
		if ref := metav1.GetControllerOf(&cm); ref != nil {
			revisionOf[ref.Name] = cm.Data[profileack.RevisionFile]
		}
	}
	pending := map[string]int{}
	now := time.Now()
	for _, pod := range pods.Items {
		session := pod.Labels[controller.LabelInstance]
		revision := revisionOf[session]
		if revision == "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		key := session + " " + revision
		g.mu.Lock()
		first, ok := g.seen[key]
		if !ok {
			first, g.seen[key] = now, now
		}
		answer := g.answer[session]
		g.mu.Unlock()
		if a, ok := profileack.Parse(pod.Annotations[profileack.Annotation]); ok && a.Revision == revision {
			continue
		}
		pending[session]++
		if now.Sub(first) < g.delay {
			continue
		}
		var applyErr error
		if answer != nil {
			var ack bool
			if ack, applyErr = answer(revision); !ack {
				continue
			}
		}
		if err := profileack.Acknowledge(ctx, e.kube, e.ns, pod.Name, revision, applyErr); err == nil {
			pending[session]--
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for session, revision := range revisionOf {
		key := session + " " + revision
		if _, seen := g.seen[key]; seen && pending[session] == 0 {
			if _, done := g.acked[key]; !done {
				g.acked[key] = time.Now()
			}
		}
	}
}

// mostAtOnce is the most sessions that held revision without every pod of
// theirs having acknowledged it, at any one time.
func (g *gameServers) mostAtOnce(revision string, sessions []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range sessions {
		key := s + " " + revision
		if from, ok := g.seen[key]; ok {
			edges = append(edges, edge{from, +1})
			if to, ok := g.acked[key]; ok {
				edges = append(edges, edge{to, -1})
			}
		}
	}
	most, now := 0, 0
	for len(edges) > 0 {
		i := 0
		for j := range edges {
			// Ends before starts at the same instant: an acknowledgment that
			// frees a place comes before the move it lets through.
			if edges[j].at.Before(edges[i].at) || edges[j].at.Equal(edges[i].at) && edges[j].delta < edges[i].delta {
				i = j
			}
		}
		now += edges[i].delta
		most = max(most, now)
		edges = append(edges[:i], edges[i+1:]...)
	}
	return most
}

// liveRevision is the revision a session's live profile holds, "" for none.
func (e *env) liveRevision(session string) string {
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, session+"-live-profile", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return cm.Data[profileack.RevisionFile]
}

// podUIDs returns the UIDs of the running pods of the namespace.
func (e *env) podUIDs() map[types.UID]string {
	e.t.Helper()
	pods, err := e.kube.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	uids := map[types.UID]string{}
	for _, p := range pods.Items {
		uids[p.UID] = p.Name
	}
	return uids
}

func withLiveDelivery(o *app.Options) { o.LiveDelivery = true }

// createLiveSessions creates the profile, delivered live under policy, and
// sessions of one pod each, and waits until every session is Ready and up
// to date: its pods acknowledged the first revision.
func (e *env) createLiveSessions(profile string, policy map[string]string, sessions ...string) {
	e.t.Helper()
	cm := e.createProfile(profile, content("v1"), true)
	e.updateProfile(cm.Name, func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationDelivery: string(rollout.DeliveryLive)}
		for k, v := range policy {
			cm.Annotations[k] = v
		}
	})
	for _, s := range sessions {
		e.createSession(newSession(s, profile, 1))
	}
	for _, s := range sessions {
		e.waitForReady(s)
		e.waitForCondition(s, gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)
	}
}

// A live edit reaches every session under max-rolling 1, a busy one
// included, and replaces no pod: the pods' UIDs are the same before and
// after, none of them ended, and at no time did two sessions hold the new
// revision unacknowledged.
func TestLiveEditPacedReplacesNoPod(t *testing.T) {
	e := newEnv(t)
	e.dumpOnFailure("arena")
	ctl := e.startController(withLiveDelivery)
	servers := e.actAsGameServers(time.Second)
	sessions := []string{"arena-a", "arena-b", "arena-c"}
	e.createLiveSessions("arena", map[string]string{rollout.AnnotationMaxRolling: "1"}, sessions...)

	// A busy session takes a live change: nothing restarts.
	e.updateSession("arena-b", func(s *gamesv1.GameSession) {
		s.Labels = map[string]string{gamesv1.BusyLabel: gamesv1.BusyLabelValue}
	})
	before := e.podUIDs()
	ended := e.watchPods()
	deploymentWrites := ctl.requests.count("update deployments") + ctl.requests.count("patch deployments")
	edited := e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v2") })
	revision := controller.RevisionName("arena", controller.ProfileHash(edited))
	e.waitForRollout("arena", "complete on the edit", func(r *gamesv1.ProfileRollout) error {
		if r.Status.TargetRevision != revision || r.Status.Phase != gamesv1.RolloutPhaseComplete {
			return errors.New("not complete on the edit")
		}
		return nil
	})
	for _, s := range sessions {
		if got := e.liveRevision(s); got != revision {
			t.Errorf("session %s's live profile holds %q, want %q", s, got, revision)
		}
		e.waitForCondition(s, gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)
		if at, ok := ended.firstEnd(s); ok {
			t.Errorf("a pod of session %s ended at %v: a live edit replaced it", s, at)
		}
	}
	if after := e.podUIDs(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("pods before the edit %v, after %v", before, after)
	}
	if n := ctl.requests.count("update deployments") + ctl.requests.count("patch deployments") - deploymentWrites; n != 0 {
		t.Errorf("the live edit wrote Deployments %d times; it has nothing to change in them", n)
	}
	if most := servers.mostAtOnce(revision, sessions); most != 1 {
		t.Errorf("at most %d sessions held the revision unacknowledged at once, want 1 (max-rolling 1)", most)
	}
}

// A canary whose game server refuses the revision halts the rollout, and
// no other session receives the content. Rolled back (the profile edited
// to its earlier content), the canary gets the earlier revision live.
func TestLiveCanaryRefusalHaltsAndRollbackIsDelivered(t *testing.T) {
	e := newEnv(t)
	e.dumpOnFailure("arena")
	e.startController(withLiveDelivery)
	servers := e.actAsGameServers(0)
	sessions := []string{"arena-a", "arena-b", "arena-c"}
	e.createLiveSessions("arena", map[string]string{rollout.AnnotationCanary: "1", rollout.AnnotationMaxFailed: "0"}, sessions...)
	first := e.liveRevision("arena-a")
	ended := e.watchPods()

	edited := e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v2 with a typo") })
	bad := controller.RevisionName("arena", controller.ProfileHash(edited))
	servers.answerFor("arena-a", func(revision string) (bool, error) {
		if revision == bad {
			return true, errors.New("parse error on line 1")
		}
		return true, nil
	})
	e.waitForRollout("arena", "halted by the canary", func(r *gamesv1.ProfileRollout) error {
		if r.Status.TargetRevision != bad || r.Status.Phase != gamesv1.RolloutPhaseHalted {
			return errors.New("not halted on the edit")
		}
		return nil
	})
	e.waitForCondition("arena-a", gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryFailed)
	for _, s := range sessions[1:] {
		if got := e.liveRevision(s); got != first {
			t.Errorf("session %s received %q while the rollout is halted; want it to keep %q", s, got, first)
		}
	}

	// The rollback: the earlier content again, delivered live.
	e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v1") })
	e.waitForRollout("arena", "complete on the earlier content", func(r *gamesv1.ProfileRollout) error {
		if r.Status.TargetRevision != first || r.Status.Phase != gamesv1.RolloutPhaseComplete {
			return errors.New("not complete on the earlier content")
		}
		return nil
	})
	for _, s := range sessions {
		if got := e.liveRevision(s); got != first {
			t.Errorf("session %s's live profile holds %q after the rollback, want %q", s, got, first)
		}
		e.waitForCondition(s, gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)
		if at, ok := ended.firstEnd(s); ok {
			t.Errorf("a pod of session %s ended at %v", s, at)
		}
	}
}

// A game server that never acknowledges is shown as pending, never as up
// to date, and fails at the progress deadline.
func TestLiveUnacknowledgedFailsAtTheDeadline(t *testing.T) {
	const deadline = 10 * time.Second
	e := newEnv(t)
	e.dumpOnFailure("arena")
	e.startController(withLiveDelivery)
	servers := e.actAsGameServers(0)
	e.createLiveSessions("arena", map[string]string{rollout.AnnotationProgressDeadline: deadline.String()}, "arena-a")

	edited := e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v2") })
	revision := controller.RevisionName("arena", controller.ProfileHash(edited))
	servers.answerFor("arena-a", func(r string) (bool, error) { return r != revision, nil })
	start := time.Now()
	e.waitForCondition("arena-a", gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryPending)
	e.waitForCondition("arena-a", gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryFailed)
	if waited := time.Since(start); waited < deadline-time.Second {
		t.Errorf("failed after %v, before the %v deadline", waited, deadline)
	}
}

// A profile switched from restart to live restarts each game server once,
// under the policy (max-rolling 1), and a live edit after it none.
func TestLiveModeSwitchRestartsEachGameServerOnce(t *testing.T) {
	e := newEnv(t)
	e.dumpOnFailure("arena")
	e.startController(withLiveDelivery)
	e.actAsGameServers(0)
	sessions := []string{"arena-a", "arena-b", "arena-c"}
	e.createProfile("arena", content("v1"), true)
	for _, s := range sessions {
		e.createSession(newSession(s, "arena", 1))
	}
	for _, s := range sessions {
		e.waitForReady(s)
	}
	ended := e.watchPods()
	e.updateProfile("arena", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationDelivery: string(rollout.DeliveryLive), rollout.AnnotationMaxRolling: "1"}
	})
	for _, s := range sessions {
		e.eventually("session "+s+" delivered live", func() (bool, error) {
			d, err := e.deployment(s)
			if err != nil {
				return false, err
			}
			return d.Spec.Template.Labels[controller.DeliveryLabel] == controller.DeliveryLiveValue, nil
		})
	}
	for _, s := range sessions {
		e.waitForReady(s)
		e.waitForCondition(s, gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)
	}
	e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v2") })
	e.waitForRollout("arena", "complete on the edit, live", func(r *gamesv1.ProfileRollout) error {
		if r.Status.Phase != gamesv1.RolloutPhaseComplete || r.Status.Delivery != string(rollout.DeliveryLive) ||
			r.Status.ReadySessions != int32(len(sessions)) {
			return errors.New("not complete")
		}
		return nil
	})
	ended.mu.Lock()
	defer ended.mu.Unlock()
	for _, s := range sessions {
		if n := len(ended.ended[s]); n != 1 {
			t.Errorf("session %s: %d pods ended, want 1 (the switch's restart, and none for the live edit)", s, n)
		}
	}
}
