package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	"github.com/example/gamesession-controller/pkg/metrics"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// profileController makes each profile's revisions and plans its rollout:
// its sync (profilesync.go) creates the revision of the profile's content,
// deletes the revisions no pod mounts, plans which sessions move next
// (pkg/rollout), queues them, and records the rollout on the profile's
// ProfileRollout.
type profileController struct {
	*caches
	kubeClient kubernetes.Interface
	gameClient clientset.Interface
	recorder   record.EventRecorder
	metrics    *metrics.ControllerMetrics
	clock      clock.PassiveClock

	// queue holds profile keys ("namespace/name").
	queue workqueue.TypedRateLimitingInterface[string]
	// sessions is the session controller, as a profile sees it: a queue.
	sessions sessionQueue

	rolloutDefaults      rollout.Policy // Options.RolloutDefaults
	revisionHistoryLimit int            // Options.RevisionHistoryLimit

	// The state this controller keeps beside the informers (state.go).
	plans     *profilePlans
	revisions *revisionExpectations
	moves     *moveLedger
	fanOut    *profileFanOut
}

func newProfileController(caches *caches, state *state, kubeClient kubernetes.Interface, gameClient clientset.Interface,
	recorder record.EventRecorder, opts Options) *profileController {
	return &profileController{
		caches:     caches,
		kubeClient: kubeClient,
		gameClient: gameClient,
		recorder:   recorder,
		metrics:    opts.Metrics,
		clock:      opts.Clock,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name + "-profiles", Clock: opts.Clock},
		),
		rolloutDefaults:      *opts.RolloutDefaults,
		revisionHistoryLimit: opts.RevisionHistoryLimit,
		plans:                state.plans,
		revisions:            state.revisions,
		moves:                state.moves,
	}
}

// rolloutView is the profile controller as the session controller sees it:
// what a profile's rollout says of a session's turn, read-only, and the door
// to the profile queue.
type rolloutView interface {
	// latestPlan is the profile's latest plan, whatever its target; nil if
	// none. A plan is never changed once made: a new one replaces it.
	latestPlan(profileKey string) *profilePlan
	// planOf is the profile's plan towards hash under policy (its String),
	// nil if none was made for them yet.
	planOf(profileKey, hash, policy string) *profilePlan
	// policyOf is the profile's rollout policy.
	policyOf(profile *corev1.ConfigMap) (rollout.Policy, error)
	// storedRollout is the profile's ProfileRollout as last written or
	// cached, nil if none of this profile.
	storedRollout(profile *corev1.ConfigMap) *gamesv1.ProfileRollout
	// revisionAvailable reports whether a session may mount the revision
	// of profile's content hash in namespace: it is cached, and not being
	// deleted.
	revisionAvailable(namespace, profile, hash string) bool

	// requestPlanFor asks for a plan of the profile soon (requestPlanFor).
	requestPlanFor(profileKey string)
	// enqueueProfile asks for a sync of the profile now.
	enqueueProfile(profileKey string)
	// enqueueProfilesOfRevisions asks for another look at the revisions
	// ("namespace/name") a write or a read released.
	enqueueProfilesOfRevisions(revisions []string)
	enqueueProfileOfRevision(namespace, name string)
}

func (c *profileController) worker() worker {
	return worker{kind: "profile", queueLabel: metrics.QueueProfiles, queue: c.queue, sync: c.syncProfile, metrics: c.metrics}
}

func (c *profileController) latestPlan(profileKey string) *profilePlan {
	return c.plans.latest(profileKey)
}

func (c *profileController) planOf(profileKey, hash, policy string) *profilePlan {
	return c.plans.get(profileKey, hash, policy)
}

func (c *profileController) addProfile(obj interface{}) {
	profile := obj.(*corev1.ConfigMap)
	key := profileKey(profile.Namespace, profile.Name)
	c.enqueueProfile(key)
	c.sessions.enqueueSessionsOf(key)
}

func (c *profileController) updateProfile(oldObj, newObj interface{}) {
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
			c.sessions.enqueueSessionsOf(key)
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

func (c *profileController) deleteProfile(obj interface{}) {
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
	c.sessions.enqueueSessionsOf(key)
}

// addRevision hears of a revision in the cache. If it is the revision of its
// profile's current content, the fan-out of the change that made it can go
// on (see profileFanOut.profileChanged). Revisions listed at start-up come
// this way too; their sessions are queued at start-up anyway.
func (c *profileController) addRevision(obj interface{}) {
	revision := obj.(*corev1.ConfigMap)
	c.revisions.observed(revision)
	if !isRevision(revision) {
		return
	}
	key := revisionOf(revision)
	c.enqueueProfile(key)
	c.sessions.enqueueSessionsMounting(revision)
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
func (c *profileController) updateRevision(_, newObj interface{}) {
	revision := newObj.(*corev1.ConfigMap)
	c.revisions.observed(revision)
	if isRevision(revision) {
		c.enqueueProfile(revisionOf(revision))
	}
}

// deleteRevision hears of a deleted revision: if it was the current one (a
// user deleted it), the profile sync creates it again.
func (c *profileController) deleteRevision(obj interface{}) {
	revision, ok := unwrap[*corev1.ConfigMap](c.logger, obj, "revision")
	if !ok {
		return
	}
	c.revisions.gone(revision)
	if isRevision(revision) {
		c.enqueueProfile(revisionOf(revision))
		c.sessions.enqueueSessionsMounting(revision)
	}
}

// enqueueProfileOfRollout queues the profile of a ProfileRollout, which is
// named like it.
func (c *profileController) enqueueProfileOfRollout(obj interface{}) {
	r, ok := unwrap[*gamesv1.ProfileRollout](c.logger, obj, "rollout")
	if !ok {
		return
	}
	// After a delay: its own writes come back this way, and each is worth
	// at most one plan.
	c.queue.AddAfter(profileKey(r.Namespace, r.Name), planInterval)
}

// deleteRollout hears that a ProfileRollout is gone (deleted by someone, or
// with its profile): what the controller last wrote of it is no more, and
// the profile sync creates it again at once if the profile is there.
func (c *profileController) deleteRollout(obj interface{}) {
	r, ok := unwrap[*gamesv1.ProfileRollout](c.logger, obj, "rollout")
	if !ok {
		return
	}
	key := profileKey(r.Namespace, r.Name)
	c.plans.setWritten(key, nil)
	c.queue.Add(key)
}

// updateReplicaSet hears of a ReplicaSet whose pods may have stopped
// mounting its revision (it was scaled down to zero): the revision may have
// become stale.
func (c *profileController) updateReplicaSet(oldObj, newObj interface{}) {
	oldRS, newRS := oldObj.(*appsv1.ReplicaSet), newObj.(*appsv1.ReplicaSet)
	if replicaSetMounts(oldRS) && !replicaSetMounts(newRS) {
		c.enqueueProfileOfRevision(newRS.Namespace, mountedRevision(&newRS.Spec.Template))
	}
}

func (c *profileController) deleteReplicaSet(obj interface{}) {
	rs, ok := unwrap[*appsv1.ReplicaSet](c.logger, obj, "replicaset")
	if !ok {
		return
	}
	c.enqueueProfileOfRevision(rs.Namespace, mountedRevision(&rs.Spec.Template))
}

// enqueueProfileOfRevision asks for a profile sync of the profile whose
// revision a Deployment or ReplicaSet mounted: it may have become stale,
// and nothing else would look at it again.
func (c *profileController) enqueueProfileOfRevision(namespace, name string) {
	if name == "" {
		return
	}
	r, err := c.revisionLister.ConfigMaps(namespace).Get(name)
	if err != nil || !isRevision(r) {
		return
	}
	c.queue.AddAfter(revisionOf(r), planInterval)
}

// enqueueProfilesOfRevisions is enqueueProfileOfRevision for revisions
// given as "namespace/name": those that pending writes released.
func (c *profileController) enqueueProfilesOfRevisions(revisions []string) {
	for _, revision := range revisions {
		namespace, name, _ := cache.SplitMetaNamespaceKey(revision)
		c.enqueueProfileOfRevision(namespace, name)
	}
}

// replanProfileOf queues the profile a session left (it was deleted, or
// its profileRef changed; newObj is nil for a delete): its rollout lost a
// member, and a settled rollout is planned again only on an event. It also
// queues the profile of a revision the session stopped reporting.
func (c *profileController) replanProfileOf(oldObj, newObj interface{}) {
	old, ok := unwrap[*gamesv1.GameSession](c.logger, oldObj, "session")
	if !ok {
		return
	}
	s, isSession := newObj.(*gamesv1.GameSession)
	if !isSession || s.Spec.ProfileRef != old.Spec.ProfileRef {
		namespace, name := profileOf(old)
		c.queue.AddAfter(profileKey(namespace, name), planInterval)
		return
	}
	// The revision a session last reported running is held while its
	// Deployment is out of the cache (revisionsOutOfSight): one it stopped
	// reporting may be stale now.
	if s.Status.ProfileRevision != old.Status.ProfileRevision {
		c.enqueueProfileOfRevision(old.Namespace, old.Status.ProfileRevision)
	}
}

// requestPlanFor asks for a plan of the profile planInterval after its last
// sync began (recordInterval if its last plan was unpaced), or now if that
// is past: many requests within it make one plan. In a paced rollout whose
// moves complete at once, each plan admits the next sessions as soon as the
// interval allows, not an interval after the first completion it hears of.
func (c *profileController) requestPlanFor(key string) {
	interval := planInterval
	if pp := c.plans.latest(key); pp != nil && pp.unpaced {
		interval = recordInterval
	}
	delay := interval
	if last, ok := c.plans.lastStarted(key); ok {
		delay = max(interval-c.clock.Since(last), 0)
	}
	c.queue.AddAfter(key, delay)
}
