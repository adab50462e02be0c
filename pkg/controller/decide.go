package controller

import (
	"fmt"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// The session sync reads, decides and acts (sync.go):
//
//  1. read: sessionController.view reads, once, everything the decision
//     needs: the session, its profile and Deployment from the caches, the
//     profile's plan and policy through rolloutView, the revisions the
//     session may mount, its Secrets and ConfigMaps, and where it stands in
//     the ledger of moves. That is a sessionView.
//  2. decide: decideSession, here, is a function of the sessionView alone,
//     in the pkg/rollout style: no client, queue, clock or state. It returns
//     one sessionDecision: what to do with the Deployment (leave it, create
//     it, write it, or look for it with a live read), the desired
//     Deployment, built once, the move it asks the ledger for, the requeue.
//  3. act: sessionController.act carries the decision out. When the world
//     answers something the decision could not know (the ledger refuses the
//     move, a live read or a create finds the Deployment), it reads that
//     into the view and decides again. The status is built in one pass from
//     the last decision and what its write returned (sessionStatusOf).

// sessionView is what a session's decision reads: a snapshot taken at the
// start of the sync, never changed by the decision.
type sessionView struct {
	key     string
	session *gamesv1.GameSession
	now     time.Time

	// profile is nil when the cache does not hold it, or the session may
	// not use it (refusal says why).
	profile         *corev1.ConfigMap
	refusal         string
	profileSelector string // for the message of a missing profile
	ref             string // the profile as the session names it (refOf)

	// The profile's rollout, as the profile controller shows it; zero
	// without a profile.
	target    string // the hash of the profile's current content
	policy    rollout.Policy
	policyErr error
	latest    *profilePlan // the profile's latest plan, whatever its target
	plan      *profilePlan // its plan towards target under policy, nil if none yet
	// stored is what the ProfileRollout remembers of the rollout towards
	// target: halted, and since when it runs.
	stored rollout.Memory
	// available holds, by hash, whether a revision the decision may mount
	// exists and is not being deleted: target's, the Deployment's, the
	// plan's stable one.
	available map[string]bool
	// changeDelay is how much longer the profile-change delay delays the
	// change, changeDelayed whether it does.
	changeDelay   time.Duration
	changeDelayed bool

	// deployment is the session's Deployment as the cache or a live read
	// (live) shows it; nil for none.
	deployment *appsv1.Deployment
	live       bool
	// rolled is the revision of the profile the Deployment runs, "" if none.
	rolled string
	// mounted is the revision of the profile its profile volume mounts,
	// which is rolled unless a hand edit took the pod template's hash
	// annotation away from it: the pods run it all the same.
	mounted string
	// deadlineExceeded: the Deployment controller gave up on the
	// Deployment's current template (caches.progressDeadlineExceeded, as
	// the profile sync counts it).
	deadlineExceeded bool
	// mayRunUncached: the cache shows no Deployment, but the session may
	// have one (mayRunUncached); looked: a live read found none.
	mayRunUncached, looked bool

	// inputs are the kinds of referenced input; have and want the sets the
	// Deployment runs with and those the caches say it is to
	// (sessionInputs); digestsAdopted: have's digest was made under a key
	// the controller no longer holds, and was taken to stand for want.
	inputs         []input
	have, want     inputSets
	digestsAdopted bool
	inputsErr      error
	// inputChangeSeen is when the change to want was first seen; zero if
	// it was not.
	inputChangeSeen time.Time
	// member is the session's name in its profile's rollout, and reads the
	// objects it wants to run with and their digests: what the canaries
	// of rotations are picked by (inputcanary.go).
	member string
	reads  []inputRead
	// permitted counts the sessions that may use the profile: the base of
	// a paced policy's percentages. Read only when the decision needs it.
	permitted int

	// The session in the ledger of moves: whether it has a place of its
	// profile, how many of the profile's input moves failed, whether an
	// input move to want would be granted now, the budget as text.
	hasProfilePlace   bool
	stalledInProfile  int
	inputMoveWouldFit bool
	budget            budgetShare
	// refused are the kinds of move the ledger refused this sync, and by
	// which limit.
	refused map[moveKind]ledgerRefusal

	// delivery is what live delivery (live.go) reads of the session.
	delivery deliveryView
}

// deliveryView is how a session's content is delivered, as a sync reads
// it: live or by restart, and for live its live profile.
type deliveryView struct {
	// wantsLive: the profile's policy delivers its content live; runsLive:
	// the Deployment's pod template carries the live delivery label, and
	// its live profile's revision is then rolled and mounted. A session
	// without a Deployment runs as it wants.
	wantsLive, runsLive bool
	// liveProfile is the cached live profile (nil for none), this sync's
	// write of it (written, which the cache does not show yet), or one a
	// live read found (uncached). taken: a ConfigMap of its name that
	// another controls (liveProfileTaken).
	liveProfile *corev1.ConfigMap
	written     *corev1.ConfigMap
	uncached    bool
	taken       bool
	// held is the content the live profile holds of a session that runs
	// live: rolled and mounted, unless a hand edit took the profile volume
	// away from it; acks, where it stands with the session's pods.
	held string
	acks liveDelivery
}

// ledgerRefusal says which of the ledger's limits refused a move.
type ledgerRefusal int

const (
	notRefused ledgerRefusal = iota
	refusedByCluster
	refusedByProfile
)

// sessionAction is what a decision does with the session's Deployment.
type sessionAction int

const (
	// actLeave leaves the Deployment as it is: blocked by another
	// Deployment of its name, nothing to mount yet, or a change that waits
	// for the revision on its way.
	actLeave sessionAction = iota
	// actLookLive asks for a live read of the Deployment: the cache shows
	// none, and the session may run one all the same.
	actLookLive
	// actCreate creates the desired Deployment.
	actCreate
	// actWrite writes what differs between the Deployment and the desired
	// one (nothing, if nothing does).
	actWrite
)

// leaveReason says why a decision leaves the Deployment as it is.
type leaveReason int

const (
	leaveNone leaveReason = iota
	leaveBlocked
	leaveProfileMissing
	leaveNothingToMount
	leaveForRevision
	// leaveLiveTaken: the content is to be delivered live, and another
	// controls the ConfigMap of the live profile's name.
	leaveLiveTaken
)

// sessionDecision is the one value a session's decision returns.
type sessionDecision struct {
	action sessionAction
	why    leaveReason
	// choice is the revision the Deployment is to run, and why when not
	// the profile's current one.
	choice revisionChoice
	// desired is the Deployment the session is to have (actCreate and
	// actWrite).
	desired *appsv1.Deployment
	// move is the move the write makes, which the ledger must grant first;
	// nil for none. profileLimit is the profile's limit on it.
	move         *move
	profileLimit int
	// inputs is what the decision found of the session's Secrets and
	// ConfigMaps.
	inputs inputDecision
	// requeueAfter asks for another sync after that long; planNeeded for a
	// profile sync.
	requeueAfter time.Duration
	planNeeded   bool
}

// decideSession decides what becomes of a session's Deployment. It reads
// nothing but v.
func decideSession(v *sessionView) sessionDecision {
	var d sessionDecision
	observed := v.deployment
	if observed != nil && blocks(observed, v.session) {
		d.action, d.why, d.requeueAfter = actLeave, leaveBlocked, blockedRecheck(observed, v.session)
		return d
	}
	if v.profile == nil {
		d = decideWithoutProfile(v)
		d.requeueAfter = earliest(d.requeueAfter, v.liveDeadlineRecheck())
		return d
	}
	base := v.deploymentWithoutInputs(v.target)
	d.choice = v.deliveryOf(v.chooseRevision(base))
	d.planNeeded, d.requeueAfter = d.choice.planNeeded, d.choice.requeueAfter
	d.requeueAfter = earliest(d.requeueAfter, v.liveDeadlineRecheck())
	if v.live {
		// No event is sure to announce what becomes of a Deployment only a
		// live read shows: look again.
		d.requeueAfter = uncachedRecheckInterval
	}
	switch {
	case d.choice.hash == "" && observed == nil && v.mayRunUncached && !v.looked:
		// With nothing to mount, no create would find the Deployment the
		// session ran before it left the cache (its label removed): look.
		d.action = actLookLive
		return d
	case d.choice.hash == "":
		// Nothing to mount yet: the profile sync is creating the revision,
		// or planning the rollout, and either queues the session again.
		d.action, d.why = actLeave, leaveNothingToMount
		return d
	case d.choice.waitForRevision:
		d.action, d.why = actLeave, leaveForRevision
		return d
	case d.choice.live && v.delivery.taken:
		d.action, d.why = actLeave, leaveLiveTaken
		d.requeueAfter = earliest(d.requeueAfter, liveTakenRecheck(v.delivery.liveProfile, v.session))
		return d
	case observed == nil:
		d.action = actCreate
		d.desired, d.inputs = v.withInputsToRun(v.withContent(base, d.choice), true)
		return d
	}
	d.action = actWrite
	if running := v.mounted; running != "" && (running != v.target || v.delivery.runsLive != v.delivery.wantsLive) &&
		d.choice.hash == v.target && d.choice.live == v.delivery.wantsLive {
		// A move of a running session, which the ledger must grant: the
		// cluster-wide budget, and under a paced policy the profile's
		// max-rolling, which the moves for new inputs count in too. Refused,
		// its own spec is still applied, with the revision it runs.
		switch v.refused[profileMove] {
		case notRefused:
			d.move, d.profileLimit = v.profileMove()
		case refusedByProfile:
			d.choice = waitingChoice(rollout.Plan{}, v.ref, running, v.target, v.policy)
			d.choice.live = v.delivery.runsLive
		default:
			d.choice = revisionChoice{hash: running, live: v.delivery.runsLive, reason: gamesv1.ReasonWaitingForClusterBudget,
				message: fmt.Sprintf(MessageWaitingForClusterBudget, RevisionName(v.ref, running),
					RevisionName(v.ref, v.target), v.budget)}
		}
	}
	d.desired, d.inputs = v.withInputsToRun(v.withContent(base, d.choice), true)
	if d.move == nil && d.inputs.move != nil {
		d.move, d.profileLimit = d.inputs.move, d.inputs.profileLimit
	}
	if wait := d.inputs.wait; wait != nil && wait.requeueAfter > 0 && (d.requeueAfter == 0 || wait.requeueAfter < d.requeueAfter) {
		d.requeueAfter = wait.requeueAfter
	}
	return d
}

// profileMove is the session's move to the profile's current content, and
// the profile's limit on it: the max-rolling its plan resolved, when the
// policy is paced.
func (v *sessionView) profileMove() (*move, int) {
	m := &move{kind: profileMove, to: v.target, live: v.delivery.wantsLive, named: profileKey(v.profile.Namespace, v.profile.Name)}
	if v.policyErr != nil || v.policy.Unpaced() || v.plan == nil {
		return m, unlimited
	}
	m.profile = profileKey(v.profile.Namespace, v.profile.Name)
	return m, v.plan.plan.MaxRolling
}

// decideWithoutProfile decides for a session whose profile is missing. A
// running game server is never torn down or changed for a missing profile:
// its Deployment keeps the revision it runs. The session's own spec (a
// scale, say) is still applied when that revision exists, since its pods can
// then be recreated; otherwise the Deployment is left exactly as it is.
func decideWithoutProfile(v *sessionView) sessionDecision {
	// A live session's pods read its live profile, which keeps its
	// content whatever becomes of the profile and its revisions.
	if v.rolled == "" || !v.delivery.runsLive && !v.available[v.rolled] {
		return sessionDecision{action: actLeave, why: leaveProfileMissing}
	}
	d := sessionDecision{action: actWrite, choice: revisionChoice{hash: v.rolled, live: v.delivery.runsLive}}
	d.desired, d.inputs = v.withInputsToRun(v.withContent(v.deploymentWithoutInputs(v.rolled), d.choice), true)
	return d
}

// deliveryOf is the choice with how its content is to be delivered: the
// way the profile's policy asks for when the session moves to the
// profile's current content in that way (a choice with no reason to wait),
// else the way it runs now. A change of delivery is a move like a change
// of content, under the same policy: it restarts the game servers once.
func (v *sessionView) deliveryOf(choice revisionChoice) revisionChoice {
	choice.live = v.delivery.runsLive
	if choice.hash == v.target && choice.reason == "" {
		choice.live = v.delivery.wantsLive
	}
	return choice
}

// withContent is base delivering choice's content: mounting its revision,
// or the session's live profile.
func (v *sessionView) withContent(base *appsv1.Deployment, choice revisionChoice) *appsv1.Deployment {
	if choice.live {
		return withLiveDelivery(base, v.session.Name)
	}
	return withRevision(base, v.ref, choice.hash)
}

// liveDeadlineRecheck is when to look again at a live delivery still
// pending, 0 for none: no event marks the deadline of a delivery nobody
// acknowledges, and its move holds a place until then, whether or not the
// profile is still there.
func (v *sessionView) liveDeadlineRecheck() time.Duration {
	if v.delivery.runsLive && v.delivery.acks.progress == livePending && !v.delivery.acks.deadline.IsZero() {
		return v.delivery.acks.deadline.Sub(v.now)
	}
	return 0
}

// earliest is the shorter of two requeues, 0 being none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// blockedRecheck is when to look again at a Deployment of the session's
// name that the session cannot use: no event may announce its end. One
// being deleted, or left by an earlier session of that name, goes by
// itself, soon; a foreign one only when a user deletes it.
func blockedRecheck(d *appsv1.Deployment, session *gamesv1.GameSession) time.Duration {
	if d.DeletionTimestamp != nil || controlledByEarlierSession(d, session) {
		return deletionRecheckInterval
	}
	return uncachedRecheckInterval
}

// chooseRevision returns the revision the session's Deployment is to mount:
// the profile's current one, unless
//   - its revision is not available yet, or cannot be created: the session
//     keeps the revision it runs, or, with none, waits;
//   - the profile's rollout has not given the session its turn (see turnOf);
//   - the change waits out the fan-out delay.
//
// In each case a change of the session's own spec is still applied, with the
// revision it keeps. base is the desired Deployment at the target, without
// its inputs.
func (v *sessionView) chooseRevision(base *appsv1.Deployment) revisionChoice {
	rolled, target := v.rolled, v.target
	if rolled == target && v.delivery.runsLive == v.delivery.wantsLive {
		return revisionChoice{hash: target}
	}
	targetRevision := RevisionName(v.ref, target)
	if !v.available[target] {
		if rolled == "" && v.deployment != nil {
			// Its profile volume was edited away from the revision its
			// annotation names: put that one back meanwhile.
			if hash := v.deployment.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; hash != "" && v.available[hash] {
				rolled = hash
			} else if v.delivery.runsLive {
				// Or the live profile, which holds its content still.
				rolled = v.delivery.held
			}
		}
		choice := revisionChoice{hash: rolled, reason: gamesv1.ReasonRevisionPending, planNeeded: true,
			message: fmt.Sprintf(MessageRevisionPending, targetRevision)}
		if pp := v.latest; pp != nil && pp.hash == target {
			if st, ok := pp.unavailableIn[v.session.Namespace]; ok {
				choice.reason, choice.message = gamesv1.ReasonRevisionUnavailable, st.message
				return choice
			}
		}
		// A change of the session's own spec waits for the revision, which
		// is on its way, when the session moves at once: one write takes
		// both along, and the game servers restart once, not twice. The
		// revision's arrival queues the session (profileFanOut.revisionCreated).
		if v.policyErr == nil && v.policy.Unpaced() && rolled != "" && v.needsWriteAt(base, rolled) {
			choice.waitForRevision = true
		}
		return choice
	}
	if choice, move := v.turnOf(); !move {
		return choice
	}
	// The fan-out delay delays the move, unless the Deployment needs a
	// write anyway (the session's spec changed): that write takes the new
	// profile along, so the game servers restart once, not twice.
	if rolled != "" && v.changeDelayed && !v.needsWriteAt(base, rolled) {
		return revisionChoice{hash: rolled, reason: gamesv1.ReasonWaitingForTurn, requeueAfter: v.changeDelay,
			message: fmt.Sprintf(MessageChangeDelayed, RevisionName(v.ref, rolled), targetRevision)}
	}
	return revisionChoice{hash: target}
}

// needsWriteAt reports whether the Deployment needs a write to stay on
// revision hash: the session's own spec, or its inputs, changed. The record
// of the digest key alone does not count: its write restarts nothing, and
// must take no move along ahead of its turn.
func (v *sessionView) needsWriteAt(base *appsv1.Deployment, hash string) bool {
	desired, _ := v.withInputsToRun(v.withContent(base, revisionChoice{hash: hash, live: v.delivery.runsLive}), false)
	if observed := v.deployment; observed != nil {
		recorded, ok := observed.Labels[gamesv1.SecretsKeyLabel]
		if _, wanted := desired.Labels[gamesv1.SecretsKeyLabel]; ok || wanted {
			desired.Labels = maps.Clone(desired.Labels)
			delete(desired.Labels, gamesv1.SecretsKeyLabel)
			if ok {
				desired.Labels[gamesv1.SecretsKeyLabel] = recorded
			}
		}
	}
	return deploymentNeedsUpdate(v.deployment, desired)
}

// deploymentWithoutInputs is NewDeployment with the progress deadline of the
// profile's rollout policy, before its referenced inputs. Without the
// profile, or with a policy that does not parse, the controller cannot know
// the deadline: the session's own, if it sets one, or else whatever the
// Deployment has, stays.
func (v *sessionView) deploymentWithoutInputs(hash string) *appsv1.Deployment {
	d := NewDeployment(v.session, hash)
	if v.session.Spec.ProgressDeadlineSeconds != nil {
		return d
	}
	if v.profile == nil || v.policyErr != nil {
		d.Spec.ProgressDeadlineSeconds = nil
		return d
	}
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](defaultProgressDeadlineSeconds)
	return withProgressDeadline(d, v.session, v.policy.ProgressDeadlineSeconds)
}

// withRevision is d mounting revision hash of the profile ref: a copy that
// shares all but the template's annotations (and volumes, for another
// revision) with d,
// so that a choice between two revisions builds and defaults the pod
// template once.
func withRevision(d *appsv1.Deployment, ref, hash string) *appsv1.Deployment {
	t := &d.Spec.Template
	out := *d
	// The annotations are copied whatever the revision: the inputs go
	// there, and d stays as it was for the next choice.
	out.Spec.Template.Annotations = maps.Clone(t.Annotations)
	if t.Annotations[gamesv1.ProfileHashAnnotation] == hash {
		return &out
	}
	out.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] = hash
	out.Spec.Template.Spec.Volumes = slices.Clone(t.Spec.Volumes)
	if i := profileVolumeIndex(&out.Spec.Template); i >= 0 {
		volume := out.Spec.Template.Spec.Volumes[i].DeepCopy()
		volume.ConfigMap.Name = RevisionName(ref, hash)
		out.Spec.Template.Spec.Volumes[i] = *volume
	}
	return &out
}

// rolloutInProgress reports whether the profile's latest plan has not
// settled: the session's syncs then ask for new plans.
func (v *sessionView) rolloutInProgress() bool {
	pp := v.latest
	return pp == nil || pp.hash != v.target || !pp.plan.Settled
}

// sessionStatusOf is the session's new status, built in one pass from the
// decision carried out: current is the Deployment as the write left it
// (observed if none was made), invalid the API server's refusal of the
// write. timedOut tells a Deployment whose rollout timed out.
func sessionStatusOf(v *sessionView, d *sessionDecision, current *appsv1.Deployment, invalid error,
	timedOut func(*appsv1.Deployment) bool) *sessionStatus {
	s := newSessionStatus(v.session)
	s.deadlineExceeded = timedOut
	observed := v.deployment
	resolved := invalid == nil && (d.action == actCreate || d.action == actWrite) || d.why == leaveForRevision
	switch {
	case v.refusal != "":
		s.referenceRefused(v.refusal)
	case v.profile == nil:
		s.profileNotFound(v.profileSelector)
	case resolved:
		s.profileResolved(d.choice.hash, v.target)
	default:
		// Until the Deployment carries it, the profile is only found.
		s.profileFound(v.target)
	}
	switch {
	case d.why == leaveBlocked:
		s.blockedBy(observed)
	case v.profile == nil && (d.action == actLeave || invalid != nil):
		s.profileMissing(observed)
	case v.profile == nil:
		s.deployment(current)
		s.profileGone()
	case d.why == leaveNothingToMount:
		s.nothingToMount(observed, d.choice)
	case d.why == leaveForRevision:
		s.deployment(observed)
		s.waiting(d.choice.reason, d.choice.message)
	case d.why == leaveLiveTaken:
		s.liveProfileBlocked(observed, v.delivery.liveProfile)
	case d.action == actCreate && invalid != nil:
		s.deploymentInvalid(invalid)
	case invalid != nil:
		s.leftAsIs(observed, v.target)
		s.deploymentInvalid(invalid)
	default:
		s.deployment(current)
		switch {
		case d.choice.live && current != nil:
			s.deliveredLive(v, d.choice)
		case d.choice.hash == v.target && d.choice.live == v.delivery.wantsLive:
			s.upToDate(v.target)
		default:
			s.waiting(d.choice.reason, d.choice.message)
		}
	}
	return s
}
