package rollout

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// testNow is the time of the plans of the tests: a Tuesday, 03:00 UTC.
var testNow = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

// TestDecideProperties checks invariants of Decide on random profiles. Each
// case has its own seed, so a failure names the seed that reproduces it.
func TestDecideProperties(t *testing.T) {
	const cases = 5000
	phases := make(map[Phase]int)
	for seed := range uint64(cases) {
		rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		policy := randomPolicy(rng)
		members := randomMembers(rng)
		memory := randomMemory(rng)
		plan, err := checkDecide(rng, policy, members, memory)
		if err != nil {
			t.Fatalf("seed %d: %v\npolicy: %#v (%v)\nmembers: %+v\nmemory: %+v", seed, err, policy, policy, members, memory)
		}
		phases[plan.Phase]++
	}
	// The invariants say little about a phase the cases never reach.
	for _, phase := range []Phase{PhaseComplete, PhaseCanary, PhaseRolling, PhasePaused, PhaseHalted, PhaseWaiting} {
		if phases[phase] < cases/100 {
			t.Errorf("only %d of %d cases reached phase %s: %v", phases[phase], cases, phase, phases)
		}
	}
}

func randomPolicy(rng *rand.Rand) Policy {
	p := Policy{
		MaxRolling: randomIntOrPercent(rng, 70, 150),
		Canary:     intstr.FromInt32(0),
		Paused:     rng.IntN(10) == 0,
	}
	// Most canaries hold the rest back, so half the policies have none, for
	// the Rolling phase to come up as often as the Canary phase.
	if rng.IntN(2) == 0 {
		p.Canary = randomIntOrPercent(rng, 70, 150)
	}
	if rng.IntN(2) == 0 {
		p.MaxFailed = new(randomIntOrPercent(rng, 6, 40)) // small, so that the brake acts
	}
	// A third defer busy members for ever, a third for a while that has or
	// has not passed since the memory's start, a third not at all.
	switch rng.IntN(3) {
	case 1:
		p.MaxDefer = new(time.Duration(rng.IntN(120)) * time.Minute)
	case 2:
		p.MaxDefer = new(time.Duration(0))
	}
	// Windows open at testNow and closed, each open for some of the days
	// before it, so that max-defer counts less than the time since the
	// memory's start.
	switch rng.IntN(10) {
	case 0:
		p.Window, _ = ParseWindow("Tue 02:00-04:00")
	case 1:
		p.Window, _ = ParseWindow("Mon,Wed-Sun 02:00-04:00 Europe/Berlin")
	case 2:
		p.Window, _ = ParseWindow("Mon 03:00-04:00")
	case 3:
		p.Window, _ = ParseWindow("02:40-03:20 America/New_York")
	}
	return p
}

// randomIntOrPercent returns mostly numbers below maxInt and percentages
// below maxPercent, where the rounding matters, and now and then a malformed
// value.
func randomIntOrPercent(rng *rand.Rand, maxInt int32, maxPercent int) intstr.IntOrString {
	switch rng.IntN(40) {
	case 0:
		return intstr.FromString([]string{"", "x", "-5%", "1.5%", "10"}[rng.IntN(5)])
	case 1:
		return intstr.FromInt32(-1 - rng.Int32N(5))
	}
	if rng.IntN(2) == 0 {
		return intstr.FromInt32(rng.Int32N(maxInt))
	}
	return intstr.FromString(fmt.Sprintf("%d%%", rng.IntN(maxPercent)))
}

// randomMemory returns a memory that is mostly empty, now and then halted,
// and half the time with a stable content.
func randomMemory(rng *rand.Rand) Memory {
	m := Memory{Halted: rng.IntN(8) == 0}
	if rng.IntN(2) == 0 {
		m.StableHash = []string{"r1", "r2", "r9"}[rng.IntN(3)]
	}
	// Started within the last two hours, or, to the second, within the
	// last two days, across several openings of the windows.
	switch rng.IntN(4) {
	case 0, 1:
		m.Started = testNow.Add(-time.Duration(rng.IntN(120)) * time.Minute)
	case 2:
		m.Started = testNow.Add(-time.Duration(rng.IntN(2*24*60*60)) * time.Second)
	}
	return m
}

// randomMembers returns up to 60 members with unique random names, in random
// order. How many moved, are Ready or failed varies from profile to profile,
// so that every phase comes up. Failed is meaningful only on the target, but
// it is set elsewhere too, to check that it is ignored there.
func randomMembers(rng *rand.Rand) []Member {
	n := rng.IntN(61)
	moved, ready, failed, busy := rng.Float64(), rng.Float64(), rng.Float64()/4, rng.Float64()/2
	seen := make(map[string]bool, n)
	members := make([]Member, 0, n)
	for len(members) < n {
		name := fmt.Sprintf("gs-%x", rng.IntN(4096))
		if seen[name] {
			continue
		}
		seen[name] = true
		m := Member{Name: name, Ready: rng.Float64() < ready, Failed: rng.Float64() < failed, Busy: rng.Float64() < busy}
		if rng.IntN(8) == 0 {
			m.Blocked = []string{"DeploymentPaused", "ContainerConflict"}[rng.IntN(2)]
		}
		if m.OnTarget = rng.Float64() < moved; m.OnTarget {
			m.Hash = "target"
			m.Failed = m.Failed && !m.Ready // a failed Deployment is not Ready
		} else {
			m.Hash = []string{"", "r1", "r2", "r3"}[rng.IntN(4)]
		}
		members = append(members, m)
	}
	return members
}

// checkDecide returns an error describing the first invariant that Decide
// breaks for this policy and these members.
func checkDecide(rng *rand.Rand, policy Policy, members []Member, memory Memory) (Plan, error) {
	before := slices.Clone(members)
	plan := Decide(policy, members, memory, testNow)
	if !slices.Equal(members, before) {
		return plan, fmt.Errorf("Decide modified its input")
	}

	shuffled := slices.Clone(members)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	// In name order, as the controller lists them, Decide reads the members
	// without a copy of its own.
	inOrder := slices.SortedFunc(slices.Values(members), compareMembers)
	for _, ordered := range [][]Member{shuffled, inOrder} {
		before := slices.Clone(ordered)
		if again := Decide(policy, ordered, memory, testNow); !reflect.DeepEqual(again, plan) {
			return plan, fmt.Errorf("Decide depends on input order:\n  %+v\nthen\n  %+v", plan, again)
		}
		if !slices.Equal(ordered, before) {
			return plan, fmt.Errorf("Decide modified its input")
		}
	}

	for _, check := range []func(Policy, []Member, Memory, Plan) error{
		checkCounts, checkResolved, checkAdmitted, checkBudget, checkPhase, checkAdmits, checkStable, checkBlocked,
		checkDeferred, checkMaxDefer, checkWindow,
	} {
		if err := check(policy, members, memory, plan); err != nil {
			return plan, fmt.Errorf("%w\nplan: %+v", err, plan)
		}
	}
	return plan, nil
}

// checkCounts checks the counts against a direct count of the members.
func checkCounts(_ Policy, members []Member, _ Memory, plan Plan) error {
	var want [5]int // Total, Moved, Ready, Rolling, Failed
	want[0] = len(members)
	for _, m := range members {
		if !m.OnTarget {
			continue
		}
		want[1]++
		if m.Ready {
			want[2]++
		} else {
			want[3]++
		}
		if m.Failed {
			want[4]++
		}
	}
	if got := [5]int{plan.Total, plan.Moved, plan.Ready, plan.Rolling, plan.Failed}; got != want {
		return fmt.Errorf("Total, Moved, Ready, Rolling, Failed = %v, want %v", got, want)
	}
	return nil
}

// checkResolved checks the policy resolved against the profile, using
// apimachinery's float rounding as an independent reference.
func checkResolved(policy Policy, _ []Member, _ Memory, plan Plan) error {
	n := plan.Total
	maxRolling := min(scaled(policy.MaxRolling, n, false), n)
	if n > 0 {
		maxRolling = max(maxRolling, 1)
	}
	maxFailed := -1
	if policy.MaxFailed != nil {
		maxFailed = scaled(*policy.MaxFailed, plan.Moved, false)
	}
	want := [3]int{maxRolling, min(scaled(policy.Canary, n, true), n), maxFailed}
	if got := [3]int{plan.MaxRolling, plan.Canary, plan.MaxFailed}; got != want {
		return fmt.Errorf("MaxRolling, Canary, MaxFailed = %v, want %v", got, want)
	}
	// The controller resolves the canary of rotations as a plan does.
	if got := policy.CanaryOf(n); got != plan.Canary {
		return fmt.Errorf("CanaryOf(%d) = %d, the plan's Canary %d", n, got, plan.Canary)
	}
	if policy.AsksForCanary() != (scaled(policy.Canary, 100, true) > 0) {
		return fmt.Errorf("AsksForCanary() = %t for canary %s", policy.AsksForCanary(), policy.Canary.String())
	}
	return nil
}

// scaled resolves v with intstr.GetScaledValueFromIntOrPercent, which wants
// percentages as strings and numbers as integers, as ParseIntOrPercent makes
// them. A malformed v resolves to 0.
func scaled(v intstr.IntOrString, total int, roundUp bool) int {
	parsed, err := ParseIntOrPercent(v.String())
	if err != nil {
		return 0
	}
	value, err := intstr.GetScaledValueFromIntOrPercent(&parsed, total, roundUp)
	if err != nil {
		panic(err)
	}
	return value
}

// checkAdmitted checks that the admitted names are distinct members not on
// the target, in name order.
func checkAdmitted(_ Policy, members []Member, _ Memory, plan Plan) error {
	offTarget := make(map[string]bool)
	for _, m := range members {
		if !m.OnTarget {
			offTarget[m.Name] = true
		}
	}
	for _, name := range plan.Admitted {
		if !offTarget[name] {
			return fmt.Errorf("admitted %q, which is not a member off the target", name)
		}
	}
	if !slices.IsSorted(plan.Admitted) {
		return fmt.Errorf("Admitted not in name order: %q", plan.Admitted)
	}
	if len(slices.Compact(slices.Clone(plan.Admitted))) != len(plan.Admitted) {
		return fmt.Errorf("Admitted has duplicates: %q", plan.Admitted)
	}
	return nil
}

// checkBudget checks that admitting never makes more sessions roll than the
// budget allows, unless they already did.
func checkBudget(_ Policy, _ []Member, _ Memory, plan Plan) error {
	if len(plan.Admitted)+plan.Rolling > max(plan.MaxRolling, plan.Rolling) {
		return fmt.Errorf("admitted %d with %d rolling, over the budget of %d",
			len(plan.Admitted), plan.Rolling, plan.MaxRolling)
	}
	return nil
}

// checkPhase checks that the phase follows from the policy and the members,
// and that each phase admits what it should.
func checkPhase(policy Policy, members []Member, memory Memory, plan Plan) error {
	sorted := slices.SortedFunc(slices.Values(members), compareMembers)
	canaries := sorted[:plan.Canary]
	slots := max(0, plan.MaxRolling-plan.Rolling)
	complete := plan.Moved == plan.Total
	halted := memory.Halted || policy.MaxFailed != nil && plan.Failed > plan.MaxFailed
	paused := policy.Paused || malformed(policy)
	closed := policy.Window != nil && !policy.Window.Open(testNow)
	deferring := deferringAt(policy, memory, testNow)

	var want Phase
	switch {
	case halted:
		want = PhaseHalted
	case complete:
		want = PhaseComplete
	case paused:
		want = PhasePaused
	case closed:
		want = PhaseWaiting
	case allOnTargetAndReady(canaries):
		want = PhaseRolling
	default:
		want = PhaseCanary
	}
	if plan.Phase != want {
		return fmt.Errorf("phase %s, want %s", plan.Phase, want)
	}

	switch plan.Phase {
	case PhaseComplete, PhaseHalted, PhasePaused, PhaseWaiting:
		if len(plan.Admitted) > 0 {
			return fmt.Errorf("%s admitted %q", plan.Phase, plan.Admitted)
		}
	case PhaseCanary:
		var canaryNames, waiting []string
		for _, m := range canaries {
			canaryNames = append(canaryNames, m.Name)
			if !m.OnTarget && !(m.Busy && deferring) {
				waiting = append(waiting, m.Name)
			}
		}
		for _, name := range plan.Admitted {
			if !slices.Contains(canaryNames, name) {
				return fmt.Errorf("Canary admitted %q, which is not among the first %d", name, plan.Canary)
			}
		}
		if want := waiting[:min(slots, len(waiting))]; !slices.Equal(plan.Admitted, want) {
			return fmt.Errorf("Canary admitted %q, want %q", plan.Admitted, want)
		}
	case PhaseRolling:
		var rest []string
		left := 0
		for _, m := range sorted[plan.Canary:] {
			if !m.OnTarget {
				left++
				if m.Blocked == "" && !(m.Busy && deferring) {
					rest = append(rest, m.Name)
				}
			}
		}
		if left == 0 {
			return fmt.Errorf("Rolling with nothing left to move")
		}
		if want := rest[:min(slots, len(rest))]; !slices.Equal(plan.Admitted, want) {
			return fmt.Errorf("Rolling admitted %q, want %q", plan.Admitted, want)
		}
	}
	return nil
}

// deferringAt reports whether busy members wait at now: max-defer "never",
// or the window open for less than max-defer since the rollout started (an
// unknown start is now), or closed since it was open that long and not yet
// open again. "0s" never defers.
func deferringAt(policy Policy, memory Memory, now time.Time) bool {
	if policy.MaxDefer == nil {
		return true
	}
	if *policy.MaxDefer == 0 {
		return false
	}
	// Spent exactly, with the window closed: it was spent as the window
	// closed, and nothing moves before it opens again.
	open := openSince(policy.Window, startOf(memory, now), now)
	return open < *policy.MaxDefer || open == *policy.MaxDefer && policy.Window != nil && !policy.Window.Open(now)
}

func startOf(memory Memory, now time.Time) time.Time {
	if memory.Started.IsZero() {
		return now
	}
	return memory.Started
}

// openSince is how long w is open from from to to, all of it for a nil w,
// as Open, NextOpen and NextClose tell it: from each opening to its close.
func openSince(w *Window, from, to time.Time) time.Duration {
	if !to.After(from) {
		return 0
	}
	if w == nil {
		return to.Sub(from)
	}
	var open time.Duration
	for t := from; t.Before(to); {
		if !w.Open(t) {
			t = w.NextOpen(t) // strictly later: t is not open
			continue
		}
		closes := w.NextClose(t)
		if closes.After(to) {
			open += to.Sub(t)
		} else {
			open += closes.Sub(t)
		}
		t = closes
	}
	return open
}

// openMinutes is openSince counted the slow way, minute by minute: the
// window's bounds are whole minutes in every zone, so it is open or closed
// for the whole of each.
func openMinutes(w *Window, from, to time.Time) time.Duration {
	var open time.Duration
	for t := from; t.Before(to); {
		next := t.Truncate(time.Minute).Add(time.Minute)
		if next.After(to) {
			next = to
		}
		if w.Open(t) {
			open += next.Sub(t)
		}
		t = next
	}
	return open
}

// checkMaxDefer checks that no busy member is admitted before the window has
// been open for max-defer since the rollout started (all the time since,
// without a window): the time during which the rollout could have ended its
// match.
func checkMaxDefer(policy Policy, members []Member, memory Memory, plan Plan) error {
	for _, m := range members {
		if !m.Busy || !plan.Admits(m.Name) {
			continue
		}
		if policy.MaxDefer == nil {
			return fmt.Errorf("admitted busy member %q under max-defer never", m.Name)
		}
		if open := openSince(policy.Window, startOf(memory, testNow), testNow); open < *policy.MaxDefer {
			return fmt.Errorf("admitted busy member %q after %v of open window since the start, under max-defer %v",
				m.Name, open, *policy.MaxDefer)
		}
	}
	return nil
}

// checkDeferred checks that no busy member is admitted while busy members
// wait, that Deferred counts exactly the busy members off the target then,
// and that DeferralEnds says when they stop waiting.
func checkDeferred(policy Policy, members []Member, memory Memory, plan Plan) error {
	deferring := deferringAt(policy, memory, testNow)
	want := 0
	for _, m := range members {
		if !m.OnTarget && m.Busy && deferring {
			want++
			if plan.Admits(m.Name) {
				return fmt.Errorf("admitted busy member %q while busy members wait", m.Name)
			}
		}
	}
	if plan.Deferred != want {
		return fmt.Errorf("Deferred = %d, want %d", plan.Deferred, want)
	}
	switch {
	case want == 0 || policy.MaxDefer == nil:
		if !plan.DeferralEnds.IsZero() {
			return fmt.Errorf("DeferralEnds %v with %d deferred under max-defer %v", plan.DeferralEnds, want, policy.MaxDefer)
		}
	case !plan.DeferralEnds.After(testNow):
		return fmt.Errorf("DeferralEnds %v is not after the plan's time while members wait", plan.DeferralEnds)
	}
	return nil
}

// checkWindow checks that a closed window says when it opens, and an open
// one when it closes, unless the rollout settled.
func checkWindow(policy Policy, _ []Member, _ Memory, plan Plan) error {
	switch {
	case plan.Phase == PhaseWaiting && !plan.Resumes.After(testNow):
		return fmt.Errorf("Waiting, resumes at %v", plan.Resumes)
	case plan.Phase != PhaseWaiting && !plan.Resumes.IsZero():
		return fmt.Errorf("%s, resumes at %v", plan.Phase, plan.Resumes)
	case policy.Window != nil && policy.Window.Open(testNow) && !plan.Settled && !plan.WindowCloses.After(testNow):
		return fmt.Errorf("open window, closes at %v", plan.WindowCloses)
	}
	return nil
}

// malformed reports whether a value of the policy does not parse.
func malformed(p Policy) bool {
	values := []intstr.IntOrString{p.MaxRolling, p.Canary}
	if p.MaxFailed != nil {
		values = append(values, *p.MaxFailed)
	}
	for _, v := range values {
		if _, err := ParseIntOrPercent(v.String()); err != nil {
			return true
		}
	}
	return false
}

func allOnTargetAndReady(members []Member) bool {
	for _, m := range members {
		if !m.OnTarget || !m.Ready {
			return false
		}
	}
	return true
}

// checkAdmits checks that Admits agrees with Admitted for every member.
func checkAdmits(_ Policy, members []Member, _ Memory, plan Plan) error {
	for _, m := range members {
		if got, want := plan.Admits(m.Name), slices.Contains(plan.Admitted, m.Name); got != want {
			return fmt.Errorf("Admits(%q) = %v, but Admitted is %q", m.Name, got, plan.Admitted)
		}
	}
	return nil
}

// checkStable checks that the remembered stable content wins, and without
// one, that no content off the target is more common than StableHash, nor as
// common and smaller.
func checkStable(_ Policy, members []Member, memory Memory, plan Plan) error {
	if memory.StableHash != "" {
		if plan.StableHash != memory.StableHash {
			return fmt.Errorf("StableHash is %q, but the memory says %q", plan.StableHash, memory.StableHash)
		}
		return nil
	}
	counts := make(map[string]int)
	for _, m := range members {
		if !m.OnTarget && m.Hash != "" {
			counts[m.Hash]++
		}
	}
	if plan.StableHash == "" {
		if len(counts) > 0 {
			return fmt.Errorf("Stable is empty, but members off the target run %v", counts)
		}
		return nil
	}
	best := counts[plan.StableHash]
	for rev, n := range counts {
		if best == 0 || n > best || n == best && rev < plan.StableHash {
			return fmt.Errorf("Stable is %q, but members off the target run %v", plan.StableHash, counts)
		}
	}
	return nil
}

// checkBlocked checks that every blocked member listed holds a slot and
// cannot progress, that every such member is listed, and that Stuck means
// nothing else can move.
func checkBlocked(_ Policy, members []Member, _ Memory, plan Plan) error {
	if !slices.IsSortedFunc(plan.Blocked, func(a, b BlockedMember) int { return strings.Compare(a.Name, b.Name) }) {
		return fmt.Errorf("Blocked not in name order: %v", plan.Blocked)
	}
	moving := plan.Phase == PhaseCanary || plan.Phase == PhaseRolling || (plan.Phase == PhaseComplete && !plan.Settled)
	if !moving && (len(plan.Blocked) > 0 || plan.Stuck) {
		return fmt.Errorf("%s reports blocked members %v (stuck %v)", plan.Phase, plan.Blocked, plan.Stuck)
	}
	if !moving {
		return nil
	}
	sorted := slices.SortedFunc(slices.Values(members), compareMembers)
	canaries := map[string]bool{}
	for _, m := range sorted[:plan.Canary] {
		canaries[m.Name] = true
	}
	want := map[string]bool{}
	unblockedMoving := false
	for _, m := range sorted {
		holding := m.OnTarget && !m.Ready
		wanted := !m.OnTarget && canaries[m.Name] == (plan.Phase == PhaseCanary)
		switch {
		case holding && (m.Blocked != "" || m.Failed):
			want[m.Name] = true
		case holding:
			unblockedMoving = true
		case wanted && m.Blocked != "":
			want[m.Name] = true
		}
	}
	got := map[string]bool{}
	for _, b := range plan.Blocked {
		got[b.Name] = true
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("Blocked %v, want the members %v", plan.Blocked, slices.Sorted(maps.Keys(want)))
	}
	unblockedAdmitted := slices.ContainsFunc(plan.Admitted, func(name string) bool {
		i := slices.IndexFunc(members, func(m Member) bool { return m.Name == name })
		return members[i].Blocked == ""
	})
	if wantStuck := len(want) > 0 && !unblockedMoving && !unblockedAdmitted; plan.Stuck != wantStuck {
		return fmt.Errorf("Stuck %v, want %v", plan.Stuck, wantStuck)
	}
	return nil
}
