package app

import (
	"context"
	"net/http"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// apiServerRecovery makes the informers wait out an API server outage
// instead of backing off through it.
//
// A client-go reflector whose request fails to reach the API server sleeps
// before it tries again, on an exponential backoff that starts at 0.8s,
// doubles up to 30s, adds up to 100% jitter (so each sleep is 0.8-1.6s,
// 1.6-3.2s, ... up to 30-60s) and is reset only every 2 minutes
// (client-go/tools/cache/reflector.go, defaultBackoff*). Once the API server is
// back, the reflector learns it only when its sleep ends; and because the
// restarted API server's watch cache no longer holds the old resource
// version, that first watch ends "too old resource version" and the
// reflector sleeps one more backoff step before it lists again. A 15s outage
// so leaves a cache stale for 13-77s after the API server is ready, and up to
// 98s after a second outage within 2 minutes (measured: 25s, then 81s). The
// reflector's backoff cannot be configured through a SharedIndexInformer
// (ReflectorOptions.Backoff is not plumbed, client-go #136943), and a
// sleeping reflector cannot be woken without stopping its informer.
//
// So the informers' requests never fail for an outage: a list or watch
// whose request gets no response at all waits, in the informers' HTTP
// transport, until the API server check (apiServerCheck, which logs once when
// the API server becomes unavailable and once when it is back, then with the
// bound below) has seen the API server unavailable and then ready again,
// polling every interval, and is then sent again. The reflector sees no
// error, so its backoff does not advance: its watch resumes within interval
// of the API server being ready, and it lists again after its first backoff
// step (0.8-1.6s; one step further for each other outage within 2 minutes,
// see resyncBound). HTTP/2 health checks (HTTP2_READ_IDLE_TIMEOUT_SECONDS,
// 30s, then HTTP2_PING_TIMEOUT_SECONDS, 15s) play no part when the API server
// process exits: its kernel closes the connections at once. They matter only
// for a connection that goes silent, which this does not shorten.
//
// Only GETs without a body wait and are resent, which every informer request
// is: they change nothing on the server, so resending one is always safe. A
// failure the API server check does not confirm as an outage is returned to
// the reflector as before, and so are HTTP errors: the server answered.
type apiServerRecovery struct {
	check *apiServerCheck
	// interval is how often the API server is asked while it is unavailable.
	interval time.Duration
	// stop ends every wait, when the controller stops.
	stop <-chan struct{}

	mu sync.Mutex
	// current is the wait under way; nil if none.
	current *outageWait
	// ends are when the outages of the last reflectorBackoffReset ended.
	ends []time.Time
}

// The reflectors' backoff (client-go tools/cache/reflector.go,
// defaultBackoffInit, defaultBackoffMax, defaultBackoffReset): the first
// step, the cap of the doubling steps, and how often it starts over. Each
// step sleeps up to twice its duration (jitter 1.0).
const (
	reflectorBackoffInit  = 800 * time.Millisecond
	reflectorBackoffMax   = 30 * time.Second
	reflectorBackoffReset = 2 * time.Minute
)

// outageWait is one wait for the API server to be available.
type outageWait struct {
	over chan struct{} // closed when the wait ends
	// wasDown is whether the API server was unavailable before it was
	// available again; false if the wait ended otherwise. Written before
	// over is closed.
	wasDown bool
}

// newAPIServerRecovery returns a recovery that follows check until stop is
// closed.
func newAPIServerRecovery(check *apiServerCheck, stop <-chan struct{}) *apiServerRecovery {
	r := &apiServerRecovery{check: check, interval: apiServerCheckInterval, stop: stop}
	check.resyncBound = r.resyncBound
	return r
}

// resyncBound is called when an outage ends at now, and returns how long the
// informers may then take to be in sync again: their requests are sent
// again within interval, and a watch that the API server no longer serves
// (a restarted one has lost the old resource versions) ends, upon which
// its reflector sleeps one backoff step before it lists again. That step is
// at most the k-th since the backoff last started over, for k outages within
// reflectorBackoffReset, so it is shorter than twice
// reflectorBackoffInit*2^(k-1), and than twice reflectorBackoffMax.
func (r *apiServerRecovery) resyncBound(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	recent := r.ends[:0]
	for _, end := range r.ends {
		if now.Sub(end) < reflectorBackoffReset {
			recent = append(recent, end)
		}
	}
	r.ends = append(recent, now)
	step := reflectorBackoffInit
	for range len(r.ends) - 1 {
		if step *= 2; step >= reflectorBackoffMax {
			step = reflectorBackoffMax
			break
		}
	}
	return r.interval + 2*step
}

// config returns cfg with its requests waiting out an outage (see
// apiServerRecovery). Meant for the informers' clients only: a worker's write
// should fail during an outage, and be retried by the work queue.
func (r *apiServerRecovery) config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &recoveringRoundTripper{next: rt, recovery: r}
	})
	return c
}

// waitOut is called when a request got no response. It returns true once
// the API server, found unavailable, is available again: the request should
// be sent again. It returns false if the API server is available (the
// failure was the request's own), or if ctx or the recovery ended first.
// Concurrent callers share one wait, and the API server sees one request per
// interval, whatever the number of informers.
func (r *apiServerRecovery) waitOut(ctx context.Context) bool {
	r.mu.Lock()
	w := r.current
	if w == nil {
		w = &outageWait{over: make(chan struct{})}
		r.current = w
		go r.follow(w)
	}
	r.mu.Unlock()
	select {
	case <-w.over:
		return w.wasDown
	case <-ctx.Done():
		return false
	}
}

// follow asks the API server every interval until it is available, then
// ends w.
func (r *apiServerRecovery) follow(w *outageWait) {
	defer func() {
		r.mu.Lock()
		r.current = nil
		r.mu.Unlock()
		close(w.over)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		err := r.check.checkNow(ctx)
		if ctx.Err() != nil {
			w.wasDown = false
			return
		}
		if err == nil {
			return
		}
		w.wasDown = true
		timer.Reset(r.interval)
		select {
		case <-timer.C:
		case <-ctx.Done():
			w.wasDown = false
			return
		}
	}
}

// checkNow asks the API server now, or joins the check under way, and
// returns its result. Unlike check it does not wait for the interval: it is
// only called when a request has just failed, and then once per interval.
func (c *apiServerCheck) checkNow(ctx context.Context) error {
	c.mu.Lock()
	if c.inFlight == nil {
		c.inFlight = make(chan struct{})
		go c.refresh(c.inFlight)
	}
	done := c.inFlight
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// recoveringRoundTripper sends a GET again once an outage that kept it from
// reaching the API server is over (see apiServerRecovery).
type recoveringRoundTripper struct {
	next     http.RoundTripper
	recovery *apiServerRecovery
}

var _ utilnet.RoundTripperWrapper = &recoveringRoundTripper{}

func (t *recoveringRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	for {
		resp, err := t.next.RoundTrip(req)
		if err == nil || req.Method != http.MethodGet || (req.Body != nil && req.Body != http.NoBody) {
			return resp, err
		}
		if req.Context().Err() != nil || !t.recovery.waitOut(req.Context()) {
			return resp, err
		}
	}
}

func (t *recoveringRoundTripper) WrappedRoundTripper() http.RoundTripper { return t.next }
