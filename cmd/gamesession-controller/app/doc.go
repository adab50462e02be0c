// Package app wires the GameSession controller into a process: clients,
// label-filtered informer factories, the controller itself, optional leader
// election, and the metrics and health servers. main parses flags into
// [Options] (options.go) and calls [Run] (server.go); the integration tests
// call Run in-process, with Options.RESTConfig, and stop it by cancelling its
// context, so nothing here exits the process.
//
// A factory applies one set of list options to every informer it makes, so
// each filter gets a factory of its own: profile ConfigMaps by
// --profile-selector, revisions by controller.RevisionSelector (cached
// without their data) and Deployments by controller.ManagedDeploymentSelector.
// No informer caches managedFields. Clients of built-in types speak protobuf;
// the GameSession client speaks JSON, as custom resources have no protobuf
// encoding.
//
// With --leader-elect (leaderelection.go) the informers and workers start
// only once the process holds the Lease, and losing it ends Run with an
// error: the process exits and comes back as a standby rather than reuse
// caches and a queue built for another term. Liveness fails only for what a
// restart can fix, and readiness holds on a standby (health.go).
package app
