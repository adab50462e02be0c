package controller

import (
	"fmt"
	"time"

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
// stable revision while the rollout is unproven (canary, paused, halted, or
// waiting for its window), so that neither bypasses the gate.
//
// A session whose Deployment runs another revision of the profile does not
// move while it is busy (deferral), nor outside the maintenance window: the
// session's own labels and the clock are checked here, at the moment of the
// write, and not only by the plan, which may be older than either.
func (v *sessionView) turnOf() (revisionChoice, bool) {
	policy, target, rolled, ref := v.policy, v.target, v.rolled, v.ref
	hasDeployment := v.deployment != nil
	var pp *profilePlan
	if v.policyErr == nil && policy.Unpaced() {
		// Even without a policy, a halt holds until the content changes:
		// removing the brake's annotations must not move every session onto
		// the content that failed. Otherwise unpaced sessions need no plan;
		// without one (a restart), the ProfileRollout says whether halted.
		pp = v.latest
		haltedPlan := pp != nil && pp.hash == target && pp.plan.Phase == rollout.PhaseHalted
		haltedRecord := pp == nil && v.stored.Halted
		if !haltedPlan && !haltedRecord {
			if choice, busy := v.deferred(); busy {
				return choice, false
			}
			return revisionChoice{}, true
		}
	} else {
		pp = v.plan
	}
	if pp == nil {
		return revisionChoice{hash: rolled, reason: gamesv1.ReasonWaitingForTurn, planNeeded: true,
			message: fmt.Sprintf(MessageWaitingForPlan, RevisionName(ref, target), ref)}, false
	}
	if !hasDeployment || rolled == "" {
		stable := pp.plan.StableHash
		if pp.plan.NewSessionsOnTarget() || stable == "" || stable == target || !v.available[stable] {
			return revisionChoice{}, true
		}
		return waitingChoice(pp.plan, ref, stable, target, policy), false
	}
	if stopped(pp.plan) {
		return waitingChoice(pp.plan, ref, rolled, target, policy), false
	}
	now := v.now
	if policy.Window != nil && !policy.Window.Open(now) {
		// The window closed since the plan: a new one says so to all.
		choice := waitingChoice(rollout.Plan{Phase: rollout.PhaseWaiting, Resumes: policy.Window.NextOpen(now)},
			ref, rolled, target, policy)
		choice.planNeeded = true
		return choice, false
	}
	if choice, busy := v.deferred(); busy {
		return choice, false
	}
	if pp.plan.Admits(memberName(v.profile.Namespace, v.key)) {
		return revisionChoice{}, true
	}
	return waitingChoice(pp.plan, ref, rolled, target, policy), false
}

// stopped reports whether the plan stops the rollout as a whole: halted,
// paused, or outside its window. A session then says so, busy or not.
func stopped(plan rollout.Plan) bool {
	switch plan.Phase {
	case rollout.PhaseHalted, rollout.PhasePaused, rollout.PhaseWaiting:
		return true
	}
	return false
}

// deferred returns the choice of a busy session whose move waits (until it is
// idle, or the policy's window has been open for max-defer since the rollout
// started: rollout.Policy.Defers), and whether it waits. A session without a
// Deployment running a revision of the profile has no match to protect from
// this rollout.
func (v *sessionView) deferred() (revisionChoice, bool) {
	rolled, now, policy := v.rolled, v.now, v.policy
	if !isBusy(v.session) || v.deployment == nil || rolled == "" {
		return revisionChoice{}, false
	}
	if v.delivery.runsLive && v.delivery.wantsLive && !policy.LiveDefersBusy {
		// A live change restarts nothing: no match to protect.
		return revisionChoice{}, false
	}
	running, targetRevision := RevisionName(v.ref, rolled), RevisionName(v.ref, v.target)
	choice := revisionChoice{hash: rolled, reason: gamesv1.ReasonSessionBusy}
	started := v.stored.Started
	if started.IsZero() {
		started = recordedStart(now) // the rollout begins: its plan records it
	}
	waits, ends := policy.Defers(started, now)
	switch {
	case !waits:
		return revisionChoice{}, false
	case ends.IsZero():
		choice.message = fmt.Sprintf(MessageSessionBusy, running, targetRevision, v.ref, "")
		return choice, true
	}
	choice.requeueAfter = ends.Sub(now)
	until := fmt.Sprintf(MessageBusyUntil, ends.UTC().Format(time.RFC3339), policy.MaxDefer)
	if policy.Window != nil {
		// Only the open window counts: say so, or a deadline days after the
		// start looks like a bug.
		until = fmt.Sprintf(MessageBusyUntilInWindow, ends.UTC().Format(time.RFC3339), policy.MaxDefer, policy.Window)
	}
	choice.message = fmt.Sprintf(MessageSessionBusy, running, targetRevision, v.ref, until)
	return choice, true
}

// isBusy reports whether the session carries the busy label.
func isBusy(session *gamesv1.GameSession) bool {
	return session.Labels[gamesv1.BusyLabel] == gamesv1.BusyLabelValue
}

// waitingChoice is the choice of a session that runs hash while the rollout
// of profile to target has not reached it. Its message names no counts, so a
// session is written when it starts waiting and when the rollout pauses,
// halts or is held up, not at every step of the rollout.
func waitingChoice(plan rollout.Plan, profile, hash, target string, policy rollout.Policy) revisionChoice {
	running, targetRevision := RevisionName(profile, hash), RevisionName(profile, target)
	choice := revisionChoice{hash: hash}
	switch {
	case plan.Phase == rollout.PhaseWaiting && policy.Window != nil:
		choice.reason, choice.message = gamesv1.ReasonOutsideWindow, fmt.Sprintf(MessageSessionOutsideWindow,
			running, profile, targetRevision, policy.Window, plan.Resumes.UTC().Format(time.RFC3339))
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
