package app

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// serviceAccountNamespaceFile holds the pod's namespace in every pod that
// mounts a service account token.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// runWithLeaderElection calls run once this process holds the lease, and
// returns when ctx is cancelled or the lease is lost, after run has returned.
//
// Losing the lease is an error: the process exits and is restarted as a
// standby, instead of trying to take over again with caches and a queue that
// were built for the old term.
//
// watchdog is the lease check of /healthz; the elector is attached to it here.
func runWithLeaderElection(ctx context.Context, o *Options, cfg *rest.Config, health *healthChecker, watchdog *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	namespace := o.leaderElectionNamespace(os.ReadFile)
	identity, err := leaderIdentity()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(leaderElectionConfig(cfg, o.RenewDeadline))
	if err != nil {
		return fmt.Errorf("building the leader election client: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: o.LeaderElectionID},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	return leadAndRun(ctx, o, lock, health, watchdog, run)
}

// leadAndRun is runWithLeaderElection once the lock is built; tests give it a
// lock on a fake clientset.
func leadAndRun(ctx context.Context, o *Options, lock *resourcelock.LeaseLock, health *healthChecker, watchdog *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	identity := lock.Identity()
	leading := make(chan context.Context, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		Name:          lock.LeaseMeta.Name,
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		// Released on a clean stop, the lease passes to a standby at its next
		// retry instead of after a full lease duration.
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			// The controller runs in this goroutine, not the elector's, so
			// that Run can wait for it to stop.
			OnStartedLeading: func(leaderCtx context.Context) { leading <- leaderCtx },
			OnStoppedLeading: func() {},
			OnNewLeader: func(holder string) {
				if holder != identity {
					logger.Info("Another replica leads", "leader", holder)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	watchdog.SetLeaderElection(elector)

	// The elector's context is not ctx: on shutdown the workers must stop
	// before the lease is released, or the successor could start syncing
	// while our last syncs are still writing.
	electorCtx, cancelElector := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElector()
	electorDone := make(chan struct{})
	go func() {
		defer close(electorDone)
		elector.Run(electorCtx)
	}()
	stopElector := func() {
		cancelElector()
		<-electorDone
	}

	lease := klog.KRef(lock.LeaseMeta.Namespace, lock.LeaseMeta.Name)
	logger.Info("Waiting to become the leader", "lease", lease, "identity", identity)
	var leaderCtx context.Context
	select {
	case <-ctx.Done():
		stopElector()
		return nil
	case leaderCtx = <-leading:
	}
	if ctx.Err() != nil {
		stopElector()
		return nil
	}
	logger.Info("Became the leader, starting the controller", "lease", lease, "identity", identity)
	health.leading.Store(true)

	// The controller stops on shutdown (ctx) or when the lease is lost
	// (leaderCtx, cancelled when the elector gives up renewing).
	runCtx, cancelRun := context.WithCancel(ctx)
	stopOnLoss := context.AfterFunc(leaderCtx, cancelRun)
	err = run(runCtx)
	stopOnLoss()
	cancelRun()

	lost := leaderCtx.Err() != nil // only the elector cancels it so far
	stopElector()                  // releases the lease if we still hold it
	if lost {
		return fmt.Errorf("lost the leader election lease %s: exiting so that a standby takes over", lease)
	}
	return err
}

// leaderElectionConfig returns the configuration of the lease client. It is a
// client of its own, with its own rate limiter, so that a fan-out filling the
// controller's client-side rate limit can never delay a renewal and cost the
// lease.
func leaderElectionConfig(cfg *rest.Config, renewDeadline time.Duration) *rest.Config {
	c := rest.CopyConfig(cfg)
	// CopyConfig keeps a shared RateLimiter; nil makes the client build its
	// own from QPS and Burst. A renewal every retry period needs little.
	c.RateLimiter = nil
	c.QPS, c.Burst = 5, 10
	// A request hung for the whole renew deadline would cost the lease on its
	// own; half of it leaves room for a retry.
	c.Timeout = max(renewDeadline/2, time.Second)
	return rest.AddUserAgent(c, "leader-election")
}

// leaderElectionNamespace resolves where the Lease lives: the flag if set;
// else, in a cluster, the pod's own namespace, where the Role for leases is;
// else --namespace, the only namespace a namespaced controller may write to;
// else "default".
func (o *Options) leaderElectionNamespace(readFile func(string) ([]byte, error)) string {
	if o.LeaderElectionNamespace != "" {
		return o.LeaderElectionNamespace
	}
	return cmp.Or(o.podNamespace(readFile), o.Namespace, metav1.NamespaceDefault)
}

// podNamespace is the namespace of the pod the controller runs in, "" when
// it runs outside a cluster. Only with the in-cluster configuration: a test
// or `make run` talking to another API server from inside some pod must not
// pick that pod's namespace.
func (o *Options) podNamespace(readFile func(string) ([]byte, error)) string {
	if o.RESTConfig == nil && o.Kubeconfig == "" && o.Master == "" {
		if b, err := readFile(serviceAccountNamespaceFile); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// leaderIdentity names this process in the Lease: the hostname (the pod name
// in a cluster) tells people which replica leads, and the random suffix keeps
// a restarted process from being taken for its predecessor.
func leaderIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}
