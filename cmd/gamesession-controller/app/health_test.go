package app

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

type fakeController struct {
	synced   bool
	running  int
	keyIssue error
}

func (f *fakeController) HasSynced() bool         { return f.synced }
func (f *fakeController) WorkersRunning() int     { return f.running }
func (f *fakeController) DigestKeyProblem() error { return f.keyIssue }

func probe(t *testing.T, h *healthChecker, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestHealthChecks(t *testing.T) {
	const workers = 4
	leaseExpired := func(*http.Request) error { return errors.New("failed to renew the lease") }
	for _, tc := range []struct {
		name           string
		leaderElection bool
		leading        bool
		controller     *fakeController // nil: not built yet
		syncedFor      time.Duration   // how long the caches have been seen synced
		leaseCheck     func(*http.Request) error
		wantLive       int
		wantReady      int
		wantBody       string // in the failing response
	}{
		{name: "starting", wantLive: 200, wantReady: 503, wantBody: "not synced"},
		{name: "caches syncing", controller: &fakeController{}, wantLive: 200, wantReady: 503, wantBody: "not synced"},
		{name: "synced, workers starting", controller: &fakeController{synced: true}, wantLive: 200, wantReady: 503, wantBody: "0 of 4 workers"},
		{name: "running", controller: &fakeController{synced: true, running: workers}, syncedFor: time.Hour, wantLive: 200, wantReady: 200},
		{name: "digest key deleted", controller: &fakeController{synced: true, running: workers, keyIssue: errors.New("the Secret digest key ns/k is gone")},
			syncedFor: time.Hour, wantLive: 200, wantReady: 503, wantBody: "digest key ns/k is gone"},
		{name: "workers missing", controller: &fakeController{synced: true, running: workers - 1}, syncedFor: time.Hour,
			wantLive: 503, wantReady: 503, wantBody: "3 of 4 workers"},

		// A standby is alive and ready: it must not block rolling updates.
		{name: "standby", leaderElection: true, wantLive: 200, wantReady: 200},
		{name: "new leader syncing", leaderElection: true, leading: true, controller: &fakeController{}, wantLive: 200, wantReady: 503},
		{name: "leader running", leaderElection: true, leading: true, controller: &fakeController{synced: true, running: workers},
			syncedFor: time.Hour, wantLive: 200, wantReady: 200},
		{name: "leader stuck renewing", leaderElection: true, leading: true, controller: &fakeController{synced: true, running: workers},
			syncedFor: time.Hour, leaseCheck: leaseExpired, wantLive: 503, wantReady: 200, wantBody: "renew"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			h := &healthChecker{workers: workers, leaderElection: tc.leaderElection, leaseCheck: tc.leaseCheck,
				now: func() time.Time { return now }}
			h.leading.Store(tc.leading)
			if tc.controller != nil {
				h.setController(tc.controller)
			}
			// A first look records when the caches were seen synced.
			_, _ = probe(t, h, "/readyz")
			now = now.Add(tc.syncedFor)

			live, liveBody := probe(t, h, "/healthz")
			ready, readyBody := probe(t, h, "/readyz")
			if live != tc.wantLive {
				t.Errorf("/healthz = %d %q, want %d", live, liveBody, tc.wantLive)
			}
			if ready != tc.wantReady {
				t.Errorf("/readyz = %d %q, want %d", ready, readyBody, tc.wantReady)
			}
			if tc.wantBody != "" && !strings.Contains(liveBody+readyBody, tc.wantBody) {
				t.Errorf("responses %q and %q do not say %q", liveBody, readyBody, tc.wantBody)
			}
			if live == 200 && liveBody != "ok\n" {
				t.Errorf("/healthz body %q, want ok", liveBody)
			}
		})
	}
}

// Between the caches syncing and the workers starting there is a short
// window; liveness must not fail in it, and only fails once workers are
// missing for longer than the grace period.
func TestLivenessGraceAfterSync(t *testing.T) {
	now := time.Now()
	h := newHealthChecker(2, nil)
	h.now = func() time.Time { return now }
	c := &fakeController{synced: true}
	h.setController(c)
	if code, body := probe(t, h, "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %q right after sync", code, body)
	}
	c.running = 2
	now = now.Add(time.Minute)
	if code, body := probe(t, h, "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %q with all workers running", code, body)
	}
	c.running = 1
	if code, _ := probe(t, h, "/healthz"); code != 503 {
		t.Errorf("/healthz = %d with a worker gone, want 503", code)
	}
}

func TestHealthFollowsControllerLifecycle(t *testing.T) {
	h := newHealthChecker(2, nil)
	c := &fakeController{synced: true, running: 2}
	h.setController(c)
	if code, _ := probe(t, h, "/readyz"); code != 200 {
		t.Fatalf("/readyz = %d with a synced controller", code)
	}
	h.setController(nil) // the controller stopped
	if code, _ := probe(t, h, "/readyz"); code != 503 {
		t.Errorf("/readyz = %d after the controller stopped, want 503", code)
	}
	if code, _ := probe(t, h, "/nothing"); code != 404 {
		t.Errorf("unknown path = %d, want 404", code)
	}
}

// fakeAPIServer stands in for the API server's /readyz. mode says how it
// answers: "ok", "not ready" (etcd down), "down" (the connection is dropped,
// as by a server that is gone) or "hang" (no answer).
type fakeAPIServer struct {
	mode     atomic.Value // string
	requests atomic.Int32
	release  chan struct{} // "hang" answers once it is closed
}

func newFakeAPIServer(t *testing.T) (*fakeAPIServer, *rest.Config) {
	f := &fakeAPIServer{release: make(chan struct{})}
	f.mode.Store("ok")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			t.Errorf("the check asked for %s, want /readyz only", r.URL.Path)
		}
		f.requests.Add(1)
		switch f.mode.Load().(string) {
		case "ok":
			fmt.Fprint(w, "ok")
		case "not ready":
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "[+]ping ok\n[-]etcd failed: reason withheld\n[+]poststarthook/rbac/bootstrap-roles ok\nreadyz check failed\n")
		case "down":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case "hang":
			select {
			case <-f.release:
			case <-r.Context().Done():
			}
		}
	}))
	// A fresh connection per request: Go's transport resends a failed GET
	// once on a new connection when the failed one was reused, which would
	// count as a second request.
	srv.Config.SetKeepAlivesEnabled(false)
	t.Cleanup(func() {
		close(f.release)
		srv.Close()
	})
	return f, &rest.Config{Host: srv.URL}
}

// logLines counts the lines of a buffered ktesting logger that contain s.
func logLines(logger klog.Logger, s string) int {
	return strings.Count(logger.GetSink().(ktesting.Underlier).GetBuffer().String(), s)
}

const (
	lostLine = "The API server is unavailable"
	backLine = "The API server is available again"
)

// settle waits for the API server check under way, if any.
func settle(c *apiServerCheck) {
	c.mu.Lock()
	inFlight := c.inFlight
	c.mu.Unlock()
	if inFlight != nil {
		<-inFlight
	}
}

// Readiness follows the API server through an outage, with results fresh
// for a second, and the outage is logged once when it begins and once when
// it ends, however many probes fail in between. Liveness ignores it.
func TestReadinessFollowsAPIServer(t *testing.T) {
	api, cfg := newFakeAPIServer(t)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	h := newHealthChecker(2, nil)
	h.setController(&fakeController{synced: true, running: 2})
	check, err := newAPIServerCheck(logger, cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	check.now = func() time.Time { return now }
	check.timeout = 200 * time.Millisecond
	h.apiServer = check

	for _, step := range []struct {
		mode       string
		wantReady  int
		wantBody   string
		lost, back int // log lines so far
	}{
		{mode: "ok", wantReady: 200, wantBody: "ok"},
		{mode: "down", wantReady: 503, wantBody: "API server unreachable", lost: 1},
		{mode: "down", wantReady: 503, wantBody: "API server unreachable", lost: 1},
		{mode: "hang", wantReady: 503, wantBody: "API server unreachable", lost: 1},
		{mode: "not ready", wantReady: 503, wantBody: "API server not ready: etcd failed: reason withheld", lost: 1},
		{mode: "ok", wantReady: 200, wantBody: "ok", lost: 1, back: 1},
		{mode: "ok", wantReady: 200, wantBody: "ok", lost: 1, back: 1},
		{mode: "down", wantReady: 503, wantBody: "API server unreachable", lost: 2, back: 1},
	} {
		api.mode.Store(step.mode)
		requests := api.requests.Load()
		// The first probe once the result is stale answers with it and
		// starts a check; once that is done, probes within the interval
		// give its result without asking again.
		now = now.Add(apiServerCheckInterval)
		_, _ = probe(t, h, "/readyz")
		settle(check)
		for range 3 {
			code, body := probe(t, h, "/readyz")
			if code != step.wantReady || !strings.Contains(body, step.wantBody) {
				t.Errorf("API server %s: /readyz = %d %q, want %d %q", step.mode, code, body, step.wantReady, step.wantBody)
			}
			now = now.Add(apiServerCheckInterval / 4)
		}
		if n := api.requests.Load() - requests; n != 1 {
			t.Errorf("API server %s: 4 probes within %s sent %d requests, want 1", step.mode, apiServerCheckInterval, n)
		}
		if code, body := probe(t, h, "/healthz"); code != 200 {
			t.Errorf("API server %s: /healthz = %d %q, want 200: a restart cannot bring it back", step.mode, code, body)
		}
		if lost, back := logLines(logger, lostLine), logLines(logger, backLine); lost != step.lost || back != step.back {
			t.Errorf("API server %s: logged %q %d times and %q %d times, want %d and %d",
				step.mode, lostLine, lost, backLine, back, step.lost, step.back)
		}
	}
}

// Once there is a result, a probe answers at once with it, even while the
// API server takes its time to answer the check.
func TestProbesDoNotWaitForAPIServer(t *testing.T) {
	api, cfg := newFakeAPIServer(t)
	check, err := newAPIServerCheck(ktesting.NewLogger(t, ktesting.NewConfig()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	check.now = func() time.Time { return now }
	check.timeout = 10 * time.Second
	h := newHealthChecker(2, nil)
	h.setController(&fakeController{synced: true, running: 2})
	h.apiServer = check
	if code, body := probe(t, h, "/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %q, want 200", code, body)
	}

	api.mode.Store("hang")
	now = now.Add(apiServerCheckInterval)
	begin := time.Now()
	for range 3 {
		if code, body := probe(t, h, "/readyz"); code != 200 {
			t.Errorf("/readyz = %d %q while the check hangs, want the last result, 200", code, body)
		}
	}
	// Waiting for the check would take its 10s timeout.
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("3 probes took %s while the API server did not answer the check: they waited for it", took)
	}
	api.release <- struct{}{}
	settle(check)
	if n := api.requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2: the first check and the one the stale result started", n)
	}
}

// Probes arriving before there is a result wait for the one check under way
// instead of sending requests of their own.
func TestAPIServerCheckSharedByConcurrentProbes(t *testing.T) {
	api, cfg := newFakeAPIServer(t)
	api.mode.Store("hang")
	check, err := newAPIServerCheck(ktesting.NewLogger(t, ktesting.NewConfig()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	check.now = func() time.Time { return now }
	h := newHealthChecker(2, nil)
	h.setController(&fakeController{synced: true, running: 2})
	h.apiServer = check

	const probes = 10
	var started, done sync.WaitGroup
	started.Add(probes)
	done.Add(probes)
	codes := make(chan int, probes)
	for range probes {
		go func() {
			defer done.Done()
			started.Done()
			rec := httptest.NewRecorder()
			h.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			codes <- rec.Code
		}()
	}
	started.Wait()
	// Let the probes pile up behind the first one's request, then answer it.
	time.Sleep(100 * time.Millisecond)
	api.mode.Store("ok")
	api.release <- struct{}{}
	done.Wait()
	close(codes)
	for code := range codes {
		if code != 200 {
			t.Errorf("/readyz = %d, want 200", code)
		}
	}
	if n := api.requests.Load(); n != 1 {
		t.Errorf("%d concurrent probes sent %d requests, want 1", probes, n)
	}
}

// A standby is ready without asking the API server (see healthChecker).
func TestStandbyReadinessSendsNoRequest(t *testing.T) {
	api, cfg := newFakeAPIServer(t)
	api.mode.Store("down")
	check, err := newAPIServerCheck(ktesting.NewLogger(t, ktesting.NewConfig()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := newHealthChecker(2, leaderelection.NewLeaderHealthzAdaptor(time.Second))
	h.apiServer = check
	if code, body := probe(t, h, "/readyz"); code != 200 {
		t.Errorf("standby /readyz = %d %q, want 200", code, body)
	}
	if n := api.requests.Load(); n != 0 {
		t.Errorf("a standby's /readyz sent %d requests to the API server, want 0", n)
	}
}
