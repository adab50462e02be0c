package faults

import (
	"testing"
	"time"
)

// TestFaultKillMidFanOut SIGKILLs the controller when a third of the
// Deployments carry an edited profile's hash, and starts a new process. The
// new process finishes the fan-out from the state it finds, and rolls no
// Deployment a second time: it has no memory of what the first one did, so
// it must go by what the Deployments carry.
func TestFaultKillMidFanOut(t *testing.T) {
	t.Parallel() // leaves the control plane alone: see the package doc
	e := newEnv(t)
	n := e.size.sessions
	tracker := e.trackRollouts()
	first := e.startController("first", e.slowFlags()...)
	e.waitReadyz(first)
	before := e.generations()

	hash := e.editProfile()
	seen := tracker.waitCarrying(hash, n/3, time.Minute)
	first.Kill()
	carried := e.carrying(hash)
	t.Logf("killed %s when the watch saw %d of %d Deployments with the new hash; %d carried it after the kill", first.Name, seen, n, carried)
	if carried >= n {
		t.Fatalf("the fan-out was over before the kill (%d of %d Deployments rolled): nothing left to test", carried, n)
	}

	second := e.startController("second")
	e.waitConverged("after the restart", hash)
	e.checkRolledOnce(before)
	tracker.check(e.hashes, e.deployments())
	if state := second.ExitState(); state != "" {
		t.Errorf("%s exited: %s", second.Name, state)
	}
}
