package controller

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// decisionView is the view of a session of profile "classic" whose
// Deployment runs oldHash, the profile's content being newHash, both
// revisions available, under the default (unpaced) policy.
func decisionView(oldHash, newHash string) *sessionView {
	session := newSession(testNamespace, "s0", "classic")
	profile := newProfile(testNamespace, "classic", classicData)
	d := apiServerDeployment(session, oldHash)
	return &sessionView{
		key: sessionKey(session), session: session, now: lastTransition.Time,
		profile: profile, ref: "classic",
		target: newHash, policy: rollout.DefaultPolicy(),
		available:  map[string]bool{oldHash: true, newHash: true},
		deployment: d, rolled: oldHash, mounted: oldHash,
		have: inputSets{}, want: inputSets{},
		refused: map[moveKind]ledgerRefusal{},
	}
}

// paced gives a decision view a policy of max-rolling 1, and a plan that
// admits the session, whose max-rolling resolved to 2.
func paced(v *sessionView) {
	v.policy.MaxRolling = intstr.FromInt32(1)
	v.plan = &profilePlan{hash: v.target, policy: v.policy.String(), plan: rollout.Plan{Phase: rollout.PhaseRolling,
		MaxRolling: 2, Admitted: []string{memberName(v.profile.Namespace, v.key)}}}
	v.latest = v.plan
}

// handEditedHash gives a decision view a Deployment whose pod template's
// profile-hash annotation someone else edited: its volume still mounts the
// revision it ran (seed 100621731: the write that moved it to the target
// went past the cluster's budget per minute).
func handEditedHash(v *sessionView) {
	v.deployment.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] = "edited"
	v.rolled = rolledProfileHash(v.deployment, v.ref)
	v.mounted = mountedProfileHash(v.deployment, v.ref)
}

// decideSession reads nothing but its view, and changes nothing of it: two
// decisions on one view are the same, and the view is as it was.
func TestDecideSessionIsAFunctionOfItsView(t *testing.T) {
	const oldHash, newHash = "1111", "2222"
	views := map[string]*sessionView{
		"a move":            decisionView(oldHash, newHash),
		"on its revision":   decisionView(newHash, newHash),
		"without a profile": func() *sessionView { v := decisionView(oldHash, newHash); v.profile, v.target = nil, ""; return v }(),
		"without a Deployment": func() *sessionView {
			v := decisionView(oldHash, newHash)
			v.deployment, v.rolled = nil, ""
			return v
		}(),
	}
	for name, v := range views {
		t.Run(name, func(t *testing.T) {
			before := deepCopyView(v)
			first, second := decideSession(v), decideSession(v)
			if !reflect.DeepEqual(first, second) {
				t.Errorf("two decisions on one view differ:\n%+v\n%+v", first, second)
			}
			if !reflect.DeepEqual(before, v) {
				t.Error("the decision changed its view")
			}
		})
	}
}

// deepCopyView copies the objects a view points to, for comparing it
// before and after a decision.
func deepCopyView(v *sessionView) *sessionView {
	c := *v
	c.session = v.session.DeepCopy()
	c.profile = v.profile.DeepCopy()
	c.deployment = v.deployment.DeepCopy()
	c.available = map[string]bool{}
	for k, val := range v.available {
		c.available[k] = val
	}
	c.refused = map[moveKind]ledgerRefusal{}
	for k, val := range v.refused {
		c.refused[k] = val
	}
	return &c
}

// What each kind of view decides: the action, the revision, the move asked
// of the ledger.
func TestDecideSession(t *testing.T) {
	const oldHash, newHash = "1111", "2222"
	tests := []struct {
		name       string
		view       func(v *sessionView)
		action     sessionAction
		why        leaveReason
		hash       string
		reason     string
		move       *move
		requeueFor time.Duration
	}{
		{name: "an unpaced move asks the ledger for a profile move", view: func(*sessionView) {},
			action: actWrite, hash: newHash, move: &move{kind: profileMove, to: newHash, named: testNamespace + "/classic"}},
		{name: "refused by the ledger, the Deployment keeps its revision and its spec is applied",
			view:   func(v *sessionView) { v.refused[profileMove] = refusedByCluster },
			action: actWrite, hash: oldHash, reason: gamesv1.ReasonWaitingForClusterBudget},
		{name: "the hash annotation edited away from the mounted revision, the write to the target is a move all the same",
			view:   handEditedHash,
			action: actWrite, hash: newHash, move: &move{kind: profileMove, to: newHash, named: testNamespace + "/classic"}},
		{name: "the hash annotation edited away and the move refused, the Deployment keeps the revision it mounts",
			view:   func(v *sessionView) { handEditedHash(v); v.refused[profileMove] = refusedByCluster },
			action: actWrite, hash: oldHash, reason: gamesv1.ReasonWaitingForClusterBudget},
		{name: "a paced move asks for a place of the profile's max-rolling, as its plan resolved it",
			view:   paced,
			action: actWrite, hash: newHash,
			move: &move{kind: profileMove, to: newHash, profile: testNamespace + "/classic", named: testNamespace + "/classic"}},
		{name: "refused by the profile's max-rolling, the session waits its turn",
			view:   func(v *sessionView) { paced(v); v.refused[profileMove] = refusedByProfile },
			action: actWrite, hash: oldHash, reason: gamesv1.ReasonWaitingForTurn},
		{name: "the fan-out delay holds the move back",
			view:   func(v *sessionView) { v.changeDelayed, v.changeDelay = true, 2*time.Second },
			action: actWrite, hash: oldHash, reason: gamesv1.ReasonWaitingForTurn, requeueFor: 2 * time.Second},
		{name: "a Deployment of another owner blocks",
			view:   func(v *sessionView) { v.deployment.OwnerReferences = nil },
			action: actLeave, why: leaveBlocked, requeueFor: uncachedRecheckInterval},
		{name: "no Deployment cached, one may run: look",
			view: func(v *sessionView) {
				v.deployment, v.rolled, v.mayRunUncached, v.available[newHash] = nil, "", true, false
			},
			action: actLookLive, reason: gamesv1.ReasonRevisionPending},
		{name: "looked and found none, nothing to mount yet",
			view: func(v *sessionView) {
				v.deployment, v.rolled, v.mayRunUncached, v.looked, v.available[newHash] = nil, "", true, true, false
			},
			action: actLeave, why: leaveNothingToMount, reason: gamesv1.ReasonRevisionPending},
		{name: "a new session is created on the current revision",
			view:   func(v *sessionView) { v.deployment, v.rolled = nil, "" },
			action: actCreate, hash: newHash},
		{name: "the profile missing, the Deployment keeps its revision",
			view:   func(v *sessionView) { v.profile, v.target = nil, "" },
			action: actWrite, hash: oldHash},
		{name: "the profile missing and the revision gone: left as it is",
			view:   func(v *sessionView) { v.profile, v.target, v.available[oldHash] = nil, "", false },
			action: actLeave, why: leaveProfileMissing},
		{name: "a Deployment seen by a live read is looked at again",
			view:   func(v *sessionView) { v.live = true },
			action: actWrite, hash: newHash, move: &move{kind: profileMove, to: newHash, named: testNamespace + "/classic"}, requeueFor: uncachedRecheckInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := decisionView(oldHash, newHash)
			tt.view(v)
			d := decideSession(v)
			if d.action != tt.action || d.why != tt.why {
				t.Fatalf("action %d (why %d), want %d (why %d)", d.action, d.why, tt.action, tt.why)
			}
			if d.choice.hash != tt.hash || d.choice.reason != tt.reason {
				t.Errorf("choice %q (%s), want %q (%s)", d.choice.hash, d.choice.reason, tt.hash, tt.reason)
			}
			if !reflect.DeepEqual(d.move, tt.move) {
				t.Errorf("move %+v, want %+v", d.move, tt.move)
			}
			if want := 2; tt.move != nil && tt.move.profile != "" && d.profileLimit != want {
				t.Errorf("profile limit %d, want the plan's max-rolling %d", d.profileLimit, want)
			}
			if d.requeueAfter != tt.requeueFor {
				t.Errorf("requeue after %s, want %s", d.requeueAfter, tt.requeueFor)
			}
			if d.action == actCreate || d.action == actWrite {
				if got := d.desired.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; got != tt.hash {
					t.Errorf("desired Deployment runs %q, want %q", got, tt.hash)
				}
				if got := rolledProfileHash(d.desired, v.ref); got != tt.hash {
					t.Errorf("desired Deployment mounts the revision of %q, want %q", got, tt.hash)
				}
			}
		})
	}
}

// withRevision swaps the revision and leaves the Deployment it starts
// from as it was: a decision weighs two revisions on one build.
func TestWithRevisionLeavesItsBaseAsItWas(t *testing.T) {
	session := newSession(testNamespace, "s0", "classic")
	base := NewDeployment(session, "1111")
	before := base.DeepCopy()
	other := withRevision(base, "classic", "2222")
	if !reflect.DeepEqual(base, before) {
		t.Error("withRevision changed the Deployment it started from")
	}
	if got := rolledProfileHash(other, "classic"); got != "2222" {
		t.Errorf("withRevision mounts %q, want 2222", got)
	}
	if want := NewDeployment(session, "2222"); !reflect.DeepEqual(other.Spec.Template, want.Spec.Template) {
		t.Error("withRevision's template differs from one built for that revision")
	}
}
