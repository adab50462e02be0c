package controller

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// Messages of status conditions and Events: they tell the user what to do.
// Condition reasons are the API's (gamesv1.Reason*).
const (
	MessageProfileResolved          = "Profile ConfigMap %q resolved: its current content is %s"
	MessageProfileFound             = "Profile ConfigMap %q found (hash %s); it is rolled out once the session has a Deployment of its own"
	MessageProfileNotFound          = "No ConfigMap %q matching %q in namespace %q: create it, or add the label if it exists. The Deployment, if any, is left running as it is"
	MessageNoReferenceGrantAPI      = "Profile %q is in another namespace, which needs a ReferenceGrant there, and this cluster serves no ReferenceGrant API: install Gateway API's ReferenceGrant CRD (the controller looks for it again every --reference-grant-recheck), or use a profile of the session's own namespace. The Deployment, if any, is left running as it is"
	MessageNamespacedController     = "Profile %q is in another namespace, and this controller manages namespace %q only (--namespace): use a profile of the session's own namespace, or a cluster-wide install. The Deployment, if any, is left running as it is"
	MessageReferenceNotPermitted    = "Profile %q is in namespace %q, and no ReferenceGrant there permits it: a grant needs spec.from {group: %s, kind: %s, namespace: %s} and spec.to {group: \"\", kind: ConfigMap, name: %s (or no name)}. The Deployment, if any, is left running as it is"
	MessageWaitingForProfile        = "Waiting for profile ConfigMap %q before creating the Deployment"
	MessageSpecWaitsForProfile      = "The spec is not applied until profile ConfigMap %q is back; the Deployment is left as it was, with %d of %d game servers ready"
	MessageDeploymentReady          = "%d of %d game servers ready"
	MessageDeploymentRolling        = "%d of %d game servers ready, %d updated"
	MessageProgressDeadlineExceeded = "Deployment %q made no progress within its deadline, %d of %d game servers ready: its pods do not become ready. Check their logs and Events; fix the profile or the spec"
	MessageWaitingForDeployment     = "Waiting for the Deployment to be observed"
	MessageDeploymentPaused         = "Deployment %q is paused, %d of %d game servers ready: nothing rolls out until it is resumed (kubectl rollout resume)"
	MessageNotControlled            = "Deployment %q already exists and is not controlled by this GameSession: delete or rename it, and the controller will create its own"
	MessageDeploymentDeleting       = "Waiting for Deployment %q, which is being deleted or belongs to an earlier GameSession of this name, to be removed by the garbage collector"
	MessageDeploymentInvalid        = "Deployment %q was rejected by the API server: %v"
	MessageDeploymentCreated        = "Created Deployment %q"
	MessageProfileFanOut            = "Profile data changed (hash %s): rolling %d GameSession(s)"
	MessageProfileFanOutPaced       = "Profile data changed (hash %s): %d GameSession(s) move under the rollout policy (%s); its ProfileRollout follows them"
	MessageRevisionCurrent          = "Runs revision %q, the current content of profile %q"
	MessageWaitingForTurn           = "Runs revision %q; waits for its turn in the rollout of profile %q to revision %q (kubectl get profilerollout shows its progress)"
	MessageWaitingForPlan           = "Waits for the rollout of revision %q of profile %q to be planned"
	MessageChangeDelayed            = "Runs revision %q; moves to revision %q once the profile-change delay is over"
	MessageRevisionPending          = "Revision %q of the profile's current content is being created"
	MessageSessionHeldUp            = "Runs revision %q; the rollout of profile %q to revision %q is held up by sessions that cannot progress: %s. Resume, fix or delete them"
	MessageSessionPaused            = "Runs revision %q; the rollout of profile %q to revision %q is paused"
	MessageRolloutBlocked           = "The Deployment cannot be moved to revision %q until the problem the Ready condition names is solved"
	MessageProfileGone              = "The profile is missing: the Deployment keeps the revision it runs"
	MessageProfileGoneSpecApplied   = "The profile is missing: the Deployment keeps revision %q, which still exists, and the session's spec is applied with it"
	MessageSessionHalted            = "Runs revision %q; the rollout of profile %q to revision %q is halted, as too many sessions moved to it failed: fix the profile, or edit it back to its previous content"
	MessageSessionBusy              = "Runs revision %q; the session is busy (label " + gamesv1.BusyLabel + "=" + gamesv1.BusyLabelValue + "), so its move to revision %q of profile %q waits until it is idle%s"
	MessageBusyUntil                = ", or until %s (max-defer %s)"
	MessageBusyUntilInWindow        = ", or until %s (max-defer %s of its maintenance window %s)"
	MessageSessionOutsideWindow     = "Runs revision %q; the rollout of profile %q to revision %q waits for its maintenance window (%s), which opens at %s"
	MessageWaitingForClusterBudget  = "Runs revision %q; its move to revision %q waits for room in the cluster-wide rollout budget (%s)"

	// Events of a profile's rollout, on the profile ConfigMap.
	MessageRolloutProgress      = "moved %d of %d sessions to revision %s, %d ready, %d failed"
	MessageProgressDeferred     = ", %d busy (deferred)"
	MessageRolloutStarted       = "Rolling out revision %s to %d sessions (%s): %s"
	MessageRolloutAdvanced      = "Rollout advanced: %s"
	MessageRolloutCompleted     = "Rolled revision %s out to all %d sessions (%d failed)"
	MessageRolloutHalted        = "Rollout halted: %s, more than max-failed %d. Sessions not moved keep their revision, and new sessions start on it. Fix the profile, or edit it back to its previous content, to go on"
	MessageInputsHalted         = "Moves for Secrets or ConfigMaps halted: %d sessions failed after new data, more than the policy (%s) allows. No other session restarts for its Secrets or ConfigMaps until new data moves the failed ones again"
	MessageInputCanaryFailed    = "The canary %s of the new data of %s %s failed: no other session restarts for that data. New data moves the canary again, and the others follow once it is Ready"
	MessageRolloutPaused        = "Rollout paused: %s. Remove the annotation " + rollout.AnnotationPaused + " to resume"
	MessageRolloutResumed       = "Rollout resumed: %s"
	MessageRolloutPolicyInvalid = "Rollout paused, as its policy does not parse: %v"
	MessageRevisionConflict     = "ConfigMap %q exists without the %s label, so it cannot serve as this profile's revision: sessions keep the revision they run until it is deleted or renamed"
	MessageRevisionCreateFailed = "Revision %q of the profile's current content cannot be created, so no session moves to it: %v"
	MessageRevisionAvailable    = "Revision %q exists"
	MessageRolloutHeldUp        = "Rollout held up: %s; these sessions cannot progress: %s. Resume, fix or delete them"
	MessageRolloutWaiting       = "Rollout waits for its maintenance window (%s), which opens at %s: %s"
	MessageRolloutDeferred      = "Rollout waits for busy sessions: %s; they move once idle%s"
	MessageDeferredUntil        = ", or at %s (max-defer)"

	// Messages of a ProfileRollout's status.
	MessageRolloutStatusComplete = "Every session runs revision %s"
	MessageRolloutStatusCanary   = "Rolling out revision %s: the first %d session(s) go first, as canaries"
	MessageRolloutStatusRolling  = "Rolling out revision %s (%s)"
	MessageRolloutStatusPaused   = "The rollout of revision %s is paused (%s)"
	MessageRolloutStatusHalted   = "The rollout of revision %s is halted: too many sessions moved to it failed. Fix the profile, or edit it back to its previous content, to go on"
	MessageRolloutStatusBlocked  = "The rollout of revision %s is held up by sessions that cannot progress: %s. Resume, fix or delete them"
	MessageRolloutStatusWaiting  = "The rollout of revision %s waits for its maintenance window (%s), which opens at %s"
	MessageRolloutStatusDeferred = "Rolling out revision %s (%s): it waits for busy sessions, which move once idle%s"
)

// Reasons of the Events the controller records beyond the condition reasons:
// on sessions (a Deployment created, a fan-out) and on profiles (a rollout's
// progress). Tools may match on them, as on the condition reasons.
const (
	EventReasonCreated              = "DeploymentCreated"
	EventReasonProfileFanOut        = "RollingSessions"
	EventReasonRolloutStarted       = "RolloutStarted"
	EventReasonRolloutAdvanced      = "RolloutAdvanced"
	EventReasonRolloutCompleted     = "RolloutCompleted"
	EventReasonRolloutHalted        = "RolloutHalted"
	EventReasonInputsHalted         = "InputRolloutHalted"
	EventReasonInputCanaryFailed    = "InputCanaryFailed"
	EventReasonRolloutPaused        = "RolloutPaused"
	EventReasonRolloutResumed       = "RolloutResumed"
	EventReasonRolloutPolicyInvalid = "RolloutPolicyInvalid"
	EventReasonRevisionConflict     = gamesv1.ReasonRevisionNameTaken
	EventReasonRolloutBlocked       = "RolloutBlocked"
	EventReasonRolloutWaiting       = "RolloutWaiting"
	EventReasonRolloutDeferred      = "RolloutDeferred"
)

// sessionStatus builds a session's new status from its old one. It changes
// only what it observes, and meta.SetStatusCondition keeps a condition's
// lastTransitionTime unless its status flips, so a session whose world did not
// change gets back a status equal to its old one, and no write follows.
type sessionStatus struct {
	session *gamesv1.GameSession
	status  *gamesv1.GameSessionStatus
	// deadlineExceeded tells a Deployment whose rollout of its current
	// template timed out (caches.progressDeadlineExceeded); without
	// it, the Progressing condition of the current generation decides.
	deadlineExceeded func(*appsv1.Deployment) bool
}

func newSessionStatus(session *gamesv1.GameSession) *sessionStatus {
	s := &sessionStatus{session: session, status: session.Status.DeepCopy()}
	s.status.ObservedGeneration = session.Generation
	s.status.Selector = labels.SelectorFromSet(selectorLabels(session)).String()
	return s
}

func (s *sessionStatus) setCondition(conditionType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.status.Conditions, metav1.Condition{
		Type:               conditionType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: s.session.Generation,
	})
}

// profileResolved reports a profile whose current content is target, and a
// Deployment that runs running.
func (s *sessionStatus) profileResolved(running, target string) {
	s.status.ProfileHash = running
	s.setCondition(gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved,
		fmt.Sprintf(MessageProfileResolved, refOf(s.session), target))
}

// profileFound reports a profile that exists but is not rolled into a
// Deployment, as the session has none it may write to.
func (s *sessionStatus) profileFound(hash string) {
	s.setCondition(gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved,
		fmt.Sprintf(MessageProfileFound, refOf(s.session), hash))
}

// profileNotFound reports a profile the cache does not hold.
func (s *sessionStatus) profileNotFound(selector string) {
	namespace, name := profileOf(s.session)
	s.setCondition(gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound,
		fmt.Sprintf(MessageProfileNotFound, name, selector, namespace))
}

// referenceRefused reports a profile of another namespace that the session
// may not use, and why: no grant permits it.
func (s *sessionStatus) referenceRefused(message string) {
	s.setCondition(gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonReferenceNotPermitted, message)
}

// profileMissing reports on the Deployment, d (nil if none), that the
// controller leaves as it is while the session's profile is missing.
// Ready never claims a spec the Deployment does not carry: a session scaled
// while its profile is missing is not Ready with the old replica count.
func (s *sessionStatus) profileMissing(d *appsv1.Deployment) {
	ref := refOf(s.session)
	if meta.FindStatusCondition(s.status.Conditions, gamesv1.ConditionProfileUpToDate) != nil {
		// No content to be up to date with: neither True nor False is so.
		s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionUnknown, gamesv1.ReasonProfileNotFound, MessageProfileGone)
	}
	switch {
	case d == nil:
		s.notReady(gamesv1.ReasonWaitingForProfile, fmt.Sprintf(MessageWaitingForProfile, ref))
	case specApplied(d, s.session):
		s.deployment(d)
	default:
		s.replicas(d)
		s.notReady(gamesv1.ReasonWaitingForProfile,
			fmt.Sprintf(MessageSpecWaitsForProfile, ref, d.Status.ReadyReplicas, ptr.Deref(d.Spec.Replicas, 1)))
	}
}

// specApplied reports whether d carries the session's spec, whatever profile
// data it was last rolled with.
func specApplied(d *appsv1.Deployment, session *gamesv1.GameSession) bool {
	return !deploymentNeedsUpdate(d, NewDeployment(session, d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]))
}

// leftAsIs records what the session's Deployment, d, which the controller
// could not patch, still runs: its profile hash, revision and replica counts,
// and whether that is the profile's current content, target. The status then
// describes the game servers as they are, not the profile data they are
// waiting for (which the ProfileResolved message names).
func (s *sessionStatus) leftAsIs(d *appsv1.Deployment, target string) {
	s.status.ProfileHash = d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	s.replicas(d)
	if rolledProfileHash(d, refOf(s.session)) == target {
		s.upToDate(target)
		return
	}
	ref := refOf(s.session)
	s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonRolloutBlocked,
		fmt.Sprintf(MessageRolloutBlocked, RevisionName(ref, target)))
}

// replicas records the Deployment's replica counts and the revision it mounts.
// noDeployment reports that no Deployment of the session's runs, whatever
// an earlier sync saw: no content, no revision, no replicas.
func (s *sessionStatus) noDeployment() {
	s.status.ProfileHash, s.status.ProfileRevision = "", ""
	s.status.Replicas, s.status.ReadyReplicas, s.status.UpdatedReplicas = 0, 0, 0
}

func (s *sessionStatus) replicas(d *appsv1.Deployment) {
	s.status.Replicas, s.status.ReadyReplicas = d.Status.Replicas, d.Status.ReadyReplicas
	// Until the Deployment controller has seen the template, its count of
	// updated pods is of the template before.
	s.status.UpdatedReplicas = 0
	if d.Status.ObservedGeneration >= d.Generation {
		s.status.UpdatedReplicas = d.Status.UpdatedReplicas
	}
	s.status.ProfileRevision = ""
	if hash := rolledProfileHash(d, refOf(s.session)); hash != "" {
		s.status.ProfileRevision = RevisionName(refOf(s.session), hash)
	}
}

// upToDate reports a Deployment that runs the profile's current revision.
func (s *sessionStatus) upToDate(hash string) {
	ref := refOf(s.session)
	s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent,
		fmt.Sprintf(MessageRevisionCurrent, RevisionName(ref, hash), ref))
}

// waiting reports a session whose Deployment does not run the profile's
// current content, with why (a revisionChoice's reason and message).
func (s *sessionStatus) waiting(reason, message string) {
	s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, reason, message)
}

// profileGone reports a session whose profile is missing while its
// Deployment runs a revision that still exists.
func (s *sessionStatus) profileGone() {
	s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionUnknown, gamesv1.ReasonProfileNotFound,
		fmt.Sprintf(MessageProfileGoneSpecApplied, s.status.ProfileRevision))
}

// deployment records the Deployment's replica counts and whether it is
// fully rolled out and ready.
func (s *sessionStatus) deployment(d *appsv1.Deployment) {
	s.replicas(d)
	want := ptr.Deref(d.Spec.Replicas, 1)
	if deploymentComplete(d) {
		s.setCondition(gamesv1.ConditionReady, metav1.ConditionTrue, gamesv1.ReasonDeploymentReady,
			fmt.Sprintf(MessageDeploymentReady, d.Status.ReadyReplicas, want))
		return
	}
	if s.timedOut(d) {
		s.notReady(gamesv1.ReasonProgressDeadlineExceeded,
			fmt.Sprintf(MessageProgressDeadlineExceeded, d.Name, d.Status.ReadyReplicas, want))
		return
	}
	if d.Spec.Paused {
		s.notReady(gamesv1.ReasonDeploymentPaused, fmt.Sprintf(MessageDeploymentPaused, d.Name, d.Status.ReadyReplicas, want))
		return
	}
	s.setCondition(gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentProgressing,
		fmt.Sprintf(MessageDeploymentRolling, d.Status.ReadyReplicas, want, d.Status.UpdatedReplicas))
}

func (s *sessionStatus) timedOut(d *appsv1.Deployment) bool {
	if s.deadlineExceeded != nil {
		return s.deadlineExceeded(d)
	}
	return timedOutCondition(d) != nil
}

// deploymentInvalid reports a Deployment the API server refused. Retrying
// cannot help until the session's spec changes, which enqueues it again.
func (s *sessionStatus) deploymentInvalid(err error) {
	s.notReady(gamesv1.ReasonDeploymentInvalid, fmt.Sprintf(MessageDeploymentInvalid, s.session.Name, err))
}

func (s *sessionStatus) notReady(reason, message string) {
	s.setCondition(gamesv1.ConditionReady, metav1.ConditionFalse, reason, message)
}

// deploymentComplete reports whether the Deployment controller has seen the
// latest spec and every replica runs the latest template and is ready.
func deploymentComplete(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation &&
		d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want &&
		d.Status.ReadyReplicas == want
}

// changed completes the new status (summarize) and reports whether it
// differs from the session's.
func (s *sessionStatus) changed() bool {
	s.summarize()
	return !equality.Semantic.DeepEqual(&s.session.Status, s.status)
}

// conditionChanged reports whether the condition of that type in next differs
// in status or reason from the one in prev. Events are emitted only then, so a
// session stuck on a missing profile warns once, not on every resync.
func conditionChanged(prev, next []metav1.Condition, conditionType string) bool {
	p, n := meta.FindStatusCondition(prev, conditionType), meta.FindStatusCondition(next, conditionType)
	if p == nil || n == nil {
		return p != n
	}
	return p.Status != n.Status || p.Reason != n.Reason
}

// summarize sets the summary conditions of the kstatus convention, Stalled
// and Reconciling, from the conditions the sync set. It runs last, so that
// the two always agree with the others; each is present only while True,
// taking the reason and message of the condition that explains it.
// Stalled wins: a session that needs a user's change fails a GitOps wait at
// once, with the reason, instead of running the wait to its timeout.
func (s *sessionStatus) summarize() {
	conditions := s.status.Conditions
	ready := meta.FindStatusCondition(conditions, gamesv1.ConditionReady)
	resolved := meta.FindStatusCondition(conditions, gamesv1.ConditionProfileResolved)
	upToDate := meta.FindStatusCondition(conditions, gamesv1.ConditionProfileUpToDate)

	var stalled, reconciling *metav1.Condition
	switch {
	case ready != nil && ready.Status == metav1.ConditionFalse && stalls(ready.Reason):
		stalled = ready
	case resolved != nil && resolved.Status == metav1.ConditionFalse:
		stalled = resolved
	case upToDate != nil && upToDate.Status == metav1.ConditionFalse && stalls(upToDate.Reason):
		stalled = upToDate
	case ready == nil:
		reconciling = &metav1.Condition{Reason: gamesv1.ReasonDeploymentProgressing, Message: MessageWaitingForDeployment}
	case ready.Status != metav1.ConditionTrue:
		reconciling = ready
	case upToDate != nil && upToDate.Status != metav1.ConditionTrue:
		reconciling = upToDate
	}
	s.summary(gamesv1.ConditionStalled, stalled)
	s.summary(gamesv1.ConditionReconciling, reconciling)
}

// summary sets the summary condition of that type to True for cause, or
// removes it when cause is nil.
func (s *sessionStatus) summary(conditionType string, cause *metav1.Condition) {
	if cause == nil {
		meta.RemoveStatusCondition(&s.status.Conditions, conditionType)
		return
	}
	s.setCondition(conditionType, metav1.ConditionTrue, cause.Reason, cause.Message)
}

// stalls reports whether a Ready or ProfileUpToDate reason holds the session
// until someone changes the profile, the spec or a conflicting object. A
// paused rollout does not count: pausing is a user's intent, and removing
// the annotation resumes it.
func stalls(reason string) bool {
	switch reason {
	case gamesv1.ReasonProgressDeadlineExceeded, gamesv1.ReasonRolloutHalted, gamesv1.ReasonRolloutBlocked,
		gamesv1.ReasonRevisionUnavailable, gamesv1.ReasonDeliveryFailed:
		return true
	}
	return needsUser(reason)
}
