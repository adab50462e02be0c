// Package controller runs one Deployment per GameSession and rolls it out
// whenever the profile ConfigMap the session references changes.
// [NewController] and [Controller.Run], in controller.go, are the entry
// points; cmd/gamesession-controller/app builds the informers and calls them.
//
// # Two controllers
//
// [Controller] is only the wiring of two controllers over one set of
// informers, each with its own type, queue, workers and sync:
//   - the session controller (sessionController, sessions.go) makes each
//     GameSession's Deployment and status. GameSession, Deployment,
//     ReferenceGrant and referenced-input events queue session keys, which
//     the workers sync (syncGameSession in sync.go);
//   - the profile controller (profileController, profiles.go) makes each
//     profile's revisions, plans its rollout and records it on the
//     ProfileRollout. Profile, revision, ReplicaSet and ProfileRollout
//     events, and session syncs while a rollout is in progress, queue
//     profile keys, which one worker syncs (syncProfile in profilesync.go).
//
// Both read one caches value (caches.go), the informers' listers and
// indexes. Each sees of the other a named view and nothing more: the session
// controller reads plans, policies and revisions through rolloutView, and
// the profile controller queues sessions through sessionQueue. So a session
// sync cannot change a plan, and a profile sync cannot reach into a session.
// Which controller hears which event is one table, eventHandlers
// (controller.go). Both queues run on one worker type (worker.go).
//
// Six informers, and up to three more (ReferenceGrants, labelled Secrets,
// labelled session-config ConfigMaps), feed the two queues (see
// [Informers]). Every ConfigMap, Deployment and ReplicaSet informer comes
// from a factory filtered by a label (the profile label, [RevisionLabel],
// [LabelManagedBy], and for the referenced inputs their own), so the
// cluster's other objects are never listed, watched or cached. The
// controller relies on those filters, not on checks of its own.
//
// # Read, decide, act
//
// A session's sync reads what its decision needs once, into a sessionView
// (view, in sync.go). decideSession (decide.go), a pure function of that
// view, returns one sessionDecision: what to do with the Deployment, the
// desired Deployment built once, the move it asks the ledger of moves for,
// the requeue. act (sync.go) carries it out in one place. When the world
// answers what the decision could not know (the ledger refuses the move, a
// live read or a create finds the Deployment), act reads the answer into the
// view and decides again. The status is built in one pass from the last
// decision (sessionStatusOf). A pure decision can be tested without clients
// or clocks, and choosing a revision writes no state.
//
// # State beside the informers
//
// What the controllers keep in memory, why a cache cannot tell it, who
// writes it and what a restart loses are one table, in state.go. What a
// rollout must remember across restarts and failovers (a halt, the stable
// revision) is not kept in memory but in the API, in the profile's
// ProfileRollout, which the profile sync writes once per rollout step.
//
// # Referenced inputs
//
// Labelled Secrets and ConfigMaps that a session's pod template reads roll
// its game servers when their data change, each kind one inputKind
// (secrets.go, sessionconfigs.go) over shared machinery (inputs.go): an
// index from an object to its readers, a digest in place of the data in
// the cache, and two pod-template annotations per kind. Their moves go under
// the profile's rollout policy, a canary per changed object included
// (inputcanary.go).
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
// costs no request. The Deployment is written as an update of the cached
// copy with the controller's fields that differ changed, or, with
// [Options.PatchDeployments], as a patch of those fields alone
// (deployment.go); the status with a PUT of the status subresource
// (statuswrite.go). Each carries the resourceVersion it was computed from, so
// a write based on a stale cache fails with a Conflict, retried quietly,
// instead of overwriting a newer object. After a write that changes the
// spec, syncs wait for the cache to show the generation it produced
// (expectations.go) rather than write again. The only live reads are of a
// session's Deployment: after a create answered AlreadyExists, and for a
// session with nothing to mount whose Deployment the cache does not show but
// may exist. There is no finalizer: the garbage collector deletes a
// session's Deployment through its owner reference.
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
// rollout. sessionStatusOf (decide.go) and status.go turn what a session's
// sync decided and saw into conditions and Events.
package controller
