package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// kcmStandIn stands in for kube-controller-manager's Deployment controller,
// for the paced rollout scenario only. The benchmark runs no
// kube-controller-manager (and no nodes), so a Deployment the controller
// moves would never report its rollout complete, and a paced rollout, which
// admits the next sessions only as the moved ones become Ready, would stop
// after its first wave.
//
// It is the least that makes a paced rollout progress: an informer on the
// Deployments of the bench namespace and workers that, for each Deployment
// whose status.observedGeneration is behind its metadata.generation, write
// its status (UpdateStatus) with observedGeneration = generation and
// replicas, updatedReplicas, readyReplicas and availableReplicas all equal to
// spec.replicas: what the Deployment controller reports once a Deployment of
// that many replicas has rolled out, and at once for the sessions' replicas:
// 0. It creates no ReplicaSets, sets no conditions and has no rate limit, so
// it is faster than a real kube-controller-manager (20 QPS by default, a
// ReplicaSet per template change) and far faster than pods becoming Ready:
// the paced times measure the controller's pacing, not a real rollout.
//
// It runs as the admin (system:masters, so API Priority and Fairness puts it
// in the exempt flow schema, never the controller's service-accounts one)
// with a user agent of its own, and counts its requests client side, by the
// verb and resource the API server's apiserver_request_total uses, so that
// they can be taken out of the server's counts (pacedRound). Its only writes
// are to deployments/status, which the controller never writes.
type kcmStandIn struct {
	client   kubernetes.Interface
	factory  kubeinformers.SharedInformerFactory
	informer cache.SharedIndexInformer
	lister   appslisters.DeploymentLister
	queue    workqueue.TypedRateLimitingInterface[string]
	requests *requestCounter

	writes, conflicts atomic.Int64
	cancel            context.CancelFunc
	done              sync.WaitGroup
}

const (
	standInUserAgent = "bench-kcm-standin"
	standInWorkers   = 16
)

// startKCMStandIn starts the stand-in on namespace and returns once its
// cache has synced.
func (e *env) startKCMStandIn(ctx context.Context, namespace string) (*kcmStandIn, error) {
	s := &kcmStandIn{requests: newRequestCounter()}
	cfg := protobufConfig(e.adminCfg)
	cfg.UserAgent = standInUserAgent
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return s.requests.wrap(rt) })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s.client = client
	s.factory = kubeinformers.NewSharedInformerFactoryWithOptions(client, 0, kubeinformers.WithNamespace(namespace))
	s.informer = s.factory.Apps().V1().Deployments().Informer()
	s.lister = s.factory.Apps().V1().Deployments().Lister()
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: standInUserAgent})
	enqueue := func(obj any) {
		if d, ok := obj.(*appsv1.Deployment); ok && d.Status.ObservedGeneration < d.Generation {
			if key, err := cache.MetaNamespaceKeyFunc(d); err == nil {
				s.queue.Add(key)
			}
		}
	}
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.factory.Start(runCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		s.stop()
		return nil, fmt.Errorf("kube-controller-manager stand-in: cache did not sync")
	}
	for range standInWorkers {
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			for s.processNext(runCtx) {
			}
		}()
	}
	logf("kube-controller-manager stand-in started on namespace %s (%d workers, protobuf, user agent %s)", namespace, standInWorkers, standInUserAgent)
	return s, nil
}

func (s *kcmStandIn) processNext(ctx context.Context) bool {
	key, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(key)
	err := s.sync(ctx, key)
	switch {
	case err == nil, apierrors.IsNotFound(err):
		s.queue.Forget(key)
	case apierrors.IsConflict(err):
		// A newer version is in the cache or on its way, and its event
		// queues the Deployment again.
		s.conflicts.Add(1)
		s.queue.Forget(key)
	case ctx.Err() != nil:
	default:
		logf("kube-controller-manager stand-in: %s: %v", key, err)
		s.queue.AddRateLimited(key)
	}
	return true
}

// sync reports the Deployment rolled out, as the Deployment controller does
// for one of 0 replicas.
func (s *kcmStandIn) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	d, err := s.lister.Deployments(ns).Get(name)
	if err != nil {
		return err
	}
	if d.Status.ObservedGeneration >= d.Generation {
		return nil
	}
	d = d.DeepCopy()
	want := ptr.Deref(d.Spec.Replicas, 1)
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = want, want, want, want
	d.Status.UnavailableReplicas = 0
	if _, err := s.client.AppsV1().Deployments(ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		return err
	}
	s.writes.Add(1)
	return nil
}

// waitSettled returns once every Deployment in the cache reports its
// rollout complete and the queue is empty.
func (s *kcmStandIn) waitSettled(ctx context.Context) error {
	for {
		list, err := s.lister.List(labels.Everything())
		if err != nil {
			return err
		}
		pending := 0
		for _, d := range list {
			if !deploymentComplete(d) {
				pending++
			}
		}
		if pending == 0 && s.queue.Len() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager stand-in: %d Deployments not complete: %w", pending, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop stops the workers and the informer; the watch ends here, so stop it
// only after a measured window's closing snapshot.
func (s *kcmStandIn) stop() {
	s.cancel()
	s.queue.ShutDown()
	s.done.Wait()
	s.factory.Shutdown()
}

// deploymentComplete is the controller's test of a Ready session
// (pkg/controller/status.go): the Deployment controller has seen the latest
// spec, and every replica runs the latest template and is ready.
func deploymentComplete(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation &&
		d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want &&
		d.Status.ReadyReplicas == want
}

// protobufConfig returns a copy of cfg whose typed clients speak protobuf,
// as the controller's Kubernetes client does (and kube-controller-manager's).
func protobufConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// requestCounter counts a client's requests by the verb and resource that
// apiserver_request_total labels them with ("PUT deployments/status.apps"),
// for the few kinds of request a Deployment client makes.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]float64 // "VERB resource"
	failed map[string]float64 // "VERB resource code", for codes >= 400
}

func newRequestCounter() *requestCounter {
	return &requestCounter{counts: map[string]float64{}, failed: map[string]float64{}}
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		key := apiVerbResource(req)
		c.mu.Lock()
		c.counts[key]++
		c.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode >= 400 {
			c.mu.Lock()
			c.failed[fmt.Sprintf("%s %d", key, resp.StatusCode)]++
			c.mu.Unlock()
		}
		return resp, err
	})
}

// snapshot returns copies of the counts and the failures so far.
func (c *requestCounter) snapshot() (counts, failed map[string]float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts), maps.Clone(c.failed)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// apiVerbResource names a request as apiserver_request_total does, for
// paths of the form /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME[/SUB]]
// or /api/VERSION/... (the core group).
func apiVerbResource(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	group := ""
	switch {
	case len(parts) >= 3 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	default:
		return req.Method + " " + req.URL.Path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return req.Method + " " + req.URL.Path
	}
	resource := parts[0]
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	if group != "" {
		resource += "." + group
	}
	verb := req.Method
	switch {
	case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case req.Method == http.MethodGet && len(parts) == 1:
		verb = "LIST"
	case req.Method == http.MethodPost && len(parts) == 1:
		verb = "POST"
	}
	return verb + " " + resource
}

// subtractRequests takes a client's own requests and failures (a
// requestCounter's differences over a window) out of what the API server
// counted in it.
func subtractRequests(d requestDelta, own, ownFailed map[string]float64) requestDelta {
	out := d
	out.byVerbResource = make(map[string]float64, len(d.byVerbResource))
	for k, v := range d.byVerbResource {
		if v -= own[k]; v != 0 {
			out.byVerbResource[k] = v
		}
	}
	out.failed = make(map[string]float64, len(d.failed))
	for k, v := range d.failed {
		if v -= ownFailed[k]; v != 0 {
			out.failed[k] = v
		}
	}
	return out
}

// requestLines renders a request count map sorted.
func requestLines(m map[string]float64) string {
	var parts []string
	for k, v := range m {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s %g", k, v))
		}
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
