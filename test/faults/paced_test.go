package faults

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/gamesession-controller/internal/testutil"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// pacedBudget is the rollout budget of the paced fault tests, as the
// profile annotation says it: a tenth of the sessions.
const pacedBudget = "10%"

// pace sets the profile's rollout budget and returns the most sessions that
// may be moved and not Ready at once.
func (e *env) pace() int {
	e.t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, profile, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[rollout.AnnotationMaxRolling] = pacedBudget
	if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return max(1, e.size.sessions/10)
}

// checkBudget fails the test if more sessions were moved and not Ready at
// once than the budget allows.
func (e *env) checkBudget(tracker *rollouts, budget int) {
	e.t.Helper()
	seen := tracker.maxRollingSeen()
	e.t.Logf("at most %d Deployments carried the new hash without being rolled out at once (budget %d)", seen, budget)
	if seen > budget {
		e.t.Errorf("%d Deployments were moved and not Ready at once, above the budget of %d", seen, budget)
	}
}

// TestFaultKillMidPacedRollout SIGKILLs the controller in the middle of a
// rollout paced at a tenth of the sessions. Who moves next is computed from
// the caches alone, so the new process goes on with the same rollout: within
// the budget throughout, and no Deployment rolled twice.
func TestFaultKillMidPacedRollout(t *testing.T) {
	t.Parallel() // leaves the control plane alone: see the package doc
	e := newEnv(t)
	n := e.size.sessions
	budget := e.pace()
	tracker := e.trackRollouts()
	first := e.startController("first")
	e.waitReadyz(first)
	before := e.generations()

	hash := e.editProfile()
	tracker.watchBudget(hash)
	seen := tracker.waitCarrying(hash, n/3, time.Minute)
	first.Kill()
	t.Logf("killed %s when the watch saw %d of %d Deployments with the new hash", first.Name, seen, n)
	if carried := e.carrying(hash); carried >= n {
		t.Fatalf("the rollout was over before the kill (%d of %d Deployments rolled): nothing left to test", carried, n)
	}

	second := e.startController("second")
	e.waitConverged("after the restart", hash)
	e.checkRolledOnce(before)
	e.checkBudget(tracker, budget)
	tracker.check(e.hashes, e.deployments())
	if state := second.ExitState(); state != "" {
		t.Errorf("%s exited: %s", second.Name, state)
	}
}

// TestFaultFailoverMidPacedRollout kills the leader of two replicas in the
// middle of a paced rollout: the new leader goes on within the same budget
// and rolls no Deployment twice.
func TestFaultFailoverMidPacedRollout(t *testing.T) {
	t.Parallel() // leaves the control plane alone: see the package doc
	e := newEnv(t)
	n := e.size.sessions
	budget := e.pace()
	tracker := e.trackRollouts()
	const leaseID = "paced-leader"
	flags := leaderElectionFlags(e.ns, leaseID)
	replicas := []*testutil.ControllerProcess{e.startController("replica-a", flags...), e.startController("replica-b", flags...)}
	leader := e.waitLeader(leaseID, replicas, "")
	before := e.generations()

	hash := e.editProfile()
	tracker.watchBudget(hash)
	seen := tracker.waitCarrying(hash, n/3, leaseWait)
	leader.Kill()
	killed := time.Now()
	if carried := e.carrying(hash); carried >= n {
		t.Fatalf("the rollout was over before the kill (%d of %d Deployments rolled): nothing left to test", carried, n)
	}
	next := e.waitLeader(leaseID, replicas, leader.Identity())
	t.Logf("killed %s when the watch saw %d of %d Deployments with the new hash; %s leads %s later",
		leader.Name, seen, n, next.Name, time.Since(killed).Round(100*time.Millisecond))

	e.waitConverged("after the failover", hash)
	e.checkRolledOnce(before)
	e.checkBudget(tracker, budget)
	tracker.check(e.hashes, e.deployments())
	if state := next.ExitState(); state != "" {
		t.Errorf("%s exited: %s", next.Name, state)
	}
}
