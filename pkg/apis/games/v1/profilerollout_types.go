package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of ProfileRolloutStatus.Conditions.
const (
	// ConditionComplete is True once every session of the profile runs the
	// target revision and is Ready, or failed within what the brake
	// tolerates: nothing is left to happen. `kubectl wait
	// --for=condition=Complete profilerollout/NAME` waits for a rollout to
	// finish.
	ConditionComplete = "Complete"
	// ConditionRevisionAvailable is False while the revision of the profile's
	// current content cannot be created; its message quotes the API server.
	ConditionRevisionAvailable = "RevisionAvailable"
)

// Reasons of a ProfileRollout's conditions, beyond the GameSession ones it
// shares (RolloutPaused, RolloutHalted).
const (
	ReasonRolloutComplete    = "RolloutComplete"
	ReasonRolloutProgressing = "RolloutProgressing"
	// ReasonSessionsBlocked: sessions the rollout moved, or wants to move,
	// cannot progress (a paused, refused or conflicting Deployment), and hold
	// the canary or the whole budget. status.blocked names them.
	ReasonSessionsBlocked = "SessionsBlocked"
	// ReasonSessionsDeferred: every session the rollout could move has
	// moved; the rest are busy, and move once idle or when max-defer passes
	// (status.deferralEndTime).
	ReasonSessionsDeferred = "SessionsDeferred"
	// ReasonRevisionCreated and ReasonRevisionCreateFailed are the reasons of
	// RevisionAvailable. RevisionNameTaken (a ConfigMap of the revision's name
	// that is not a revision) is the third.
	ReasonRevisionCreated      = "RevisionCreated"
	ReasonRevisionCreateFailed = "RevisionCreateFailed"
	ReasonRevisionNameTaken    = "RevisionNameTaken"
)

// RolloutPhase is where a profile's rollout stands.
type RolloutPhase string

// The phases of a profile's rollout.
const (
	RolloutPhaseComplete RolloutPhase = "Complete"
	RolloutPhaseCanary   RolloutPhase = "Canary"
	RolloutPhaseRolling  RolloutPhase = "Rolling"
	RolloutPhasePaused   RolloutPhase = "Paused"
	RolloutPhaseHalted   RolloutPhase = "Halted"
	// RolloutPhaseWaiting: the maintenance window is closed; resumeTime
	// says when it opens.
	RolloutPhaseWaiting RolloutPhase = "Waiting"
)

// ProfileRollout is the rollout state of one profile ConfigMap: which
// revision its sessions move to, which one last completed, how far the move
// is, and whether the brake halted it. The controller creates one per
// profile, named like the profile, in the profile's namespace, owned by it
// (so it goes with the profile), and is its only writer. It exists so that
// what a rollout must remember survives restarts and failovers: a halt holds
// until the profile's content changes, and sessions created during a canary,
// a halt or a rollback start on the stable revision. Its status is written
// once per rollout step (a phase change, each tenth of the sessions), never
// once per session.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=pro,categories=games
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.status.targetRevision`
// +kubebuilder:printcolumn:name="Stable",type=string,JSONPath=`.status.stableRevision`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Moved",type=integer,JSONPath=`.status.movedSessions`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readySessions`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedSessions`
// +kubebuilder:printcolumn:name="Busy",type=integer,JSONPath=`.status.deferredSessions`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.totalSessions`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
type ProfileRollout struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// status is the rollout's state. Written only by the controller.
	// +optional
	Status ProfileRolloutStatus `json:"status,omitempty"`
}

// ProfileRolloutStatus is the state of a profile's rollout.
type ProfileRolloutStatus struct {
	// targetHash is the content hash of the profile now, and targetRevision
	// the revision (a ConfigMap named after the profile and the hash) its
	// sessions move to.
	// +optional
	TargetHash string `json:"targetHash,omitempty"`
	// +optional
	TargetRevision string `json:"targetRevision,omitempty"`

	// stableHash and stableRevision are the revision whose rollout last
	// completed. Sessions created while a rollout is in its canary, halted
	// or paused start on it. Empty until a rollout completes.
	// +optional
	StableHash string `json:"stableHash,omitempty"`
	// +optional
	StableRevision string `json:"stableRevision,omitempty"`

	// haltedHash is the content hash whose rollout the brake halted. The halt
	// holds while the profile has that content: no scaling, deleting or
	// recreating of sessions or Deployments, no restart and no failover of
	// the controller releases it. Changing the profile's content does.
	// +optional
	HaltedHash string `json:"haltedHash,omitempty"`

	// phase is Canary, Rolling, Paused, Halted, Waiting (outside the
	// maintenance window) or Complete.
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`

	// totalSessions is the number of the profile's sessions with a
	// Deployment; movedSessions those whose Deployment runs the target,
	// readySessions those of them that are Ready, failedSessions those of
	// them whose Deployment exceeded its progress deadline. Between two
	// rollout steps the counts may lag by up to a tenth of totalSessions.
	// +optional
	TotalSessions int32 `json:"totalSessions"`
	// +optional
	MovedSessions int32 `json:"movedSessions"`
	// +optional
	ReadySessions int32 `json:"readySessions"`
	// +optional
	FailedSessions int32 `json:"failedSessions"`
	// deferredSessions is the number of sessions not on the target that are
	// busy (the games.example.com/busy label) and whose move waits until
	// they are idle or the policy's max-defer passes. They count neither as
	// failed nor against the budget.
	// +optional
	DeferredSessions int32 `json:"deferredSessions"`
	// pendingSessions is the number of moved sessions neither Ready nor
	// failed yet: their Deployment rolls out, or, delivered live, not every
	// game server has acknowledged the target.
	// +optional
	PendingSessions int32 `json:"pendingSessions,omitempty"`

	// delivery is how the target reaches the game servers: "restart" (a
	// new pod template) or "live" (the files the running game servers
	// mount; rollout.games.example.com/delivery). With live, movedSessions
	// counts the sessions the target was delivered to, readySessions those
	// whose every game server applied it, failedSessions those where one
	// refused it or did not apply it within the progress deadline.
	// +optional
	// +kubebuilder:validation:Enum=restart;live
	Delivery string `json:"delivery,omitempty"`

	// resumeTime is when the closed maintenance window opens and the
	// rollout resumes; set only in the Waiting phase.
	// +optional
	ResumeTime *metav1.Time `json:"resumeTime,omitempty"`
	// deferralEndTime is when the policy's max-defer passes and busy
	// sessions move too; unset when none is deferred or max-defer is never.
	// +optional
	DeferralEndTime *metav1.Time `json:"deferralEndTime,omitempty"`

	// inputs is how far the moves of the profile's sessions for new data of
	// the Secrets and ConfigMaps their pod templates read (a rotation) are:
	// they go under the profile's rollout policy too. Unset when none moves,
	// fails or waits.
	// +optional
	Inputs *InputRolloutStatus `json:"inputs,omitempty"`

	// clusterBudget says whose share of the controller's cluster-wide budget
	// (--max-moving-sessions, --max-moves-per-minute) the profile's sessions
	// wait for. The budget is shared by namespace: a place that frees goes
	// to a waiting session of the namespace that holds the fewest, so a
	// namespace waits behind another's rollout for no more than its share,
	// and a rollout alone in the cluster takes every place. Unset when none
	// of the profile's sessions waits for it.
	// +optional
	ClusterBudget *ClusterBudgetWait `json:"clusterBudget,omitempty"`

	// blocked names sessions that hold a canary or budget slot and cannot
	// progress, with why (at most 10 of them).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=10
	Blocked []BlockedSession `json:"blocked,omitempty"`

	// policy is the rollout policy in force, as the profile's annotations
	// and the controller's flags make it, e.g. "max-rolling 10%, canary 1,
	// max-failed 0".
	// +optional
	Policy string `json:"policy,omitempty"`

	// message says in a sentence where the rollout stands and what to do.
	// +optional
	Message string `json:"message,omitempty"`

	// startTime is when the rollout to the target began; completionTime when
	// it completed, unset while it is in progress.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// conditions: Complete (every session on the target and Ready),
	// RevisionAvailable (the target revision exists), and Reconciling and
	// Stalled in the kstatus convention (present only while True).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InputRolloutStatus is where the moves of a profile's sessions for new
// data of their Secrets and ConfigMaps stand. The controller keeps them in
// memory, so after a restart it counts every Deployment still rolling as
// moving until it is Ready.
type InputRolloutStatus struct {
	// movingSessions is the number of sessions moved to new data and not
	// Ready yet, failed ones included.
	// +optional
	MovingSessions int32 `json:"movingSessions"`
	// failedSessions is the number of them whose Deployment exceeded its
	// progress deadline. They keep their places among max-rolling until new
	// data moves them again.
	// +optional
	FailedSessions int32 `json:"failedSessions"`
	// waitingSessions is the number of sessions whose move waits for a
	// place among max-rolling, for new data or for new content: both kinds
	// of move count in it together.
	// +optional
	WaitingSessions int32 `json:"waitingSessions"`
	// halted reports the brake: more moves failed than the policy's
	// max-failed allows, and no other session moves for its Secrets or
	// ConfigMaps until new data moves the failed ones again and they are
	// Ready, or the policy changes.
	// +optional
	Halted bool `json:"halted,omitempty"`
	// canaries are the rotations whose canary has not passed yet, at most
	// 10, by kind, namespace and name: the object whose data changed, and
	// the sessions that move for it before the others. Unset when every
	// canary passed, or the policy has none.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Canaries []InputCanary `json:"canaries,omitempty"`
}

// ClusterBudgetWait is where the profile's sessions that wait for the
// cluster-wide budget stand.
type ClusterBudgetWait struct {
	// waitingSessions is the number of the profile's sessions that wait.
	WaitingSessions int32 `json:"waitingSessions"`
	// namespaces are the namespaces of the waiting sessions, and those that
	// hold more places than their fair share: at most 10, those with the
	// most sessions waiting first. A namespace that holds its share waits
	// for its own places to free; one below it, for the places of those
	// beyond theirs.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=10
	Namespaces []NamespaceShare `json:"namespaces,omitempty"`
}

// NamespaceShare is a namespace's part of the cluster-wide budget.
type NamespaceShare struct {
	Namespace string `json:"namespace"`
	// waitingSessions is the number of the profile's sessions in the
	// namespace that wait.
	// +optional
	WaitingSessions int32 `json:"waitingSessions"`
	// heldPlaces is the number of places the namespace's sessions hold, for
	// every profile: moving and not yet Ready (or, with only a budget per
	// minute, moves started within the minute), or kept for a session woken
	// to move.
	// +optional
	HeldPlaces int32 `json:"heldPlaces"`
	// fairShare is the number of places the namespace is due while every
	// namespace that holds or waits for one wants more: the budget divided
	// among them, rounded up.
	// +optional
	FairShare int32 `json:"fairShare"`
}

// InputCanary is the canary of a rotation: with a canary in its policy, a
// profile's sessions move for new data of a Secret or ConfigMap only after
// the first of them, in name order, that read it run the new data and are
// Ready.
type InputCanary struct {
	// kind of the object: Secret or ConfigMap.
	Kind string `json:"kind"`
	// namespace and name of the object.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// sessions are the canaries (at most 10 of them named), as members of
	// the rollout are named.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Sessions []string `json:"sessions,omitempty"`
	// canarySessions is how many canaries the rotation has, movingSessions
	// how many of them do not run the new data Ready yet.
	CanarySessions int32 `json:"canarySessions"`
	MovingSessions int32 `json:"movingSessions"`
	// failed names a canary whose Deployment exceeded its progress deadline
	// on the new data: no other session moves for the object until new data
	// moves the canaries again and they are Ready.
	// +optional
	Failed string `json:"failed,omitempty"`
}

// BlockedSession is a session that holds up a rollout.
type BlockedSession struct {
	// name of the GameSession.
	Name string `json:"name"`
	// reason it cannot progress: DeploymentPaused,
	// DeploymentInvalid, or another Ready reason of the session.
	Reason string `json:"reason"`
}

// ProfileRolloutList is a list of ProfileRollouts.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ProfileRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the ProfileRollouts.
	Items []ProfileRollout `json:"items"`
}
