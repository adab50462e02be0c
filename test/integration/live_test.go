package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/livestandin"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/profileack"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// actAsGameServers acts as the game servers of the test's live sessions
// (livestandin): each acknowledges what its live profile holds, delay after
// first seeing it.
func (e *env) actAsGameServers(delay time.Duration) *livestandin.StandIn {
	s := livestandin.New(e.kube, livestandin.Options{Namespace: e.ns, Delay: delay})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return s
}

// mostAtOnce is the most sessions that held revision without every pod of
// theirs having acknowledged it, at any one time.
func (e *env) mostAtOnce(s *livestandin.StandIn, revision string, sessions []string) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, name := range sessions {
		if from, ok := s.Seen(e.ns+"/"+name, revision); ok {
			edges = append(edges, edge{from, +1})
			if to, ok := s.Acked(e.ns+"/"+name, revision); ok {
				edges = append(edges, edge{to, -1})
			}
		}
	}
	// Ends before starts at the same instant: an acknowledgment that frees
	// a place comes before the move it lets through.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	most, now := 0, 0
	for _, ed := range edges {
		now += ed.delta
		most = max(most, now)
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

// waitForRolloutPhase waits until the profile's ProfileRollout targets
// revision in phase.
func (e *env) waitForRolloutPhase(profile, revision string, phase gamesv1.RolloutPhase) {
	e.t.Helper()
	e.waitForRollout(profile, fmt.Sprintf("%s on %s", phase, revision), func(r *gamesv1.ProfileRollout) error {
		if r.Status.TargetRevision != revision || r.Status.Phase != phase {
			return errors.New("not yet")
		}
		return nil
	})
}

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
	e.waitForRolloutPhase("arena", revision, gamesv1.RolloutPhaseComplete)
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
	if most := e.mostAtOnce(servers, revision, sessions); most != 1 {
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
	servers.SetAnswer(func(session, revision string, _ map[string]string) (bool, error) {
		if session == "arena-a" && revision == bad {
			return true, errors.New("parse error on line 1")
		}
		return true, nil
	})
	e.waitForRolloutPhase("arena", bad, gamesv1.RolloutPhaseHalted)
	e.waitForCondition("arena-a", gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryFailed)
	for _, s := range sessions[1:] {
		if got := e.liveRevision(s); got != first {
			t.Errorf("session %s received %q while the rollout is halted; want it to keep %q", s, got, first)
		}
	}

	// The rollback: the earlier content again, delivered live.
	e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v1") })
	e.waitForRolloutPhase("arena", first, gamesv1.RolloutPhaseComplete)
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
	servers.SetAnswer(func(_, r string, _ map[string]string) (bool, error) { return r != revision, nil })
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

// A ConfigMap of a user's that happens to have the name of a new live
// session's live profile is never written: the session says what to change
// and creates no Deployment, whose pods would mount it. Once it is gone,
// the session starts on its own live profile, with no event to announce it
// (the controller caches only labelled live profiles): it looks again.
func TestLiveProfileNameTakenByAUsersConfigMap(t *testing.T) {
	e := newEnv(t)
	e.dumpOnFailure("arena")
	e.startController(withLiveDelivery)
	e.actAsGameServers(0)
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "arena-a-live-profile"}, Data: map[string]string{"notes.txt": "mine"}}
	if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(e.ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := e.createProfile("arena", content("v1"), true)
	e.updateProfile(cm.Name, func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationDelivery: string(rollout.DeliveryLive)}
	})
	e.createSession(newSession("arena-a", "arena", 1))
	s := e.waitForCondition("arena-a", gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonLiveProfileNotControlled)
	if c := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady); !strings.Contains(c.Message, "arena-a-live-profile") {
		t.Errorf("Ready says %q, not naming the ConfigMap in the way", c.Message)
	}
	if _, err := e.deployment("arena-a"); !apierrors.IsNotFound(err) {
		t.Errorf("a Deployment was created to mount a ConfigMap the session does not control: %v", err)
	}
	if got, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, mine.Name, metav1.GetOptions{}); err != nil || got.Data["notes.txt"] != "mine" {
		t.Errorf("the user's ConfigMap was written: %v, %v", got.Data, err)
	}

	if err := e.kube.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, mine.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitForReady("arena-a")
	e.waitForCondition("arena-a", gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)
}
