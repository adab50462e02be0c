package v1

import (
	appsv1 "k8s.io/api/apps/v1"
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

	// BusyLabel on a GameSession, with the value BusyLabelValue, says that a
	// match is running on its game servers: a profile rollout does not
	// restart them until the label is gone (or has another value), or the
	// profile's max-defer has passed. Whoever starts matches sets it, with
	// `kubectl label gamesession NAME games.example.com/busy=true`, and
	// removes it when the match ends (`games.example.com/busy-`). It is a
	// label so that `kubectl get gs -l games.example.com/busy=true` lists
	// the busy sessions; it reaches neither the Deployment nor the pods.
	BusyLabel      = "games.example.com/busy"
	BusyLabelValue = "true"

	// SecretLabel marks a Secret whose changes roll the game servers that
	// use it: a session's pod template that references a Secret carrying
	// SecretLabel=SecretLabelValue (a volume, a projected source, env or
	// envFrom) rolls when the Secret's data change. The controller watches
	// only Secrets with the label, and keeps a keyed digest of their data,
	// never the data.
	SecretLabel      = "games.example.com/session-secret"
	SecretLabelValue = "true"

	// SecretsAnnotation on a Deployment's pod template lists, comma
	// separated, the labelled Secrets its pods were started with, and
	// SecretsHashAnnotation holds a keyed digest of their data: changing it
	// is what rolls the Deployment when one of them changes. Both are absent
	// when the template references no labelled Secret. The digest is keyed
	// by a Secret of the controller's own, so it tells nothing about the
	// data to whoever can read Deployments.
	SecretsAnnotation     = "games.example.com/secrets"
	SecretsHashAnnotation = "games.example.com/secrets-hash"

	// SecretsKeyLabel on a Deployment says which digest key its template's
	// SecretsHashAnnotation was made under, by the key's fingerprint: "FP".
	// A template made under a key since replaced or lost keeps its digest,
	// and the label "FP.HASH" says what it stands for under the key FP: the
	// digest of the same data, so that losing or rotating the key restarts
	// no game server. A label of the Deployment, not its pod template, so
	// that writing it restarts nothing, and not an annotation, whose change
	// would give the Deployment a new generation and its session a moment
	// of Progressing. Absent on Deployments written before it existed,
	// which were made under the key of the time.
	SecretsKeyLabel = "games.example.com/secrets-key"

	// SessionConfigLabel marks a ConfigMap whose changes roll the game
	// servers that read it, as SecretLabel does for Secrets: a session's pod
	// template that reads a ConfigMap carrying
	// SessionConfigLabel=SessionConfigLabelValue (a volume, a projected
	// source, env or envFrom) rolls when the ConfigMap's data change. The
	// controller watches only ConfigMaps with the label, and keeps a digest
	// of their data, never the data.
	SessionConfigLabel      = "games.example.com/session-config"
	SessionConfigLabelValue = "true"

	// ConfigMapsAnnotation and ConfigMapsHashAnnotation are to labelled
	// ConfigMaps what SecretsAnnotation and SecretsHashAnnotation are to
	// labelled Secrets: the names the pods were started with, and a digest
	// of their data.
	ConfigMapsAnnotation     = "games.example.com/configmaps"
	ConfigMapsHashAnnotation = "games.example.com/configmaps-hash"

	// MoveStartsAnnotation on a Deployment (its metadata, not its pod
	// template) records when the controller started the moves of its
	// session to new revisions of the profile within the minute before the
	// latest one: RFC 3339 times to the nanosecond, comma separated, oldest
	// first. The controller writes it with each move while
	// --max-moves-per-minute is set, and a new leader reads it to count the
	// moves of the last minute against that budget. Nothing else reads it,
	// and the controller never writes it back if someone changes it.
	MoveStartsAnnotation = "games.example.com/move-starts"
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
	// for its turn in a paced rollout, for its maintenance window, for the
	// cluster-wide budget or while it is busy, or the rollout is paused or
	// halted.
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
	// ReasonReferenceNotPermitted: the profile is in another namespace, and
	// no ReferenceGrant there permits the session's namespace to use it
	// (or the cluster serves no ReferenceGrant API). The Deployment keeps
	// the revision it runs; a grant made later resolves it by itself.
	ReasonReferenceNotPermitted = "ReferenceNotPermitted"

	ReasonDeploymentReady         = "DeploymentReady"
	ReasonDeploymentProgressing   = "DeploymentProgressing"
	ReasonWaitingForProfile       = "WaitingForProfile"
	ReasonDeploymentNotControlled = "DeploymentNotControlled"
	ReasonDeploymentInvalid       = "DeploymentInvalid"
	// ReasonDeploymentDeleting: the Deployment of the session's name is being
	// deleted, or belongs to an earlier session of that name and awaits the
	// garbage collector. It resolves by itself.
	ReasonDeploymentDeleting = "DeploymentDeleting"
	// ReasonLiveProfileNotControlled: the session's profile is delivered
	// live, and a ConfigMap of its live profile's name exists that the
	// session does not control. Its Deployment is left as it is until a
	// user deletes or renames that ConfigMap.
	ReasonLiveProfileNotControlled = "LiveProfileNotControlled"
	// ReasonLiveProfileDeleting: as ReasonLiveProfileNotControlled, for a
	// ConfigMap being deleted, or left by an earlier session of that name:
	// it resolves by itself.
	ReasonLiveProfileDeleting = "LiveProfileDeleting"
	// ReasonContainerConflict was reported while the controller owned only
	// the game server container, for another container on its ports (a
	// renamed game server). Now that the session owns the whole pod
	// template, a renamed container is put back, and it is no longer
	// reported; kept for tools that match on it.
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
	// ReasonDeliveryPending: the profile's current revision is delivered
	// live, and not every game server of the session has said it applied
	// it yet.
	ReasonDeliveryPending = "DeliveryPending"
	// ReasonDeliveryFailed: a game server said it could not apply the
	// revision delivered live, or the progress deadline passed first.
	ReasonDeliveryFailed = "DeliveryFailed"
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
	// ReasonSessionBusy: the session is busy (BusyLabel), so the move to the
	// new revision waits until it is idle or the profile's max-defer passes.
	ReasonSessionBusy = "SessionBusy"
	// ReasonOutsideWindow: the profile's maintenance window is closed; the
	// move waits until it opens, at the time the message gives.
	ReasonOutsideWindow = "OutsideWindow"
	// ReasonWaitingForClusterBudget: the controller's cluster-wide budget
	// (sessions moving at once, moves started per minute, across all
	// profiles) has no room for the move yet.
	ReasonWaitingForClusterBudget = "WaitingForClusterBudget"
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
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Up-to-date",type=integer,JSONPath=`.status.updatedReplicas`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.conditions[?(@.type=="ProfileUpToDate")].reason`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.profileRevision`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Template-Image",type=string,JSONPath=`.spec.template.spec.containers[?(@.name=="game-server")].image`,priority=1,description="The game server's image when spec.template sets it: the image of the template's container named game-server, the default spec.container. A column is one JSONPath, which cannot follow spec.container, so a game server container named otherwise shows none here."
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
//
// The game server's pod is spec.template, a full pod template, and its game
// server container the one that spec.container names. The short fields
// image, ports and resources are the game server container's, for sessions
// that need nothing else (and as sessions were written before template
// existed): each may be set either here or in the template's container, not
// both. The controller owns the Deployment's pod template entirely: it is
// spec.template with the short fields folded into the game server container,
// the controller's labels, and the profile mounted.
//
// The rules below relate the template to spec's own fields. The rules about
// the template alone sit on its fields (hack/tools/codegen/crdlimits), where
// a session's writes, its status writes included, evaluate them at a
// fraction of the cost.
//
// +kubebuilder:validation:XValidation:rule="!has(self.image) || !(has(self.template) && has(self.template.spec) && self.template.spec.containers.exists(c, c.name == self.container && has(c.image)))",message="the game server's image is set twice, in spec.image and in the image of spec.template's container named by spec.container: remove one of them"
// +kubebuilder:validation:XValidation:rule="has(self.image) || (has(self.template) && has(self.template.spec) && self.template.spec.containers.exists(c, c.name == self.container && has(c.image)))",messageExpression="'the game server needs an image: set spec.image, or add to spec.template.spec.containers a container named ' + self.container + ' (spec.container) with an image'"
// +kubebuilder:validation:XValidation:rule="!has(self.ports) || size(self.ports) == 0 || !(has(self.template) && has(self.template.spec) && self.template.spec.containers.exists(c, c.name == self.container && has(c.ports) && size(c.ports) > 0))",message="the game server's ports are set twice, in spec.ports and in the ports of spec.template's container named by spec.container: keep one list"
// +kubebuilder:validation:XValidation:rule="!has(self.resources) || (!has(self.resources.requests) && !has(self.resources.limits)) || !(has(self.template) && has(self.template.spec) && self.template.spec.containers.exists(c, c.name == self.container && has(c.resources)))",message="the game server's resources are set twice, in spec.resources and in the resources of spec.template's container named by spec.container: keep one of them"
// +kubebuilder:validation:XValidation:rule="!(has(self.template) && has(self.template.spec)) || self.template.spec.containers.all(c, c.name != self.container || !has(c.volumeMounts) || c.volumeMounts.all(m, m.mountPath != '/etc/gamesession/profile' && !m.mountPath.startsWith('/etc/gamesession/profile/')))",message="the game server container must not mount anything at or below /etc/gamesession/profile: the controller mounts the profile there; choose another mountPath"
// +kubebuilder:validation:XValidation:rule="!(has(self.template) && has(self.template.spec)) || self.template.spec.containers.all(c, c.name == self.container || has(c.image))",message="each container of spec.template.spec.containers other than the game server's needs an image"
// +kubebuilder:validation:XValidation:rule="!has(self.progressDeadlineSeconds) || !has(self.minReadySeconds) || self.progressDeadlineSeconds > self.minReadySeconds",message="progressDeadlineSeconds must be greater than minReadySeconds: a pod must get the chance to count as available before the rollout is declared stuck"
type GameSessionSpec struct {
	// profileRef names the profile ConfigMap that the game servers mount
	// read-only at /etc/gamesession/profile: "name" for one of the
	// GameSession's own namespace, or "namespace/name" for one of another
	// namespace, which that namespace must permit with a Gateway API
	// ReferenceGrant (from group games.example.com, kind GameSession, the
	// session's namespace; to group "", kind ConfigMap). The pods mount a
	// copy the controller makes in the session's namespace. The ConfigMap
	// must carry the label games.example.com/profile=true; the controller
	// ignores ConfigMaps without it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="profileRef must be a ConfigMap name (a DNS-1123 subdomain of lowercase letters, digits, '-' and '.', starting and ending with a letter or digit), optionally after a namespace and a slash: arena, or platform/arena"
	// +kubebuilder:validation:XValidation:rule="self.contains('/') ? self.split('/')[0].size() <= 63 && self.split('/')[1].size() <= 253 : self.size() <= 253",message="profileRef: a namespace is at most 63 characters, and a ConfigMap name at most 253"
	ProfileRef string `json:"profileRef"`

	// image is the game server's container image, e.g.
	// registry.example.com/arena:1.4.2: optionally a registry host (and
	// port), a lowercase repository path, optionally a :tag and an
	// @sha256: digest; the pattern below is that grammar, as container
	// runtimes parse it. Set it here or as the image of the game server's
	// container in template, not both. The template's images are checked
	// against the same pattern.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('\\\\s')",message="image must not contain whitespace"
	// +kubebuilder:validation:XValidation:rule="self == self.trim()",message="image must not begin or end with a whitespace character (Kubernetes refuses an image with leading or trailing Unicode space, such as a no-break space)"
	// +kubebuilder:validation:Pattern=`^((?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:[.](?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`
	Image string `json:"image,omitempty"`

	// replicas is the number of game server pods. Defaults to 1, at most 100:
	// a session is the game servers of one match or shard, rolled out and
	// reported together; a platform runs more sessions, not bigger ones, and
	// a profile rollout paces sessions, not pods.
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

	// container names the game server's container in template: the one the
	// short fields image, ports and resources fill in, and that mounts the
	// profile. If template has no container of that name, the controller adds
	// it, first. Defaults to game-server.
	// +optional
	// +kubebuilder:default=game-server
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Container string `json:"container,omitempty"`

	// template is the game server pod: every field of a Pod's spec (env,
	// probes, lifecycle hooks, scheduling, sidecars, volumes, security
	// context...) and its labels and annotations. It becomes the pod template
	// of the session's Deployment, which the controller keeps equal to it:
	// hand edits of the Deployment's template are undone. The readiness probe
	// matters: a profile rollout counts a session as done, or failed, by its
	// pods' readiness.
	// +optional
	Template *corev1.PodTemplateSpec `json:"template,omitempty"`

	// progressDeadlineSeconds is how long the Deployment may take to make
	// progress before it reports ProgressDeadlineExceeded, which a profile
	// rollout's brake counts as a failed session. Unset, the profile's
	// rollout policy decides (annotation
	// rollout.games.example.com/progress-deadline), and without one it is
	// the Deployment default, 600 seconds.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// minReadySeconds is how long a new pod must be ready before it counts as
	// available. Unset, it is the Deployment default, 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinReadySeconds *int32 `json:"minReadySeconds,omitempty"`

	// revisionHistoryLimit is how many old ReplicaSets the Deployment keeps
	// for rollback. Unset, it is the Deployment default, 10.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`

	// strategy is how the Deployment replaces the game server pods, as in a
	// Deployment: RollingUpdate (maxSurge and maxUnavailable, 25% each by
	// default) or Recreate. Unset, it is the Deployment default,
	// RollingUpdate with 25% each. The session owns these settings as it
	// owns the pod template: a hand edit of them on the Deployment is undone.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type in ['RollingUpdate', 'Recreate']",message="strategy.type must be RollingUpdate or Recreate"
	// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || !has(self.type) || self.type == 'RollingUpdate'",message="strategy.rollingUpdate may be set only when strategy.type is RollingUpdate"
	// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || !has(self.rollingUpdate.maxSurge) || !has(self.rollingUpdate.maxUnavailable) || !(self.rollingUpdate.maxSurge == 0 || self.rollingUpdate.maxSurge == '0%') || !(self.rollingUpdate.maxUnavailable == 0 || self.rollingUpdate.maxUnavailable == '0%')",message="strategy.rollingUpdate.maxSurge and maxUnavailable must not both be 0: the rollout could never replace a pod"
	// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || ((!has(self.rollingUpdate.maxSurge) || (type(self.rollingUpdate.maxSurge) == int ? int(self.rollingUpdate.maxSurge) >= 0 : string(self.rollingUpdate.maxSurge).matches('^[0-9]+%$'))) && (!has(self.rollingUpdate.maxUnavailable) || (type(self.rollingUpdate.maxUnavailable) == int ? int(self.rollingUpdate.maxUnavailable) >= 0 : string(self.rollingUpdate.maxUnavailable).matches('^[0-9]+%$'))))",message="strategy.rollingUpdate.maxSurge and maxUnavailable must each be a non-negative number or a percentage such as 25%"
	// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || !has(self.rollingUpdate.maxUnavailable) || type(self.rollingUpdate.maxUnavailable) != string || !string(self.rollingUpdate.maxUnavailable).matches('^[0-9]+%$') || int(string(self.rollingUpdate.maxUnavailable).replace('%', '')) <= 100",message="strategy.rollingUpdate.maxUnavailable must be at most 100%"
	Strategy *appsv1.DeploymentStrategy `json:"strategy,omitempty"`
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

	// updatedReplicas is the number of game server pods of the current pod
	// template (spec.template and the profile revision). During a rolling
	// update replicas and readyReplicas may exceed spec.replicas, by up to
	// the strategy's maxSurge, while old pods drain.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas"`

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
