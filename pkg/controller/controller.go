package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
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

// Options tune a Controller.
type Options struct {
	// Namespace is the one namespace the informers were built for, "" for
	// all. A controller of one namespace refuses profiles of others, and
	// says why.
	Namespace string
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

	// MaxMovingSessions and MaxMovesPerMinute are the cluster-wide budget of
	// profile moves, across all profiles: at most that many sessions moved
	// to a new revision and not yet Ready at once, and at most that many
	// moves started in any minute (see moveLedger). Zero is no limit.
	MaxMovingSessions int
	MaxMovesPerMinute int

	// PatchDeployments makes the controller write its changes to a
	// Deployment as a patch of the fields that differ, not as an update of
	// the whole object. An update costs the API server less (a patch is
	// applied to the stored object, an update only decoded), but it is the
	// cached copy with the controller's fields changed, and that copy was
	// decoded into this build's API types: a field the API server serves
	// and the types lack, as a cluster newer than the client's Kubernetes
	// version may have, would be erased by it. Set it when the API server
	// may be newer than k8s.io/api; the app does (--deployment-writes).
	PatchDeployments bool
}

// Informers are the informers a Controller reads. Each must come from a
// factory with the filter its field names: the controller relies on the
// filters, not on checks of its own, to keep the cluster's other objects out
// of its caches. Named fields, because two of them have the same type.
type Informers struct {
	// Sessions: every GameSession.
	Sessions gamesinformers.GameSessionInformer
	// Rollouts: every ProfileRollout. The controller creates them, one per
	// profile, and reads in them what a rollout remembers.
	Rollouts gamesinformers.ProfileRolloutInformer
	// Profiles: ConfigMaps matching the profile label selector.
	Profiles coreinformers.ConfigMapInformer
	// Revisions: ConfigMaps matching RevisionSelector. The controller reads
	// which revisions exist, never what they hold, so a transform may drop
	// their data.
	Revisions coreinformers.ConfigMapInformer
	// Deployments: matching ManagedDeploymentSelector.
	Deployments appsinformers.DeploymentInformer
	// ReplicaSets: matching ManagedDeploymentSelector too (a ReplicaSet
	// carries its Deployment's pod template labels), slimmed by
	// SlimReplicaSet. They say which revisions the pods of old ReplicaSets
	// still mount.
	ReplicaSets appsinformers.ReplicaSetInformer
	// Grants: every Gateway API ReferenceGrant (ReferenceGrantVersions),
	// through a dynamic informer with SlimReferenceGrant as its transform;
	// nil when the cluster serves none, and then no session may use a
	// profile of another namespace.
	Grants cache.SharedIndexInformer
	// Secrets: Secrets matching SecretSelector, through SecretDigester as
	// the transform, so that the cache holds a digest of each one's data
	// and never the data. Nil: Secret changes roll nothing, and the
	// Deployments keep the Secret digest they have.
	Secrets coreinformers.SecretInformer
	// SessionConfigs: ConfigMaps matching SessionConfigSelector, through
	// SessionConfigDigester as the transform: a digest of each one's data,
	// never the data. From a factory of its own, not the profiles'. Nil:
	// their changes roll nothing, and the Deployments keep the digest they
	// have.
	SessionConfigs coreinformers.ConfigMapInformer
}

// Controller reconciles GameSessions into Deployments, and profiles into
// revisions and rollouts.
//
// What it keeps beside the informers, why, and what a restart loses:
//   - profileHashes: the hash of each profile version, so a fan-out hashes a
//     profile once, not once per session. A restart loses nothing.
//   - fanOut: the profile-change delay and which sessions a fan-out queued
//     (fanout.go). A restart loses the delay and the Deployments-first order
//     of a fan-out in flight, never a write.
//   - expectations: the Deployment generation each session's last write
//     produced, by UID (expectations.go), so a sync does not patch again
//     before the cache shows it. A restart costs at most one idle patch.
//   - revisions: revisions created, deleted and newly mounted that the
//     caches do not show yet, by UID and generation (revision.go), so a
//     revision is neither deleted under a Deployment just moved to it nor
//     mounted just after its delete. A restarted controller's caches start
//     in sync and need none of it.
//   - plans: the latest rollout plan of each profile (profilesync.go), what
//     session syncs read to know whose turn it is. A plan is computed from
//     the caches and the profile's ProfileRollout, where what a rollout must
//     remember (halt, stable revision, start) lives: a restart recomputes it.
//   - moves: the ledger of moves (ledger.go), every session moving to a new
//     profile revision or new data of its Secrets and ConfigMaps, for the
//     cluster-wide budget and each profile's max-rolling, and the sessions
//     waiting for a place. A restart rebuilds the moves from the caches
//     (every Deployment still rolling) and the starts of the last minute
//     from the annotation each move writes on its Deployment; its waiting
//     sessions sync again on their own, their caches being new.
//   - inputChanges (inputs.go): since when each session's change of its
//     Secrets or ConfigMaps has waited, for max-defer. A restart counts
//     max-defer from its start: a busy session waits longer, never less.
type Controller struct {
	kubeClient kubernetes.Interface
	gameClient clientset.Interface
	putStatus  putSessionStatus // from gameClient, leaves the answer unread
	logger     klog.Logger

	sessionLister     gameslisters.GameSessionLister
	sessionIndexer    cache.Indexer
	rolloutLister     gameslisters.ProfileRolloutLister
	profileLister     corelisters.ConfigMapLister
	revisionLister    corelisters.ConfigMapLister
	revisionIndexer   cache.Indexer
	deploymentLister  appslisters.DeploymentLister
	deploymentIndexer cache.Indexer
	replicaSetIndexer cache.Indexer
	grants            atomic.Pointer[grantChecker] // nil: no ReferenceGrant API (yet)
	inputs            []input                      // the kinds of referenced input tracked (inputs.go)
	inputChanges      *inputChanges
	namespace         string // Options.Namespace
	patchDeployments  bool   // Options.PatchDeployments
	cachesSynced      []cache.InformerSynced

	// queue holds GameSession keys; profileQueue profile keys, for the
	// profile sync (revisions and rollouts, see profilesync.go).
	queue        workqueue.TypedRateLimitingInterface[string]
	profileQueue workqueue.TypedRateLimitingInterface[string]
	// lanes orders queue: Deployment work before status writes (lanes.go).
	// Tests that swap queue swap lanes with it.
	lanes            sessionLanes
	eventBroadcaster record.EventBroadcaster
	recorder         record.EventRecorder
	metrics          *metrics.ControllerMetrics
	clock            clock.PassiveClock

	profileHashes   *profileHashCache
	profileSelector string
	fanOut          *profileFanOut
	expectations    *writeExpectations
	revisions       *revisionExpectations

	plans                *profilePlans
	rolloutDefaults      rollout.Policy
	revisionHistoryLimit int
	moves                *moveLedger

	// workersRunning counts live session workers, for the health check.
	workersRunning atomic.Int32

	// syncHandler and enqueueSession are fields so tests can replace them.
	syncHandler    func(ctx context.Context, key string) error
	enqueueSession func(obj interface{})
}

// NewController returns a Controller fed by the given informers (see
// Informers for the filter each must have).
//
// It registers its indexes and event handlers, so it must be called before
// the informers start.
func NewController(
	ctx context.Context,
	kubeClient kubernetes.Interface,
	gameClient clientset.Interface,
	informers Informers,
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
	queue, lanes := newSessionQueue(Name, opts.Clock)
	c := &Controller{
		kubeClient:        kubeClient,
		gameClient:        gameClient,
		putStatus:         newPutSessionStatus(gameClient),
		logger:            logger,
		sessionLister:     informers.Sessions.Lister(),
		sessionIndexer:    informers.Sessions.Informer().GetIndexer(),
		rolloutLister:     informers.Rollouts.Lister(),
		profileLister:     informers.Profiles.Lister(),
		revisionLister:    informers.Revisions.Lister(),
		revisionIndexer:   informers.Revisions.Informer().GetIndexer(),
		deploymentLister:  informers.Deployments.Lister(),
		deploymentIndexer: informers.Deployments.Informer().GetIndexer(),
		replicaSetIndexer: informers.ReplicaSets.Informer().GetIndexer(),
		namespace:         opts.Namespace,
		cachesSynced: []cache.InformerSynced{
			informers.Sessions.Informer().HasSynced,
			informers.Rollouts.Informer().HasSynced,
			informers.Profiles.Informer().HasSynced,
			informers.Revisions.Informer().HasSynced,
			informers.Deployments.Informer().HasSynced,
			informers.ReplicaSets.Informer().HasSynced,
		},
		queue: queue,
		lanes: lanes,
		profileQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name + "-profiles", Clock: opts.Clock},
		),
		eventBroadcaster:     broadcaster,
		recorder:             broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Name}),
		metrics:              opts.Metrics,
		clock:                opts.Clock,
		profileHashes:        newProfileHashCache(),
		profileSelector:      opts.ProfileSelector,
		expectations:         newWriteExpectations(opts.Clock),
		revisions:            newRevisionExpectations(opts.Clock),
		plans:                newProfilePlans(),
		rolloutDefaults:      *opts.RolloutDefaults,
		revisionHistoryLimit: opts.RevisionHistoryLimit,
		moves:                newMoveLedger(opts.Clock, opts.MaxMovingSessions, opts.MaxMovesPerMinute),
		inputChanges:         newInputChanges(),
		patchDeployments:     opts.PatchDeployments,
	}
	var inputInformers []cache.SharedIndexInformer
	c.inputs, inputInformers = informers.inputs()
	for _, informer := range inputInformers {
		if informer != nil {
			c.cachesSynced = append(c.cachesSynced, informer.HasSynced)
		}
	}
	if informers.Grants != nil {
		c.grants.Store(&grantChecker{indexer: informers.Grants.GetIndexer()})
		c.cachesSynced = append(c.cachesSynced, informers.Grants.HasSynced)
	}
	// The fan-out reads c.queue at call time, so tests may swap the queue.
	c.fanOut = newProfileFanOut(opts.Clock, opts.ProfileChangeDelay, c.sessionKeysOf,
		func(key string, delay time.Duration) { c.queue.AddAfter(key, delay) })
	c.syncHandler = c.syncGameSession
	c.enqueueSession = c.enqueue

	// The indexes must exist before the informers run: events can arrive as
	// soon as they start, and a lookup on a missing index would lose them.
	type index struct {
		informer cache.SharedIndexInformer
		name     string
		index    cache.IndexFunc
	}
	indexes := []index{
		{informers.Sessions.Informer(), profileRefIndex, profileRefIndexFunc},
		{informers.Sessions.Informer(), grantingNamespaceIndex, grantingNamespaceIndexFunc},
		{informers.Revisions.Informer(), revisionOfIndex, revisionOfIndexFunc},
		{informers.Deployments.Informer(), mountedRevisionIndex, deploymentMountIndexFunc},
		{informers.ReplicaSets.Informer(), mountedRevisionIndex, replicaSetMountIndexFunc},
		{informers.ReplicaSets.Informer(), scaledDownIndex, scaledDownIndexFunc},
		{informers.ReplicaSets.Informer(), replicaSetsOfIndex, replicaSetsOfIndexFunc},
	}
	logger.Info("Setting up event handlers")
	h := c.eventHandlers()
	type registration struct {
		informer cache.SharedIndexInformer
		handlers cache.ResourceEventHandlerFuncs
	}
	registrations := []registration{
		{informers.Sessions.Informer(), h.sessions},
		{informers.Rollouts.Informer(), h.rollouts},
		{informers.Profiles.Informer(), h.profiles},
		{informers.Revisions.Informer(), h.revisions},
		{informers.Deployments.Informer(), h.deployments},
		{informers.ReplicaSets.Informer(), h.replicaSets},
	}
	if informers.Grants != nil {
		registrations = append(registrations, registration{informers.Grants, h.grants})
	}
	for i, in := range c.inputs {
		if informer := inputInformers[i]; informer != nil {
			indexes = append(indexes, index{informers.Sessions.Informer(), in.index, in.indexFunc})
			registrations = append(registrations, registration{informer, h.inputs[i]})
		}
	}
	for _, ix := range indexes {
		if err := ix.informer.AddIndexers(cache.Indexers{ix.name: ix.index}); err != nil {
			return nil, fmt.Errorf("adding the %s index: %w", ix.name, err)
		}
	}
	for _, reg := range registrations {
		if _, err := reg.informer.AddEventHandler(reg.handlers); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// eventHandlers are the controller's informer event handlers, one set per
// informer: NewController registers them, and the sequence harness
// (sequence_test.go) delivers its events to the same ones.
type eventHandlers struct {
	sessions, rollouts, profiles, revisions, deployments, replicaSets, grants cache.ResourceEventHandlerFuncs
	// inputs are the handlers of the referenced inputs' informers, in the
	// order of Controller.inputs (those of a kind not tracked are unused).
	inputs []cache.ResourceEventHandlerFuncs
}

func (c *Controller) eventHandlers() eventHandlers {
	h := eventHandlers{
		sessions: cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj interface{}) { c.enqueueSession(obj) },
			// Resyncs land here too (same object twice); a resync is the
			// safety net that re-checks every session, so it is not filtered.
			UpdateFunc: func(oldObj, newObj interface{}) {
				c.enqueueSession(newObj)
				c.replanProfileOf(oldObj, newObj)
			},
			// Nothing to clean up (the garbage collector removes the
			// Deployment), but the sync of a deleted key ends any
			// per-session state.
			DeleteFunc: func(obj interface{}) {
				c.enqueueSession(obj)
				c.replanProfileOf(obj, nil)
			},
		},
		// The profile sync is the ProfileRollout's only writer and reads it
		// from the cache; a change by anyone else (a delete, say) needs a
		// sync to be written again.
		rollouts: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueProfileOfRollout,
			UpdateFunc: func(_, obj interface{}) { c.enqueueProfileOfRollout(obj) },
			DeleteFunc: c.deleteRollout,
		},
		profiles: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.addProfile,
			UpdateFunc: c.updateProfile,
			DeleteFunc: c.deleteProfile,
		},
		revisions: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.addRevision,
			UpdateFunc: c.updateRevision,
			DeleteFunc: c.deleteRevision,
		},
		deployments: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.addDeployment,
			UpdateFunc: c.updateDeployment,
			DeleteFunc: c.deleteDeployment,
		},
		replicaSets: cache.ResourceEventHandlerFuncs{
			UpdateFunc: c.updateReplicaSet,
			DeleteFunc: c.deleteReplicaSet,
		},
		// A grant made, changed or revoked decides anew whether the sessions
		// of other namespaces may use the profiles of its namespace.
		grants: cache.ResourceEventHandlerFuncs{
			AddFunc: c.grantChanged,
			UpdateFunc: func(oldObj, newObj interface{}) {
				if oldObj.(metav1.Object).GetResourceVersion() != newObj.(metav1.Object).GetResourceVersion() {
					c.grantChanged(newObj)
				}
			},
			DeleteFunc: c.grantChanged,
		},
	}
	for _, in := range c.inputs {
		h.inputs = append(h.inputs, c.inputEventHandlers(in))
	}
	return h
}

// inputs returns the kinds of referenced input (inputs.go), each with the
// cache of its informer when one is given, and those informers (nil for a
// kind not tracked), in the same order. A new kind is one line here.
func (i Informers) inputs() ([]input, []cache.SharedIndexInformer) {
	kinds := []struct {
		inputKind
		informer cache.SharedIndexInformer
	}{
		{secretKind{}, informerOrNil(i.Secrets)},
		{configMapKind{}, informerOrNil(i.SessionConfigs)},
	}
	inputs := make([]input, len(kinds))
	informers := make([]cache.SharedIndexInformer, len(kinds))
	for n, kind := range kinds {
		inputs[n] = input{inputKind: kind.inputKind, index: inputIndex(kind.inputKind)}
		if kind.informer != nil {
			inputs[n].cache = kind.informer.GetIndexer()
			informers[n] = kind.informer
		}
	}
	return inputs, informers
}

// informerOrNil is the informer of a typed informer, nil for none: an
// optional informer is a nil interface.
func informerOrNil(typed interface {
	Informer() cache.SharedIndexInformer
}) cache.SharedIndexInformer {
	if typed == nil {
		return nil
	}
	return typed.Informer()
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
	c.seedLedger()

	var wg sync.WaitGroup
	// One profile worker: profile syncs are few (one per profile change,
	// and at most one per planInterval during a rollout), and one at a time
	// they never race each other on a profile's revisions.
	profiles := c.profileWorker()
	wg.Go(func() { wait.UntilWithContext(ctx, profiles.run, time.Second) })
	sessions := c.sessionWorker()
	for range workers {
		wg.Go(func() {
			c.workersRunning.Add(1)
			defer c.workersRunning.Add(-1)
			wait.UntilWithContext(ctx, sessions.run, time.Second)
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

// processNextWorkItem syncs the next GameSession key (tests call it step by
// step).
func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	return c.sessionWorker().processNext(ctx)
}

// processNextProfile syncs the next profile key.
func (c *Controller) processNextProfile(ctx context.Context) bool {
	return c.profileWorker().processNext(ctx)
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
	// A new revision or a new rollout policy, or a resync: the profile sync
	// sees to the first two, and a resync plans every profile again, so
	// that no missed event can wedge a rollout. One sync per profile.
	c.enqueueProfile(key)
	// Only data reach the pods. Resyncs and label or annotation edits would
	// otherwise re-sync every session of the profile for nothing.
	if oldProfile.ResourceVersion == newProfile.ResourceVersion {
		return
	}
	if profileDataEqual(oldProfile, newProfile) {
		// The one part of a policy that is a Deployment setting: every
		// session of the profile that sets none of its own takes it along.
		if oldProfile.Annotations[rollout.AnnotationProgressDeadline] != newProfile.Annotations[rollout.AnnotationProgressDeadline] {
			c.enqueueSessionsOf(key)
		}
		return
	}
	c.plans.forgetPlan(key)
	hash := c.profileHashes.hash(newProfile)
	ready := c.revisionsReady(newProfile, hash)
	sessions, started := c.fanOut.profileChanged(key, ready)
	if !started {
		return // joined the rollout scheduled by an edit moments ago
	}
	c.metrics.ObserveFanOut(sessions)
	// The Event counts the sessions the change rolls: those of other
	// namespaces that name the profile without a grant keep what they run.
	sessions = len(c.permittedSessionKeysOf(newProfile.Namespace, newProfile.Name))
	if sessions == 0 {
		return
	}
	// `kubectl describe configmap` then answers "what did my edit do?".
	policy, err := c.policyOf(newProfile)
	switch {
	case err == nil && policy.Unpaced():
		c.recorder.Eventf(newProfile, corev1.EventTypeNormal, EventReasonProfileFanOut, MessageProfileFanOut, hash, sessions)
	default:
		c.recorder.Eventf(newProfile, corev1.EventTypeNormal, EventReasonProfileFanOut, MessageProfileFanOutPaced, hash, sessions, policy)
	}
}

func (c *Controller) deleteProfile(obj interface{}) {
	profile, ok := unwrap[*corev1.ConfigMap](c.logger, obj, "profile")
	if !ok {
		return
	}
	key := profileKey(profile.Namespace, profile.Name)
	c.profileHashes.forget(profile.UID)
	c.fanOut.forgetProfile(key)
	// Its rollout's memory went with it (its ProfileRollout too, by the
	// garbage collector): a profile created again under the name starts
	// afresh, also if it comes back before the profile sync runs.
	c.forgetRollout(profile.Namespace, profile.Name)
	c.enqueueProfile(key)
	c.enqueueSessionsOf(key)
}

// unwrap returns the object of a delete event, out of the tombstone the
// informer hands over when it missed the delete itself.
func unwrap[T any](logger klog.Logger, obj interface{}, what string) (T, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	t, ok := obj.(T)
	if !ok {
		logger.Error(nil, "Delete handler got an unexpected object", "informer", what, "type", fmt.Sprintf("%T", obj))
	}
	return t, ok
}

// addRevision hears of a revision in the cache. If it is the revision of its
// profile's current content, the fan-out of the change that made it can go
// on (see profileFanOut.profileChanged). Revisions listed at start-up come
// this way too; their sessions are queued at start-up anyway.
func (c *Controller) addRevision(obj interface{}) {
	revision := obj.(*corev1.ConfigMap)
	c.revisions.observed(revision)
	if !isRevision(revision) {
		return
	}
	key := revisionOf(revision)
	c.enqueueProfile(key)
	c.enqueueSessionsMounting(revision)
	namespace, name, _ := cache.SplitMetaNamespaceKey(key)
	profile, err := c.cachedProfile(namespace, name)
	if err == nil && profile != nil && revision.Labels[revisionHashLabel] == c.profileHashes.hash(profile) &&
		c.revisionsReady(profile, revision.Labels[revisionHashLabel]) {
		// The last of the revisions the profile's sessions mount, one per
		// namespace using it.
		c.fanOut.revisionCreated(key)
	}
}

// updateRevision hears of a resync (revisions are immutable, but their
// labels are not): it queues the revision's profile, so that revisions of a
// deleted profile are looked at again now and then.
func (c *Controller) updateRevision(_, newObj interface{}) {
	revision := newObj.(*corev1.ConfigMap)
	c.revisions.observed(revision)
	if isRevision(revision) {
		c.enqueueProfile(revisionOf(revision))
	}
}

// deleteRevision hears of a deleted revision: if it was the current one (a
// user deleted it), the profile sync creates it again.
func (c *Controller) deleteRevision(obj interface{}) {
	revision, ok := unwrap[*corev1.ConfigMap](c.logger, obj, "revision")
	if !ok {
		return
	}
	c.revisions.gone(revision)
	if isRevision(revision) {
		c.enqueueProfile(revisionOf(revision))
		c.enqueueSessionsMounting(revision)
	}
}

// enqueueSessionsMounting queues the sessions whose Deployment mounts the
// revision: while their profile is missing, whether its revision exists
// decides whether their spec can be applied. The index gives Deployment
// keys, which are the sessions' keys; a stale revision has no users, so the
// common case costs one lookup.
func (c *Controller) enqueueSessionsMounting(revision *corev1.ConfigMap) {
	keys, _ := c.deploymentIndexer.IndexKeys(mountedRevisionIndex, revision.Namespace+"/"+revision.Name)
	for _, key := range keys {
		c.queue.Add(key)
	}
}

// replanProfileOf queues the profile a session left (it was deleted, or
// its profileRef changed; newObj is nil for a delete): its rollout lost a
// member, and a settled rollout is planned again only on an event. It also
// queues the profile of a revision the session stopped reporting.
func (c *Controller) replanProfileOf(oldObj, newObj interface{}) {
	old, ok := unwrap[*gamesv1.GameSession](c.logger, oldObj, "session")
	if !ok {
		return
	}
	s, isSession := newObj.(*gamesv1.GameSession)
	if !isSession || s.Spec.ProfileRef != old.Spec.ProfileRef {
		namespace, name := profileOf(old)
		c.profileQueue.AddAfter(profileKey(namespace, name), planInterval)
		return
	}
	// The revision a session last reported running is held while its
	// Deployment is out of the cache (revisionsOutOfSight): one it stopped
	// reporting may be stale now.
	if s.Status.ProfileRevision != old.Status.ProfileRevision {
		c.enqueueProfileOfRevision(old.Namespace, old.Status.ProfileRevision)
	}
}

// enqueueProfileOfRollout queues the profile of a ProfileRollout, which is
// named like it.
func (c *Controller) enqueueProfileOfRollout(obj interface{}) {
	r, ok := unwrap[*gamesv1.ProfileRollout](c.logger, obj, "rollout")
	if !ok {
		return
	}
	// After a delay: its own writes come back this way, and each is worth
	// at most one plan.
	c.profileQueue.AddAfter(profileKey(r.Namespace, r.Name), planInterval)
}

// deleteRollout hears that a ProfileRollout is gone (deleted by someone, or
// with its profile): what the controller last wrote of it is no more, and
// the profile sync creates it again at once if the profile is there.
func (c *Controller) deleteRollout(obj interface{}) {
	r, ok := unwrap[*gamesv1.ProfileRollout](c.logger, obj, "rollout")
	if !ok {
		return
	}
	key := profileKey(r.Namespace, r.Name)
	c.plans.setWritten(key, nil)
	c.profileQueue.Add(key)
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
	d := obj.(*appsv1.Deployment)
	c.deploymentObserved(d)
	c.enqueueOwner(d)
	c.enqueueProfilesOfScaledDown(d)
}

// enqueueProfilesOfScaledDown queues the profiles of the revisions that the
// Deployment's ReplicaSets scaled to zero mount, other than its template's:
// while it was out of the cache, they kept them (revisionsOutOfSight), and
// now that it is back, they may be stale. A Deployment the cache lists at
// start-up comes this way too, when every profile is queued anyway.
func (c *Controller) enqueueProfilesOfScaledDown(d *appsv1.Deployment) {
	scaledDown, _ := c.replicaSetIndexer.ByIndex(scaledDownIndex, cache.MetaObjectToName(d).String())
	for _, obj := range scaledDown {
		if revision := mountedRevision(&obj.(*appsv1.ReplicaSet).Spec.Template); revision != mountedRevision(&d.Spec.Template) {
			c.enqueueProfileOfRevision(d.Namespace, revision)
		}
	}
}

// deploymentObserved ends the revision expectations the cached Deployment
// shows, and asks for another look at the revisions they no longer hold.
func (c *Controller) deploymentObserved(d *appsv1.Deployment) {
	c.enqueueProfilesOfRevisions(c.revisions.deploymentObserved(d))
}

func (c *Controller) updateDeployment(oldObj, newObj interface{}) {
	oldDeployment, newDeployment := oldObj.(*appsv1.Deployment), newObj.(*appsv1.Deployment)
	if oldDeployment.ResourceVersion == newDeployment.ResourceVersion {
		return // a resync; the session's own resync covers it
	}
	c.deploymentObserved(newDeployment)
	if key := cache.MetaObjectToName(newDeployment).String(); c.expectations.awaits(key, newDeployment) {
		// The event of the controller's own write, whose sync has done the
		// Deployment's part: what is left is the status, which need not
		// go before other sessions' Deployment writes (sessionLanes).
		c.deferStatus(key)
	} else {
		c.enqueueOwner(newDeployment)
	}
	if old := mountedRevision(&oldDeployment.Spec.Template); old != mountedRevision(&newDeployment.Spec.Template) {
		c.enqueueProfileOfRevision(oldDeployment.Namespace, old)
	}
	// The profile's rollout counts its sessions Ready and blocked: a
	// settled rollout, whose sessions ask for no plan, hears of a change too.
	if deploymentComplete(oldDeployment) != deploymentComplete(newDeployment) ||
		oldDeployment.Spec.Paused != newDeployment.Spec.Paused {
		c.enqueueProfileOfRevision(newDeployment.Namespace, mountedRevision(&newDeployment.Spec.Template))
	}
}

// deleteDeployment also sees a Deployment that lost the managed-by label:
// it left the label-filtered cache, which the informer reports as a delete.
func (c *Controller) deleteDeployment(obj interface{}) {
	deployment, ok := unwrap[*appsv1.Deployment](c.logger, obj, "deployment")
	if !ok {
		return
	}
	// A Deployment of a session that still exists may only have lost its
	// label: a sync that has nothing to mount looks for it.
	if session, err := c.sessionLister.GameSessions(deployment.Namespace).Get(deployment.Name); err == nil &&
		metav1.IsControlledBy(deployment, session) {
		c.revisions.deploymentLeft(cache.MetaObjectToName(deployment).String())
	}
	c.enqueueOwner(deployment)
	c.enqueueProfileOfRevision(deployment.Namespace, mountedRevision(&deployment.Spec.Template))
}

// updateReplicaSet hears of a ReplicaSet whose pods may have stopped
// mounting its revision (it was scaled down to zero): the revision may have
// become stale.
func (c *Controller) updateReplicaSet(oldObj, newObj interface{}) {
	oldRS, newRS := oldObj.(*appsv1.ReplicaSet), newObj.(*appsv1.ReplicaSet)
	if replicaSetMounts(oldRS) && !replicaSetMounts(newRS) {
		c.enqueueProfileOfRevision(newRS.Namespace, mountedRevision(&newRS.Spec.Template))
	}
}

func (c *Controller) deleteReplicaSet(obj interface{}) {
	rs, ok := unwrap[*appsv1.ReplicaSet](c.logger, obj, "replicaset")
	if !ok {
		return
	}
	c.enqueueProfileOfRevision(rs.Namespace, mountedRevision(&rs.Spec.Template))
}

// enqueueProfileOfRevision asks for a profile sync of the profile whose
// revision a Deployment or ReplicaSet mounted: it may have become stale,
// and nothing else would look at it again.
func (c *Controller) enqueueProfileOfRevision(namespace, name string) {
	if name == "" {
		return
	}
	r, err := c.revisionLister.ConfigMaps(namespace).Get(name)
	if err != nil || !isRevision(r) {
		return
	}
	c.profileQueue.AddAfter(revisionOf(r), planInterval)
}

// enqueueProfilesOfRevisions is enqueueProfileOfRevision for revisions
// given as "namespace/name": those that pending writes released.
func (c *Controller) enqueueProfilesOfRevisions(revisions []string) {
	for _, revision := range revisions {
		namespace, name, _ := cache.SplitMetaNamespaceKey(revision)
		c.enqueueProfileOfRevision(namespace, name)
	}
}

// enqueueOwner enqueues the session of a Deployment's name. A Deployment in
// this cache carries our label and is named after its session; whether that
// session controls it or is blocked by it (a previous session's Deployment
// awaiting the garbage collector, one orphaned by --cascade=orphan), the
// session of that name must hear of the change, its deletion above all.
func (c *Controller) enqueueOwner(deployment *appsv1.Deployment) {
	c.queue.Add(cache.MetaObjectToName(deployment).String())
}
