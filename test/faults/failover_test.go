package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/testutil"
)

// leaderElectionFlags are the flags of a replica that runs for the lease
// leaseID in namespace ns. Short timings keep each failover to a few seconds.
func leaderElectionFlags(ns, leaseID string) []string {
	return []string{
		"--leader-elect",
		"--leader-election-namespace=" + ns,
		"--leader-election-id=" + leaseID,
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=1s",
	}
}

// TestFaultLeaderFailoverRepeated runs three replicas with leader election
// and short lease timings, and SIGKILLs the leader again and again, each
// time when it has rolled a third of the Deployments to the latest edit; a
// new edit lands right after each kill, while no one leads, and a new
// replica replaces the dead one.
//
// What "no session rolled twice" means when edits overlap failovers: a
// Deployment may receive several edits (one the dead leader rolled, then the
// next), or skip some (not rolled yet when a newer edit came, it goes
// straight to the newer hash). It must never receive one edit twice, nor go
// back to an older hash, as a new leader redoing its predecessor's work with
// stale data would make it; and its generation must rise exactly once per
// edit it received. The watch of rollouts_test.go sees every change of every
// Deployment, so all of this is checked for each of them.
func TestFaultLeaderFailoverRepeated(t *testing.T) {
	t.Parallel() // leaves the control plane alone: see the package doc
	e := newEnv(t)
	n := e.size.sessions
	tracker := e.trackRollouts()
	const leaseID = "faults-leader"
	flags := append(e.slowFlags(), leaderElectionFlags(e.ns, leaseID)...)
	var replicas []*testutil.ControllerProcess
	for _, name := range []string{"replica-a", "replica-b", "replica-c"} {
		replicas = append(replicas, e.startController(name, flags...))
	}
	leader := e.waitLeader(leaseID, replicas, "")

	hash := e.editProfile()
	for kill := 1; kill <= e.size.failovers; kill++ {
		seen := tracker.waitCarrying(hash, n/3, leaseWait)
		leader.Kill()
		killed := time.Now()
		carried := e.carrying(hash)
		if carried >= n {
			t.Fatalf("failover %d: edit %d had reached all %d Deployments before the kill: nothing left to test", kill, len(e.hashes)-1, n)
		}
		replacement := e.startController(fmt.Sprintf("replica-%d", kill), flags...)
		replicas = slices.DeleteFunc(replicas, func(p *testutil.ControllerProcess) bool { return p == leader })
		replicas = append(replicas, replacement)
		hash = e.editProfile()
		next := e.waitLeader(leaseID, replicas, leader.Identity())
		t.Logf("failover %d: killed %s when the watch saw %d Deployments with edit %d (%d after the kill); made edit %d; %s leads %s after the kill",
			kill, leader.Name, seen, len(e.hashes)-2, carried, len(e.hashes)-1, next.Name, time.Since(killed).Round(100*time.Millisecond))
		leader = next
	}

	e.waitConverged("after the last failover", hash)
	deployments := e.deployments()
	received := tracker.check(e.hashes, deployments)
	t.Logf("edits received per Deployment (of %d made): %v", len(e.hashes)-1, received)
	// Cross-check with kube-controller-manager: every template it made a
	// ReplicaSet for is one the watch saw on that Deployment.
	var unseen []string
	for name, hashes := range e.replicaSets() {
		seen := tracker.hashesOf(name)
		for _, h := range hashes {
			if !slices.Contains(seen, h) {
				unseen = append(unseen, fmt.Sprintf("%s: ReplicaSet of hash %s, history %v", name, h, seen))
			}
		}
	}
	report(t, unseen, "ReplicaSets for a template the watch never saw on their Deployment")
	for _, p := range replicas {
		state := p.ExitState()
		switch {
		case state == "":
		case strings.Contains(p.Log(), "lost the leader election lease"):
			// A leader starved of CPU for a renew deadline (3s) steps down
			// and exits, as designed; the checks above hold all the same.
			t.Logf("%s lost its lease and exited: %s", p.Name, state)
		default:
			t.Errorf("%s exited: %s", p.Name, state)
		}
	}
}

// waitLeader waits until the lease names a live one of the replicas, other
// than the identity not, and returns it.
func (e *env) waitLeader(leaseID string, replicas []*testutil.ControllerProcess, not string) *testutil.ControllerProcess {
	e.t.Helper()
	var leader *testutil.ControllerProcess
	var holder string
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, leaseWait, true, func(ctx context.Context) (bool, error) {
		lease, err := e.kube.CoordinationV1().Leases(e.ns).Get(ctx, leaseID, metav1.GetOptions{})
		if err != nil {
			return false, nil // not created yet
		}
		holder = ptr.Deref(lease.Spec.HolderIdentity, "")
		if holder == "" || holder == not {
			return false, nil
		}
		for _, p := range replicas {
			if p.Identity() == holder && p.ExitState() == "" {
				leader = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		var ids []string
		for _, p := range replicas {
			ids = append(ids, p.Name+"="+p.Identity())
		}
		e.t.Fatalf("no new leader within %s: the lease names %q; replicas %s", leaseWait, holder, strings.Join(ids, ", "))
	}
	return leader
}
