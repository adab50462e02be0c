package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// turnOf decides whether a session moves to its profile's current content,
// target, now: at once when the policy is unpaced, else as the profile's
// plan for that content and that policy says. rolled is the content the
// session's Deployment runs ("" if it has none of this profile). When the
// session does not move, the choice says what it runs meanwhile and why.
//
// A session with no plan to go by (the controller has just started, the
// profile or its policy just changed) keeps what it runs and asks for one:
// the plan queues it. A session whose Deployment runs no revision of this
// profile (a new session, or one whose profileRef changed) starts on the
// stable revision while the rollout is unproven (canary, paused, halted), so
// that neither bypasses the gate.
func (c *Controller) turnOf(session *gamesv1.GameSession, profile *corev1.ConfigMap, target, rolled string,
	hasDeployment bool) (revisionChoice, bool) {
	policy, err := c.policyOf(profile)
	key := profileKey(profile.Namespace, profile.Name)
	var pp *profilePlan
	if err == nil && policy.Unpaced() {
		// Even without a policy, a halt holds until the content changes:
		// removing the brake's annotations must not move every session onto
		// the content that failed. Otherwise unpaced sessions need no plan;
		// without one (a restart), the ProfileRollout says whether halted.
		pp = c.plans.latest(key)
		haltedPlan := pp != nil && pp.hash == target && pp.plan.Phase == rollout.PhaseHalted
		haltedRecord := pp == nil && memoryOf(c.storedRollout(profile), target).Halted
		if !haltedPlan && !haltedRecord {
			return revisionChoice{}, true
		}
	} else {
		pp = c.plans.get(key, target, policy.String())
	}
	if pp == nil {
		return revisionChoice{hash: rolled, reason: gamesv1.ReasonWaitingForTurn, planNeeded: true,
			message: fmt.Sprintf(MessageWaitingForPlan, RevisionName(profile.Name, target), profile.Name)}, false
	}
	if !hasDeployment || rolled == "" {
		stable := pp.plan.StableHash
		if pp.plan.NewSessionsOnTarget() || stable == "" || stable == target ||
			!c.revisionAvailable(profile.Namespace, profile.Name, stable) {
			return revisionChoice{}, true
		}
		return waitingChoice(pp.plan, profile.Name, stable, target), false
	}
	if pp.plan.Admits(session.Name) {
		return revisionChoice{}, true
	}
	return waitingChoice(pp.plan, profile.Name, rolled, target), false
}

// waitingChoice is the choice of a session that runs hash while the rollout
// of profile to target has not reached it. Its message names no counts, so a
// session is written when it starts waiting and when the rollout pauses,
// halts or is held up, not at every step of the rollout.
func waitingChoice(plan rollout.Plan, profile, hash, target string) revisionChoice {
	running, targetRevision := RevisionName(profile, hash), RevisionName(profile, target)
	choice := revisionChoice{hash: hash}
	switch {
	case plan.Phase == rollout.PhaseHalted:
		choice.reason, choice.message = gamesv1.ReasonRolloutHalted, fmt.Sprintf(MessageSessionHalted, running, profile, targetRevision)
	case plan.Phase == rollout.PhasePaused:
		choice.reason, choice.message = gamesv1.ReasonRolloutPaused, fmt.Sprintf(MessageSessionPaused, running, profile, targetRevision)
	case plan.Stuck:
		choice.reason, choice.message = gamesv1.ReasonRolloutBlocked,
			fmt.Sprintf(MessageSessionHeldUp, running, profile, targetRevision, blockedList(plan.Blocked))
	default:
		choice.reason, choice.message = gamesv1.ReasonWaitingForTurn, fmt.Sprintf(MessageWaitingForTurn, running, profile, targetRevision)
	}
	return choice
}

// rolloutInProgress reports whether the profile's latest plan has not
// settled: its sessions' syncs then ask for new plans.
func (c *Controller) rolloutInProgress(profile *corev1.ConfigMap) bool {
	pp := c.plans.latest(profileKey(profile.Namespace, profile.Name))
	return pp == nil || pp.hash != c.profileHashes.hash(profile) || !pp.plan.Settled
}
