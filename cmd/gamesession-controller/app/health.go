package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
)

// controllerStatus is what the health checks read from a running controller.
// *controller.Controller implements it.
type controllerStatus interface {
	WorkersRunning() int
	HasSynced() bool
	// DigestKeyProblem says what is wrong with the Secret of the digest
	// key; nil if nothing is.
	DigestKeyProblem() error
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
// its lease without noticing. An unreachable API server is not among them: a
// restart cannot fix it, and restarts would only add the cost of refilling
// the caches once it is back. Readiness waits on the leader for the API
// server, the caches and the workers, and is true on a standby: a standby is
// doing its job by waiting, and holding it unready would stall every rolling
// update of the Deployment, whose new pods all start as standbys.
type healthChecker struct {
	workers        int
	leaderElection bool
	leading        atomic.Bool
	// leaseCheck reports a lease the leader failed to renew; nil without
	// leader election. Set before serving, never changed.
	leaseCheck func(*http.Request) error
	// apiServer reports an API server the controller cannot use; nil skips
	// the check. Set before serving, never changed.
	apiServer *apiServerCheck
	now       func() time.Time

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
	// First, as the likely cause of anything else failing: caches go stale
	// and every write fails while the API server is out of reach.
	if h.apiServer != nil {
		if err := h.apiServer.check(); err != nil {
			return err
		}
	}
	c, synced, _ := h.observe()
	if !synced {
		return fmt.Errorf("informer caches not synced yet")
	}
	if running := c.WorkersRunning(); running != h.workers {
		return fmt.Errorf("%d of %d workers running", running, h.workers)
	}
	// Last: the controller works on without its key Secret, and restarts
	// nothing, but the next process to start will not have the key.
	return c.DigestKeyProblem()
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

const (
	// apiServerCheckInterval is how long an API server check result is
	// fresh: however often /readyz is probed, the API server sees at most
	// one request per interval from each replica.
	apiServerCheckInterval = time.Second
	// apiServerCheckTimeout bounds one check. An idle API server answers its
	// /readyz in milliseconds, outside API Priority and Fairness queues, but
	// one busy on 2 cores was measured taking over 2s; probes do not wait
	// for the check (see check), so the bound can be generous.
	apiServerCheckTimeout = 5 * time.Second
)

// apiServerCheck asks the API server for its /readyz, the cheapest request
// that tells whether the controller can work: it fails when the server is
// unreachable, and when the server is up but cannot serve (etcd down, still
// starting, shutting down).
//
// It logs once when the API server becomes unavailable and once when it is
// back, not once per probe: an outage of minutes must not flood the log.
type apiServerCheck struct {
	probe    func(context.Context) error
	logger   klog.Logger
	now      func() time.Time
	interval time.Duration
	timeout  time.Duration

	mu        sync.Mutex
	checkedAt time.Time     // when the last result came; zero before the first
	err       error         // the last result
	inFlight  chan struct{} // closed when the check under way ends; nil if none
	lostAt    time.Time     // when the API server became unavailable; zero while it is available
	// resyncBound, if set, returns when the API server is back how long
	// the informers may take to be in sync again, for the log (see
	// apiServerRecovery). Set before serving, never changed.
	resyncBound func(now time.Time) time.Duration
}

// newAPIServerCheck returns a check of the API server cfg points at. It uses
// a client of its own, with its own rate limiter and its own connection: on
// the controller's, the check would wait behind a fan-out filling the
// client-side rate limit, or behind the megabytes of lists every informer
// reads at once when the API server is back, and time out, reporting an
// outage that is not (or no longer).
func newAPIServerCheck(logger klog.Logger, cfg *rest.Config) (*apiServerCheck, error) {
	c := rest.CopyConfig(cfg)
	// nil makes the client build its own limiter from QPS and Burst; one
	// request per interval needs little.
	c.RateLimiter = nil
	c.QPS, c.Burst = 5, 10
	// client-go shares one transport, hence one HTTP/2 connection, among
	// clients of equal TLS settings, unless they dial for themselves.
	c.Dial = (&net.Dialer{Timeout: apiServerCheckTimeout, KeepAlive: 30 * time.Second}).DialContext
	// Also the discovery client's default (32s) for the HTTP client; check
	// bounds each request with a context anyway.
	c.Timeout = apiServerCheckTimeout
	client, err := discovery.NewDiscoveryClientForConfig(rest.AddUserAgent(c, "health"))
	if err != nil {
		return nil, fmt.Errorf("building the API server health check client: %w", err)
	}
	rc := client.RESTClient()
	return &apiServerCheck{
		probe: func(ctx context.Context) error {
			var code int
			// No retries: the next probe is the retry.
			body, err := rc.Get().AbsPath("/readyz").MaxRetries(0).Do(ctx).StatusCode(&code).Raw()
			return readyzError(code, body, err)
		},
		logger:   logger,
		now:      time.Now,
		interval: apiServerCheckInterval,
		timeout:  apiServerCheckTimeout,
	}, nil
}

// readyzError turns the answer to GET /readyz into nil or a short reason.
func readyzError(code int, body []byte, err error) error {
	switch {
	case code == 0 && err != nil:
		return fmt.Errorf("API server unreachable: %w", err)
	case code == http.StatusOK:
		return nil
	}
	// The body lists every check, "[+]name ok" or "[-]name failed: ...";
	// the failed ones are what matters.
	var failed []string
	for line := range strings.Lines(string(body)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "[-]"); ok {
			failed = append(failed, name)
		}
	}
	if len(failed) == 0 {
		failed = append(failed, fmt.Sprintf("HTTP %d", code))
	}
	return errors.New("API server not ready: " + strings.Join(failed, ", "))
}

// check returns the last result and, if it is older than the interval,
// starts a new check in the background. Only the first call waits for a
// result, having none to give: a probe must not hang on a slow API server
// (the kubelet gives it one second by default, and would count the wait as
// a failure), and probes arriving together share one request.
func (c *apiServerCheck) check() error {
	c.mu.Lock()
	if c.inFlight == nil && (c.checkedAt.IsZero() || c.now().Sub(c.checkedAt) >= c.interval) {
		c.inFlight = make(chan struct{})
		go c.refresh(c.inFlight)
	}
	first, inFlight := c.checkedAt.IsZero(), c.inFlight
	c.mu.Unlock()
	if first {
		<-inFlight
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// refresh asks the API server, records the answer and logs a change of
// availability, then closes done.
func (c *apiServerCheck) refresh(done chan struct{}) {
	defer close(done)
	// Not a probe request's context: the result is shared, and one prober
	// hanging up must not fail it for the others.
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	err := c.probe(ctx)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.checkedAt, c.err, c.inFlight = now, err, nil
	switch {
	case err != nil && c.lostAt.IsZero():
		c.lostAt = now
		c.logger.Error(err, "The API server is unavailable; not ready until it is back")
	case err == nil && !c.lostAt.IsZero():
		kv := []any{"unavailableFor", now.Sub(c.lostAt).Round(time.Millisecond)}
		if c.resyncBound != nil {
			kv = append(kv, "informersInSyncWithin", c.resyncBound(now).Round(time.Millisecond))
		}
		c.logger.Info("The API server is available again", kv...)
		c.lostAt = time.Time{}
	}
}
