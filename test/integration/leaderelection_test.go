package integration

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/testutil"
	"github.com/example/gamesession-controller/pkg/controller"
)

// TestLeaderElectionFailover runs two controller processes with the default
// lease timings (15s/10s/2s): exactly one reconciles while the other stands
// by, ready; when the leader is SIGKILLed (no lease release), the standby
// takes over and finishes a profile rollout started at that moment within the
// lease duration and a few seconds.
func TestLeaderElectionFailover(t *testing.T) {
	e := newEnv(t)
	const sessions = 3
	e.createProfile("arena", map[string]string{"server.cfg": "max_players=16"}, true)
	var names []string
	for i := range sessions {
		names = append(names, fmt.Sprintf("arena-%d", i))
		e.createSession(newSession(names[i], "arena", 1))
	}
	leaseID := "gamesession-controller-" + e.ns
	args := []string{"--leader-elect", "--leader-election-namespace=" + e.ns, "--leader-election-id=" + leaseID}
	replicas := []*testutil.ControllerProcess{
		e.startControllerProcess("replica-a", cp.KubeconfigPath(), nil, args...),
		e.startControllerProcess("replica-b", cp.KubeconfigPath(), nil, args...),
	}

	// One replica takes the lease and creates the Deployments.
	var holder string
	e.eventually("a leader", func() (bool, error) {
		lease, err := e.kube.CoordinationV1().Leases(e.ns).Get(e.ctx, leaseID, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		holder = ptr.Deref(lease.Spec.HolderIdentity, "")
		return holder != "", nil
	})
	e.eventually("Deployments", func() (bool, error) {
		hash := controller.ProfileHash(e.profile("arena"))
		return e.deploymentsCarry(names, hash)
	})
	var leader, standby *testutil.ControllerProcess
	for _, p := range replicas {
		switch p.Identity() {
		case holder:
			leader = p
		case "":
			t.Fatalf("%s logged no leader election identity", p.Name)
		default:
			standby = p
		}
	}
	if leader == nil || standby == nil {
		t.Fatalf("lease holder %q is not exactly one of the replicas (%s, %s)", holder, replicas[0].Identity(), replicas[1].Identity())
	}
	t.Logf("%s leads, %s stands by", leader.Name, standby.Name)

	// Both are live and ready: a standby that failed readiness would stall
	// every rolling update of the controller's Deployment.
	for _, p := range replicas {
		for _, probe := range []func() (int, string){func() (int, string) { return p.Healthz(e.ctx) }, func() (int, string) { return p.Readyz(e.ctx) }} {
			if code, body := probe(); code != http.StatusOK {
				t.Errorf("%s probe = %d %q, want 200", p.Name, code, body)
			}
		}
	}
	// Only the leader synced; the standby only read the lease.
	e.eventually("the leader's sync metrics", func() (bool, error) {
		n, _ := leader.Metrics(e.ctx).Sum("gamesession_controller_syncs_total", map[string]string{"result": "success"})
		return n >= sessions, fmt.Errorf("%g successful syncs", n)
	})
	sm := standby.Metrics(e.ctx)
	if n, _ := sm.Sum("gamesession_controller_syncs_total", nil); n != 0 {
		t.Errorf("the standby synced %g times, want 0", n)
	}
	// Started together, both replicas may try to create the Lease; only
	// successful writes count.
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		for _, code := range []string{"200", "201"} {
			if n, _ := sm.Sum("rest_client_requests_total", map[string]string{"method": method, "code": code}); n != 0 {
				t.Errorf("the standby wrote: %g %s requests answered %s, want none", n, method, code)
			}
		}
	}
	status := map[string]string{"name": leaseID}
	if v, ok := leader.Metrics(e.ctx).Sum("leader_election_master_status", status); !ok || v != 1 {
		t.Errorf("leader's leader_election_master_status = %g (present %v), want 1", v, ok)
	}
	if v, ok := sm.Sum("leader_election_master_status", status); !ok || v != 0 {
		t.Errorf("standby's leader_election_master_status = %g (present %v), want 0", v, ok)
	}

	// The leader dies without releasing the lease; a profile edit lands at
	// that very moment and waits for the standby.
	leader.Kill()
	killed := time.Now()
	hash := controller.ProfileHash(e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data["server.cfg"] = "max_players=32" }))
	var tookOver, rolledOut time.Duration
	e.eventually("the standby to take over and roll the edit", func() (bool, error) {
		if tookOver == 0 {
			lease, err := e.kube.CoordinationV1().Leases(e.ns).Get(e.ctx, leaseID, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if ptr.Deref(lease.Spec.HolderIdentity, "") == standby.Identity() {
				tookOver = time.Since(killed)
			}
		}
		ok, err := e.deploymentsCarry(names, hash)
		if ok {
			rolledOut = time.Since(killed)
		}
		return ok, err
	})
	if tookOver == 0 {
		tookOver = rolledOut // seen in the same poll
	}
	lease := app.NewOptions().LeaseDuration
	t.Logf("failover with the default lease timings: the standby took the lease %s after SIGKILL, and the profile edit made then was in all %d Deployments after %s",
		tookOver.Round(100*time.Millisecond), sessions, rolledOut.Round(100*time.Millisecond))
	if limit := lease + 10*time.Second; rolledOut >= limit {
		t.Errorf("rollout finished %s after the leader died, want under %s (lease duration + 10s)", rolledOut, limit)
	}
	if code, body := standby.Readyz(e.ctx); code != http.StatusOK {
		t.Errorf("new leader /readyz = %d %q, want 200", code, body)
	}
	if n, _ := standby.Metrics(e.ctx).Sum("gamesession_controller_syncs_total", map[string]string{"result": "success"}); n == 0 {
		t.Errorf("the new leader reports no syncs")
	}
}

func (e *env) profile(name string) *corev1.ConfigMap {
	e.t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return cm
}
