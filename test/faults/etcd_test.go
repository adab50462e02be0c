package faults

import (
	"testing"
	"time"
)

// TestFaultEtcdRestart restarts etcd in the middle of a fan-out. Requests
// fail or stall while it is away, the API server's watches start over, and
// the controller must still bring every session to the new hash, rolling
// each Deployment once.
func TestFaultEtcdRestart(t *testing.T) {
	e := newEnv(t)
	n := e.size.sessions
	tracker := e.trackRollouts()
	p := e.startController("controller", e.slowFlags()...)
	e.waitReadyz(p)
	before := e.generations()

	hash := e.editProfile()
	tracker.waitCarrying(hash, n/3, time.Minute)
	tracker.stop() // its watch may not resume across the restart
	begin := time.Now()
	if err := cp.RestartEtcd(e.ctx); err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	end := time.Now()
	t.Logf("etcd restarted, and kube-apiserver ready again, in %s", end.Sub(begin).Round(time.Millisecond))

	e.waitConverged("after the etcd restart", hash)
	if state := p.ExitState(); state != "" {
		t.Fatalf("the controller exited: %s", state)
	}
	// etcd is gone from the moment the restart begins, so a patch made
	// after that moment was made after etcd came back; the API server
	// serves writes before its /readyz says so, so end would be too late.
	patchedBefore, patchedAfter := e.patchedAround(begin, begin)
	t.Logf("Deployments last patched before the restart: %d, after it: %d (of %d)", patchedBefore, patchedAfter, n)
	if patchedBefore == 0 || patchedAfter == 0 {
		t.Errorf("the restart did not cut the fan-out in two: %d Deployments patched before it, %d after", patchedBefore, patchedAfter)
	}
	e.checkRolledOnce(before)
}
