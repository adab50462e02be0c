package plugin

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

func TestAssess(t *testing.T) {
	profile := newProfile("arena", v2Data)
	target, old := hashOf(v2Data), hashOf(v1Data)
	sessions := []*gamesv1.GameSession{
		newSession("a", "arena", target, ready(t0)),
		newSession("b", "arena", target, ready(t0)),
	}
	for _, tc := range []struct {
		name               string
		rollout            *gamesv1.ProfileRollout
		complete, halted   bool
		phase, messagePart string
	}{
		{"complete", newRollout("arena", target, target, gamesv1.RolloutPhaseComplete, true), true, false, "Complete", "message of Complete"},
		// Right after an edit the ProfileRollout reports on the content
		// before: Complete, but not of the target.
		{"stale Complete", newRollout("arena", old, old, gamesv1.RolloutPhaseComplete, true), false, false, "Pending", "still targets arena-" + old},
		{"rolling", newRollout("arena", target, old, gamesv1.RolloutPhaseRolling, false), false, false, "Rolling", "message of Rolling"},
		{"halted", newRollout("arena", target, old, gamesv1.RolloutPhaseHalted, false), false, true, "Halted", "message of Halted"},
		// The halt of an earlier content is over once the content changed.
		{"stale halt", newRollout("arena", old, old, gamesv1.RolloutPhaseHalted, false), false, false, "Pending", "still targets"},
		{"no ProfileRollout", nil, false, false, "Pending", "create the ProfileRollout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := assess("arena", profile, tc.rollout, sessions, t0)
			phase, message := s.phase()
			if s.complete() != tc.complete || s.halted() != tc.halted || phase != tc.phase || !strings.Contains(message, tc.messagePart) {
				t.Errorf("complete %v halted %v phase %q message %q, want %v %v %q %q",
					s.complete(), s.halted(), phase, message, tc.complete, tc.halted, tc.phase, tc.messagePart)
			}
			if s.counts.Moved != 2 || s.counts.Total != 2 {
				t.Errorf("counts %+v: the live counts go by the profile's content, whatever the ProfileRollout says", s.counts)
			}
		})
	}
}

func TestAssessWaitingPhase(t *testing.T) {
	pr := newRollout("arena", hashOf(v2Data), "", gamesv1.RolloutPhaseWaiting, false)
	resume := metav1.NewTime(t0.Add(time.Hour))
	pr.Status.ResumeTime = &resume
	s := assess("arena", newProfile("arena", v2Data), pr, []*gamesv1.GameSession{
		newSession("a", "arena", hashOf(v2Data), ready(t0)),
		newSession("b", "arena", hashOf(v1Data), ready(t0)),
	}, t0)
	if _, message := s.phase(); message != "message of Waiting (resumes at 2026-05-04T13:00:00Z)" {
		t.Errorf("message %q", message)
	}
	// The rate of a rollout that stands still says nothing of what is left.
	if s.eta != "?" {
		t.Errorf("eta %q while Waiting, want ?", s.eta)
	}
}

func TestStatusOnce(t *testing.T) {
	target, old := hashOf(v2Data), hashOf(v1Data)
	sessions := func() []runtime.Object {
		return []runtime.Object{
			newProfile("arena", v2Data),
			newSession("a", "arena", target, ready(t0.Add(-30*time.Second))),
			newSession("b", "arena", target, notReady(gamesv1.ReasonDeploymentProgressing)),
			newSession("c", "arena", old, busy, ready(t0)),
			newSession("d", "arena", old, ready(t0)),
		}
	}
	run := func(pr *gamesv1.ProfileRollout) (string, error) {
		var out strings.Builder
		objs := sessions()
		if pr != nil {
			objs = append(objs, pr)
		}
		err := Status(context.Background(), newFakes(objs...).clients(), &out, StatusOptions{
			Namespace: ns, Profile: "arena", Now: func() time.Time { return t0 }})
		return out.String(), err
	}

	out, err := run(newRollout("arena", target, old, gamesv1.RolloutPhaseRolling, false))
	mustNot(t, err)
	want := "rollout of profile arena to revision arena-" + target + "\n" +
		"Rolling: message of Rolling\n" +
		// 1 Ready in the minute since the start: 3 more take 3 minutes.
		"[#####=====..........] moved 2/4  ready 1  busy 1  failed 0  eta 3m\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}

	// A Complete of the content before is no completion: the state is
	// printed, nothing more.
	out, err = run(newRollout("arena", old, old, gamesv1.RolloutPhaseComplete, true))
	mustNot(t, err)
	if strings.Contains(out, "complete:") || !strings.Contains(out, "Pending: waiting for the controller") {
		t.Errorf("a stale Complete reported as completion:\n%s", out)
	}

	out, err = run(newRollout("arena", target, target, gamesv1.RolloutPhaseComplete, true))
	mustNot(t, err)
	if !strings.HasSuffix(out, "rollout of profile arena to revision arena-"+target+" complete: 1 of 4 sessions ready, 0 failed\n") {
		t.Errorf("completion not reported:\n%s", out)
	}

	_, err = run(newRollout("arena", target, old, gamesv1.RolloutPhaseHalted, false))
	if !errors.Is(err, ErrHalted) || !strings.Contains(err.Error(), "message of Halted") {
		t.Errorf("Status of a halted rollout: %v, want ErrHalted with its message", err)
	}

	var b strings.Builder
	err = Status(context.Background(), newFakes().clients(), &b, StatusOptions{Namespace: ns, Profile: "arena"})
	if err == nil || !strings.Contains(err.Error(), "profile arena not found") {
		t.Errorf("Status of a missing profile: %v", err)
	}
}

// watchedFakes are fakes that report when the three watches of Status are
// open: only then do changes reach it as events (the fake API server has no
// resourceVersions to resume from).
func watchedFakes(objs ...runtime.Object) (fakes, <-chan struct{}) {
	f := newFakes(objs...)
	var mu sync.Mutex
	open := 0
	all := make(chan struct{})
	count := func(k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		if open++; open == 3 {
			close(all)
		}
		return false, nil, nil // on to the fake's own watch
	}
	f.kube.PrependWatchReactor("*", count)
	f.game.PrependWatchReactor("*", count)
	return f, all
}

// syncBuffer is a strings.Builder safe to read while Status writes it,
// which tells waiters of each write.
type syncBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	written chan struct{} // closed and replaced at each write
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{written: make(chan struct{})} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.written)
	s.written = make(chan struct{})
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitForOutput waits until the output contains want.
func (s *syncBuffer) waitForOutput(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		got, written := s.b.String(), s.written
		s.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		select {
		case <-written:
		case <-deadline:
			t.Fatalf("timed out waiting for %q in the output:\n%s", want, got)
		}
	}
}

// startStatus runs a watching Status in the background; its error arrives
// on the channel.
func startStatus(t *testing.T, f fakes, out *syncBuffer, o StatusOptions) <-chan error {
	t.Helper()
	o.Namespace, o.Profile, o.Watch = ns, "arena", true
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { done <- Status(ctx, f.clients(), out, o) }()
	return done
}

func waitFor[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestStatusWatchCompletes(t *testing.T) {
	target, old := hashOf(v2Data), hashOf(v1Data)
	f, watching := watchedFakes(
		newProfile("arena", v2Data),
		// Just edited: the ProfileRollout still says Complete, of v1.
		newRollout("arena", old, old, gamesv1.RolloutPhaseComplete, true),
		newSession("a", "arena", old, ready(t0)),
		newSession("b", "arena", old, ready(t0)),
	)
	out := newSyncBuffer()
	done := startStatus(t, f, out, StatusOptions{})
	waitFor(t, "the watches", watching)
	// Reported once, and still watching: a Complete of v1 is not v2's.
	out.waitForOutput(t, "moved 0/2")

	ctx := context.Background()
	pr := newRollout("arena", target, old, gamesv1.RolloutPhaseRolling, false)
	_, err := f.game.GamesV1().ProfileRollouts(ns).UpdateStatus(ctx, pr, metav1.UpdateOptions{})
	mustNot(t, err)
	// The informers of different resources keep no order between them:
	// each step is awaited before the next.
	out.waitForOutput(t, "Rolling: message of Rolling")
	for _, name := range []string{"a", "b"} {
		_, err := f.game.GamesV1().GameSessions(ns).UpdateStatus(ctx, newSession(name, "arena", target, ready(t0)), metav1.UpdateOptions{})
		mustNot(t, err)
	}
	// All sessions on the target and Ready, the ProfileRollout not
	// Complete yet: not done.
	out.waitForOutput(t, "moved 2/2  ready 2")
	select {
	case err := <-done:
		t.Fatalf("Status returned before the ProfileRollout was Complete: %v\n%s", err, out)
	default:
	}
	pr = newRollout("arena", target, target, gamesv1.RolloutPhaseComplete, true)
	_, err = f.game.GamesV1().ProfileRollouts(ns).UpdateStatus(ctx, pr, metav1.UpdateOptions{})
	mustNot(t, err)
	if err := waitFor(t, "Status to return", done); err != nil {
		t.Fatalf("Status: %v\n%s", err, out)
	}
	got := out.String()
	for _, want := range []string{
		"Pending: waiting for the controller to start the rollout (the ProfileRollout still targets arena-" + old + ")\n",
		"moved 0/2  ready 0  busy 0  failed 0  eta ?\n",
		"Rolling: message of Rolling\n",
		"moved 2/2  ready 2  busy 0  failed 0",
		"Complete: message of Complete\n",
		"rollout of profile arena to revision arena-" + target + " complete: 2 of 2 sessions ready, 0 failed\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// Not a terminal: one line per change of the numbers, no \r.
	if strings.Contains(got, "\r") || strings.Count(got, "moved 2/2  ready 2") != 1 {
		t.Errorf("progress lines not once per change:\n%s", got)
	}
}

func TestStatusWatchHalts(t *testing.T) {
	target, old := hashOf(v2Data), hashOf(v1Data)
	f, watching := watchedFakes(
		newProfile("arena", v2Data),
		newRollout("arena", target, old, gamesv1.RolloutPhaseCanary, false),
		newSession("a", "arena", target, notReady(gamesv1.ReasonDeploymentProgressing)),
	)
	out := newSyncBuffer()
	done := startStatus(t, f, out, StatusOptions{})
	waitFor(t, "the watches", watching)
	out.waitForOutput(t, "moved 1/1  ready 0  busy 0  failed 0")
	ctx := context.Background()
	_, err := f.game.GamesV1().GameSessions(ns).UpdateStatus(ctx,
		newSession("a", "arena", target, notReady(gamesv1.ReasonProgressDeadlineExceeded)), metav1.UpdateOptions{})
	mustNot(t, err)
	out.waitForOutput(t, "failed 1")
	_, err = f.game.GamesV1().ProfileRollouts(ns).UpdateStatus(ctx,
		newRollout("arena", target, old, gamesv1.RolloutPhaseHalted, false), metav1.UpdateOptions{})
	mustNot(t, err)
	err = waitFor(t, "Status to return", done)
	if !errors.Is(err, ErrHalted) {
		t.Fatalf("Status: %v, want ErrHalted\n%s", err, out)
	}
	if got := out.String(); !strings.Contains(got, "Halted: message of Halted\n") || !strings.Contains(got, "failed 1") {
		t.Errorf("output:\n%s", got)
	}
}

// The controller halts on what the Deployments report, and the failed
// session's status says so a moment later: Status waits for it, so the
// last progress line shows the failure that halted the rollout.
func TestStatusWatchHaltBeforeTheFailureShows(t *testing.T) {
	target, old := hashOf(v2Data), hashOf(v1Data)
	halted := newRollout("arena", target, old, gamesv1.RolloutPhaseHalted, false)
	halted.Status.FailedSessions = 1
	f, watching := watchedFakes(
		newProfile("arena", v2Data),
		halted,
		newSession("a", "arena", target, notReady(gamesv1.ReasonDeploymentProgressing)),
	)
	out := newSyncBuffer()
	done := startStatus(t, f, out, StatusOptions{})
	waitFor(t, "the watches", watching)
	out.waitForOutput(t, "Halted: message of Halted")
	select {
	case err := <-done:
		t.Fatalf("Status returned before the session showed its failure: %v\n%s", err, out)
	default:
	}
	_, err := f.game.GamesV1().GameSessions(ns).UpdateStatus(context.Background(),
		newSession("a", "arena", target, notReady(gamesv1.ReasonProgressDeadlineExceeded)), metav1.UpdateOptions{})
	mustNot(t, err)
	err = waitFor(t, "Status to return", done)
	if !errors.Is(err, ErrHalted) || !strings.HasSuffix(out.String(), "failed 1  eta ?\n") {
		t.Errorf("Status: %v, want ErrHalted after a line with the failure\n%s", err, out)
	}
}

// A halt whose failures the sessions never show (the failed session was
// deleted) is reported after the grace, with the live counts.
func TestStatusWatchHaltGrace(t *testing.T) {
	defer func(g time.Duration) { settleGrace = g }(settleGrace)
	settleGrace = 200 * time.Millisecond
	target, old := hashOf(v2Data), hashOf(v1Data)
	halted := newRollout("arena", target, old, gamesv1.RolloutPhaseHalted, false)
	halted.Status.FailedSessions = 1
	f, _ := watchedFakes(newProfile("arena", v2Data), halted,
		newSession("a", "arena", target, notReady(gamesv1.ReasonDeploymentProgressing)))
	out := newSyncBuffer()
	err := waitFor(t, "Status to return", startStatus(t, f, out, StatusOptions{}))
	if !errors.Is(err, ErrHalted) || !strings.Contains(out.String(), "failed 0") {
		t.Errorf("Status: %v, want ErrHalted with the live counts\n%s", err, out)
	}
}

func TestStatusWatchTimeout(t *testing.T) {
	f, _ := watchedFakes(newProfile("arena", v2Data),
		newRollout("arena", hashOf(v2Data), "", gamesv1.RolloutPhasePaused, false))
	out := newSyncBuffer()
	done := startStatus(t, f, out, StatusOptions{Timeout: 200 * time.Millisecond, TTY: true})
	err := waitFor(t, "Status to time out", done)
	if err == nil || err.Error() != "timed out after 200ms waiting for the rollout of profile arena" {
		t.Errorf("Status: %v", err)
	}
	// On a terminal the progress line is drawn in place, and ended
	// before the error is printed.
	if got := out.String(); !strings.Contains(got, "\r[") || !strings.HasSuffix(got, "\n") {
		t.Errorf("terminal output %q", got)
	}
}

func TestStatusWatchProfileDeleted(t *testing.T) {
	f, watching := watchedFakes(newProfile("arena", v2Data))
	out := newSyncBuffer()
	done := startStatus(t, f, out, StatusOptions{})
	waitFor(t, "the watches", watching)
	out.waitForOutput(t, "moved 0/0")
	mustNot(t, f.kube.CoreV1().ConfigMaps(ns).Delete(context.Background(), "arena", metav1.DeleteOptions{}))
	if err := waitFor(t, "Status to return", done); err == nil || err.Error() != "profile arena was deleted" {
		t.Errorf("Status: %v", err)
	}
}

// Many sessions: the counts follow them one event at a time, and the
// completion waits for the last of them.
func TestStatusWatchManySessions(t *testing.T) {
	target, old := hashOf(v2Data), hashOf(v1Data)
	objs := []runtime.Object{newProfile("arena", v2Data), newRollout("arena", target, old, gamesv1.RolloutPhaseRolling, false)}
	for _, n := range names(30, "s") {
		objs = append(objs, newSession(n, "arena", old, ready(t0)))
	}
	f, watching := watchedFakes(objs...)
	out := newSyncBuffer()
	done := startStatus(t, f, out, StatusOptions{})
	waitFor(t, "the watches", watching)
	out.waitForOutput(t, "moved 0/30")
	// The ProfileRollout's Complete arrives before the session updates
	// that led to it: Status waits for them.
	ctx := context.Background()
	complete := newRollout("arena", target, target, gamesv1.RolloutPhaseComplete, true)
	_, err := f.game.GamesV1().ProfileRollouts(ns).UpdateStatus(ctx, complete, metav1.UpdateOptions{})
	mustNot(t, err)
	out.waitForOutput(t, "Complete: message of Complete")
	for _, n := range names(30, "s") {
		_, err := f.game.GamesV1().GameSessions(ns).UpdateStatus(ctx, newSession(n, "arena", target, ready(t0)), metav1.UpdateOptions{})
		mustNot(t, err)
	}
	mustNot(t, waitFor(t, "Status to return", done))
	if got := out.String(); !strings.Contains(got, "complete: 30 of 30 sessions ready") {
		t.Errorf("output:\n%s", got)
	}
}

// A Complete the sessions never agree with (one of them has no Deployment,
// which the controller does not count) is reported after a grace, with the
// live counts.
func TestStatusWatchSettleGrace(t *testing.T) {
	defer func(g time.Duration) { settleGrace = g }(settleGrace)
	settleGrace = 200 * time.Millisecond
	target := hashOf(v2Data)
	f, _ := watchedFakes(newProfile("arena", v2Data),
		newRollout("arena", target, target, gamesv1.RolloutPhaseComplete, true),
		newSession("a", "arena", target, ready(t0)),
		newSession("invalid", "arena", "", notReady(gamesv1.ReasonDeploymentInvalid)),
	)
	out := newSyncBuffer()
	err := waitFor(t, "Status to return", startStatus(t, f, out, StatusOptions{}))
	if err != nil || !strings.HasSuffix(out.String(), "complete: 1 of 2 sessions ready, 0 failed\n") {
		t.Errorf("Status: %v\n%s", err, out)
	}
}

// A Complete that turns out not to be (the first sync of a profile whose
// sessions have no Deployment yet says Complete of none) is not reported,
// however long the rollout that follows it takes.
func TestStatusWatchEarlyComplete(t *testing.T) {
	defer func(g time.Duration) { settleGrace = g }(settleGrace)
	settleGrace = 200 * time.Millisecond
	target := hashOf(v2Data)
	f, watching := watchedFakes(newProfile("arena", v2Data),
		newRollout("arena", target, target, gamesv1.RolloutPhaseComplete, true),
		newSession("a", "arena", ""),
	)
	out := newSyncBuffer()
	done := startStatus(t, f, out, StatusOptions{})
	waitFor(t, "the watches", watching)
	ctx := context.Background()
	_, err := f.game.GamesV1().ProfileRollouts(ns).UpdateStatus(ctx,
		newRollout("arena", target, target, gamesv1.RolloutPhaseRolling, false), metav1.UpdateOptions{})
	mustNot(t, err)
	out.waitForOutput(t, "Rolling: ")
	time.Sleep(2 * settleGrace) // the grace of the first Complete, had it not been stopped
	select {
	case err := <-done:
		t.Fatalf("Status returned during the rollout: %v\n%s", err, out)
	default:
	}
	_, err = f.game.GamesV1().GameSessions(ns).UpdateStatus(ctx, newSession("a", "arena", target, ready(t0)), metav1.UpdateOptions{})
	mustNot(t, err)
	out.waitForOutput(t, "moved 1/1  ready 1")
	_, err = f.game.GamesV1().ProfileRollouts(ns).UpdateStatus(ctx,
		newRollout("arena", target, target, gamesv1.RolloutPhaseComplete, true), metav1.UpdateOptions{})
	mustNot(t, err)
	if err := waitFor(t, "Status to return", done); err != nil || !strings.HasSuffix(out.String(), "complete: 1 of 1 sessions ready, 0 failed\n") {
		t.Errorf("Status: %v\n%s", err, out)
	}
}

// After a rollback from a failed revision, the controller's Complete (it
// goes by the Deployments) may come before a session's status drops the
// failure of the revision before: Status waits for the Ready the
// ProfileRollout counted.
func TestStatusWatchStaleFailure(t *testing.T) {
	target := hashOf(v1Data)
	f, watching := watchedFakes(newProfile("arena", v1Data),
		newRollout("arena", target, target, gamesv1.RolloutPhaseRolling, false),
		newSession("a", "arena", target, ready(t0)),
		newSession("b", "arena", target, notReady(gamesv1.ReasonProgressDeadlineExceeded)),
	)
	out := newSyncBuffer()
	done := startStatus(t, f, out, StatusOptions{})
	waitFor(t, "the watches", watching)
	out.waitForOutput(t, "moved 2/2  ready 1  busy 0  failed 1")
	ctx := context.Background()
	complete := newRollout("arena", target, target, gamesv1.RolloutPhaseComplete, true)
	complete.Status.TotalSessions, complete.Status.MovedSessions, complete.Status.ReadySessions = 2, 2, 2
	_, err := f.game.GamesV1().ProfileRollouts(ns).UpdateStatus(ctx, complete, metav1.UpdateOptions{})
	mustNot(t, err)
	out.waitForOutput(t, "Complete: ")
	select {
	case err := <-done:
		t.Fatalf("Status returned with a session's failure still showing: %v\n%s", err, out)
	default:
	}
	_, err = f.game.GamesV1().GameSessions(ns).UpdateStatus(ctx, newSession("b", "arena", target, ready(t0)), metav1.UpdateOptions{})
	mustNot(t, err)
	if err := waitFor(t, "Status to return", done); err != nil || !strings.HasSuffix(out.String(), "complete: 2 of 2 sessions ready, 0 failed\n") {
		t.Errorf("Status: %v\n%s", err, out)
	}
}
