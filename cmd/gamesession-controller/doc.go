// Command gamesession-controller runs one Deployment per GameSession and rolls
// it out whenever the profile ConfigMap the session references changes.
//
// main.go only parses the flags (the controller's, which --help lists, and
// klog's) and calls app.Run: everything else is in package app, so that the
// integration tests run the same code in-process. The first SIGTERM or SIGINT
// stops the controller gracefully, letting the workers finish the session
// they sync; a second one kills the process at once.
//
// artifacts/ holds what it needs in a cluster (`kubectl apply -k artifacts/`):
// the CRD, its RBAC, and a Deployment of two replicas with --leader-elect.
package main
