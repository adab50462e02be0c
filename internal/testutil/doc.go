// Package testutil holds what the test packages that run the controller
// binary as a process share: building it, starting and stopping it, probing
// its /healthz, /readyz and /metrics, and writing kubeconfigs for it.
// test/integration and test/faults use it; nothing else should.
package testutil
