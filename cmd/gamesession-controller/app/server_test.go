package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// An API server that is down: every request fails.
func unavailableAPIServer(t *testing.T) *rest.Config {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	t.Cleanup(api.Close)
	return &rest.Config{Host: api.URL}
}

func TestRunFailsFastWhenPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	o := NewOptions()
	o.RESTConfig = unavailableAPIServer(t)
	o.MetricsBindAddress = taken.Addr().String()
	o.HealthProbeBindAddress = "0"
	_, ctx := ktesting.NewTestContext(t)
	if err := Run(ctx, o); err == nil || !strings.Contains(err.Error(), "metrics server") {
		t.Errorf("Run = %v, want the metrics server's listen error", err)
	}
}

// A replica that cannot get the lease is a standby: it serves metrics and
// health, reports ready so rolling updates proceed, and stops on cancel.
func TestRunStandbyServesAndStops(t *testing.T) {
	o := NewOptions()
	o.RESTConfig = unavailableAPIServer(t)
	o.LeaderElect = true
	o.LeaderElectionNamespace = "ops"
	o.RetryPeriod = 100 * time.Millisecond
	o.RenewDeadline = time.Second
	o.MetricsBindAddress = freeAddr(t)
	o.HealthProbeBindAddress = freeAddr(t)

	logger, _ := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()

	healthURL := "http://" + o.HealthProbeBindAddress
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := http.Get(healthURL + "/healthz"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the health server never answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, healthURL+path); code != http.StatusOK {
			t.Errorf("standby %s = %d %q, want 200", path, code, body)
		}
	}
	// The first lease read may still be in flight: wait until it is counted.
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; {
		var code int
		code, body = get(t, "http://"+o.MetricsBindAddress+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics = %d", code)
		}
		if strings.Contains(body, `rest_client_requests_total{code="503"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{
		"go_goroutines ",
		`leader_election_master_status{name="gamesession-controller"} 0`,
		`rest_client_requests_total{code="503"`, // the failed lease reads
		`gamesession_controller_syncs_total{queue="gamesessions",result="success"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "gamesession_controller_session_conditions") {
		t.Error("a standby reports session conditions it has no cache for")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v after cancellation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if _, err := http.Get(healthURL + "/healthz"); err == nil {
		t.Error("the health server still answers after Run returned")
	}
}
