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
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gamesscheme "github.com/example/gamesession-controller/pkg/generated/clientset/versioned/scheme"
	gamesinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions/games/v1"
	gameslisters "github.com/example/gamesession-controller/pkg/generated/listers/games/v1"
	"github.com/example/gamesession-controller/pkg/metrics"
	"github.com/example/gamesession-controller/pkg/rollout"
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
	// this long before they sync, so that a burst of edits rolls each session
	// once (see profileFanOut). Zero syncs at once.
	ProfileChangeDelay time.Duration

	// Clock is the controller's time source: its queue's delays and backoff,
	// and the profile-change delay. Nil means the real clock; tests pass a
	// fake one and step it.
	Clock clock.WithTicker

	// Metrics receives the controller's own series. Nil gives the controller
	// a fresh set that nothing exposes.
	Metrics *metrics.ControllerMetrics

	// RolloutDefaults is the rollout policy of profiles without rollout
	// annotations, and the base their annotations change. Nil is
	// rollout.DefaultPolicy: every session moves at once.
	RolloutDefaults *rollout.Policy

	// RevisionHistoryLimit is how many of a profile's newest revisions are
	// kept for rollback besides those in use (see staleRevisions).
	RevisionHistoryLimit int
}

// Controller reconciles GameSessions into Deployments.
type Controller struct {
	kubeClient kubernetes.Interface
	gameClient clientset.Interface
	logger     klog.Logger

	sessionLister     gameslisters.GameSessionLister
	sessionIndexer    cache.Indexer
	profileLister     corelisters.ConfigMapLister
	revisionLister    corelisters.ConfigMapLister
	revisionIndexer   cache.Indexer
	deploymentLister  appslisters.DeploymentLister
	deploymentIndexer cache.Indexer
	cachesSynced      []cache.InformerSynced

	// queue holds GameSession keys; profileQueue profile keys, for the
	// profile sync (revisions and rollout plans, see rollout.go).
	queue            workqueue.TypedRateLimitingInterface[string]
	profileQueue     workqueue.TypedRateLimitingInterface[string]
	eventBroadcaster record.EventBroadcaster
	recorder         record.EventRecorder
	metrics          *metrics.ControllerMetrics

	profileHashes   *profileHashCache
	profileSelector string
	fanOut          *profileFanOut
	expectations    *writeExpectations

	plans                *profilePlans
	mounts               *recentMounts
	rolloutDefaults      rollout.Policy
	revisionHistoryLimit int

	// workersRunning counts live workers, for the health check.
	workersRunning atomic.Int32

	// syncHandler and enqueueSession are fields so tests can replace them.
	syncHandler    func(ctx context.Context, key string) error
	enqueueSession func(obj interface{})
}

// NewController returns a Controller fed by the given informers. The profile
// informer must come from a factory filtered by the profile label selector,
// the revision informer (ConfigMaps too) from one filtered by
// RevisionSelector, and the Deployment informer from one filtered by
// ManagedDeploymentSelector: the controller relies on the filters, not on
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
	revisionInformer coreinformers.ConfigMapInformer,
	deploymentInformer appsinformers.DeploymentInformer,
	opts Options,
) (*Controller, error) {
	logger := klog.FromContext(ctx)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewControllerMetrics()
	}
	if opts.RolloutDefaults == nil {
		opts.RolloutDefaults = ptr.To(rollout.DefaultPolicy())
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	c := &Controller{
		kubeClient:        kubeClient,
		gameClient:        gameClient,
		logger:            logger,
		sessionLister:     sessionInformer.Lister(),
		sessionIndexer:    sessionInformer.Informer().GetIndexer(),
		profileLister:     profileInformer.Lister(),
		revisionLister:    revisionInformer.Lister(),
		revisionIndexer:   revisionInformer.Informer().GetIndexer(),
		deploymentLister:  deploymentInformer.Lister(),
		deploymentIndexer: deploymentInformer.Informer().GetIndexer(),
		cachesSynced: []cache.InformerSynced{
			sessionInformer.Informer().HasSynced,
			profileInformer.Informer().HasSynced,
			revisionInformer.Informer().HasSynced,
			deploymentInformer.Informer().HasSynced,
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name, Clock: opts.Clock},
		),
		profileQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name + "-profiles", Clock: opts.Clock},
		),
		eventBroadcaster:     broadcaster,
		recorder:             broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Name}),
		metrics:              opts.Metrics,
		profileHashes:        newProfileHashCache(),
		profileSelector:      opts.ProfileSelector,
		expectations:         newWriteExpectations(opts.Clock),
		plans:                newProfilePlans(),
		mounts:               newRecentMounts(opts.Clock),
		rolloutDefaults:      *opts.RolloutDefaults,
		revisionHistoryLimit: opts.RevisionHistoryLimit,
	}
	// The fan-out reads c.queue at call time, so tests may swap the queue.
	c.fanOut = newProfileFanOut(opts.Clock, opts.ProfileChangeDelay, c.sessionKeysOf,
		func(key string, delay time.Duration) { c.queue.AddAfter(key, delay) })
	c.syncHandler = c.syncGameSession
	c.enqueueSession = c.enqueue

	// The index must exist before the informer runs: ConfigMap events can
	// arrive as soon as the informers start, and a lookup on a missing index
	// would lose them.
	if err := sessionInformer.Informer().AddIndexers(cache.Indexers{profileRefIndex: profileRefIndexFunc}); err != nil {
		return nil, fmt.Errorf("adding the %s index to the GameSession informer: %w", profileRefIndex, err)
	}
	if err := revisionInformer.Informer().AddIndexers(cache.Indexers{revisionOfIndex: revisionOfIndexFunc}); err != nil {
		return nil, fmt.Errorf("adding the %s index to the revision informer: %w", revisionOfIndex, err)
	}
	if err := deploymentInformer.Informer().AddIndexers(cache.Indexers{mountedRevisionIndex: mountedRevisionIndexFunc}); err != nil {
		return nil, fmt.Errorf("adding the %s index to the Deployment informer: %w", mountedRevisionIndex, err)
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
	if _, err := revisionInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addRevision,
		DeleteFunc: c.deleteRevision,
	}); err != nil {
		return nil, err
	}
	if _, err := deploymentInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addDeployment,
		UpdateFunc: c.updateDeployment,
		DeleteFunc: c.deleteDeployment,
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
	defer c.profileQueue.ShutDown()
	logger := klog.FromContext(ctx)

	c.eventBroadcaster.StartStructuredLogging(3)
	c.eventBroadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kubeClient.CoreV1().Events("")})
	defer c.eventBroadcaster.Shutdown()

	logger.Info("Starting controller", "workers", workers)
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.cachesSynced...) {
		return fmt.Errorf("%s: caches did not sync before shutdown", Name)
	}

	var wg sync.WaitGroup
	// One profile worker: profile syncs are few (one per profile change,
	// and at most one per planInterval during a rollout), and one at a time
	// they never race each other on a profile's revisions.
	wg.Go(func() { wait.UntilWithContext(ctx, c.runProfileWorker, time.Second) })
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
	c.profileQueue.ShutDown()
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
	c.metrics.ObserveDropped(metrics.QueueSessions)
	c.queue.Forget(key)
}

func (c *Controller) enqueue(obj interface{}) {
	// DeletionHandlingMetaNamespaceKeyFunc also unwraps the tombstone the
	// informer hands over when it missed the delete itself.
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.logger.Error(err, "Cannot enqueue GameSession")
		return
	}
	c.queue.Add(key)
}

func (c *Controller) addProfile(obj interface{}) {
	profile := obj.(*corev1.ConfigMap)
	key := profileKey(profile.Namespace, profile.Name)
	c.enqueueProfile(key)
	c.enqueueSessionsOf(key)
}

func (c *Controller) updateProfile(oldObj, newObj interface{}) {
	oldProfile, newProfile := oldObj.(*corev1.ConfigMap), newObj.(*corev1.ConfigMap)
	key := profileKey(newProfile.Namespace, newProfile.Name)
	if oldProfile.ResourceVersion != newProfile.ResourceVersion {
		// A new revision, or a new rollout policy: the profile sync sees to both.
		c.enqueueProfile(key)
	}
	// Only data reach the pods. Resyncs and label or annotation edits would
	// otherwise re-sync every session of the profile for nothing.
	if profileDataEqual(oldProfile, newProfile) {
		return
	}
	ready := c.revisionCached(newProfile.Namespace, newProfile.Name, c.profileHashes.hash(newProfile))
	sessions, started := c.fanOut.profileChanged(key, ready)
	if !started {
		return // joined the rollout scheduled by an edit moments ago
	}
	c.metrics.ObserveFanOut(sessions)
	if sessions > 0 {
		// `kubectl describe configmap` then answers "what did my edit do?".
		c.recorder.Eventf(newProfile, corev1.EventTypeNormal, EventReasonProfileFanOut,
			MessageProfileFanOut, c.profileHashes.hash(newProfile), sessions)
	}
}

func (c *Controller) deleteProfile(obj interface{}) {
	profile, ok := obj.(*corev1.ConfigMap)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			c.logger.Error(nil, "Profile delete handler got an unexpected object", "type", fmt.Sprintf("%T", obj))
			return
		}
		if profile, ok = tombstone.Obj.(*corev1.ConfigMap); !ok {
			c.logger.Error(nil, "Profile tombstone holds an unexpected object", "type", fmt.Sprintf("%T", tombstone.Obj))
			return
		}
	}
	key := profileKey(profile.Namespace, profile.Name)
	c.profileHashes.forget(profile.UID)
	c.fanOut.forgetProfile(key)
	c.enqueueProfile(key)
	c.enqueueSessionsOf(key)
}

// addRevision hears of a revision in the cache. If it is the revision of its
// profile's current content, the fan-out of the change that made it can go
// on (see profileFanOut.profileChanged). Revisions listed at start-up come
// this way too; their sessions are queued at start-up anyway.
func (c *Controller) addRevision(obj interface{}) {
	revision := obj.(*corev1.ConfigMap)
	if !isRevision(revision) {
		return
	}
	key := profileKey(revision.Namespace, revision.Annotations[RevisionOfAnnotation])
	c.enqueueProfile(key)
	profile, err := c.cachedProfile(revision.Namespace, revision.Annotations[RevisionOfAnnotation])
	if err == nil && profile != nil && revision.Labels[labelProfileHash] == c.profileHashes.hash(profile) {
		c.fanOut.revisionCreated(key)
	}
}

// deleteRevision hears of a deleted revision: if it was the current one (a
// user deleted it), the profile sync creates it again.
func (c *Controller) deleteRevision(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if revision, ok := obj.(*corev1.ConfigMap); ok && isRevision(revision) {
		c.enqueueProfile(profileKey(revision.Namespace, revision.Annotations[RevisionOfAnnotation]))
	}
}

// sessionKeysOf returns the keys of the GameSessions that reference the
// profile ("namespace/name"), and no other. It reads only the index: the keys
// are what the queue needs, so no object is even fetched.
func (c *Controller) sessionKeysOf(profileKey string) []string {
	keys, err := c.sessionIndexer.IndexKeys(profileRefIndex, profileKey)
	if err != nil {
		// Only a missing index fails, and NewController adds it.
		c.logger.Error(err, "Looking up the GameSessions of a profile", "profile", profileKey)
		return nil
	}
	return keys
}

func (c *Controller) enqueueSessionsOf(profileKey string) {
	for _, key := range c.sessionKeysOf(profileKey) {
		c.queue.Add(key)
	}
}

func (c *Controller) addDeployment(obj interface{}) {
	c.enqueueOwner(obj.(*appsv1.Deployment))
}

func (c *Controller) updateDeployment(oldObj, newObj interface{}) {
	oldDeployment, newDeployment := oldObj.(*appsv1.Deployment), newObj.(*appsv1.Deployment)
	if oldDeployment.ResourceVersion == newDeployment.ResourceVersion {
		return // a resync; the session's own resync covers it
	}
	c.enqueueOwner(newDeployment)
	if mountedRevision(oldDeployment) != mountedRevision(newDeployment) {
		c.enqueueProfileOfRevision(oldDeployment)
	}
}

// deleteDeployment also sees a Deployment that lost the managed-by label:
// it left the label-filtered cache, which the informer reports as a delete.
func (c *Controller) deleteDeployment(obj interface{}) {
	deployment, ok := obj.(*appsv1.Deployment)
	if !ok {
		tombstone, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			c.logger.Error(nil, "Deployment delete handler got an unexpected object", "type", fmt.Sprintf("%T", obj))
			return
		}
		if deployment, ok = tombstone.Obj.(*appsv1.Deployment); !ok {
			c.logger.Error(nil, "Deployment tombstone holds an unexpected object", "type", fmt.Sprintf("%T", tombstone.Obj))
			return
		}
	}
	c.enqueueOwner(deployment)
	c.enqueueProfileOfRevision(deployment)
}

// enqueueProfileOfRevision asks for a profile sync of the profile whose
// revision the Deployment mounted: it may have become stale, and nothing
// else would look at it again.
func (c *Controller) enqueueProfileOfRevision(d *appsv1.Deployment) {
	name := mountedRevision(d)
	if name == "" {
		return
	}
	r, err := c.revisionLister.ConfigMaps(d.Namespace).Get(name)
	if err != nil || !isRevision(r) {
		return
	}
	c.profileQueue.AddAfter(profileKey(d.Namespace, r.Annotations[RevisionOfAnnotation]), planInterval)
}

// enqueueOwner enqueues the session of a Deployment's name. A Deployment in
// this cache carries our label and is named after its session; whether that
// session controls it or is blocked by it (a previous session's Deployment
// awaiting the garbage collector, one orphaned by --cascade=orphan), the
// session of that name must hear of the change, its deletion above all.
func (c *Controller) enqueueOwner(deployment *appsv1.Deployment) {
	c.queue.Add(cache.MetaObjectToName(deployment).String())
}
