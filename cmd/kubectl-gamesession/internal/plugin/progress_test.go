package plugin

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

func TestComputeCounts(t *testing.T) {
	start := metav1.NewTime(t0.Add(-time.Minute))
	sessions := []*gamesv1.GameSession{
		newSession("ready-new", "arena", "new", ready(t0.Add(-30*time.Second))),
		newSession("ready-before-start", "arena", "new", ready(t0.Add(-time.Hour))),
		newSession("rolling", "arena", "new", notReady(gamesv1.ReasonDeploymentProgressing)),
		newSession("failed", "arena", "new", notReady(gamesv1.ReasonProgressDeadlineExceeded)),
		newSession("no-conditions", "arena", "new"),
		// Busy counts only sessions that wait: a busy one already moved
		// is moved.
		newSession("busy-moved", "arena", "new", busy, ready(t0)),
		newSession("busy-waiting", "arena", "old", busy, ready(t0)),
		newSession("waiting", "arena", "old", ready(t0)),
		// Failed is of the moved: an old revision's failure is not the
		// rollout's.
		newSession("failed-old", "arena", "old", notReady(gamesv1.ReasonProgressDeadlineExceeded)),
		newSession("no-deployment-yet", "arena", ""),
		newSession("other-profile", "classic", "new", ready(t0)),
	}
	got := ComputeCounts(sessions, "arena", "new", &start, false)
	want := Counts{Total: 10, Moved: 6, Ready: 3, Failed: 1, Busy: 1, ReadySince: 2}
	if got != want {
		t.Errorf("ComputeCounts = %+v, want %+v", got, want)
	}
	// Without a start time nothing is known to be Ready since.
	if got := ComputeCounts(sessions, "arena", "new", nil, false); got.ReadySince != 0 {
		t.Errorf("ReadySince without a start = %d, want 0", got.ReadySince)
	}
	// Without a target nothing has moved.
	if got := ComputeCounts(sessions, "arena", "", &start, false); got.Moved != 0 || got.Busy != 2 || got.Total != 10 {
		t.Errorf("ComputeCounts without a target = %+v", got)
	}
}

// A live delivery counts by ProfileUpToDate: the Deployments of live
// sessions stay Ready while their game servers apply the content.
func TestComputeCountsLive(t *testing.T) {
	start := metav1.NewTime(t0.Add(-time.Minute))
	upToDate := func(status metav1.ConditionStatus, reason string) sessionOpt {
		return func(s *gamesv1.GameSession) {
			s.Status.Conditions = append(s.Status.Conditions, metav1.Condition{Type: gamesv1.ConditionProfileUpToDate,
				Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(t0)})
		}
	}
	sessions := []*gamesv1.GameSession{
		newSession("applied", "arena", "new", ready(t0.Add(-time.Hour)), upToDate(metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)),
		newSession("pending", "arena", "new", ready(t0.Add(-time.Hour)), upToDate(metav1.ConditionFalse, gamesv1.ReasonDeliveryPending)),
		newSession("refused", "arena", "new", ready(t0.Add(-time.Hour)), upToDate(metav1.ConditionFalse, gamesv1.ReasonDeliveryFailed)),
		newSession("not-delivered", "arena", "old", ready(t0.Add(-time.Hour)), upToDate(metav1.ConditionFalse, gamesv1.ReasonWaitingForTurn)),
	}
	got := ComputeCounts(sessions, "arena", "new", &start, true)
	want := Counts{Total: 4, Moved: 3, Ready: 1, Failed: 1, ReadySince: 1, Live: true}
	if got != want {
		t.Errorf("ComputeCounts = %+v, want %+v", got, want)
	}
	line := progressLine(got, "1m")
	if !strings.Contains(line, "delivered 3/4  applied 1  pending 1  busy 0  failed 1") {
		t.Errorf("progressLine of a live delivery = %s", line)
	}
}

func TestEstimateRemaining(t *testing.T) {
	start := metav1.NewTime(t0.Add(-time.Minute))
	for _, tc := range []struct {
		name   string
		counts Counts
		start  *metav1.Time
		now    time.Time
		want   string
	}{
		// 5 Ready in a minute: 15 left take 3 more.
		{"rate", Counts{Total: 20, Moved: 8, Ready: 5, ReadySince: 5}, &start, t0, "3m"},
		// Sessions Ready before the rollout started do not make it faster.
		{"only since start counts", Counts{Total: 20, Ready: 10, ReadySince: 5}, &start, t0, "2m"},
		// Failed sessions are done: they are not waited for.
		{"failed are done", Counts{Total: 10, Moved: 10, Ready: 8, Failed: 2, ReadySince: 8}, &start, t0, "0s"},
		{"nothing ready yet", Counts{Total: 10, Moved: 3}, &start, t0, "?"},
		{"no start", Counts{Total: 10, Ready: 3, ReadySince: 3}, nil, t0, "?"},
		{"clock behind the start", Counts{Total: 10, Ready: 3, ReadySince: 3}, &start, t0.Add(-time.Hour), "?"},
		{"no sessions", Counts{}, nil, t0, "0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := formatETA(EstimateRemaining(tc.counts, tc.start, tc.now)); got != tc.want {
				t.Errorf("ETA = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine(Counts{Total: 20, Moved: 12, Ready: 7, Busy: 1}, "40s")
	want := "[#######=====........] moved 12/20  ready 7  busy 1  failed 0  eta 40s"
	if got != want {
		t.Errorf("progressLine =\n%s\nwant\n%s", got, want)
	}
	if got := progressLine(Counts{}, "?"); !strings.HasPrefix(got, "[....................] moved 0/0") {
		t.Errorf("progressLine of nothing = %s", got)
	}
}

func TestPrinterNotTerminal(t *testing.T) {
	var b strings.Builder
	p := &printer{out: &b}
	p.progress("a eta 1s", "1")
	p.progress("a eta 2s", "1") // same numbers, another estimate: not worth a line
	p.line("phase")
	p.progress("b", "2")
	p.done()
	if got, want := b.String(), "a eta 1s\nphase\nb\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

func TestPrinterTerminal(t *testing.T) {
	var b strings.Builder
	p := &printer{out: &b, tty: true}
	p.progress("long line", "1")
	p.progress("short", "1")
	p.line("msg")
	p.progress("x", "2")
	p.done()
	// Each redraw returns to the line's start and blanks what the longer
	// line before left; a message replaces the progress line, which is
	// drawn again below it.
	if got, want := b.String(), "\rlong line\rshort    \rmsg  \n\rx\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}
