// Package testutil holds what the test packages that run the controller
// binary as a process share: building it, starting and stopping it, probing
// its /healthz, /readyz and /metrics, writing kubeconfigs for it, and a
// minimal GameSession to give it work ([GameSession], objects.go). The test
// packages (test/integration, test/faults, test/image, and the test/deploy
// module) use it; nothing else should.
//
// [ControllerBinary] and [StartController] (process.go) are the entry points.
// A process, unlike Run in-process, can be SIGKILLed and its lease left to
// expire, which is what the leader election and fault tests need. [PromText]
// (prom.go) reads what /metrics returns.
package testutil
