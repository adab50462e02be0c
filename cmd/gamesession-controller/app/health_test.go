package app

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type fakeController struct {
	synced  bool
	running int
}

func (f *fakeController) HasSynced() bool     { return f.synced }
func (f *fakeController) WorkersRunning() int { return f.running }

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
