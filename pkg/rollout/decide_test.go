package rollout

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// fleet returns n members named gs-000, gs-001, ..., in name order. The first
// moved run the target revision "new"; of those, the first ready are Ready and
// the next failed are Failed. The others run "old".
func fleet(n, moved, ready, failed int) []Member {
	members := make([]Member, n)
	for i := range members {
		m := Member{Name: name(i), Hash: "old"}
		if i < moved {
			m.Hash, m.OnTarget = "new", true
			m.Ready = i < ready
			m.Failed = i >= ready && i < ready+failed
		}
		members[i] = m
	}
	return members
}

func name(i int) string { return fmt.Sprintf("gs-%03d", i) }

// span returns the names of fleet members from up to, but not including, to.
func span(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, name(i))
	}
	return out
}

// policy builds a policy from annotation-style values; maxFailed "" means no
// brake.
func policy(t *testing.T, maxRolling, canary, maxFailed string, paused bool) Policy {
	t.Helper()
	p := Policy{MaxRolling: mustParse(t, maxRolling), Canary: mustParse(t, canary), Paused: paused}
	if maxFailed != "" {
		p.MaxFailed = new(mustParse(t, maxFailed))
	}
	return p
}

func mustParse(t *testing.T, s string) intstr.IntOrString {
	t.Helper()
	v, err := ParseIntOrPercent(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name    string
		policy  Policy
		members []Member
		want    Plan
	}{
		{
			name:    "unpaced admits all",
			policy:  DefaultPolicy(),
			members: fleet(5, 0, 0, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(0, 5), Total: 5,
				MaxRolling: 5, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "unpaced admits the rest",
			policy:  DefaultPolicy(),
			members: fleet(5, 2, 1, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(2, 5), Total: 5, Moved: 2, Ready: 1, Rolling: 1,
				MaxRolling: 5, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "zero-value policy moves one at a time",
			policy:  Policy{},
			members: fleet(5, 0, 0, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(0, 1), Total: 5,
				MaxRolling: 1, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "budget 10% of 200 admits 20",
			policy:  policy(t, "10%", "0", "", false),
			members: fleet(200, 0, 0, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(0, 20), Total: 200,
				MaxRolling: 20, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "budget spent admits none",
			policy:  policy(t, "10%", "0", "", false),
			members: fleet(200, 20, 0, 0),
			want: Plan{Phase: PhaseRolling, Total: 200, Moved: 20, Rolling: 20,
				MaxRolling: 20, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "5 Ready free 5 slots",
			policy:  policy(t, "10%", "0", "", false),
			members: fleet(200, 20, 5, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(20, 25), Total: 200, Moved: 20, Ready: 5, Rolling: 15,
				MaxRolling: 20, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "percentage rounding to 0 still admits one",
			policy:  policy(t, "10%", "0", "", false),
			members: fleet(5, 0, 0, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(0, 1), Total: 5,
				MaxRolling: 1, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "max-rolling above the total means all",
			policy:  policy(t, "50", "0", "", false),
			members: fleet(10, 0, 0, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(0, 10), Total: 10,
				MaxRolling: 10, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "canary moves first",
			policy:  policy(t, "100%", "1", "", false),
			members: fleet(10, 0, 0, 0),
			want: Plan{Phase: PhaseCanary, Admitted: span(0, 1), Total: 10,
				MaxRolling: 10, Canary: 1, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "the rest wait for the canary to be Ready",
			policy:  policy(t, "100%", "1", "", false),
			members: fleet(10, 1, 0, 0),
			want: Plan{Phase: PhaseCanary, Total: 10, Moved: 1, Rolling: 1,
				MaxRolling: 10, Canary: 1, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "a Ready canary releases the rest",
			policy:  policy(t, "100%", "1", "", false),
			members: fleet(10, 1, 1, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(1, 10), Total: 10, Moved: 1, Ready: 1,
				MaxRolling: 10, Canary: 1, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "canary percentage rounds up",
			policy:  policy(t, "100%", "5%", "", false),
			members: fleet(30, 0, 0, 0),
			want: Plan{Phase: PhaseCanary, Admitted: span(0, 2), Total: 30,
				MaxRolling: 30, Canary: 2, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "canaries move within the budget",
			policy:  policy(t, "1", "3", "", false),
			members: fleet(30, 0, 0, 0),
			want: Plan{Phase: PhaseCanary, Admitted: span(0, 1), Total: 30,
				MaxRolling: 1, Canary: 3, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "canary above the total means all",
			policy:  policy(t, "100%", "50", "", false),
			members: fleet(4, 0, 0, 0),
			want: Plan{Phase: PhaseCanary, Admitted: span(0, 4), Total: 4,
				MaxRolling: 4, Canary: 4, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "a failed canary holds the rollout without a brake",
			policy:  policy(t, "100%", "2", "", false),
			members: fleet(10, 2, 1, 1),
			want: Plan{Phase: PhaseCanary, Total: 10, Moved: 2, Ready: 1, Rolling: 1, Failed: 1,
				MaxRolling: 10, Canary: 2, MaxFailed: -1, StableHash: "old",
				Blocked: []BlockedMember{{Name: "gs-001", Reason: ReasonFailed}}, Stuck: true},
		},
		{
			name:    "brake 0 halts on the first failure",
			policy:  policy(t, "100%", "0", "0", false),
			members: fleet(20, 10, 5, 1),
			want: Plan{Phase: PhaseHalted, Total: 20, Moved: 10, Ready: 5, Rolling: 5, Failed: 1,
				MaxRolling: 20, MaxFailed: 0, StableHash: "old"},
		},
		{
			name:    "brake 0 without failures rolls",
			policy:  policy(t, "100%", "0", "0", false),
			members: fleet(20, 10, 5, 0),
			want: Plan{Phase: PhaseRolling, Admitted: span(10, 20), Total: 20, Moved: 10, Ready: 5, Rolling: 5,
				MaxRolling: 20, MaxFailed: 0, StableHash: "old"},
		},
		{
			name:    "brake 10% tolerates 2 failures of 20 moved",
			policy:  policy(t, "100%", "0", "10%", false),
			members: fleet(40, 20, 10, 2),
			want: Plan{Phase: PhaseRolling, Admitted: span(20, 40), Total: 40, Moved: 20, Ready: 10, Rolling: 10, Failed: 2,
				MaxRolling: 40, MaxFailed: 2, StableHash: "old",
				Blocked: []BlockedMember{{Name: "gs-010", Reason: ReasonFailed}, {Name: "gs-011", Reason: ReasonFailed}}},
		},
		{
			name:    "brake 10% halts at 3 failures of 20 moved",
			policy:  policy(t, "100%", "0", "10%", false),
			members: fleet(40, 20, 10, 3),
			want: Plan{Phase: PhaseHalted, Total: 40, Moved: 20, Ready: 10, Rolling: 10, Failed: 3,
				MaxRolling: 40, MaxFailed: 2, StableHash: "old"},
		},
		{
			name:    "brake 10% of 9 moved rounds down to 0",
			policy:  policy(t, "100%", "0", "10%", false),
			members: fleet(40, 9, 0, 1),
			want: Plan{Phase: PhaseHalted, Total: 40, Moved: 9, Rolling: 9, Failed: 1,
				MaxRolling: 40, MaxFailed: 0, StableHash: "old"},
		},
		{
			name:   "failures on the old revision do not count",
			policy: policy(t, "100%", "0", "0", false),
			members: []Member{
				{Name: "a", Hash: "old", Failed: true},
				{Name: "b", Hash: "new", OnTarget: true, Ready: true},
			},
			want: Plan{Phase: PhaseRolling, Admitted: []string{"a"}, Total: 2, Moved: 1, Ready: 1,
				MaxRolling: 2, MaxFailed: 0, StableHash: "old"},
		},
		{
			name:    "pause admits nothing",
			policy:  policy(t, "100%", "0", "", true),
			members: fleet(10, 3, 3, 0),
			want: Plan{Phase: PhasePaused, Total: 10, Moved: 3, Ready: 3,
				MaxRolling: 10, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "halt beats pause",
			policy:  policy(t, "100%", "0", "0", true),
			members: fleet(10, 3, 2, 1),
			want: Plan{Phase: PhaseHalted, Total: 10, Moved: 3, Ready: 2, Rolling: 1, Failed: 1,
				MaxRolling: 10, MaxFailed: 0, StableHash: "old"},
		},
		{
			name:    "malformed policy pauses",
			policy:  Policy{MaxRolling: intstr.FromString("ten"), Canary: intstr.FromInt32(0)},
			members: fleet(5, 0, 0, 0),
			want: Plan{Phase: PhasePaused, Total: 5,
				MaxRolling: 1, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "negative policy value pauses",
			policy:  Policy{MaxRolling: intstr.FromString("100%"), Canary: intstr.FromInt32(-1)},
			members: fleet(5, 0, 0, 0),
			want: Plan{Phase: PhasePaused, Total: 5,
				MaxRolling: 5, MaxFailed: -1, StableHash: "old"},
		},
		{
			name:    "complete",
			policy:  DefaultPolicy(),
			members: fleet(10, 10, 10, 0),
			want: Plan{Phase: PhaseComplete, Total: 10, Moved: 10, Ready: 10,
				MaxRolling: 10, MaxFailed: -1, Settled: true},
		},
		{
			name:    "halt beats complete and pause: every session moved, too many failed",
			policy:  policy(t, "1", "0", "0", true),
			members: fleet(10, 10, 5, 5),
			want: Plan{Phase: PhaseHalted, Total: 10, Moved: 10, Ready: 5, Rolling: 5, Failed: 5,
				MaxRolling: 1, MaxFailed: 0},
		},
		{
			name:   "complete but held up: the last moved session is paused",
			policy: policy(t, "1", "0", "", false),
			members: []Member{
				{Name: "a", Hash: "new", OnTarget: true, Ready: true},
				{Name: "b", Hash: "new", OnTarget: true, Blocked: "DeploymentPaused"},
			},
			want: Plan{Phase: PhaseComplete, Total: 2, Moved: 2, Ready: 1, Rolling: 1, MaxRolling: 1, MaxFailed: -1,
				Blocked: []BlockedMember{{Name: "b", Reason: "DeploymentPaused"}}, Stuck: true},
		},
		{
			name:    "complete beats pause",
			policy:  policy(t, "1", "0", "", true),
			members: fleet(10, 10, 10, 0),
			want: Plan{Phase: PhaseComplete, Total: 10, Moved: 10, Ready: 10,
				MaxRolling: 1, MaxFailed: -1, Settled: true},
		},
		{
			name:    "no members",
			policy:  policy(t, "10%", "3", "0", false),
			members: nil,
			want:    Plan{Phase: PhaseComplete, Settled: true},
		},
		{
			name:    "no members, unpaced",
			policy:  DefaultPolicy(),
			members: []Member{},
			want:    Plan{Phase: PhaseComplete, MaxFailed: -1, Settled: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.policy, tc.members, Memory{}, testNow)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decide(%v) =\n  %+v\nwant\n  %+v", tc.policy, got, tc.want)
			}
		})
	}
}

func TestDecideMovesInNameOrder(t *testing.T) {
	members := []Member{
		{Name: "gs-c", Hash: "old"},
		{Name: "gs-b", Hash: "new", OnTarget: true, Ready: true},
		{Name: "gs-aa", Hash: "old"},
		{Name: "gs-d", Hash: "old"},
		{Name: "gs-a", Hash: "old"},
	}
	before := slices.Clone(members)

	got := Decide(policy(t, "2", "0", "", false), members, Memory{}, testNow)

	if want := []string{"gs-a", "gs-aa"}; !slices.Equal(got.Admitted, want) {
		t.Errorf("Admitted = %q, want %q", got.Admitted, want)
	}
	if !slices.Equal(members, before) {
		t.Errorf("Decide modified its input:\n  %+v\nwas\n  %+v", members, before)
	}
}

func TestDecideStable(t *testing.T) {
	tests := []struct {
		name      string
		revisions []string // of members not on the target, named in order
		onTarget  int      // members on the target, after them
		want      string
	}{
		{"majority", []string{"r3", "r1", "r3", "r3"}, 0, "r3"},
		{"tie takes the smallest", []string{"r2", "r2", "r3", "r1", "r1"}, 0, "r1"},
		{"two-way tie", []string{"b", "a"}, 0, "a"},
		{"members on the target do not count", []string{"old"}, 5, "old"},
		{"unknown revisions do not count", []string{"", "", "", "a"}, 0, "a"},
		{"only unknown revisions", []string{"", ""}, 0, ""},
		{"everyone moved", nil, 3, ""},
	}
	for _, tc := range tests {
		var members []Member
		for i, rev := range tc.revisions {
			members = append(members, Member{Name: name(i), Hash: rev})
		}
		for i := range tc.onTarget {
			members = append(members, Member{Name: name(100 + i), Hash: "new", OnTarget: true})
		}
		if got := Decide(DefaultPolicy(), members, Memory{}, testNow).StableHash; got != tc.want {
			t.Errorf("%s: Stable = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPlanAdmits(t *testing.T) {
	members := fleet(10, 2, 0, 0)
	plan := Decide(policy(t, "5", "0", "", false), members, Memory{}, testNow)
	if want := span(2, 5); !slices.Equal(plan.Admitted, want) {
		t.Fatalf("Admitted = %q, want %q", plan.Admitted, want)
	}
	for i, m := range members {
		if got, want := plan.Admits(m.Name), i >= 2 && i < 5; got != want {
			t.Errorf("Admits(%q) = %v, want %v", m.Name, got, want)
		}
	}
	for _, other := range []string{"", "gs", "gs-0025", "gs-100"} {
		if plan.Admits(other) {
			t.Errorf("Admits(%q) = true for a name that is not a member", other)
		}
	}
	if (Plan{}).Admits("gs-000") {
		t.Error("the zero Plan admits a member")
	}
}

func TestPlanNewSessionsOnTarget(t *testing.T) {
	want := map[Phase]bool{
		PhaseComplete: true,
		PhaseRolling:  true,
		PhaseCanary:   false,
		PhasePaused:   false,
		PhaseHalted:   false,
	}
	for phase, onTarget := range want {
		if got := (Plan{Phase: phase}).NewSessionsOnTarget(); got != onTarget {
			t.Errorf("Phase %s: NewSessionsOnTarget() = %v, want %v", phase, got, onTarget)
		}
	}
}

// The example: a profile edited on Sunday, with a window on Monday
// from 03:00 to 04:00 and max-defer 2h. Monday's window spends an hour of
// max-defer, not the day that passed before it, so the busy session's match
// lives on; the next Monday's spends the rest as it closes, and the busy
// session moves as the third Monday's opens.
func TestDecideMaxDeferCountsTheOpenWindow(t *testing.T) {
	window, err := ParseWindow("Mon 03:00-04:00")
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t, "100%", "0", "", false)
	p.Window, p.MaxDefer = window, new(2*time.Hour)
	members := []Member{{Name: "busy", Hash: "old", Busy: true}, {Name: "idle", Hash: "old"}}
	sunday := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	memory := Memory{Started: sunday}
	thirdMonday := time.Date(2026, 12, 14, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		now      time.Time
		phase    Phase
		admitted []string
		deferred int
	}{
		{time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC), PhaseRolling, []string{"idle"}, 1},
		{time.Date(2026, 11, 30, 3, 59, 59, 0, time.UTC), PhaseRolling, []string{"idle"}, 1},
		{time.Date(2026, 12, 7, 3, 59, 59, 0, time.UTC), PhaseRolling, []string{"idle"}, 1},
		{time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC), PhaseWaiting, nil, 1},
		{thirdMonday.Add(-time.Second), PhaseWaiting, nil, 1},
		{thirdMonday, PhaseRolling, []string{"busy", "idle"}, 0},
	} {
		plan := Decide(p, members, memory, tc.now)
		if plan.Phase != tc.phase || !slices.Equal(plan.Admitted, tc.admitted) || plan.Deferred != tc.deferred {
			t.Errorf("at %v: phase %s, admitted %q, %d deferred; want %s, %q, %d",
				tc.now, plan.Phase, plan.Admitted, plan.Deferred, tc.phase, tc.admitted, tc.deferred)
		}
		if tc.deferred > 0 && !plan.DeferralEnds.Equal(thirdMonday) {
			t.Errorf("at %v: DeferralEnds %v, want %v", tc.now, plan.DeferralEnds, thirdMonday)
		}
	}

	// 90 minutes run out within the second Monday's window.
	p.MaxDefer = new(90 * time.Minute)
	secondMonday := time.Date(2026, 12, 7, 3, 30, 0, 0, time.UTC)
	if plan := Decide(p, members, memory, secondMonday.Add(-time.Second)); plan.Deferred != 1 || !plan.DeferralEnds.Equal(secondMonday) {
		t.Errorf("max-defer 90m: %d deferred until %v, want 1 until %v", plan.Deferred, plan.DeferralEnds, secondMonday)
	}
	if plan := Decide(p, members, memory, secondMonday); !plan.Admits("busy") {
		t.Errorf("max-defer 90m: at %v, busy not admitted: %+v", secondMonday, plan)
	}

	// Without a window, all the time since the start counts.
	p.Window = nil
	if plan := Decide(p, members, memory, sunday.Add(90*time.Minute)); !plan.Admits("busy") {
		t.Errorf("no window: 90m after the start, busy not admitted: %+v", plan)
	}
}
