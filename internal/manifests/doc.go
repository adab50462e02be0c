// Package manifests applies YAML manifests (the generated CRD, the examples,
// the deployment artifacts) to a cluster with client-go alone, so tests, the
// benchmarks and `make run` need no kubectl.
//
// An [Applier] (manifests.go) server-side-applies each object as
// [FieldManager] through the dynamic client, finding its resource by
// discovery; a kind whose CRD was applied a moment ago is retried after a
// discovery refresh. [InstallCRDs] also waits until the API server serves the
// CRDs it applies.
package manifests
