package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
)

// fakeTransport stands for the informers' HTTP transport: while down, every
// request fails as one to a port nobody listens on does.
type fakeTransport struct {
	down  atomic.Bool
	calls atomic.Int32
	// failed receives a value each time a request fails.
	failed chan struct{}
}

func newFakeTransport() *fakeTransport {
	return &fakeTransport{failed: make(chan struct{}, 100)}
}

func (f *fakeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if f.down.Load() {
		f.failed <- struct{}{}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// newTestRecovery returns a recovery whose API server check answers as
// probe says, and a channel that receives each check's result.
func newTestRecovery(t *testing.T, probe func() error) (*apiServerRecovery, *apiServerCheck, chan error) {
	t.Helper()
	checked := make(chan error, 100)
	check := &apiServerCheck{
		probe: func(context.Context) error {
			err := probe()
			select {
			case checked <- err:
			default: // the test has seen enough
			}
			return err
		},
		logger:   ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true))),
		now:      time.Now,
		interval: apiServerCheckInterval,
		timeout:  apiServerCheckTimeout,
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	r := newAPIServerRecovery(check, stop)
	r.interval = time.Millisecond
	return r, check, checked
}

func getThrough(ctx context.Context, rt http.RoundTripper) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://apiserver.invalid/api/v1/configmaps?watch=true", nil)
	return rt.RoundTrip(req)
}

// A GET that fails for an outage waits until the API server is back, then is
// sent once more; the outage is logged once when it begins and once when it
// ends, however many times the API server was asked meanwhile.
func TestRecoveryWaitsOutOutage(t *testing.T) {
	var apiDown atomic.Bool
	apiDown.Store(true)
	r, check, checked := newTestRecovery(t, func() error {
		if apiDown.Load() {
			return errors.New("API server unreachable: connection refused")
		}
		return nil
	})
	next := newFakeTransport()
	next.down.Store(true)
	rt := &recoveringRoundTripper{next: next, recovery: r}

	const requests = 5
	done := make(chan error, requests)
	for range requests {
		go func() {
			resp, err := getThrough(t.Context(), rt)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
	}
	for range requests {
		<-next.failed
	}
	// The API server is asked again and again while it is away.
	for range 3 {
		if err := <-checked; err == nil {
			t.Fatal("the check passed while the API server was down")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("a request returned (%v) while the API server was down", err)
	default:
	}

	next.down.Store(false)
	apiDown.Store(false)
	for range requests {
		if err := <-done; err != nil {
			t.Errorf("request after the outage: %v, want it sent again and answered", err)
		}
	}
	if n := next.calls.Load(); n != 2*requests {
		t.Errorf("%d requests reached the transport, want %d: each once failing, once after the outage", n, 2*requests)
	}
	if lost, back := logLines(check.logger, lostLine), logLines(check.logger, backLine); lost != 1 || back != 1 {
		t.Errorf("logged %q %d times and %q %d times, want once each", lostLine, lost, backLine, back)
	}
	if n := logLines(check.logger, "informersInSyncWithin="); n != 1 {
		t.Errorf("the line %q gave the informers' bound %d times, want once", backLine, n)
	}
}

// A failure the API server check does not confirm as an outage goes back to
// the caller, as do failed requests that are not GETs, and a request whose
// context ends while it waits.
func TestRecoveryReturnsOtherFailures(t *testing.T) {
	var apiDown atomic.Bool
	r, check, checked := newTestRecovery(t, func() error {
		if apiDown.Load() {
			return errors.New("API server unreachable: connection refused")
		}
		return nil
	})
	next := newFakeTransport()
	next.down.Store(true)
	rt := &recoveringRoundTripper{next: next, recovery: r}

	if _, err := getThrough(t.Context(), rt); !utilnet.IsConnectionRefused(err) {
		t.Errorf("GET while the API server check passes: %v, want the transport's error", err)
	}
	if err := <-checked; err != nil {
		t.Errorf("check: %v", err)
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://apiserver.invalid/api/v1/namespaces/ns/configmaps", strings.NewReader("{}"))
	if _, err := rt.RoundTrip(req); !utilnet.IsConnectionRefused(err) {
		t.Errorf("POST: %v, want the transport's error", err)
	}
	select {
	case <-checked:
		t.Error("a failed POST asked the API server: only GETs wait out an outage")
	default:
	}

	apiDown.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := getThrough(ctx, rt)
		done <- err
	}()
	<-checked // found down: the request waits
	cancel()
	if err := <-done; !utilnet.IsConnectionRefused(err) {
		t.Errorf("GET whose context ended during the outage: %v, want the transport's error", err)
	}
	if n := logLines(check.logger, backLine); n != 0 {
		t.Errorf("logged %q %d times while the API server is still down", backLine, n)
	}
}

// The informers' clients built from recovery.config list through a real
// outage: the API server's port refuses connections for a while, then
// listens again.
func TestRecoveryConfigListsThroughOutage(t *testing.T) {
	var lists atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			fmt.Fprint(w, "ok")
		case "/api/v1/namespaces/ns/configmaps":
			lists.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`)
		default:
			http.NotFound(w, r)
		}
	})
	first := httptest.NewServer(handler)
	addr := first.Listener.Addr().String()
	cfg := &rest.Config{Host: "http://" + addr}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	check, err := newAPIServerCheck(logger, cfg)
	if err != nil {
		t.Fatal(err)
	}
	probed := make(chan error, 100)
	probe := check.probe
	check.probe = func(ctx context.Context) error {
		err := probe(ctx)
		select {
		case probed <- err:
		default: // the test has seen enough
		}
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	r := newAPIServerRecovery(check, stop)
	r.interval = 10 * time.Millisecond
	client, err := kubernetes.NewForConfig(r.config(cfg))
	if err != nil {
		t.Fatal(err)
	}
	first.Close() // the port now refuses connections

	listed := make(chan error, 1)
	go func() {
		_, err := client.CoreV1().ConfigMaps("ns").List(t.Context(), metav1.ListOptions{})
		listed <- err
	}()
	for range 2 {
		if err := <-probed; err == nil {
			t.Fatal("the check passed with nothing listening")
		}
	}

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	second := &httptest.Server{Listener: l, Config: &http.Server{Handler: handler}}
	second.Start()
	defer second.Close()
	select {
	case err := <-listed:
		if err != nil {
			t.Fatalf("list through the outage: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the list did not resume once the API server listened again")
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("the API server answered %d lists, want 1", n)
	}
	if lost, back := logLines(logger, lostLine), logLines(logger, backLine); lost != 1 || back != 1 {
		t.Errorf("logged %q %d times and %q %d times, want once each", lostLine, lost, backLine, back)
	}
}

// Stopping the controller ends the waits.
func TestRecoveryStops(t *testing.T) {
	checked := make(chan error, 100)
	check := &apiServerCheck{
		probe: func(context.Context) error {
			err := errors.New("API server unreachable")
			select {
			case checked <- err:
			default:
			}
			return err
		},
		logger:  ktesting.NewLogger(t, ktesting.NewConfig()),
		now:     time.Now,
		timeout: time.Second,
	}
	stop := make(chan struct{})
	r := newAPIServerRecovery(check, stop)
	next := newFakeTransport()
	next.down.Store(true)
	rt := &recoveringRoundTripper{next: next, recovery: r}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := getThrough(context.Background(), rt); !utilnet.IsConnectionRefused(err) {
			t.Errorf("GET when the controller stops: %v, want the transport's error", err)
		}
	})
	<-checked
	close(stop)
	wg.Wait()
}

// The bound logged when an outage ends follows the reflectors' backoff: its
// first step after a first outage, one step further for each outage within
// the 2 minutes before the backoff starts over, up to its cap.
func TestRecoveryResyncBound(t *testing.T) {
	r := &apiServerRecovery{interval: time.Second}
	now := time.Now()
	for i, want := range []time.Duration{
		2600 * time.Millisecond, // 1s + under 2 x 0.8s
		4200 * time.Millisecond, // the second outage within 2 minutes: 1s + 2 x 1.6s
		7400 * time.Millisecond,
		13800 * time.Millisecond,
		26600 * time.Millisecond,
		52200 * time.Millisecond,
		61 * time.Second, // capped: 1s + 2 x 30s
		61 * time.Second,
	} {
		if got := r.resyncBound(now); got != want {
			t.Errorf("outage %d within 2 minutes: bound %s, want %s", i+1, got, want)
		}
		now = now.Add(time.Second)
	}
	// Two minutes after the last outage, the backoff starts over.
	if got, want := r.resyncBound(now.Add(reflectorBackoffReset)), 2600*time.Millisecond; got != want {
		t.Errorf("outage 2 minutes after the others: bound %s, want %s", got, want)
	}
}
