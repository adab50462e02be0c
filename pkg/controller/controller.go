package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gamesscheme "github.com/example/gamesession-controller/pkg/generated/clientset/versioned/scheme"
	gamesinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions/games/v1"
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

	// ProfileChangeDelay keeps the sessions of a changed profile in the queue
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
// of its caches. Named fields, because three of them have the same type.
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
	// still mount, and with which data of their Secrets and ConfigMaps.
	ReplicaSets appsinformers.ReplicaSetInformer
	// Grants: every Gateway API ReferenceGrant (ReferenceGrantVersions),
	// through a dynamic informer with SlimReferenceGrant as its transform;
	// nil when the cluster serves none, and then no session may use a
	// profile of another namespace.
	Grants cache.SharedIndexInformer
	// Secrets: Secrets matching SecretSelector, through
	// SecretDigestKeys.Digester as the transform, so that the cache holds a
	// digest of each one's data and never the data. Nil: Secret changes
	// roll nothing, and the Deployments keep the Secret digest they have.
	// SecretDigestKeys are the keys of that transform: the controller keeps
	// their fingerprints only, to record on each Deployment which key its
	// digest was made under (gamesv1.SecretsKeyLabel).
	Secrets          coreinformers.SecretInformer
	SecretDigestKeys SecretDigestKeys
	// DigestKeySecret: the key Secret alone, named by
	// DigestKeySelector, through DigestKeyStandIn as the transform; its
	// namespace and name are DigestKeyNamespace and DigestKeyName. The
	// controller says when it no longer holds its key (digestkey.go). Nil
	// with Secrets nil.
	DigestKeySecret                   coreinformers.SecretInformer
	DigestKeyNamespace, DigestKeyName string
	// SessionConfigs: ConfigMaps matching SessionConfigSelector, through
	// SessionConfigDigester as the transform: a digest of each one's data,
	// never the data. From a factory of its own, not the profiles'. Nil:
	// their changes roll nothing, and the Deployments keep the digest they
	// have.
	SessionConfigs coreinformers.ConfigMapInformer
	// LiveProfiles: the sessions' live profiles (LiveProfileSelector),
	// through SlimLiveProfile: which revision each holds, never its data.
	// LivePods: the pods of sessions delivered live (LivePodSelector),
	// through SlimLivePod: their acknowledgments. Both nil: live delivery
	// is off, and a profile that asks for it is delivered by restart.
	LiveProfiles coreinformers.ConfigMapInformer
	LivePods     coreinformers.PodInformer
}

// Controller runs two controllers over one set of informers, the way the
// kube-controller-manager runs its controllers over shared ones:
//
//   - the session controller (sessions.go, sync.go) makes each GameSession's
//     Deployment and status, one session per sync;
//   - the profile controller (profiles.go, profilesync.go) makes each
//     profile's revisions, plans its rollout and records it on the
//     ProfileRollout, one profile per sync.
//
// Each has its own queue, workers and sync. They read the same caches
// (caches.go), and each sees of the other a named view, nothing more: the
// session controller reads the profile controller's plans through
// rolloutView, and the profile controller queues sessions through
// sessionQueue. What they keep beside the informers is listed, with why and
// what a restart loses, in state.go.
type Controller struct {
	sessions *sessionController
	profiles *profileController
	caches   *caches
	state    *state

	kubeClient       kubernetes.Interface // for the Event sink
	eventBroadcaster record.EventBroadcaster
	cachesSynced     []cache.InformerSynced
	// digestKey follows the Secret of the digest key; nil without one.
	digestKey *digestKeyWatch
	// workersRunning counts live session workers, for the health check.
	workersRunning atomic.Int32
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
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Name})
	caches := newCaches(informers, opts, logger)
	state := newState(opts)
	sessions := newSessionController(caches, state, kubeClient, gameClient, recorder, opts)
	profiles := newProfileController(caches, state, kubeClient, gameClient, recorder, opts)
	sessions.rollouts, profiles.sessions = profiles, sessions
	// The fan-out reads the session queue at call time, so tests may swap it.
	state.fanOut = newProfileFanOut(opts.Clock, opts.ProfileChangeDelay, caches.sessionKeysOf,
		func(key string, delay time.Duration) { sessions.queue.AddAfter(key, delay) })
	sessions.fanOut, profiles.fanOut = state.fanOut, state.fanOut

	c := &Controller{
		sessions:         sessions,
		profiles:         profiles,
		caches:           caches,
		state:            state,
		kubeClient:       kubeClient,
		eventBroadcaster: broadcaster,
		cachesSynced:     informers.synced(),
	}
	logger.Info("Setting up event handlers")
	if err := c.register(informers); err != nil {
		return nil, err
	}
	if informers.DigestKeySecret != nil {
		watch, err := newDigestKeyWatch(informers.DigestKeySecret, informers.DigestKeyNamespace, informers.DigestKeyName,
			KeyFingerprint(informers.SecretDigestKeys.Current), recorder, opts.Metrics, logger)
		if err != nil {
			return nil, err
		}
		c.digestKey = watch
	}
	return c, nil
}

// DigestKeyProblem says, for /readyz, what is wrong with the Secret of the
// digest key: gone, or holding another key than this process digests
// under. Nil when it holds this process's key, or Secrets are not watched.
func (c *Controller) DigestKeyProblem() error {
	if c.digestKey == nil {
		return nil
	}
	return c.digestKey.Problem()
}

// register adds the controllers' indexes and event handlers to the
// informers.
func (c *Controller) register(informers Informers) error {
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
	if informers.LiveProfiles != nil && informers.LivePods != nil {
		indexes = append(indexes, index{informers.LivePods.Informer(), sessionOfPodIndex, sessionOfPodIndexFunc})
		registrations = append(registrations,
			registration{informers.LiveProfiles.Informer(), h.liveProfiles},
			registration{informers.LivePods.Informer(), h.livePods})
	}
	for i, t := range informers.trackedInputs() {
		if informer := t.informer; informer != nil {
			in := c.caches.inputs[i]
			indexes = append(indexes, index{informers.Sessions.Informer(), in.index, in.indexFunc})
			registrations = append(registrations, registration{informer, h.inputs[i]})
		}
	}
	for _, ix := range indexes {
		if err := ix.informer.AddIndexers(cache.Indexers{ix.name: ix.index}); err != nil {
			return fmt.Errorf("adding the %s index: %w", ix.name, err)
		}
	}
	for _, reg := range registrations {
		if _, err := reg.informer.AddEventHandler(reg.handlers); err != nil {
			return err
		}
	}
	return nil
}

// eventHandlers are the controller's informer event handlers, one set per
// informer: NewController registers them, and the sequence harness
// (sequence_test.go) delivers its events to the same ones.
type eventHandlers struct {
	sessions, rollouts, profiles, revisions, deployments, replicaSets, grants cache.ResourceEventHandlerFuncs
	// liveProfiles and livePods queue the session a live profile or pod
	// belongs to: the cache caught up with a delivery, or a game server
	// acknowledged one.
	liveProfiles, livePods cache.ResourceEventHandlerFuncs
	// inputs are the handlers of the referenced inputs' informers, in the
	// order of caches.inputs (those of a kind not tracked are unused).
	inputs []cache.ResourceEventHandlerFuncs
}

// eventHandlers is the handler table: which controller hears of what. Each
// handler queues the keys of its own controller, and of the other's through
// the view it has of it.
func (c *Controller) eventHandlers() eventHandlers {
	s, p := c.sessions, c.profiles
	h := eventHandlers{
		sessions: cache.ResourceEventHandlerFuncs{
			AddFunc: s.enqueue,
			// Resyncs land here too (same object twice); a resync is the
			// safety net that re-checks every session, so it is not filtered.
			UpdateFunc: func(oldObj, newObj interface{}) {
				s.updateSession(oldObj, newObj)
				p.replanProfileOf(oldObj, newObj)
			},
			// Nothing to clean up (the garbage collector removes the
			// Deployment), but the sync of a deleted key ends any
			// per-session state.
			DeleteFunc: func(obj interface{}) {
				s.enqueue(obj)
				p.replanProfileOf(obj, nil)
			},
		},
		// The profile sync is the ProfileRollout's only writer and reads it
		// from the cache; a change by anyone else (a delete, say) needs a
		// sync to be written again.
		rollouts: cache.ResourceEventHandlerFuncs{
			AddFunc:    p.enqueueProfileOfRollout,
			UpdateFunc: func(_, obj interface{}) { p.enqueueProfileOfRollout(obj) },
			DeleteFunc: p.deleteRollout,
		},
		profiles: cache.ResourceEventHandlerFuncs{
			AddFunc:    p.addProfile,
			UpdateFunc: p.updateProfile,
			DeleteFunc: p.deleteProfile,
		},
		revisions: cache.ResourceEventHandlerFuncs{
			AddFunc:    p.addRevision,
			UpdateFunc: p.updateRevision,
			DeleteFunc: p.deleteRevision,
		},
		deployments: cache.ResourceEventHandlerFuncs{
			AddFunc:    s.addDeployment,
			UpdateFunc: s.updateDeployment,
			DeleteFunc: s.deleteDeployment,
		},
		replicaSets: cache.ResourceEventHandlerFuncs{
			AddFunc:    s.addReplicaSet,
			UpdateFunc: p.updateReplicaSet,
			DeleteFunc: p.deleteReplicaSet,
		},
		// A grant made, changed or revoked decides anew whether the sessions
		// of other namespaces may use the profiles of its namespace.
		grants: cache.ResourceEventHandlerFuncs{
			AddFunc: s.grantChanged,
			UpdateFunc: func(oldObj, newObj interface{}) {
				if oldObj.(metav1.Object).GetResourceVersion() != newObj.(metav1.Object).GetResourceVersion() {
					s.grantChanged(newObj)
				}
			},
			DeleteFunc: s.grantChanged,
		},
	}
	for _, in := range c.caches.inputs {
		h.inputs = append(h.inputs, s.inputEventHandlers(in))
	}
	h.liveProfiles = cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { s.enqueueSessionOfLiveProfile(obj, false) },
		UpdateFunc: func(_, obj interface{}) { s.enqueueSessionOfLiveProfile(obj, false) },
		DeleteFunc: func(obj interface{}) { s.enqueueSessionOfLiveProfile(obj, true) },
	}
	h.livePods = cache.ResourceEventHandlerFuncs{
		AddFunc: s.enqueueSessionOfPod,
		UpdateFunc: func(oldObj, newObj interface{}) {
			if ackChanged(oldObj, newObj) {
				s.enqueueSessionOfPod(newObj)
			}
		},
		DeleteFunc: s.enqueueSessionOfPod,
	}
	return h
}

// Run waits for the caches, runs workers until ctx is cancelled, then shuts the
// queues down and waits for the workers to finish their current item. It can
// be called once per Controller; informers are started and stopped by the
// caller.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.sessions.queue.ShutDown()
	defer c.profiles.queue.ShutDown()
	logger := klog.FromContext(ctx)

	c.eventBroadcaster.StartStructuredLogging(3)
	c.eventBroadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kubeClient.CoreV1().Events("")})
	defer c.eventBroadcaster.Shutdown()

	logger.Info("Starting controller", "workers", workers)
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.cachesSynced...) {
		return fmt.Errorf("%s: caches did not sync before shutdown", Name)
	}
	c.sessions.seedLedger()

	var wg sync.WaitGroup
	// One profile worker: profile syncs are few (one per profile change,
	// and at most one per planInterval during a rollout), and one at a time
	// they never race each other on a profile's revisions.
	profiles := c.profiles.worker()
	wg.Go(func() { wait.UntilWithContext(ctx, profiles.run, time.Second) })
	sessions := c.sessions.worker()
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
	c.sessions.queue.ShutDown()
	c.profiles.queue.ShutDown()
	wg.Wait()
	logger.Info("Controller stopped")
	return nil
}

// WorkersRunning is the number of session workers currently running, for
// health checks.
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
