package app

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2/ktesting"
)

const testLease = "gamesession-controller"

// electionOptions are short timings for tests. The lease duration is long on
// purpose: a standby taking over well before it proves the lease was released,
// not left to expire.
func electionOptions() *Options {
	o := NewOptions()
	o.LeaderElect = true
	o.LeaseDuration = 10 * time.Second
	o.RenewDeadline = time.Second
	o.RetryPeriod = 100 * time.Millisecond
	return o
}

// candidate is one replica running leadAndRun with a run function that
// records its term.
type candidate struct {
	identity string
	health   *healthChecker
	cancel   context.CancelFunc
	started  chan struct{} // closed when run starts
	runDone  chan struct{} // closed when run returns
	done     chan struct{} // closed when leadAndRun returns
	err      error         // leadAndRun's result, once done
	// holderAtRunEnd is the lease holder seen when run returned.
	holderAtRunEnd atomic.Value
}

func startCandidate(t *testing.T, client kubernetes.Interface, o *Options, identity string) *candidate {
	t.Helper()
	c := &candidate{
		identity: identity,
		started:  make(chan struct{}),
		runDone:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	watchdog := leaderelection.NewLeaderHealthzAdaptor(o.LeaseDuration)
	c.health = newHealthChecker(o.Workers, watchdog)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: "ops", Name: testLease},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	run := func(ctx context.Context) error {
		close(c.started)
		<-ctx.Done()
		// Workers finishing their last item: the lease must still be ours.
		time.Sleep(50 * time.Millisecond)
		if holder, err := getLeaseHolder(client); err == nil {
			c.holderAtRunEnd.Store(holder)
		}
		close(c.runDone)
		return nil
	}
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(tctx)
	c.cancel = cancel
	go func() {
		defer close(c.done)
		c.err = leadAndRun(ctx, o, lock, c.health, watchdog, run)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: leadAndRun did not return", identity)
		}
	})
	return c
}

func getLeaseHolder(client kubernetes.Interface) (string, error) {
	lease, err := client.CoordinationV1().Leases("ops").Get(context.Background(), testLease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

func leaseHolder(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	holder, err := getLeaseHolder(client)
	if err != nil {
		t.Errorf("getting the lease: %v", err)
	}
	return holder
}

func waitClosed(t *testing.T, ch <-chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s did not happen within %s", what, within)
	}
}

func TestLeaderElectionHandsOverOnStop(t *testing.T) {
	client := fake.NewClientset()
	o := electionOptions()

	a := startCandidate(t, client, o, "a")
	waitClosed(t, a.started, 5*time.Second, "a leading")
	// Once leading, readiness follows the controller, which this fake run
	// never registers.
	if a.health.ready() == nil {
		t.Error("the leader is ready without a synced controller")
	}

	b := startCandidate(t, client, o, "b")
	select {
	case <-b.started:
		t.Fatal("b started while a holds the lease")
	case <-time.After(5 * o.RetryPeriod):
	}
	if err := b.health.ready(); err != nil {
		t.Errorf("standby not ready: %v", err)
	}
	if err := b.health.live(nil); err != nil {
		t.Errorf("standby not live: %v", err)
	}

	a.cancel()
	select {
	case <-a.done:
		if a.err != nil {
			t.Errorf("a returned %v after a clean stop", a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a did not return after cancellation")
	}
	select {
	case <-a.runDone:
	default:
		t.Error("leadAndRun returned before run did")
	}
	if holder := a.holderAtRunEnd.Load(); holder != "a" {
		t.Errorf("lease holder when a's workers stopped = %q, want a: the lease was released too early", holder)
	}

	// Released, not expired: b takes over well within the lease duration.
	waitClosed(t, b.started, o.LeaseDuration/2, "b taking over")
	if holder := leaseHolder(t, client); holder != "b" {
		t.Errorf("lease holder = %q, want b", holder)
	}
}

func TestLeaderElectionLostLeaseReturnsError(t *testing.T) {
	client := fake.NewClientset()
	var apiDown atomic.Bool
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if apiDown.Load() {
			return true, nil, errors.New("API server unreachable")
		}
		return false, nil, nil
	})
	o := electionOptions()
	a := startCandidate(t, client, o, "a")
	waitClosed(t, a.started, 5*time.Second, "a leading")

	start := time.Now()
	apiDown.Store(true)
	select {
	case <-a.done:
		if a.err == nil || !strings.Contains(a.err.Error(), "lost the leader election lease") {
			t.Errorf("leadAndRun returned %v, want the lease lost", a.err)
		}
		// Well before a standby may take over, which is one lease duration
		// after the last renewal.
		if took := time.Since(start); took > o.LeaseDuration/2 {
			t.Errorf("stepping down took %s", took)
		}
	case <-time.After(o.LeaseDuration):
		t.Fatal("leadAndRun still running after the lease could not be renewed")
	}
	select {
	case <-a.runDone:
	default:
		t.Error("leadAndRun returned before the controller stopped")
	}
}

func TestLeaderElectionStopWhileStandby(t *testing.T) {
	client := fake.NewClientset()
	o := electionOptions()
	a := startCandidate(t, client, o, "a")
	waitClosed(t, a.started, 5*time.Second, "a leading")
	b := startCandidate(t, client, o, "b")
	time.Sleep(3 * o.RetryPeriod)

	b.cancel()
	select {
	case <-b.done:
		if b.err != nil {
			t.Errorf("standby returned %v after a clean stop", b.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("standby did not return after cancellation")
	}
	select {
	case <-b.started:
		t.Error("the standby ran the controller")
	default:
	}
	if holder := leaseHolder(t, client); holder != "a" {
		t.Errorf("lease holder = %q, want a: a standby's stop must not touch the lease", holder)
	}
}

func TestLeaderElectionNamespace(t *testing.T) {
	inPod := func(string) ([]byte, error) { return []byte("gamesession-system\n"), nil }
	notInPod := func(string) ([]byte, error) { return nil, errors.New("no such file") }
	for _, tc := range []struct {
		name     string
		change   func(*Options)
		readFile func(string) ([]byte, error)
		want     string
	}{
		{"flag wins", func(o *Options) { o.LeaderElectionNamespace = "ops"; o.Namespace = "tenant" }, inPod, "ops"},
		{"in a pod: the pod's namespace", func(o *Options) { o.Namespace = "tenant" }, inPod, "gamesession-system"},
		{"out of cluster: --namespace", func(o *Options) { o.Namespace = "tenant" }, notInPod, "tenant"},
		{"out of cluster, all namespaces", func(*Options) {}, notInPod, "default"},
		// A kubeconfig or RESTConfig means another cluster than the pod's
		// own: its namespace file is irrelevant there.
		{"kubeconfig from inside a pod", func(o *Options) { o.Kubeconfig = "/kc" }, inPod, "default"},
		{"RESTConfig from inside a pod", func(o *Options) { o.RESTConfig = &rest.Config{}; o.Namespace = "t" }, inPod, "t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.change(o)
			if got := o.leaderElectionNamespace(tc.readFile); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLeaderElectionClientConfig(t *testing.T) {
	shared := flowcontrol.NewTokenBucketRateLimiter(1000, 2000)
	parent := &rest.Config{Host: "https://api", QPS: 1000, Burst: 2000, RateLimiter: shared, UserAgent: "gsc"}
	c := leaderElectionConfig(parent, 10*time.Second)
	if c.RateLimiter != nil {
		t.Error("the lease client shares the controller's rate limiter")
	}
	if c.QPS <= 0 || c.Burst <= 0 {
		t.Errorf("QPS %v, burst %d: the lease client must have a limit of its own", c.QPS, c.Burst)
	}
	if c.Timeout != 5*time.Second {
		t.Errorf("timeout %s, want half the renew deadline", c.Timeout)
	}
	if !strings.Contains(c.UserAgent, "leader-election") {
		t.Errorf("user agent %q does not name the leader election", c.UserAgent)
	}
	if parent.RateLimiter != shared || parent.Timeout != 0 || parent.UserAgent != "gsc" {
		t.Error("the controller's config was modified")
	}
	if c := leaderElectionConfig(parent, time.Second); c.Timeout != time.Second {
		t.Errorf("timeout %s with a 1s renew deadline, want the 1s floor", c.Timeout)
	}
}

func TestLeaderIdentity(t *testing.T) {
	a, err := leaderIdentity()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := leaderIdentity()
	host, suffix, ok := strings.Cut(a, "_")
	if !ok || host == "" || len(suffix) < 8 {
		t.Errorf("identity %q, want hostname_random", a)
	}
	if a == b {
		t.Errorf("two identities are both %q: a restarted process must not pass for its predecessor", a)
	}
}
