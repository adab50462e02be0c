package rollout

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Annotations on a profile ConfigMap that set its rollout policy.
const (
	// AnnotationMaxRolling is the most sessions that may run the new revision
	// without being Ready at once: a number ("10") or a percentage ("10%").
	AnnotationMaxRolling = "rollout.games.example.com/max-rolling"
	// AnnotationCanary is how many of the first sessions, in name order, move
	// first: the others wait until these are Ready. "1" or "5%".
	AnnotationCanary = "rollout.games.example.com/canary"
	// AnnotationMaxFailed halts the rollout when more than this many of the
	// moved sessions failed: "0" or "10%" of the moved sessions.
	AnnotationMaxFailed = "rollout.games.example.com/max-failed"
	// AnnotationPaused pauses the rollout when "true"; "false" or absent lets
	// it run.
	AnnotationPaused = "rollout.games.example.com/paused"
	// AnnotationProgressDeadline is how long a moved session's Deployment
	// may go without progress before it counts as failed, for the sessions
	// that set no progressDeadlineSeconds of their own: a duration of whole
	// seconds such as "90s" or "2m". It is what makes the brake fire in a
	// minute or two rather than the Deployment default's ten.
	AnnotationProgressDeadline = "rollout.games.example.com/progress-deadline"
	// AnnotationMaxDefer is how long busy sessions may hold their move back:
	// a duration such as "30m" or "2h" of the time during which the rollout
	// could have moved them, that is of the time the maintenance window has
	// been open since the rollout started (all the time since, without a
	// window), after which busy sessions move too; or "never" (the default),
	// with which a busy session moves only once it is idle. "0s" does not
	// defer. See [Policy.Defers].
	AnnotationMaxDefer = "rollout.games.example.com/max-defer"
	// AnnotationWindow is the maintenance window: the rollout moves sessions
	// only within it, for example "Mon-Fri 02:00-06:00 Europe/Berlin" (see
	// [Window]). Absent: any time.
	AnnotationWindow = "rollout.games.example.com/window"
	// AnnotationDelivery is how a new content reaches the sessions' game
	// servers: "restart" (the default) moves each session to a new pod
	// template, so its game servers restart with the new files; "live"
	// rewrites the files its running game servers mount, and they reload
	// them (see [DeliveryLive]).
	AnnotationDelivery = "rollout.games.example.com/delivery"
	// AnnotationLiveDefersBusy is "true" when a live delivery waits for busy
	// sessions as a restart does (max-defer applies); absent or "false", a
	// busy session takes a live change at once, since nothing restarts.
	AnnotationLiveDefersBusy = "rollout.games.example.com/live-defers-busy"
)

// Delivery is how a profile's new content reaches running game servers.
type Delivery string

const (
	// DeliveryRestart runs the new content in a new pod template: the game
	// servers restart to read it.
	DeliveryRestart Delivery = "restart"
	// DeliveryLive writes the new content into the files the running game
	// servers mount; no pod is replaced, and each game server says, through
	// its pod, whether it applied the content.
	DeliveryLive Delivery = "live"
)

// MaxDeferNever is the max-defer value with which busy sessions wait until
// they are idle, however long that takes.
const MaxDeferNever = "never"

// wantIntOrPercent describes the accepted syntax in error messages.
const wantIntOrPercent = `want a non-negative integer such as "10" or a percentage such as "10%"`

// Policy is how the sessions of one profile move to a new revision of it.
type Policy struct {
	// MaxRolling is the most sessions that may run the new revision without
	// being Ready at once. The default, "100%", does not pace the rollout.
	MaxRolling intstr.IntOrString
	// Canary is how many sessions, first in name order, move before the
	// others. The default, 0, has no canary.
	Canary intstr.IntOrString
	// MaxFailed is the most moved sessions that may fail before the rollout
	// halts. nil has no brake.
	MaxFailed *intstr.IntOrString
	// Paused stops admitting sessions.
	Paused bool
	// ProgressDeadlineSeconds is the progress deadline of the Deployments of
	// sessions that set none; nil leaves them the Deployment default.
	ProgressDeadlineSeconds *int32
	// MaxDefer is how long busy sessions may hold their move back, in time
	// the window has been open since the rollout started (see Defers); nil
	// defers them until they are idle.
	MaxDefer *time.Duration
	// Window is the maintenance window outside which nothing moves; nil
	// allows any time.
	Window *Window
	// Delivery is how the content reaches the game servers; "" is
	// DeliveryRestart.
	Delivery Delivery
	// LiveDefersBusy makes a live delivery wait for busy sessions as a
	// restart does.
	LiveDefersBusy bool
}

// Live reports whether the policy delivers content to running game servers.
func (p Policy) Live() bool { return p.Delivery == DeliveryLive }

// Defers reports whether a busy session still holds back at now a move
// that waits since started (the rollout's start, or a Secret change's), and
// until when: the zero time while it waits until it is idle.
//
// MaxDefer counts the time during which the move could have been made: the
// time the window has been open since started, or all of it without a
// window. A closed window protects a match anyway, so it spends none of
// MaxDefer. With "Mon 03:00-04:00" and max-defer "90m", a rollout started on
// Sunday spares busy sessions through the next day's window and restarts
// them at 03:30 on the Monday after, not at 03:00 the next day; with "2h",
// the two Mondays' windows spend it all as they close, so they restart as
// the third Monday's opens. A MaxDefer that the window does not give within
// ten years (Window.AfterOpen) waits until the session is idle. "0s" never
// holds a session back, whatever the start.
func (p Policy) Defers(started, now time.Time) (waits bool, until time.Time) {
	switch {
	case p.MaxDefer == nil:
		return true, time.Time{}
	case *p.MaxDefer == 0:
		return false, time.Time{}
	case p.Window == nil:
		until = started.Add(*p.MaxDefer)
	default:
		if until = p.Window.AfterOpen(started, *p.MaxDefer); until.IsZero() {
			return true, until
		}
		// Spent as the window closes, MaxDefer lets nothing move until it
		// opens again: until then the session still counts as held back.
		until = p.Window.NextOpen(until)
	}
	return now.Before(until), until
}

// DefaultPolicy is the unpaced policy: every session moves at once, as it did
// before rollout policies existed (max-rolling 100%, no canary, no brake).
func DefaultPolicy() Policy {
	return Policy{
		MaxRolling: intstr.FromString("100%"),
		Canary:     intstr.FromInt32(0),
	}
}

// Unpaced reports whether the policy moves every session at once, whatever
// the number of sessions: MaxRolling is a percentage of at least 100%, there
// is no canary, no brake, no pause and no window. A MaxRolling given as a
// number is never unpaced, since a profile may grow past it. Sessions of an
// unpaced profile move without waiting for a plan (busy ones still wait
// until they are idle, or max-defer passes); the controller still plans, to
// record the rollout.
func (p Policy) Unpaced() bool {
	rolling, percent, err := parse(p.MaxRolling.String())
	if err != nil || !percent || rolling < 100 {
		return false
	}
	canary, _, err := parse(p.Canary.String())
	return err == nil && canary == 0 && p.MaxFailed == nil && !p.Paused && p.Window == nil
}

// String renders the policy compactly for Events and logs, for example
// "max-rolling 10%, canary 1, max-failed 0", "unpaced", "unpaced, max-defer
// 30m0s", or
// "max-rolling 5, canary 0, paused".
func (p Policy) String() string {
	if p.Unpaced() {
		// max-defer changes which sessions move even when all may: a change
		// of it is a change of policy, which the controller tells sessions.
		s := "unpaced"
		if p.MaxDefer != nil {
			s += ", max-defer " + p.MaxDefer.String()
		}
		return s + p.deliveryString(", ")
	}
	parts := []string{
		"max-rolling " + p.MaxRolling.String(),
		"canary " + p.Canary.String(),
	}
	if p.MaxFailed != nil {
		parts = append(parts, "max-failed "+p.MaxFailed.String())
	}
	if p.ProgressDeadlineSeconds != nil {
		parts = append(parts, "progress-deadline "+(time.Duration(*p.ProgressDeadlineSeconds)*time.Second).String())
	}
	if p.MaxDefer != nil {
		parts = append(parts, "max-defer "+p.MaxDefer.String())
	}
	if p.Window != nil {
		parts = append(parts, "window "+p.Window.String())
	}
	if p.Paused {
		parts = append(parts, "paused")
	}
	return strings.Join(parts, ", ") + p.deliveryString(", ")
}

// deliveryString renders a live delivery, after sep; a restart, the
// default, as nothing, so that policies written before live delivery keep
// their text (a change of it is a change of policy).
func (p Policy) deliveryString(sep string) string {
	if !p.Live() {
		return ""
	}
	s := sep + "delivery live"
	if p.LiveDefersBusy {
		s += ", live-defers-busy"
	}
	return s
}

// ParseIntOrPercent parses a non-negative integer ("10") or a non-negative
// integer percentage ("10%"), as flags and annotations spell them. Anything
// else, such as "-1", "1.5", " 10", "" or "%", is an error that quotes the
// value and says what is expected. A percentage is returned without leading
// zeros ("010%" becomes "10%").
func ParseIntOrPercent(s string) (intstr.IntOrString, error) {
	value, percent, err := parse(s)
	switch {
	case err != nil:
		return intstr.IntOrString{}, err
	case percent:
		return intstr.FromString(strconv.Itoa(value) + "%"), nil
	default:
		return intstr.FromInt32(int32(value)), nil
	}
}

// parse is ParseIntOrPercent without building an IntOrString, so that policy
// values can be checked and resolved by the same grammar.
func parse(s string) (value int, percent bool, err error) {
	digits, percent := strings.CutSuffix(s, "%")
	// Checking the digits first rejects the signs and spaces that ParseInt
	// would accept or report less clearly.
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false, fmt.Errorf("invalid value %q: %s", s, wantIntOrPercent)
	}
	v, err := strconv.ParseInt(digits, 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("invalid value %q: out of range, want at most %d", s, math.MaxInt32)
	}
	return int(v), percent, nil
}

// PolicyFor returns the policy of a profile from its annotations, starting
// from defaults, the controller's flags: an absent annotation keeps the
// default's value.
//
// An annotation that does not parse must not make the rollout faster than its
// author meant, so PolicyFor then returns the defaults, paused, with an error
// naming each bad annotation, its value and what is expected, for the
// controller to report in an Event. A max-rolling of 0 or 0% is such an error
// too, since the rollout would never progress.
func PolicyFor(annotations map[string]string, defaults Policy) (Policy, error) {
	p := defaults
	var errs []error
	// A fixed order keeps the joined error stable across syncs.
	if s, ok := annotations[AnnotationMaxRolling]; ok {
		v, err := parseMaxRolling(s)
		p.MaxRolling = v
		errs = append(errs, annotationError(AnnotationMaxRolling, err))
	}
	if s, ok := annotations[AnnotationCanary]; ok {
		v, err := ParseIntOrPercent(s)
		p.Canary = v
		errs = append(errs, annotationError(AnnotationCanary, err))
	}
	if s, ok := annotations[AnnotationMaxFailed]; ok {
		v, err := ParseIntOrPercent(s)
		p.MaxFailed = &v
		errs = append(errs, annotationError(AnnotationMaxFailed, err))
	}
	if s, ok := annotations[AnnotationPaused]; ok {
		v, err := parsePaused(s)
		p.Paused = v
		errs = append(errs, annotationError(AnnotationPaused, err))
	}
	if s, ok := annotations[AnnotationProgressDeadline]; ok {
		v, err := parseProgressDeadline(s)
		p.ProgressDeadlineSeconds = &v
		errs = append(errs, annotationError(AnnotationProgressDeadline, err))
	}
	if s, ok := annotations[AnnotationMaxDefer]; ok {
		v, err := ParseMaxDefer(s)
		p.MaxDefer = v
		errs = append(errs, annotationError(AnnotationMaxDefer, err))
	}
	if s, ok := annotations[AnnotationWindow]; ok {
		v, err := ParseWindow(s)
		p.Window = v
		errs = append(errs, annotationError(AnnotationWindow, err))
	}
	if s, ok := annotations[AnnotationDelivery]; ok {
		v, err := parseDelivery(s)
		p.Delivery = v
		errs = append(errs, annotationError(AnnotationDelivery, err))
	}
	if s, ok := annotations[AnnotationLiveDefersBusy]; ok {
		v, err := parseBool(s)
		p.LiveDefersBusy = v
		errs = append(errs, annotationError(AnnotationLiveDefersBusy, err))
	}
	if err := errors.Join(errs...); err != nil {
		paused := defaults
		paused.Paused = true
		return paused, err
	}
	return p, nil
}

// parseMaxRolling parses a max-rolling value, which must not be zero.
func parseMaxRolling(s string) (intstr.IntOrString, error) {
	v, err := ParseIntOrPercent(s)
	if err != nil {
		return v, err
	}
	if n, _, _ := parse(v.String()); n == 0 {
		return v, fmt.Errorf("invalid value %q: want more than 0, or the rollout never progresses", s)
	}
	return v, nil
}

// parseProgressDeadline parses a progress deadline: a Go duration of whole
// seconds, at least one.
func parseProgressDeadline(s string) (int32, error) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf(`invalid value %q: want a duration such as "90s" or "2m"`, s)
	case d < time.Second || d%time.Second != 0:
		return 0, fmt.Errorf(`invalid value %q: want whole seconds, at least "1s"`, s)
	case d > math.MaxInt32*time.Second:
		return 0, fmt.Errorf("invalid value %q: want at most %ds", s, math.MaxInt32)
	}
	return int32(d / time.Second), nil
}

// ParseMaxDefer parses a max-defer value: "never" (nil), or a
// non-negative duration such as "30m".
func ParseMaxDefer(s string) (*time.Duration, error) {
	if s == MaxDeferNever {
		return nil, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return nil, fmt.Errorf(`invalid value %q: want a duration such as "30m" or "2h", or "never"`, s)
	}
	return &d, nil
}

// parsePaused accepts exactly "true" and "false": a looser reading such as
// strconv.ParseBool's could resume a rollout its author meant to hold.
func parsePaused(s string) (bool, error) {
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return true, fmt.Errorf(`invalid value %q: want "true" or "false"`, s)
	}
}

// parseDelivery parses a delivery mode.
func parseDelivery(s string) (Delivery, error) {
	switch d := Delivery(s); d {
	case DeliveryRestart, DeliveryLive:
		return d, nil
	}
	return DeliveryRestart, fmt.Errorf(`invalid value %q: want "restart" or "live"`, s)
}

// parseBool parses "true" or "false", as annotations spell them.
func parseBool(s string) (bool, error) {
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf(`invalid value %q: want "true" or "false"`, s)
}

// annotationError names the annotation in err, or returns nil if err is nil.
func annotationError(key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("annotation %s: %w", key, err)
}
