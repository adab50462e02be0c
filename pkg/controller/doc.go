// Package controller runs one Deployment per GameSession and rolls it out
// whenever the profile ConfigMap the session references changes.
// [NewController] and [Controller.Run], in controller.go, are the entry
// points; cmd/gamesession-controller/app builds the informers and calls them.
//
// Six informers, and up to three more (ReferenceGrants, labelled Secrets,
// labelled session-config ConfigMaps), feed two work queues (see
// [Informers]). GameSession, profile, Deployment and referenced-input
// events queue GameSession keys, which the workers
// sync (syncGameSession in sync.go). Profile, revision, ReplicaSet and
// ProfileRollout events, and session syncs while a rollout is in progress,
// queue profile keys, which one profile worker syncs (syncProfile in
// profilesync.go). Both queues run on one worker type (worker.go). Every
// ConfigMap, Deployment and ReplicaSet informer comes from a factory
// filtered by a label (the profile label, [RevisionLabel], [LabelManagedBy],
// and for the referenced inputs their own), so the cluster's other objects
// are never listed, watched or cached. The
// controller relies on those filters, not on checks of its own.
//
// # State beside the informers
//
// Each piece the controller keeps in memory, why, and what a restart loses
// (the [Controller] type lists where each lives):
//   - profile hashes, so a fan-out hashes a profile once: nothing is lost;
//   - the fan-out's delay and Deployments-first order (fanout.go): a
//     restart loses the delay of a fan-out in flight, never a write;
//   - write expectations by Deployment UID and generation (expectations.go):
//     a restart costs at most one idle patch per session;
//   - revision expectations by UID (revision.go): revisions deleted, and
//     Deployment writes that mount one, until the caches show them, a live
//     read supersedes them or they expire (a deleted session's writes
//     included: its Deployment may run on); whatever ends one queues the
//     profiles of the revisions it held; a restarted controller's caches
//     start in sync and need none;
//   - the latest rollout plan of each profile (profilesync.go): recomputed
//     from the caches and the profile's ProfileRollout;
//   - the ledger of moves (ledger.go): every session moving to a new
//     profile revision or to new data of its Secrets and ConfigMaps, for the
//     cluster-wide budget and each profile's max-rolling and max-failed, and
//     the sessions waiting for a place; rebuilt at start from the
//     Deployments still rolling and the moves they record for the last
//     minute;
//   - the session queue's lanes and the kind of each add (lanes.go): a
//     restart loses the order, never a key;
//   - since when each session's change of referenced inputs has waited
//     (inputs.go): a restart counts max-defer from its start, so a busy
//     session waits longer, never less.
//
// # Referenced inputs
//
// Labelled Secrets and ConfigMaps that a session's pod template reads roll
// its game servers when their data change, each kind one inputKind
// (secrets.go, sessionconfigs.go) over shared machinery (inputs.go): an
// index from an object to its readers, a digest in place of the data in
// the cache, and two pod-template annotations per kind.
//
// What a rollout must remember across restarts and failovers (a halt, the
// stable revision) is not kept in memory but in the API, in the profile's
// ProfileRollout, which the profile sync writes once per rollout step.
//
// # Fan-out
//
// The GameSession informer has an index on spec.profileRef, keyed by
// "namespace/name" (profile.go). A change of a profile's data goes through it
// to exactly the keys of the sessions that reference it, without fetching an
// object, so its cost does not grow with the other sessions and profiles in
// the cluster; label and annotation edits and resyncs roll nothing. The
// fan-out (fanout.go) queues those keys after [Options.ProfileChangeDelay],
// so that a burst of edits rolls each session once, and has each session
// write its Deployment first and its status on a second pass, so that every
// game server gets the new profile before the statuses are written.
//
// # Writes
//
// A sync reads the caches, and writes only what differs: a session in order
// costs no request. The Deployment is written with a strategic merge patch of
// the fields the controller owns (deployment.go) and the status with
// UpdateStatus, each carrying the resourceVersion it was computed from, so a
// write based on a stale cache fails with a Conflict, retried quietly,
// instead of overwriting a newer object. After a patch, syncs wait for the
// cache to show the generation it produced (expectations.go) rather than
// patch again. The only live read follows a create answered AlreadyExists.
// There is no finalizer: the garbage collector deletes a session's
// Deployment through its owner reference.
//
// # Revisions
//
// A Deployment never mounts the live profile, whose files the kubelet would
// rewrite in running pods ahead of their rollout, but an immutable copy of
// one content of it, a revision named after the profile and the content hash
// ([RevisionName], revision.go). The profile sync creates the revision of
// each new content, deletes those that no pod can mount and that are
// neither current, stable, nor among the newest
// [Options.RevisionHistoryLimit], plans paced rollouts with pkg/rollout and
// records them in the profile's ProfileRollout. A new leader computes the
// same plans from the same caches and ProfileRollouts and carries on the
// rollout. status.go turns what a sync saw into conditions and Events.
package controller
