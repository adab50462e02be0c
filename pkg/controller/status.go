package controller

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Messages of status conditions and Events. The reasons are the API's
// (gamesv1.Reason*); the messages tell the user what to do.
const (
	MessageProfileResolved   = "Profile ConfigMap %q is rolled into the Deployment (hash %s)"
	MessageProfileNotFound   = "No ConfigMap %q matching %q in namespace %q: create it, or add the label if it exists. The Deployment, if any, is left running as it is"
	MessageWaitingForProfile = "Waiting for profile ConfigMap %q before creating the Deployment"
	MessageDeploymentReady   = "%d of %d game servers ready"
	MessageDeploymentRolling = "%d of %d game servers ready, %d updated"
	MessageNotControlled     = "Deployment %q already exists and is not controlled by this GameSession: delete or rename it, and the controller will create its own"
	MessageDeploymentInvalid = "Deployment %q was rejected by the API server: %v"
	MessageDeploymentCreated = "Created Deployment %q"
	MessageProfileFanOut     = "Profile data changed (hash %s): rolling %d GameSession(s)"
	EventReasonCreated       = "DeploymentCreated"
	EventReasonProfileFanOut = "RollingSessions"
)

// sessionStatus builds a session's new status from its old one. It changes
// only what it observes, and meta.SetStatusCondition keeps a condition's
// lastTransitionTime unless its status flips, so a session whose world did not
// change gets back a status equal to its old one, and no write follows.
type sessionStatus struct {
	session *gamesv1.GameSession
	status  *gamesv1.GameSessionStatus
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

func (s *sessionStatus) profileResolved(hash string) {
	s.status.ProfileHash = hash
	s.setCondition(gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved,
		fmt.Sprintf(MessageProfileResolved, s.session.Spec.ProfileRef, hash))
}

func (s *sessionStatus) profileNotFound(selector string) {
	s.setCondition(gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound,
		fmt.Sprintf(MessageProfileNotFound, s.session.Spec.ProfileRef, selector, s.session.Namespace))
}

// deployment records the Deployment's replica counts and whether it is
// fully rolled out and ready.
func (s *sessionStatus) deployment(d *appsv1.Deployment) {
	s.status.Replicas = d.Status.Replicas
	s.status.ReadyReplicas = d.Status.ReadyReplicas
	want := ptr.Deref(d.Spec.Replicas, 1)
	if deploymentComplete(d) {
		s.setCondition(gamesv1.ConditionReady, metav1.ConditionTrue, gamesv1.ReasonDeploymentReady,
			fmt.Sprintf(MessageDeploymentReady, d.Status.ReadyReplicas, want))
		return
	}
	s.setCondition(gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentProgressing,
		fmt.Sprintf(MessageDeploymentRolling, d.Status.ReadyReplicas, want, d.Status.UpdatedReplicas))
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
