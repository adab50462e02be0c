// Package profileack is the game server's side of live profiles: it reads
// which revision of a profile is mounted, and acknowledges, through the
// Kubernetes API, that it applied it or failed to. The contract:
//
//	the mounted profile directory holds the profile's files and .revision, the revision's name
//	the game server sets its own pod's annotation games.example.com/profile-ack to "<revision>" or "<revision> failed: <reason>"
//
// The controller delivers a profile into a per-session ConfigMap that the
// game server's pods mount as a directory (no subPath), so the kubelet
// replaces its files in place, without restarting the pods. It replaces
// them all at once (one symlink swap), so the files next to a .revision are
// always that revision's.
//
// # The annotation
//
// [Value] writes the annotation and [Parse] reads it; the controller reads
// acknowledgments with Parse. A value is one of:
//
//	<revision>                  applied
//	<revision> failed:          not applied, no reason given
//	<revision> failed: <reason> not applied, and why
//
// A revision is an opaque name without whitespace or control characters, of
// at most [MaxRevisionBytes] bytes. The reason is one line: runs of
// whitespace and control characters become one space, and it is cut to
// [MaxMessageBytes] bytes, so that a long error keeps the pod object small.
// Parse refuses anything else, an empty revision first of all (it only
// tidies a hand-written reason the way Value would).
//
// # Writing it
//
// [Acknowledge] sends a JSON merge patch of that one annotation on the
// game server's own pod, with the pod's own ServiceAccount token: the
// projected token every pod mounts is bound to the pod, so the API server
// knows which pod is writing. RBAC cannot say "only your own pod", so the
// ValidatingAdmissionPolicy gamesession-profile-ack
// (artifacts/admission/profile-ack.yaml) refuses a pod-bound token's write
// of the annotation on any other pod, or with any other change.
// artifacts/examples/game-server-ack-rbac.yaml holds the RBAC a game
// server's ServiceAccount needs.
//
// # Following revisions
//
// [Follow] polls .revision (the kubelet updates a mounted ConfigMap every
// minute or so; polling every few seconds is plenty, and needs no inotify),
// calls the game server's apply function once per new revision, and then
// acknowledges the result. [InClusterAck] builds the acknowledgment function
// for a game server running in a pod.
package profileack
