package rollout

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Member is one session of the profile, as the controller's caches show it.
type Member struct {
	// Name is the session's name. All members share one namespace, so names
	// are unique.
	Name string
	// Hash is the content hash of the profile revision its Deployment runs,
	// "" if none is known.
	Hash string
	// OnTarget reports whether its Deployment runs the target revision.
	OnTarget bool
	// Ready reports whether its Deployment is fully rolled out and every
	// replica is ready.
	Ready bool
	// Failed reports whether its Deployment reports ProgressDeadlineExceeded
	// for its current generation.
	Failed bool
	// Blocked says why the member cannot progress, "" if it can: its
	// Deployment is paused by a user, or refuses the controller's writes
	// (a conflict, an invalid spec). A blocked member is never admitted past
	// the canary, and one that holds a canary or budget slot is reported.
	Blocked string
	// Busy reports whether the session is busy (a match is running): a
	// rollout does not move it until it is idle, or until the policy's
	// window has been open for MaxDefer since the rollout started (see
	// Policy.Defers).
	Busy bool
}

// Memory is what a rollout remembers between plans, across restarts and
// failovers: the controller keeps it in the profile's ProfileRollout.
type Memory struct {
	// Halted reports whether the brake halted the rollout towards the
	// current target. It holds until the target changes: a halt is never
	// released by the failures going away (a failed session deleted or
	// scaled down, say).
	Halted bool
	// StableHash is the content whose rollout last completed, "" if none is
	// known.
	StableHash string
	// Started is when the rollout towards the current target began, the zero
	// time if it has just begun. MaxDefer counts from it: a Started later
	// than the real start only makes busy members wait longer, so the
	// controller rounds it up to the second it stores.
	Started time.Time
}

// BlockedMember is a member that holds a canary or budget slot and cannot
// progress.
type BlockedMember struct {
	Name   string
	Reason string
}

// Phase is the state of a profile's rollout.
type Phase string

// The phases of a rollout.
const (
	// PhaseComplete means every member is on the target.
	PhaseComplete Phase = "Complete"
	// PhaseCanary means the canaries are moving or not yet Ready.
	PhaseCanary Phase = "Canary"
	// PhaseRolling means the rollout is past the canary, moving sessions
	// within the budget.
	PhaseRolling Phase = "Rolling"
	// PhasePaused means the policy is paused, or does not parse.
	PhasePaused Phase = "Paused"
	// PhaseHalted means the brake: too many moved sessions failed.
	PhaseHalted Phase = "Halted"
	// PhaseWaiting means the policy's maintenance window is closed: nothing
	// moves until it opens (Plan.Resumes).
	PhaseWaiting Phase = "Waiting"
)

// Plan is Decide's answer.
type Plan struct {
	// Phase is the state of the rollout.
	Phase Phase
	// Admitted are the names of the members not on the target that may move
	// now, in the order they move, which is name order.
	Admitted []string

	// Total is the number of members.
	Total int
	// Moved is the number of members on the target.
	Moved int
	// Ready is the number of moved members that are Ready.
	Ready int
	// Rolling is the number of moved members that are not Ready yet.
	Rolling int
	// Failed is the number of moved members that failed.
	Failed int
	// Deferred is the number of busy members not on the target whose move
	// waits until they are idle or MaxDefer passes (Policy.Defers). They
	// count neither as failed nor against the budget.
	Deferred int

	// MaxRolling is the policy's MaxRolling resolved against Total.
	MaxRolling int
	// Canary is the policy's Canary resolved against Total.
	Canary int
	// MaxFailed is the policy's MaxFailed resolved against Moved, or -1 when
	// the policy has no brake.
	MaxFailed int

	// StableHash is the content new sessions start on while the rollout is
	// in its canary phase, paused, halted or waiting for its window:
	// Memory.StableHash if known, else the one most members not on the
	// target run (the lexicographically smallest on a tie), else "".
	StableHash string
	// Settled reports whether the rollout is Complete and every member is
	// Ready or Failed: nothing is left to happen. The controller then records
	// the target as the stable content, unless members failed (a failure
	// the brake tolerated ends the rollout, but is no proof of the content).
	Settled bool

	// Blocked are the members that hold a canary or budget slot and cannot
	// progress (Member.Blocked, or Failed while the brake tolerates it), in
	// name order.
	Blocked []BlockedMember
	// Stuck reports that the rollout cannot progress until a blocked member
	// is unblocked: nothing is admitted, and every member that is moving is
	// blocked.
	Stuck bool

	// Resumes is when the closed maintenance window opens, for a plan in
	// PhaseWaiting; WindowCloses when the open one closes, for a plan that
	// is not settled. Each is the zero time otherwise. The controller plans
	// again at that time.
	Resumes, WindowCloses time.Time
	// DeferralEnds is when MaxDefer passes and the deferred members move
	// too: when the window has been open for MaxDefer since the rollout
	// started. It is the zero time if none is deferred, or the policy
	// defers them until they are idle.
	DeferralEnds time.Time
}

// Admits reports whether the named member may move now. It is cheap enough to
// call for every session: Admitted is in name order, so it binary-searches.
func (p Plan) Admits(name string) bool {
	_, found := slices.BinarySearch(p.Admitted, name)
	return found
}

// NewSessionsOnTarget reports whether a session that has no Deployment yet
// should start on the target revision. That is so once the rollout is past its
// canary and not stopped. Otherwise it should start on StableHash, or on the
// target if StableHash is "".
func (p Plan) NewSessionsOnTarget() bool {
	return p.Phase == PhaseRolling || p.Phase == PhaseComplete
}

// Decide computes which members may move now. See the package documentation
// for the rules.
//
// Decide does not depend on the order of members and does not modify it.
// Policies from DefaultPolicy and PolicyFor are always well-formed. A policy
// built by hand with a malformed or negative value is treated as paused, as
// PolicyFor treats an annotation that does not parse, and the value resolves
// to 0 (MaxRolling to at least 1).
//
// now is the time of the plan: it decides whether the maintenance window is
// open, and whether it has been open for MaxDefer since memory.Started.
func Decide(policy Policy, members []Member, memory Memory, now time.Time) Plan {
	// The controller lists members in name order, mostly: a sorted input is
	// read as it is, never written.
	sorted := members
	if !slices.IsSortedFunc(members, compareMembers) {
		sorted = slices.Clone(members)
		slices.SortFunc(sorted, compareMembers)
	}

	plan := tally(sorted)
	malformed := plan.resolve(policy)
	deferring := plan.deferral(policy, memory, now)
	closed := policy.Window != nil && !policy.Window.Open(now)
	var candidates []Member
	plan.Phase, candidates = plan.phase(sorted, policy.Paused || malformed, memory.Halted, closed)
	for _, m := range sorted {
		if !m.OnTarget && m.Busy && deferring {
			plan.Deferred++
		}
	}
	admittable := candidates
	if plan.Phase == PhaseRolling {
		// Past the canary, a member that cannot take a write waits without
		// taking a slot from those that can.
		admittable = slices.DeleteFunc(slices.Clone(admittable), func(m Member) bool { return m.Blocked != "" })
	}
	if deferring {
		// A busy member waits without taking a slot, in the canary too.
		admittable = slices.DeleteFunc(slices.Clone(admittable), func(m Member) bool { return m.Busy })
	}
	plan.Admitted = names(admittable, max(0, plan.MaxRolling-plan.Rolling))
	plan.StableHash = cmp.Or(memory.StableHash, mostRun(sorted))
	plan.Settled = plan.Phase == PhaseComplete && plan.Ready+plan.Failed == plan.Total
	plan.blocked(sorted, candidates)
	if policy.Window != nil && plan.Phase == PhaseWaiting {
		plan.Resumes = policy.Window.NextOpen(now)
	} else if policy.Window != nil && !plan.Settled {
		plan.WindowCloses = policy.Window.NextClose(now)
	}
	if plan.Deferred == 0 {
		plan.DeferralEnds = time.Time{}
	}
	return plan
}

// deferral reports whether busy members wait, and sets DeferralEnds to when
// they stop waiting (zero for never).
func (p *Plan) deferral(policy Policy, memory Memory, now time.Time) bool {
	started := memory.Started
	if started.IsZero() {
		// The rollout begins now: MaxDefer counts from now.
		started = now
	}
	deferring, ends := policy.Defers(started, now)
	p.DeferralEnds = ends
	return deferring
}

// blocked fills in the members that hold a slot, or the rollout's end, and
// cannot progress, and whether the rollout is stuck on them. candidates are
// the members the phase wants to move (the canaries not yet moved, or all
// the others).
func (p *Plan) blocked(sorted, candidates []Member) {
	// A rollout whose every member moved is Complete, but not over while
	// members are not Ready yet: one that cannot get there holds its end.
	if p.Phase != PhaseCanary && p.Phase != PhaseRolling && (p.Phase != PhaseComplete || p.Settled) {
		return
	}
	movingUnblocked := 0
	for _, m := range sorted {
		switch {
		case m.OnTarget && !m.Ready && m.Blocked != "":
			p.Blocked = append(p.Blocked, BlockedMember{Name: m.Name, Reason: m.Blocked})
		case m.OnTarget && !m.Ready && m.Failed:
			p.Blocked = append(p.Blocked, BlockedMember{Name: m.Name, Reason: ReasonFailed})
		case m.OnTarget && !m.Ready:
			movingUnblocked++
		}
	}
	// A blocked canary holds its slot: the canaries are fixed by name. A
	// blocked member past the canary holds the rollout's end.
	for _, m := range candidates {
		if m.Blocked != "" {
			p.Blocked = append(p.Blocked, BlockedMember{Name: m.Name, Reason: m.Blocked})
		}
	}
	slices.SortFunc(p.Blocked, func(a, b BlockedMember) int { return strings.Compare(a.Name, b.Name) })
	admittable := slices.ContainsFunc(p.Admitted, func(name string) bool {
		i := slices.IndexFunc(candidates, func(m Member) bool { return m.Name == name })
		return i >= 0 && candidates[i].Blocked == ""
	})
	p.Stuck = len(p.Blocked) > 0 && movingUnblocked == 0 && !admittable
}

// ReasonFailed is the BlockedMember reason of a member whose Deployment
// exceeded its progress deadline, while the brake tolerates it.
const ReasonFailed = "ProgressDeadlineExceeded"

// compareMembers orders members by name. Names are unique, but comparing the
// other fields too makes the order total, so that even duplicates could not
// make Decide depend on the order of its input.
func compareMembers(a, b Member) int {
	return cmp.Or(
		strings.Compare(a.Name, b.Name),
		strings.Compare(a.Hash, b.Hash),
		compareBool(a.OnTarget, b.OnTarget),
		compareBool(a.Ready, b.Ready),
		compareBool(a.Failed, b.Failed),
		strings.Compare(a.Blocked, b.Blocked),
		compareBool(a.Busy, b.Busy),
	)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}

// tally counts the members and where the moved ones stand. Ready and Failed
// of a member not on the target describe the old revision, so they do not
// count.
func tally(members []Member) Plan {
	plan := Plan{Total: len(members)}
	for _, m := range members {
		if !m.OnTarget {
			continue
		}
		plan.Moved++
		if m.Ready {
			plan.Ready++
		} else {
			plan.Rolling++
		}
		if m.Failed {
			plan.Failed++
		}
	}
	return plan
}

// resolve turns the policy's values into numbers of sessions for this
// profile, and reports whether any of them was malformed.
func (p *Plan) resolve(policy Policy) (malformed bool) {
	maxRolling, errRolling := scale(policy.MaxRolling, p.Total, false)
	canary, errCanary := scale(policy.Canary, p.Total, true)
	// At least one, or a small profile with a percentage would never move.
	p.MaxRolling = min(max(maxRolling, 1), p.Total)
	p.Canary = min(canary, p.Total)
	p.MaxFailed = -1
	var errFailed error
	if policy.MaxFailed != nil {
		p.MaxFailed, errFailed = scale(*policy.MaxFailed, p.Moved, false)
	}
	return errRolling != nil || errCanary != nil || errFailed != nil
}

// scale resolves v against total, rounding a percentage up or down. Integer
// arithmetic keeps the rounding exact. A malformed v resolves to 0.
func scale(v intstr.IntOrString, total int, roundUp bool) (int, error) {
	value, percent, err := parse(v.String())
	switch {
	case err != nil || !percent:
		return value, err
	case roundUp:
		return (value*total + 99) / 100, nil
	default:
		return value * total / 100, nil
	}
}

// phase returns the phase of the rollout and the members that may move now if
// the budget allows, in order. Only the first plan.Canary members are
// canaries. A halt, remembered or found now, comes first: a rollout whose
// every member moved but too many failed is halted, not complete, so that
// its content never becomes the stable one.
func (p *Plan) phase(sorted []Member, paused, halted, closed bool) (Phase, []Member) {
	switch {
	case halted || (p.MaxFailed >= 0 && p.Failed > p.MaxFailed):
		return PhaseHalted, nil
	case p.Moved == p.Total:
		return PhaseComplete, nil
	case paused:
		return PhasePaused, nil
	case closed:
		return PhaseWaiting, nil
	}
	canaries, rest := sorted[:p.Canary], sorted[p.Canary:]
	if waiting := notOnTarget(canaries); len(waiting) > 0 {
		return PhaseCanary, waiting
	}
	if !allReady(canaries) {
		return PhaseCanary, nil
	}
	return PhaseRolling, notOnTarget(rest)
}

func notOnTarget(members []Member) []Member {
	n := 0
	for _, m := range members {
		if !m.OnTarget {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]Member, 0, n)
	for _, m := range members {
		if !m.OnTarget {
			out = append(out, m)
		}
	}
	return out
}

// allReady reports whether every member is Ready. Every member passed to it is
// on the target, so Ready refers to the target revision.
func allReady(members []Member) bool {
	for _, m := range members {
		if !m.Ready {
			return false
		}
	}
	return true
}

// names returns the names of the first n members, or nil if there are none.
func names(members []Member, n int) []string {
	var out []string
	for _, m := range members[:min(n, len(members))] {
		out = append(out, m.Name)
	}
	return out
}

// mostRun returns the content that most members not on the target run; on a
// tie, the lexicographically smallest.
func mostRun(members []Member) string {
	counts := make(map[string]int)
	for _, m := range members {
		if !m.OnTarget && m.Hash != "" {
			counts[m.Hash]++
		}
	}
	best := ""
	// In sorted order, only a strictly larger count replaces the best, so a
	// tie keeps the smallest revision.
	for _, hash := range slices.Sorted(maps.Keys(counts)) {
		if counts[hash] > counts[best] {
			best = hash
		}
	}
	return best
}

// MaxRollingOf is the policy's MaxRolling resolved against a profile of total
// sessions, as a plan resolves it: at least one, at most total.
func (p Policy) MaxRollingOf(total int) int {
	maxRolling, _ := scale(p.MaxRolling, total, false)
	return min(max(maxRolling, 1), total)
}

// AsksForCanary reports whether the policy has a canary: sessions move
// only after the first of them, in name order, moved and are Ready.
func (p Policy) AsksForCanary() bool {
	canary, _, err := parse(p.Canary.String())
	return err == nil && canary > 0
}

// CanaryOf is the policy's Canary resolved against a profile of total
// sessions, as a plan resolves it.
func (p Policy) CanaryOf(total int) int {
	canary, _ := scale(p.Canary, total, true)
	return min(canary, total)
}

// MaxFailedOf is the policy's MaxFailed resolved against n sessions, and
// whether the policy has a brake at all.
func (p Policy) MaxFailedOf(n int) (int, bool) {
	if p.MaxFailed == nil {
		return 0, false
	}
	maxFailed, _ := scale(*p.MaxFailed, n, false)
	return maxFailed, true
}
