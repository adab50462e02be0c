package integration

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/example/gamesession-controller/internal/testutil"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// TestReadinessAndMetrics runs the binary (its own process, so its metrics
// are its own) with leader election, as a ServiceAccount granted at first
// only the Role of its own namespace (the Lease, the Secret digest key): it
// leads, but its caches cannot sync, so it is live but not ready. Granted
// the artifacts' ClusterRole it becomes ready, and after a fan-out its
// /metrics shows the work queue, the REST client and the fan-out. Last,
// with a rollout in progress, it serves every metric the chart's Grafana
// dashboard queries.
func TestReadinessAndMetrics(t *testing.T) {
	e := newEnv(t)
	cfg := e.serviceAccountConfig(rbacServiceAccount)
	r := loadControllerRBAC(t)
	r.bindTo(t, e.ns, rbacServiceAccount)
	e.applyNamespaceRBAC(r)
	// The Role grants the default --leader-election-id's Lease.
	p := e.startControllerProcess("controller", testutil.WriteKubeconfig(t, cfg), nil,
		"--leader-elect", "--leader-election-namespace="+e.ns)

	// A standby is always ready: only the leader's readiness waits on its caches.
	e.eventually("the controller to lead", func() (bool, error) {
		v, found := p.Metrics(e.ctx).Sum("leader_election_master_status", map[string]string{"name": "gamesession-controller"})
		return v == 1, fmt.Errorf("leader_election_master_status = %g (found %v)", v, found)
	})
	// Refused, the informers retry; /readyz waits for them and says why,
	// while /healthz stays 200: a long cache sync is no reason to restart.
	e.waitFor("the controller's first refused request", func() bool {
		n, _ := p.Metrics(e.ctx).Sum("rest_client_requests_total", map[string]string{"code": "403"})
		return n > 0
	})
	// The leader's metric is set a moment before its health checks learn it leads.
	e.eventually("/readyz 503 once leading", func() (bool, error) {
		code, body := p.Readyz(e.ctx)
		return code == http.StatusServiceUnavailable, fmt.Errorf("/readyz %d %q", code, body)
	})
	for range 3 {
		if code, body := p.Readyz(e.ctx); code != http.StatusServiceUnavailable || !strings.Contains(body, "caches not synced") {
			t.Fatalf("/readyz before the caches synced = %d %q, want 503: caches not synced", code, body)
		}
		if code, body := p.Healthz(e.ctx); code != http.StatusOK {
			t.Fatalf("/healthz before the caches synced = %d %q, want 200", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}

	e.applyClusterRBAC(r)
	// The informers back off between attempts (up to a few seconds by now).
	e.eventually("/readyz 200 once the role is granted", func() (bool, error) {
		code, body := p.Readyz(e.ctx)
		return code == http.StatusOK, fmt.Errorf("/readyz %d %q", code, body)
	})

	const sessions = 4
	e.createProfile("arena", map[string]string{"server.cfg": "max_players=16"}, true)
	var names []string
	for i := range sessions {
		names = append(names, fmt.Sprintf("arena-%d", i))
		e.createSession(newSession(names[i], "arena", 1))
	}
	e.eventually("Deployments", func() (bool, error) { return e.deploymentsCarry(names, controller.ProfileHash(e.profile("arena"))) })
	hash := controller.ProfileHash(e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data["server.cfg"] = "max_players=32" }))
	e.eventually("the fan-out", func() (bool, error) {
		if ok, err := e.deploymentsCarry(names, hash); !ok {
			return false, err
		}
		for _, name := range names {
			if got := e.session(name).Status.ProfileHash; got != hash {
				return false, fmt.Errorf("session %s status.profileHash %q", name, got)
			}
		}
		return true, nil
	})

	// The status writes above are the last requests of the fan-out; the
	// scrape after them sees its whole count.
	m := p.Metrics(e.ctx)
	queue := map[string]string{"name": controller.Name}
	want := []struct {
		what   string
		metric string
		labels map[string]string
		ok     func(float64) bool
		expect string
	}{
		// Every session at least twice: created, then rolled.
		{"queue adds", "workqueue_adds_total", queue, func(v float64) bool { return v >= 2*sessions }, fmt.Sprintf(">= %d", 2*sessions)},
		{"queue depth", "workqueue_depth", queue, func(v float64) bool { return v >= 0 && v <= sessions+1 }, fmt.Sprintf("0..%d", sessions+1)},
		{"queue latency observations", "workqueue_queue_duration_seconds_count", queue, func(v float64) bool { return v >= 2*sessions }, fmt.Sprintf(">= %d", 2*sessions)},
		// Deployments and Events created; Deployments and status updated.
		{"POST 201", "rest_client_requests_total", map[string]string{"method": "POST", "code": "201"}, func(v float64) bool { return v >= sessions }, fmt.Sprintf(">= %d", sessions)},
		{"PUT 200", "rest_client_requests_total", map[string]string{"method": "PUT", "code": "200"}, func(v float64) bool { return v >= 2*sessions }, fmt.Sprintf(">= %d", 2*sessions)},
		// Refusals from before the role was granted.
		{"GET 403", "rest_client_requests_total", map[string]string{"method": "GET", "code": "403"}, func(v float64) bool { return v >= 1 }, ">= 1"},
		{"request latency observations", "rest_client_request_duration_seconds_count", nil, func(v float64) bool { return v >= 3*sessions }, fmt.Sprintf(">= %d", 3*sessions)},
		// One data edit of one profile with all the sessions.
		{"fan-outs", "gamesession_controller_profile_fanout_sessions_count", nil, func(v float64) bool { return v == 1 }, "1"},
		{"sessions fanned out", "gamesession_controller_profile_fanout_sessions_sum", nil, func(v float64) bool { return v == sessions }, fmt.Sprint(sessions)},
		{"successful syncs", "gamesession_controller_syncs_total", map[string]string{"result": "success"}, func(v float64) bool { return v >= 2*sessions }, fmt.Sprintf(">= %d", 2*sessions)},
		{"failed syncs", "gamesession_controller_syncs_total", map[string]string{"result": "error"}, func(v float64) bool { return v == 0 }, "0"},
		{"cached sessions", "gamesession_controller_sessions", nil, func(v float64) bool { return v == sessions }, fmt.Sprint(sessions)},
		{"resolved sessions", "gamesession_controller_session_conditions", map[string]string{"condition": "ProfileResolved", "status": "True"}, func(v float64) bool { return v == sessions }, fmt.Sprint(sessions)},
	}
	for _, w := range want {
		v, found := m.Sum(w.metric, w.labels)
		if !found || !w.ok(v) {
			t.Errorf("%s: %s = %g (found %v), want %s", w.what, testutil.Series(w.metric, w.labels), v, found, w.expect)
		} else {
			t.Logf("%s: %s = %g", w.what, testutil.Series(w.metric, w.labels), v)
		}
	}
	if code, body := p.Healthz(e.ctx); code != http.StatusOK {
		t.Errorf("/healthz = %d %q, want 200", code, body)
	}
	if code, body := p.Readyz(e.ctx); code != http.StatusOK {
		t.Errorf("/readyz = %d %q, want 200", code, body)
	}

	// The rollout series exist only while a rollout is in progress: a
	// paused one stays in progress.
	e.updateProfile("arena", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationPaused: "true"}
	})
	e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data["server.cfg"] = "max_players=64" })
	e.eventually("the paused rollout's series", func() (bool, error) {
		v, found := p.Metrics(e.ctx).Sum("gamesession_controller_rollout_paused", map[string]string{"profile": "arena"})
		return v == 1, fmt.Errorf("gamesession_controller_rollout_paused = %g (found %v)", v, found)
	})
	checkDashboardServed(t, p.Metrics(e.ctx))
}

// dashboardFile is the chart's Grafana dashboard.
const dashboardFile = "../../charts/gamesession-controller/files/grafana-dashboard.json"

// checkDashboardServed fails the test for every metric the dashboard
// queries that the scrape m lacks, or that a query reads against its type
// (testutil.DashboardProblems). m must come from a leader with leader
// election, a rollout in progress and --watch-secrets, the conditions under
// which every series the dashboard shows exists.
func checkDashboardServed(t *testing.T, m testutil.PromText) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := testutil.DashboardQueries(raw)
	if err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	problems := testutil.DashboardProblems(queries, m)
	for _, p := range problems {
		t.Errorf("the Grafana dashboard: %s", p)
	}
	if len(problems) == 0 {
		t.Logf("the Grafana dashboard's %d queries select only served metrics", len(queries))
	}
}
