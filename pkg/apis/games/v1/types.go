package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Well-known labels and annotations of the GameSession API.
const (
	// ProfileLabel marks a ConfigMap as a GameSession profile. The controller
	// watches only ConfigMaps carrying ProfileLabel=ProfileLabelValue, so a
	// ConfigMap without it is invisible to the controller by design.
	ProfileLabel      = "games.example.com/profile"
	ProfileLabelValue = "true"

	// ProfileHashAnnotation on a Deployment's pod template holds the hash of
	// the profile data the pods were started with. Changing it is what makes
	// the Deployment roll out when the profile changes.
	ProfileHashAnnotation = "games.example.com/profile-hash"
)

// Condition types reported in GameSessionStatus.Conditions.
const (
	// ConditionProfileResolved is True when spec.profileRef names an existing,
	// labelled profile ConfigMap and its data are rolled into the Deployment.
	ConditionProfileResolved = "ProfileResolved"
	// ConditionReady is True when the Deployment is fully rolled out and all
	// its replicas are ready.
	ConditionReady = "Ready"
	// ConditionProfileUpToDate is True when the Deployment runs the revision
	// of the profile's current content, and False while the session waits
	// for its turn in a paced rollout, or the rollout is paused or halted.
	ConditionProfileUpToDate = "ProfileUpToDate"

	// ConditionReconciling and ConditionStalled summarise the three above in
	// the kstatus convention that Flux, kstatus-based waiters and the Argo CD
	// health check shipped in the chart read. Both are "abnormal-true": they
	// are present only while True, and a session with neither is settled.
	//
	// ConditionReconciling is True while the controller works towards the
	// spec and the profile: the Deployment rolls out, or the session waits
	// for its turn in a profile rollout (or for a paused one to resume).
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the session cannot progress until someone
	// changes something: the profile is missing, the Deployment is rejected
	// or not the controller's, its rollout exceeded its progress deadline,
	// or the profile's rollout halted. Its reason is that of the condition
	// that names the problem.
	ConditionStalled = "Stalled"
)

// Condition reasons. They are part of the API: tools may match on them.
const (
	ReasonProfileResolved = "ProfileResolved"
	ReasonProfileNotFound = "ProfileNotFound"

	ReasonDeploymentReady         = "DeploymentReady"
	ReasonDeploymentProgressing   = "DeploymentProgressing"
	ReasonWaitingForProfile       = "WaitingForProfile"
	ReasonDeploymentNotControlled = "DeploymentNotControlled"
	ReasonDeploymentInvalid       = "DeploymentInvalid"
	// ReasonDeploymentDeleting: the Deployment of the session's name is being
	// deleted, or belongs to an earlier session of that name and awaits the
	// garbage collector. It resolves by itself.
	ReasonDeploymentDeleting = "DeploymentDeleting"
	// ReasonContainerConflict: another container of the Deployment declares
	// the game server's ports (a renamed game server container, say). The
	// controller leaves the Deployment as it is until a user resolves it.
	ReasonContainerConflict = "ContainerConflict"
	// ReasonDeploymentPaused: the Deployment is paused (spec.paused, as
	// `kubectl rollout pause` sets it): nothing rolls out until it is
	// resumed, and a profile rollout that moved it waits on it.
	ReasonDeploymentPaused = "DeploymentPaused"
	// ReasonProgressDeadlineExceeded: the Deployment controller gave up on
	// the Deployment's rollout (its pods do not become ready in time). It
	// needs a fixed profile or spec.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"

	// Reasons of ProfileUpToDate.
	ReasonRevisionCurrent = "RevisionCurrent"
	// ReasonWaitingForTurn: the profile's rollout policy has not moved the
	// session to the new revision yet; it keeps running its revision.
	ReasonWaitingForTurn = "WaitingForTurn"
	// ReasonRolloutPaused: the profile's rollout is paused by its annotation.
	ReasonRolloutPaused = "RolloutPaused"
	// ReasonRolloutHalted: too many sessions moved to the new revision
	// failed, so the rollout stopped until the profile is changed.
	ReasonRolloutHalted = "RolloutHalted"
	// ReasonRolloutBlocked: the Deployment cannot be moved to the current
	// revision until the problem its Ready condition names is solved; or the
	// session waits on a rollout held up by sessions that cannot progress,
	// which the message names.
	ReasonRolloutBlocked = "RolloutBlocked"
	// ReasonRevisionPending: the revision of the profile's current content
	// is being created; the session keeps the revision it runs.
	ReasonRevisionPending = "RevisionPending"
	// ReasonRevisionUnavailable: the revision of the profile's current
	// content cannot be created (the message quotes the API server); the
	// session keeps the revision it runs.
	ReasonRevisionUnavailable = "RevisionUnavailable"
)

// GameSession runs one game-server Deployment whose pods mount a shared
// profile ConfigMap. When the profile's data change, the Deployment rolls out.
// Its name is at most 63 characters, as it becomes a label value on the
// Deployment and its pods. The limit is checked on create only (names are
// immutable), so that a session stored before it existed can still be
// updated and deleted.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=gs,categories=games
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.profileRef`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.conditions[?(@.type=="ProfileUpToDate")].reason`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.profileRevision`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || self.metadata.name.size() <= 63",optionalOldSelf=true,message="metadata.name must be at most 63 characters: it becomes the value of the app.kubernetes.io/instance label on the GameSession's Deployment and pods, and label values are at most 63 characters"
type GameSession struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired game server: its image, size and profile.
	// +required
	Spec GameSessionSpec `json:"spec"`

	// status is what the controller last observed. Written only by the controller.
	// +optional
	Status GameSessionStatus `json:"status,omitempty"`
}

// GameSessionSpec is the desired state of a GameSession.
type GameSessionSpec struct {
	// profileRef is the name of the profile ConfigMap, in the GameSession's own
	// namespace, that the game servers mount read-only at /etc/gamesession/profile.
	// The ConfigMap must carry the label games.example.com/profile=true; the
	// controller ignores ConfigMaps without it. There is deliberately no
	// namespace field: a session can only use its own namespace's profiles.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="profileRef must be a ConfigMap name: a DNS-1123 subdomain of lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
	ProfileRef string `json:"profileRef"`

	// image is the game server's container image, e.g. registry.example.com/arena:1.4.2.
	// It must not contain whitespace, nor begin or end with any Unicode space
	// (a no-break space, say), which Kubernetes refuses in a Pod's image.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('\\\\s')",message="image must not contain whitespace"
	// +kubebuilder:validation:XValidation:rule="self == self.trim()",message="image must not begin or end with a whitespace character (Kubernetes refuses an image with leading or trailing Unicode space, such as a no-break space)"
	Image string `json:"image"`

	// replicas is the number of game server pods. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Replicas *int32 `json:"replicas,omitempty"`

	// ports the game server listens on. Names and port/protocol pairs must be unique.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(p, self.exists_one(q, q.containerPort == p.containerPort && q.protocol == p.protocol))",message="each containerPort and protocol pair may appear only once"
	Ports []GameServerPort `json:"ports,omitempty"`

	// resources are the compute resources of the game server container,
	// as in a Pod's container (requests and limits of cpu, memory, ...).
	// +optional
	Resources GameServerResources `json:"resources,omitempty"`
}

// GameServerPort is one port the game server listens on.
type GameServerPort struct {
	// name of the port, unique within the session: an IANA service name of at
	// most 15 lowercase letters, digits and '-', with at least one letter,
	// beginning and ending with a letter or digit, and no "--"; e.g. "game"
	// or "query".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.matches('[a-z]')",message="port name must contain at least one letter (an IANA service name cannot be digits only)"
	// +kubebuilder:validation:XValidation:rule="!self.contains('--')",message="port name must not contain '--' (an IANA service name cannot have adjacent hyphens)"
	Name string `json:"name"`

	// containerPort is the port number inside the container, 1 to 65535.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ContainerPort int32 `json:"containerPort"`

	// protocol is UDP (the default, as most game traffic is), TCP or SCTP.
	// +optional
	// +kubebuilder:default=UDP
	// +kubebuilder:validation:Enum=UDP;TCP;SCTP
	Protocol corev1.Protocol `json:"protocol,omitempty"`
}

// GameServerResources are the compute resources of the game server container.
// It is the requests/limits part of a container's resources, without the
// fields a game server has no use for. A request must not exceed the limit
// of the same resource.
//
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || ['cpu', 'memory', 'ephemeral-storage'].all(k, !(k in self.requests) || !(k in self.limits) || !isQuantity(string(self.requests[k])) || !isQuantity(string(self.limits[k])) || quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",message="each request must be less than or equal to the limit of the same resource"
type GameServerResources struct {
	// requests is the minimum amount of each resource the game server needs,
	// e.g. cpu: 500m, memory: 256Mi. Resource names are cpu, memory and
	// ephemeral-storage; each value a non-negative quantity.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",message="requests may name only the resources cpu, memory and ephemeral-storage"
	// +kubebuilder:validation:XValidation:rule="self.all(k, isQuantity(string(self[k])))",message="each request must be a valid quantity, e.g. 500m or 256Mi"
	// +kubebuilder:validation:XValidation:rule="['cpu', 'memory', 'ephemeral-storage'].all(k, !(k in self) || !isQuantity(string(self[k])) || !quantity(string(self[k])).isLessThan(quantity('0')))",message="each request must not be negative"
	Requests corev1.ResourceList `json:"requests,omitempty"`

	// limits is the maximum amount of each resource the game server may use.
	// Resource names are cpu, memory and ephemeral-storage; each value a
	// non-negative quantity.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",message="limits may name only the resources cpu, memory and ephemeral-storage"
	// +kubebuilder:validation:XValidation:rule="self.all(k, isQuantity(string(self[k])))",message="each limit must be a valid quantity, e.g. 500m or 256Mi"
	// +kubebuilder:validation:XValidation:rule="['cpu', 'memory', 'ephemeral-storage'].all(k, !(k in self) || !isQuantity(string(self[k])) || !quantity(string(self[k])).isLessThan(quantity('0')))",message="each limit must not be negative"
	Limits corev1.ResourceList `json:"limits,omitempty"`
}

// GameSessionStatus is the observed state of a GameSession.
type GameSessionStatus struct {
	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of game server pods the Deployment currently has.
	// +optional
	Replicas int32 `json:"replicas"`

	// readyReplicas is the number of game server pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// selector is the label selector of the game server pods, in string form,
	// for the scale subresource (kubectl scale, HorizontalPodAutoscaler).
	// +optional
	Selector string `json:"selector,omitempty"`

	// profileHash is the hash of the profile data now rolled into the
	// Deployment's pod template (annotation games.example.com/profile-hash).
	// +optional
	ProfileHash string `json:"profileHash,omitempty"`

	// profileRevision is the immutable revision of the profile (a ConfigMap
	// named after the profile and profileHash) that the Deployment mounts.
	// +optional
	ProfileRevision string `json:"profileRevision,omitempty"`

	// conditions: ProfileResolved says whether the profile was found and
	// applied, and how to fix it when not; Ready says whether the game servers
	// are rolled out and ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GameSessionList is a list of GameSessions.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type GameSessionList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the GameSessions.
	Items []GameSession `json:"items"`
}
