package controller

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	"github.com/example/gamesession-controller/pkg/metrics"
)

// sessionController makes each GameSession's Deployment and status: its
// sync (sync.go) reads the session, its profile and its Deployment from the
// caches, decides which revision and which Secrets and ConfigMaps the
// Deployment runs (turn.go, inputs.go), takes or frees the session's place
// in the ledger of moves (ledger.go), and writes what differs.
type sessionController struct {
	*caches
	kubeClient kubernetes.Interface
	putStatus  putSessionStatus // from the game clientset, leaves the answer unread
	recorder   record.EventRecorder
	metrics    *metrics.ControllerMetrics
	clock      clock.PassiveClock
	// patchDeployments is Options.PatchDeployments.
	patchDeployments bool

	// queue holds GameSession keys, in two lanes: Deployment work before
	// status writes (lanes.go). Tests that swap queue swap lanes with it.
	queue workqueue.TypedRateLimitingInterface[string]
	lanes sessionLanes
	// rollouts is the profile controller, as a session sees it: the plans,
	// read-only, and its queue.
	rollouts rolloutView

	// The state this controller keeps beside the informers (state.go).
	expectations *writeExpectations
	revisions    *revisionExpectations
	moves        *moveLedger
	fanOut       *profileFanOut
	inputChanges *inputChanges
	echoes       *statusEchoes

	// syncHandler is syncGameSession; a field, so tests can replace it.
	syncHandler func(ctx context.Context, key string) error
}

func newSessionController(caches *caches, state *state, kubeClient kubernetes.Interface, gameClient clientset.Interface,
	recorder record.EventRecorder, opts Options) *sessionController {
	queue, lanes := newSessionQueue(Name, opts.Clock)
	c := &sessionController{
		caches:           caches,
		kubeClient:       kubeClient,
		putStatus:        newPutSessionStatus(gameClient),
		recorder:         recorder,
		metrics:          opts.Metrics,
		clock:            opts.Clock,
		patchDeployments: opts.PatchDeployments,
		queue:            queue,
		lanes:            lanes,
		expectations:     state.expectations,
		revisions:        state.revisions,
		moves:            state.moves,
		inputChanges:     state.inputChanges,
		echoes:           state.echoes,
	}
	c.syncHandler = c.syncGameSession
	return c
}

// sessionQueue is the session controller as the profile controller sees
// it: a queue of sessions.
type sessionQueue interface {
	enqueueKey(key string)
	enqueueSessionsOf(profileKey string)
	enqueueSessionsMounting(revision *corev1.ConfigMap)
}

// worker is built at call time from the controller's fields, which tests
// may replace (the queue, syncHandler).
func (c *sessionController) worker() worker {
	return worker{kind: "gameSession", queueLabel: metrics.QueueSessions, queue: c.queue, sync: c.syncHandler, metrics: c.metrics}
}

// enqueueKey queues the session of key.
func (c *sessionController) enqueueKey(key string) {
	c.queue.Add(key)
}

func (c *sessionController) enqueue(obj interface{}) {
	// DeletionHandlingMetaNamespaceKeyFunc also unwraps the tombstone the
	// informer hands over when it missed the delete itself.
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.logger.Error(err, "Cannot enqueue GameSession")
		return
	}
	c.queue.Add(key)
}

// enqueueSessionsMounting queues the sessions whose Deployment mounts the
// revision: while their profile is missing, whether its revision exists
// decides whether their spec can be applied. The index gives Deployment
// keys, which are the sessions' keys; a stale revision has no users, so the
// common case costs one lookup.
func (c *sessionController) enqueueSessionsMounting(revision *corev1.ConfigMap) {
	keys, _ := c.deploymentIndexer.IndexKeys(mountedRevisionIndex, revision.Namespace+"/"+revision.Name)
	for _, key := range keys {
		c.queue.Add(key)
	}
}

func (c *sessionController) enqueueSessionsOf(profileKey string) {
	for _, key := range c.sessionKeysOf(profileKey) {
		c.queue.Add(key)
	}
}

// updateSession queues the session, unless the update is the watch event of
// the controller's own status write that a sync would find nothing in
// (statusEchoes): then only the plan that write asked for is asked again.
func (c *sessionController) updateSession(oldObj, newObj interface{}) {
	old, okOld := oldObj.(*gamesv1.GameSession)
	updated, okNew := newObj.(*gamesv1.GameSession)
	if okOld && okNew {
		if planProfile, echoed := c.echoes.echoed(cache.MetaObjectToName(updated).String(), old, updated); echoed {
			c.logger.V(5).Info("The watch event of our own status write; no sync", "gameSession", klog.KObj(updated))
			if planProfile != "" {
				c.rollouts.requestPlanFor(planProfile)
			}
			return
		}
	}
	c.enqueue(newObj)
}

func (c *sessionController) addDeployment(obj interface{}) {
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
func (c *sessionController) enqueueProfilesOfScaledDown(d *appsv1.Deployment) {
	scaledDown, _ := c.replicaSetIndexer.ByIndex(scaledDownIndex, cache.MetaObjectToName(d).String())
	for _, obj := range scaledDown {
		if revision := mountedRevision(&obj.(*appsv1.ReplicaSet).Spec.Template); revision != mountedRevision(&d.Spec.Template) {
			c.rollouts.enqueueProfileOfRevision(d.Namespace, revision)
		}
	}
}

// deploymentObserved ends the revision expectations the cached Deployment
// shows, and asks for another look at the revisions they no longer hold.
func (c *sessionController) deploymentObserved(d *appsv1.Deployment) {
	c.rollouts.enqueueProfilesOfRevisions(c.revisions.deploymentObserved(d))
}

func (c *sessionController) updateDeployment(oldObj, newObj interface{}) {
	oldDeployment, newDeployment := oldObj.(*appsv1.Deployment), newObj.(*appsv1.Deployment)
	if oldDeployment.ResourceVersion == newDeployment.ResourceVersion {
		return // a resync; the session's own resync covers it
	}
	c.deploymentObserved(newDeployment)
	if key := cache.MetaObjectToName(newDeployment).String(); c.expectations.awaits(key, newDeployment) && !c.endsMove(key, newDeployment) {
		// The event of the controller's own write, whose sync has done the
		// Deployment's part: what is left is the status, which need not
		// go before other sessions' Deployment writes (sessionLanes).
		c.deferStatus(key)
	} else {
		c.enqueueOwner(newDeployment)
	}
	if old := mountedRevision(&oldDeployment.Spec.Template); old != mountedRevision(&newDeployment.Spec.Template) {
		c.rollouts.enqueueProfileOfRevision(oldDeployment.Namespace, old)
	}
	// The profile's rollout counts its sessions Ready and blocked: a
	// settled rollout, whose sessions ask for no plan, hears of a change too.
	if deploymentComplete(oldDeployment) != deploymentComplete(newDeployment) ||
		oldDeployment.Spec.Paused != newDeployment.Spec.Paused {
		c.rollouts.enqueueProfileOfRevision(newDeployment.Namespace, mountedRevision(&newDeployment.Spec.Template))
	}
}

// endsMove reports whether d shows the end of the session's move in the
// ledger (Ready, or failed): its sync frees a place that other sessions
// wait for, and must not wait behind them in the status lane.
func (c *sessionController) endsMove(key string, d *appsv1.Deployment) bool {
	if _, moving := c.moves.moveOf(key); !moving {
		return false
	}
	return deploymentComplete(d) || c.progressDeadlineExceeded(d)
}

// deleteDeployment also sees a Deployment that lost the managed-by label:
// it left the label-filtered cache, which the informer reports as a delete.
func (c *sessionController) deleteDeployment(obj interface{}) {
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
	c.rollouts.enqueueProfileOfRevision(deployment.Namespace, mountedRevision(&deployment.Spec.Template))
}

// addReplicaSet queues the session of a ReplicaSet's Deployment when the
// cache does not show that Deployment (its managed-by label removed, say):
// its ReplicaSets are then what tells a sync, a restarted controller's
// above all, that it may run (mayRunUncached), and one that arrives after
// the session's last sync would otherwise wait for the next resync.
func (c *sessionController) addReplicaSet(obj interface{}) {
	rs := obj.(*appsv1.ReplicaSet)
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref == nil || ref.Kind != "Deployment" {
		return
	}
	if _, err := c.deploymentLister.Deployments(rs.Namespace).Get(ref.Name); err == nil {
		return
	}
	c.queue.Add(rs.Namespace + "/" + ref.Name)
}

// enqueueOwner enqueues the session of a Deployment's name. A Deployment in
// this cache carries our label and is named after its session; whether that
// session controls it or is blocked by it (a previous session's Deployment
// awaiting the garbage collector, one orphaned by --cascade=orphan), the
// session of that name must hear of the change, its deletion above all.
func (c *sessionController) enqueueOwner(deployment *appsv1.Deployment) {
	c.queue.Add(cache.MetaObjectToName(deployment).String())
}
