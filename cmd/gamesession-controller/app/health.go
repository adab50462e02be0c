package app

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// controllerStatus is what the health checks read from a running controller.
// *controller.Controller implements it.
type controllerStatus interface {
	WorkersRunning() int
	HasSynced() bool
}

// workerStartGrace is how long the workers may take to start once the caches
// are seen synced. The controller starts them right after its next poll of
// the caches, a fraction of a second later; without the grace a probe landing
// in between would report a healthy process as dead.
const workerStartGrace = 5 * time.Second

// healthChecker answers /healthz (liveness) and /readyz (readiness).
//
// Liveness fails only for what a restart can fix: the leader's workers not
// all running once its caches have synced, or a leader that stopped renewing
// its lease without noticing. Readiness waits on the leader for the caches
// and the workers, and is true on a standby: a standby is doing its job by
// waiting, and holding it unready would stall every rolling update of the
// Deployment, whose new pods all start as standbys.
type healthChecker struct {
	workers        int
	leaderElection bool
	leading        atomic.Bool
	// leaseCheck reports a lease the leader failed to renew; nil without
	// leader election. Set before serving, never changed.
	leaseCheck func(*http.Request) error
	now        func() time.Time

	mu         sync.Mutex
	controller controllerStatus
	// syncedAt is when the current controller's caches were first seen
	// synced; zero until then.
	syncedAt time.Time
}

// newHealthChecker returns the checks for a controller with that many
// workers. watchdog is nil without leader election.
func newHealthChecker(workers int, watchdog *leaderelection.HealthzAdaptor) *healthChecker {
	h := &healthChecker{workers: workers, leaderElection: watchdog != nil, now: time.Now}
	if watchdog != nil {
		h.leaseCheck = watchdog.Check
	}
	return h
}

// setController makes the checks follow c; nil when the controller stops.
func (h *healthChecker) setController(c controllerStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.controller = c
	h.syncedAt = time.Time{}
}

// observe returns the current controller, whether its caches are synced, and
// for how long they have been seen synced.
func (h *healthChecker) observe() (c controllerStatus, synced bool, syncedFor time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.controller == nil || !h.controller.HasSynced() {
		return h.controller, false, 0
	}
	now := h.now()
	if h.syncedAt.IsZero() {
		h.syncedAt = now
	}
	return h.controller, true, now.Sub(h.syncedAt)
}

// live returns why the process should be restarted, or nil.
func (h *healthChecker) live(r *http.Request) error {
	if h.leaseCheck != nil {
		if err := h.leaseCheck(r); err != nil {
			return err
		}
	}
	// Workers start only after the caches sync, which can take a while with
	// many sessions; until then there is nothing to count.
	c, synced, syncedFor := h.observe()
	if !synced || syncedFor < workerStartGrace {
		return nil
	}
	if running := c.WorkersRunning(); running != h.workers {
		return fmt.Errorf("%d of %d workers running", running, h.workers)
	}
	return nil
}

// ready returns why the process should not receive traffic yet, or nil.
func (h *healthChecker) ready() error {
	if h.leaderElection && !h.leading.Load() {
		return nil // a standby: see healthChecker
	}
	c, synced, _ := h.observe()
	if !synced {
		return fmt.Errorf("informer caches not synced yet")
	}
	if running := c.WorkersRunning(); running != h.workers {
		return fmt.Errorf("%d of %d workers running", running, h.workers)
	}
	return nil
}

// handler serves /healthz and /readyz. The body says what failed, for
// `kubectl describe pod` and for humans with curl.
func (h *healthChecker) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeCheck(w, h.live(r))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		writeCheck(w, h.ready())
	})
	return mux
}

func writeCheck(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "failed: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
}
