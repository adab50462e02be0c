// Package controller runs one Deployment per GameSession and rolls it out
// whenever the profile ConfigMap the session references changes.
//
// Three informers feed one work queue of GameSession keys:
//   - GameSessions, with an index on spec.profileRef;
//   - profile ConfigMaps, from a factory filtered by the profile label, so the
//     cluster's other ConfigMaps are never listed, watched or cached;
//   - the controller's own Deployments, from a factory filtered by the
//     managed-by label.
//
// A ConfigMap event is mapped to the sessions that reference it through the
// index, so a profile change enqueues exactly its sessions, whatever the number
// of sessions and profiles in the cluster.
package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gamesscheme "github.com/example/gamesession-controller/pkg/generated/clientset/versioned/scheme"
	gamesinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions/games/v1"
	gameslisters "github.com/example/gamesession-controller/pkg/generated/listers/games/v1"
	"github.com/example/gamesession-controller/pkg/metrics"
)

func init() {
	// Events about GameSessions need the type in the scheme the event
	// recorder uses to find an object's kind. The scheme is process-wide and
	// unsynchronised, so it is extended here, before any goroutine reads it,
	// not in NewController, which tests call while other controllers run.
	utilruntime.Must(gamesscheme.AddToScheme(scheme.Scheme))
}

// Name is the controller's name: its work queue, field manager, event source
// and the value of the managed-by label on its Deployments.
const Name = "gamesession-controller"

// maxRetries is how often a session is retried before it is dropped from the
// queue. With the default per-item backoff of 5ms*2^n, 15 retries span
// 5ms, 10ms, ... 82s, about 2.7 minutes in all. A dropped session is picked up
// again by its next event or the next resync.
const maxRetries = 15

// Options tune a Controller.
type Options struct {
	// ProfileSelector is the label selector the ConfigMap informer was built
	// with. The controller only quotes it in messages, to tell users which
	// label their profile is missing.
	ProfileSelector string

	// ProfileChangeDelay holds the sessions of a changed profile in the queue
	// this long before they sync. Profile edits come in bursts (a script
	// writing key by key, an apply of several files), and every rollout
	// restarts game servers: within the delay, further edits collapse into one
	// rollout per session instead of one per edit. Zero syncs at once.
	ProfileChangeDelay time.Duration
}

// Controller reconciles GameSessions into Deployments.
type Controller struct {
	kubeClient kubernetes.Interface
	gameClient clientset.Interface

	sessionLister    gameslisters.GameSessionLister
	sessionIndexer   cache.Indexer
	profileLister    corelisters.ConfigMapLister
	deploymentLister appslisters.DeploymentLister
	cachesSynced     []cache.InformerSynced

	queue            workqueue.TypedRateLimitingInterface[string]
	eventBroadcaster record.EventBroadcaster
	recorder         record.EventRecorder

	profileHashes      *profileHashCache
	profileSelector    string
	profileChangeDelay time.Duration

	// pendingFanOuts holds the profiles ("namespace/name") whose fan-out is
	// scheduled but has not run yet.
	pendingMu      sync.Mutex
	pendingFanOuts map[string]struct{}

	// The objects the controller wrote, until its caches catch up with them.
	writtenSessions    *writeTracker[*gamesv1.GameSession]
	writtenDeployments *writeTracker[*appsv1.Deployment]

	// rolling orders a fan-out's writes: every Deployment before any status.
	rolling *rollingSessions

	// workersRunning counts live workers, for the health check.
	workersRunning atomic.Int32

	// syncHandler and enqueueSession are fields so tests can replace them.
	syncHandler    func(ctx context.Context, key string) error
	enqueueSession func(obj interface{})
}

// NewController returns a Controller fed by the given informers. The
// ConfigMap informer must come from a factory filtered by the profile label
// selector, and the Deployment informer from one filtered by
// ManagedDeploymentSelector: the controller relies on the filter, not on
// checks of its own, to keep the cluster's other objects out of its caches.
//
// It registers its index and event handlers, so it must be called before the
// informers start.
func NewController(
	ctx context.Context,
	kubeClient kubernetes.Interface,
	gameClient clientset.Interface,
	sessionInformer gamesinformers.GameSessionInformer,
	profileInformer coreinformers.ConfigMapInformer,
	deploymentInformer appsinformers.DeploymentInformer,
	opts Options,
) (*Controller, error) {
	logger := klog.FromContext(ctx)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	c := &Controller{
		kubeClient:       kubeClient,
		gameClient:       gameClient,
		sessionLister:    sessionInformer.Lister(),
		sessionIndexer:   sessionInformer.Informer().GetIndexer(),
		profileLister:    profileInformer.Lister(),
		deploymentLister: deploymentInformer.Lister(),
		cachesSynced: []cache.InformerSynced{
			sessionInformer.Informer().HasSynced,
			profileInformer.Informer().HasSynced,
			deploymentInformer.Informer().HasSynced,
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name},
		),
		eventBroadcaster:   broadcaster,
		recorder:           broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Name}),
		profileHashes:      newProfileHashCache(),
		profileSelector:    opts.ProfileSelector,
		profileChangeDelay: opts.ProfileChangeDelay,
		pendingFanOuts:     make(map[string]struct{}),
		writtenSessions:    newWriteTracker[*gamesv1.GameSession](),
		writtenDeployments: newWriteTracker[*appsv1.Deployment](),
		rolling:            newRollingSessions(),
	}
	c.syncHandler = c.syncGameSession
	c.enqueueSession = c.enqueue

	// The index must exist before the informer runs: ConfigMap events can
	// arrive as soon as the informers start, and a lookup on a missing index
	// would lose them.
	if err := sessionInformer.Informer().AddIndexers(cache.Indexers{profileRefIndex: profileRefIndexFunc}); err != nil {
		return nil, fmt.Errorf("adding the %s index to the GameSession informer: %w", profileRefIndex, err)
	}

	logger.Info("Setting up event handlers")
	if _, err := sessionInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { c.enqueueSession(obj) },
		UpdateFunc: func(_, newObj interface{}) {
			// Resyncs land here too (same object twice); a resync is the
			// safety net that re-checks every session, so it is not filtered.
			c.enqueueSession(newObj)
		},
		// Nothing to clean up (the garbage collector removes the Deployment),
		// but the sync of a deleted key ends any per-session state.
		DeleteFunc: func(obj interface{}) { c.enqueueSession(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := profileInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addProfile,
		UpdateFunc: c.updateProfile,
		DeleteFunc: c.deleteProfile,
	}); err != nil {
		return nil, err
	}
	if _, err := deploymentInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.handleDeployment,
		UpdateFunc: func(oldObj, newObj interface{}) {
			if oldObj.(*appsv1.Deployment).ResourceVersion == newObj.(*appsv1.Deployment).ResourceVersion {
				return // a resync; the session's own resync covers it
			}
			c.handleDeployment(newObj)
		},
		DeleteFunc: c.handleDeployment,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the caches, runs workers until ctx is cancelled, then shuts the
// queue down and waits for the workers to finish their current item. It can be
// called once per Controller; informers are started and stopped by the caller.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)

	c.eventBroadcaster.StartStructuredLogging(3)
	c.eventBroadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kubeClient.CoreV1().Events("")})
	defer c.eventBroadcaster.Shutdown()

	logger.Info("Starting controller", "workers", workers)
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.cachesSynced...) {
		return fmt.Errorf("%s: caches did not sync before shutdown", Name)
	}

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			c.workersRunning.Add(1)
			defer c.workersRunning.Add(-1)
			wait.UntilWithContext(ctx, c.runWorker, time.Second)
		})
	}
	logger.Info("Started workers", "workers", workers)
	<-ctx.Done()
	logger.Info("Shutting down workers")
	c.queue.ShutDown()
	wg.Wait()
	logger.Info("Controller stopped")
	return nil
}

// WorkersRunning is the number of workers currently running, for health checks.
func (c *Controller) WorkersRunning() int {
	return int(c.workersRunning.Load())
}

// HasSynced reports whether every informer the controller reads has synced.
func (c *Controller) HasSynced() bool {
	for _, synced := range c.cachesSynced {
		if !synced() {
			return false
		}
	}
	return true
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	// Done tells the queue the key may be handed out again; until then a
	// re-add is parked, so two workers never sync the same session at once.
	defer c.queue.Done(key)

	err := c.instrumentedSync(ctx, key)
	c.handleErr(ctx, err, key)
	return true
}

func (c *Controller) handleErr(ctx context.Context, err error, key string) {
	if err == nil {
		c.queue.Forget(key)
		return
	}
	logger := klog.FromContext(ctx)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	ref := klog.KRef(ns, name)
	if apierrors.IsConflict(err) {
		// Our cached copy was stale; the watch event with the fresh one is on
		// its way. Normal under load, so retry quietly.
		logger.V(4).Info("Conflict syncing GameSession, retrying", "gameSession", ref, "err", err)
		c.queue.AddRateLimited(key)
		return
	}
	if c.queue.NumRequeues(key) < maxRetries {
		logger.Info("Error syncing GameSession, retrying", "gameSession", ref, "err", err)
		c.queue.AddRateLimited(key)
		return
	}
	utilruntime.HandleErrorWithContext(ctx, err, "Dropping GameSession out of the queue", "gameSession", ref)
	c.queue.Forget(key)
}

func (c *Controller) enqueue(obj interface{}) {
	// DeletionHandlingMetaNamespaceKeyFunc also unwraps the tombstone the
	// informer hands over when it missed the delete itself.
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) addProfile(obj interface{}) {
	profile := obj.(*corev1.ConfigMap)
	c.enqueueSessionsForProfile(profile.Namespace, profile.Name, false)
}

func (c *Controller) updateProfile(oldObj, newObj interface{}) {
	oldProfile, newProfile := oldObj.(*corev1.ConfigMap), newObj.(*corev1.ConfigMap)
	// Only data reach the pods. Resyncs and label or annotation edits would
	// otherwise re-sync every session of the profile for nothing.
	if profileDataEqual(oldProfile, newProfile) {
		return
	}
	c.scheduleProfileFanOut(newProfile.Namespace, newProfile.Name)
}

func (c *Controller) deleteProfile(obj interface{}) {
	profile, ok := obj.(*corev1.ConfigMap)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			utilruntime.HandleError(fmt.Errorf("profile delete: unexpected object %T", obj))
			return
		}
		if profile, ok = tombstone.Obj.(*corev1.ConfigMap); !ok {
			utilruntime.HandleError(fmt.Errorf("profile delete: tombstone holds %T, not a ConfigMap", tombstone.Obj))
			return
		}
	}
	c.profileHashes.forget(profile.UID)
	c.enqueueSessionsForProfile(profile.Namespace, profile.Name, false)
}

// scheduleProfileFanOut enqueues the sessions of a changed profile after
// ProfileChangeDelay. While a fan-out is pending, further edits of the same
// profile join it: the sessions sync once, against the latest data.
func (c *Controller) scheduleProfileFanOut(namespace, name string) {
	if c.profileChangeDelay <= 0 {
		c.fanOutProfile(namespace, name)
		return
	}
	key := profileKey(namespace, name)
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	if _, pending := c.pendingFanOuts[key]; pending {
		return
	}
	c.pendingFanOuts[key] = struct{}{}
	time.AfterFunc(c.profileChangeDelay, func() {
		c.pendingMu.Lock()
		delete(c.pendingFanOuts, key)
		c.pendingMu.Unlock()
		c.fanOutProfile(namespace, name)
	})
}

// fanOutPending reports whether a fan-out of the profile is scheduled.
func (c *Controller) fanOutPending(namespace, name string) bool {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	_, pending := c.pendingFanOuts[profileKey(namespace, name)]
	return pending
}

// fanOutProfile enqueues the sessions of a changed profile and records on the
// ConfigMap how many it set rolling, so `kubectl describe configmap` answers
// "what did my edit do?".
func (c *Controller) fanOutProfile(namespace, name string) {
	n := c.enqueueSessionsForProfile(namespace, name, true)
	metrics.ObserveFanOut(n)
	profile, err := c.profileLister.ConfigMaps(namespace).Get(name)
	if n == 0 || err != nil {
		return // no sessions, or deleted meanwhile (its delete enqueued them)
	}
	c.recorder.Eventf(profile, corev1.EventTypeNormal, EventReasonProfileFanOut,
		MessageProfileFanOut, c.profileHashes.hash(profile), n)
}

// enqueueSessionsForProfile enqueues every GameSession that references the
// profile, and no other, and returns how many it enqueued. It reads only the
// index: the keys are what the queue needs, so no object is even fetched.
// rolling marks them as a fan-out (see rollingSessions).
func (c *Controller) enqueueSessionsForProfile(namespace, name string, rolling bool) int {
	keys, err := c.sessionIndexer.IndexKeys(profileRefIndex, profileKey(namespace, name))
	if err != nil {
		// Only a missing index fails, and NewController adds it.
		utilruntime.HandleError(fmt.Errorf("looking up GameSessions of profile %s/%s: %w", namespace, name, err))
		return 0
	}
	if rolling {
		// Before they are queued, so no worker can sync one unmarked.
		c.rolling.add(keys)
	}
	for _, key := range keys {
		c.queue.Add(key)
	}
	return len(keys)
}

// handleDeployment enqueues the GameSession that controls a Deployment or,
// if no current session does, the session of the Deployment's name, which
// that Deployment blocks (DeploymentNotControlled).
func (c *Controller) handleDeployment(obj interface{}) {
	object, ok := obj.(metav1.Object)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			utilruntime.HandleError(fmt.Errorf("deployment event: unexpected object %T", obj))
			return
		}
		if object, ok = tombstone.Obj.(metav1.Object); !ok {
			utilruntime.HandleError(fmt.Errorf("deployment event: tombstone holds %T", tombstone.Obj))
			return
		}
	}
	// A Deployment in this cache carries our label and is named after its
	// session. When no current session controls it (a deleted session's,
	// awaiting the garbage collector; one orphaned by --cascade=orphan), the
	// session of that name is blocked by it and must hear of its deletion
	// at once, not at the next resync.
	name := object.GetName()
	if ref := metav1.GetControllerOf(object); ref != nil && ref.Kind == gameSessionKind.Kind && ref.APIVersion == gameSessionKind.GroupVersion().String() {
		name = ref.Name
	}
	session, err := c.sessionLister.GameSessions(object.GetNamespace()).Get(name)
	if err != nil {
		return // gone: the garbage collector removes its Deployment
	}
	c.enqueueSession(session)
}
