package plugin

import (
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Counts is where the sessions of a profile stand in a rollout, counted from
// the sessions themselves: the ProfileRollout's own counts are written only
// at each tenth of the progress, too coarse to follow.
type Counts struct {
	// Total is the number of sessions referencing the profile.
	Total int
	// Moved run the target revision; Ready are those of them that are
	// Ready; Failed those of them whose Deployment exceeded its progress
	// deadline.
	Moved, Ready, Failed int
	// Busy are the sessions not moved yet that are busy (label
	// games.example.com/busy=true): their move waits until they are idle.
	Busy int
	// ReadySince are the Ready ones that became Ready at or after the
	// start given to ComputeCounts: the ones the rollout made Ready, which
	// the estimate of the time left goes by.
	ReadySince int
	// Live counts a live delivery: Moved are the sessions the target was
	// delivered to, Ready those whose every game server applied it, Failed
	// those where one refused it or did not apply it in time.
	Live bool
}

// ComputeCounts counts the sessions of profile against the target hash.
// Sessions of other profiles are skipped. start is when the rollout began
// (nil: unknown), for ReadySince. live counts a live delivery, whose
// sessions' ProfileUpToDate condition says whether their game servers
// applied the target (their Deployments stay Ready throughout).
func ComputeCounts(sessions []*gamesv1.GameSession, profile, target string, start *metav1.Time, live bool) Counts {
	c := Counts{Live: live}
	conditionType, failed := gamesv1.ConditionReady, gamesv1.ReasonProgressDeadlineExceeded
	if live {
		conditionType, failed = gamesv1.ConditionProfileUpToDate, gamesv1.ReasonDeliveryFailed
	}
	for _, s := range sessions {
		if s.Spec.ProfileRef != profile {
			continue
		}
		c.Total++
		if target == "" || s.Status.ProfileHash != target {
			if s.Labels[gamesv1.BusyLabel] == gamesv1.BusyLabelValue {
				c.Busy++
			}
			continue
		}
		c.Moved++
		ready := meta.FindStatusCondition(s.Status.Conditions, conditionType)
		switch {
		case ready == nil:
		case ready.Status == metav1.ConditionTrue:
			c.Ready++
			if start != nil && !ready.LastTransitionTime.Before(start) {
				c.ReadySince++
			}
		case ready.Status == metav1.ConditionFalse && ready.Reason == failed:
			c.Failed++
		}
	}
	return c
}

// EstimateRemaining estimates the time left in a rollout that started at
// start, from the rate at which sessions became Ready since: the sessions
// neither Ready nor failed, at that rate. ok is false when nothing is known
// yet (no start, or no session Ready since it).
func EstimateRemaining(c Counts, start *metav1.Time, now time.Time) (left time.Duration, ok bool) {
	remaining := c.Total - c.Ready - c.Failed
	if remaining <= 0 {
		return 0, true
	}
	if start == nil || c.ReadySince == 0 {
		return 0, false
	}
	elapsed := now.Sub(start.Time)
	if elapsed <= 0 {
		return 0, false
	}
	return time.Duration(float64(elapsed) * float64(remaining) / float64(c.ReadySince)), true
}

// formatETA is EstimateRemaining for people: "?" when unknown.
func formatETA(left time.Duration, ok bool) string {
	if !ok {
		return "?"
	}
	return duration.HumanDuration(left.Round(time.Second))
}

// barWidth is the number of cells of the progress bar.
const barWidth = 20

// progressLine renders counts as a bar and numbers, e.g.
//
//	[#######=====........] moved 12/20  ready 7  busy 1  failed 0  eta 40s
//
// In the bar, # is a Ready session on the target, = one moved but not
// Ready (yet), . one still to move.
func progressLine(c Counts, eta string) string {
	ready, moved := 0, 0
	if c.Total > 0 {
		ready = c.Ready * barWidth / c.Total
		moved = c.Moved*barWidth/c.Total - ready
	}
	bar := strings.Repeat("#", ready) + strings.Repeat("=", moved) + strings.Repeat(".", barWidth-ready-moved)
	if c.Live {
		return fmt.Sprintf("[%s] delivered %d/%d  applied %d  pending %d  busy %d  failed %d  eta %s",
			bar, c.Moved, c.Total, c.Ready, max(c.Moved-c.Ready-c.Failed, 0), c.Busy, c.Failed, eta)
	}
	return fmt.Sprintf("[%s] moved %d/%d  ready %d  busy %d  failed %d  eta %s",
		bar, c.Moved, c.Total, c.Ready, c.Busy, c.Failed, eta)
}

// printer writes status output. On a terminal the progress line is redrawn
// in place (\r); elsewhere (a log, a pipe) it is printed anew, and only when
// its numbers change, so that a CI log gets one line per step rather than
// one per event.
type printer struct {
	out io.Writer
	tty bool
	// drawn is the length of the progress line on screen (tty), 0 if none.
	drawn int
	// lastKey is the numbers of the last progress line printed (not tty).
	lastKey string
	err     error
}

// line prints a line of its own, above the progress line on a terminal.
func (p *printer) line(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if p.tty && p.drawn > 0 {
		s = "\r" + pad(s, p.drawn)
		p.drawn = 0
	}
	p.write(s + "\n")
}

// progress shows the progress line; key is its numbers (the part whose
// change is worth a new line).
func (p *printer) progress(s, key string) {
	if p.tty {
		p.write("\r" + pad(s, p.drawn))
		p.drawn = len(s)
		return
	}
	if key == p.lastKey {
		return
	}
	p.lastKey = key
	p.write(s + "\n")
}

// done ends the progress line on a terminal, so that what follows starts on
// a line of its own.
func (p *printer) done() {
	if p.tty && p.drawn > 0 {
		p.write("\n")
		p.drawn = 0
	}
}

func (p *printer) write(s string) {
	if p.err == nil {
		_, p.err = io.WriteString(p.out, s)
	}
}

// pad fills s with spaces to width, to blank out the rest of a longer line
// drawn before.
func pad(s string, width int) string {
	if len(s) >= width {
		return s
	}
	return s + strings.Repeat(" ", width-len(s))
}
