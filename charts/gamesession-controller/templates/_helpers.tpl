{{/*
Object names do not depend on the release name: the chart runs the one
controller of a cluster (rbac.scope=cluster) or of a namespace
(rbac.scope=namespace), and a second cluster-wide install should fail on the
existing ClusterRole rather than run two controllers over the same sessions.
*/}}
{{- define "gamesession-controller.name" -}}
gamesession-controller
{{- end }}

{{/* The labels of every object, and the pods' selector. */}}
{{- define "gamesession-controller.labels" -}}
app.kubernetes.io/name: {{ include "gamesession-controller.name" . }}
{{- end }}

{{- define "gamesession-controller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "gamesession-controller.name" .) }}
{{- else -}}
{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Lease name; empty means the controller's default --leader-election-id. */}}
{{- define "gamesession-controller.leaseName" -}}
{{ .Values.leaderElection.id | default "gamesession-controller" }}
{{- end }}

{{- define "gamesession-controller.leaseNamespace" -}}
{{ .Values.leaderElection.namespace | default .Release.Namespace }}
{{- end }}

{{/*
The RBAC rules of the controller in the namespaces it manages, shared by the
ClusterRole and the namespace-scoped Role. artifacts/rbac/clusterrole.yaml
says why each is needed.
*/}}
{{- define "gamesession-controller.rules" -}}
- apiGroups: ["games.example.com"]
  resources: ["gamesessions"]
  verbs: ["list", "watch"]
# Status only through the status subresource: no write to a session's spec.
- apiGroups: ["games.example.com"]
  resources: ["gamesessions/status"]
  verbs: ["update"]
# Rollout state, one ProfileRollout per profile: created, its status
# written; the garbage collector removes it with its profile.
- apiGroups: ["games.example.com"]
  resources: ["profilerollouts"]
  verbs: ["list", "watch", "create"]
- apiGroups: ["games.example.com"]
  resources: ["profilerollouts/status"]
  verbs: ["update"]
# RBAC cannot grant by label: the controller itself lists only profiles
# (--profile-selector) and its revisions.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["list", "watch"]
# Profile revisions: created per content, stale ones deleted.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "delete"]
# A GET only where the revision cache cannot know: a revision's create
# answered AlreadyExists (its own, not cached yet, or a foreign ConfigMap in
# the way), or a delete of it sent without learning the outcome.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
# No delete: the garbage collector removes a session's Deployment.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "create", "update", "patch"]
# A GET only when a create answers AlreadyExists: the Deployment may be the
# session's own with its managed-by label removed, which the cache omits.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get"]
# ReplicaSets, read only: which revisions the pods of old ReplicaSets mount.
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Labelled Secrets (--watch-secrets), cached as a keyed digest of their data
# only: RBAC cannot grant by label.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["list", "watch"]
{{- if .Values.liveDelivery }}
# Live delivery: the sessions' live profiles rewritten with each revision.
# RBAC cannot limit the update by label: the controller updates only the
# labelled ConfigMaps its sessions control.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["update"]
# Live delivery: the game servers' acknowledgments on their pods. RBAC
# cannot grant by label: the controller lists only the pods of live sessions
# and caches only their name, UID, session label, phase and acknowledgment.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}

{{/*
The Secret digest key, in the controller's own namespace: create (not
limited by name) and a get of the key only.
*/}}
{{- define "gamesession-controller.keyRules" -}}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: ["gamesession-controller-secret-digest-key"]
  verbs: ["get"]
{{- end }}

{{/*
The leader election Lease: create (RBAC cannot limit a create by name), and
get and update of this release's Lease only.
*/}}
{{- define "gamesession-controller.leaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ include "gamesession-controller.leaseName" . | quote }}]
  verbs: ["get", "update"]
{{- end }}

{{- define "gamesession-controller.subjects" -}}
- kind: ServiceAccount
  name: {{ include "gamesession-controller.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
The controller's arguments. Flags without a value in .Values.controller are
left out, so the binary's defaults apply. Within each group the flags come
in alphabetical order (range over a dict).
*/}}
{{- define "gamesession-controller.args" -}}
{{- if .Values.leaderElection.enabled }}
- --leader-elect=true
{{- with .Values.leaderElection.namespace }}
- --leader-election-namespace={{ . }}
{{- end }}
{{- with .Values.leaderElection.id }}
- --leader-election-id={{ . }}
{{- end }}
{{- end }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
- --health-probe-bind-address=:{{ .Values.health.port }}
{{- /* Always stated: the rules above follow the same value, whatever the binary's default. */}}
- --live-delivery={{ .Values.liveDelivery }}
{{- if eq .Values.rbac.scope "namespace" }}
- --namespace=$(POD_NAMESPACE)
{{- end }}
{{- $c := .Values.controller }}
{{- range $flag, $value := dict "workers" $c.workers "kube-api-burst" $c.kubeAPIBurst "revision-history-limit" $c.revisionHistoryLimit "max-moving-sessions" $c.maxMovingSessions "max-moves-per-minute" $c.maxMovesPerMinute }}
{{- if not (kindIs "invalid" $value) }}
- --{{ $flag }}={{ int64 $value }}
{{- end }}
{{- end }}
{{- /* Values parse as float64, which prints 1e+06 for a million: fine for a float flag. */}}
{{- if not (kindIs "invalid" $c.kubeAPIQPS) }}
- --kube-api-qps={{ $c.kubeAPIQPS }}
{{- end }}
{{- range $flag, $value := dict "profile-selector" $c.profileSelector "profile-change-delay" $c.profileChangeDelay "resync-period" $c.resyncPeriod "rollout-max-rolling" $c.rolloutMaxRolling "rollout-canary" $c.rolloutCanary "rollout-max-failed" $c.rolloutMaxFailed "rollout-max-defer" $c.rolloutMaxDefer }}
{{- /* A number is a value too: rolloutMaxFailed 0 halts at the first failure. */}}
{{- if and (not (kindIs "invalid" $value)) (ne (toString $value) "") }}
- {{ printf "--%s=%v" $flag $value | quote }}
{{- end }}
{{- end }}
{{- with .Values.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end }}
