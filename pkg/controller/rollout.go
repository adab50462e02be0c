package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/metrics"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// The profile sync runs per profile, on a queue of its own, and does what
// concerns a profile as a whole, in this order:
//
//  1. it creates the revision of the profile's current content, if missing;
//  2. it deletes the revisions nothing needs any more (see staleRevisions);
//  3. it plans the rollout (pkg/rollout): from the caches, which sessions run
//     the new revision, which are Ready, which failed; which may move next.
//
// The plan is kept in memory for the session syncs to read, but it is only
// ever a function of what the caches show: a restarted controller, or a new
// leader, computes the same plan from the same caches, and so goes on with
// the same rollout, within the same budget, moving no session twice.
//
// Session syncs ask for a new plan (at most one per planInterval per
// profile, however many Deployments change) while a rollout is in progress;
// the plan queues the sessions it admits.

// planInterval bounds how often a profile with a rollout in progress is
// planned again: its sessions' Deployments change many times a second during
// a rollout, and one plan looks at every session of the profile.
const planInterval = 250 * time.Millisecond

// profilePlans holds the latest rollout plan of each profile.
type profilePlans struct {
	mu    sync.Mutex
	plans map[string]*profilePlan
}

// profilePlan is a profile's rollout plan towards one revision.
type profilePlan struct {
	hash   string // content hash of the target revision
	policy rollout.Policy
	plan   rollout.Plan
}

func newProfilePlans() *profilePlans {
	return &profilePlans{plans: make(map[string]*profilePlan)}
}

// get returns the plan of profileKey towards the revision of hash, or nil if
// none was made for it yet.
func (p *profilePlans) get(profileKey, hash string) *profilePlan {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pp := p.plans[profileKey]; pp != nil && pp.hash == hash {
		return pp
	}
	return nil
}

// set stores a plan and returns the one it replaces (nil if none).
func (p *profilePlans) set(profileKey string, pp *profilePlan) *profilePlan {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.plans[profileKey]
	p.plans[profileKey] = pp
	return prev
}

func (p *profilePlans) forget(profileKey string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.plans, profileKey)
}

func (c *Controller) enqueueProfile(profileKey string) {
	c.profileQueue.Add(profileKey)
}

func (c *Controller) runProfileWorker(ctx context.Context) {
	for c.processNextProfile(ctx) {
	}
}

func (c *Controller) processNextProfile(ctx context.Context) bool {
	key, shutdown := c.profileQueue.Get()
	if shutdown {
		return false
	}
	defer c.profileQueue.Done(key)
	err := c.syncProfile(ctx, key)
	if err == nil {
		c.profileQueue.Forget(key)
		return true
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	if c.profileQueue.NumRequeues(key) < maxRetries {
		klog.FromContext(ctx).Info("Error syncing profile, retrying", "profile", klog.KRef(ns, name), "err", err)
		c.profileQueue.AddRateLimited(key)
		return true
	}
	klog.FromContext(ctx).Error(err, "Dropping profile out of the queue", "profile", klog.KRef(ns, name))
	c.metrics.ObserveDropped(metrics.QueueProfiles)
	c.profileQueue.Forget(key)
	return true
}

// syncProfile creates the revision of a profile's current content, deletes
// stale revisions and plans the rollout. A deleted profile (or one that lost
// its label) keeps every revision in use: its sessions go on running them.
func (c *Controller) syncProfile(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("invalid profile key %q: %w", key, err)
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "profile", klog.KRef(namespace, name))
	ctx = klog.NewContext(ctx, logger)

	profile, err := c.cachedProfile(namespace, name)
	if err != nil {
		return err
	}
	current := ""
	if profile != nil {
		hash := c.profileHashes.hash(profile)
		current = RevisionName(name, hash)
		if err := c.ensureRevision(ctx, profile, hash); err != nil {
			return err
		}
	}
	if err := c.deleteStaleRevisions(ctx, namespace, key, current); err != nil {
		return err
	}
	if profile == nil {
		c.forgetRollout(namespace, name)
		return nil
	}
	c.planRollout(ctx, profile)
	return nil
}

// cachedProfile returns the profile from the cache, nil if it is not there.
// A revision is never a profile, whatever the profile selector says.
func (c *Controller) cachedProfile(namespace, name string) (*corev1.ConfigMap, error) {
	profile, err := c.profileLister.ConfigMaps(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if profile.Labels[RevisionLabel] == RevisionLabelValue {
		return nil, nil
	}
	return profile, nil
}

// revisionCached reports whether the revision of profile with content hash
// is in the revision cache.
func (c *Controller) revisionCached(namespace, profile, hash string) bool {
	name := RevisionName(profile, hash)
	r, err := c.revisionLister.ConfigMaps(namespace).Get(name)
	return err == nil && isRevision(r) && !c.mounts.deletedLately(namespace, name)
}

// ensureRevision creates the revision of profile's content, hash, unless the
// cache has it. Only this sync creates revisions, one profile at a time, so
// a content gets one create, not one per session.
func (c *Controller) ensureRevision(ctx context.Context, profile *corev1.ConfigMap, hash string) error {
	if c.revisionCached(profile.Namespace, profile.Name, hash) {
		return nil
	}
	revision := newRevision(profile, hash)
	_, err := c.kubeClient.CoreV1().ConfigMaps(profile.Namespace).Create(ctx, revision, metav1.CreateOptions{FieldManager: Name})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Created profile revision", "revision", klog.KObj(revision))
		c.mounts.createdRevision(revision.Namespace, revision.Name)
		return nil
	case apierrors.IsAlreadyExists(err):
		// Created moments ago and not yet in the cache, whose event then
		// queues this profile again; or a ConfigMap of that name without
		// the revision label, which the sessions must not mount.
		if _, getErr := c.revisionLister.ConfigMaps(profile.Namespace).Get(revision.Name); apierrors.IsNotFound(getErr) &&
			!c.mounts.createdLately(profile.Namespace, revision.Name) {
			c.recorder.Eventf(profile, corev1.EventTypeWarning, EventReasonRevisionConflict, MessageRevisionConflict, revision.Name, RevisionLabel)
		}
		return nil
	default:
		return err
	}
}

// deleteStaleRevisions deletes the revisions of a profile that no
// Deployment mounts, other than the current one and the newest the history
// limit keeps. The Deployments come from the cache; a Deployment outside it
// (its label removed) that mounts a revision is not seen, so its revision
// could go: the session puts the label back and recreates nothing, but the
// profile sync recreates the current revision, and a session whose revision
// is gone moves to the current one.
func (c *Controller) deleteStaleRevisions(ctx context.Context, namespace, profileKey, current string) error {
	objs, err := c.revisionIndexer.ByIndex(revisionOfIndex, profileKey)
	if err != nil {
		return err
	}
	revisions := make([]*corev1.ConfigMap, 0, len(objs))
	for _, obj := range objs {
		revisions = append(revisions, obj.(*corev1.ConfigMap))
	}
	var retry time.Duration
	inUse := func(name string) bool {
		if left := c.mounts.guarded(namespace, name); left > 0 {
			retry = max(retry, left)
			return true
		}
		users, err := c.deploymentIndexer.IndexKeys(mountedRevisionIndex, namespace+"/"+name)
		return err != nil || len(users) > 0
	}
	defer func() {
		if retry > 0 {
			c.profileQueue.AddAfter(profileKey, retry) // look again once the guard is over
		}
	}()
	for _, r := range staleRevisions(revisions, current, inUse, c.revisionHistoryLimit) {
		// The preconditions make sure it is the revision the cache showed.
		err := c.kubeClient.CoreV1().ConfigMaps(namespace).Delete(ctx, r.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &r.UID, ResourceVersion: &r.ResourceVersion},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
		c.mounts.deletedRevision(namespace, r.Name)
		klog.FromContext(ctx).V(2).Info("Deleted stale profile revision", "revision", klog.KObj(r))
	}
	return nil
}

// mountedRevisionIndexFunc indexes a Deployment by the ConfigMap its profile
// volume mounts.
func mountedRevisionIndexFunc(obj interface{}) ([]string, error) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok || mountedRevision(d) == "" {
		return nil, nil
	}
	return []string{d.Namespace + "/" + mountedRevision(d)}, nil
}

// mountedRevision is the ConfigMap the Deployment's profile volume mounts,
// "" if none.
func mountedRevision(d *appsv1.Deployment) string {
	v := findByName(d.Spec.Template.Spec.Volumes, profileVolumeName)
	if v == nil || v.ConfigMap == nil {
		return ""
	}
	return v.ConfigMap.Name
}

// policyOf returns a profile's rollout policy; an annotation that does not
// parse pauses the rollout (see rollout.PolicyFor).
func (c *Controller) policyOf(profile *corev1.ConfigMap) (rollout.Policy, error) {
	return rollout.PolicyFor(profile.Annotations, c.rolloutDefaults)
}

// planRollout plans the rollout of a profile's current revision, stores the
// plan, queues the sessions whose turn came, and reports progress.
func (c *Controller) planRollout(ctx context.Context, profile *corev1.ConfigMap) {
	key := profileKey(profile.Namespace, profile.Name)
	hash := c.profileHashes.hash(profile)
	policy, policyErr := c.policyOf(profile)
	members := c.rolloutMembers(profile, hash)
	next := &profilePlan{hash: hash, policy: policy, plan: rollout.Decide(policy, members)}
	prev := c.plans.set(key, next)
	if prev != nil && prev.hash != hash {
		prev = nil // another rollout
	}

	// Wake the sessions the plan changed for: those it admits now, and, when
	// the rollout pauses, halts or goes on, those waiting, whose status says
	// why they wait. Sessions of an unpaced profile do not wait for plans:
	// the fan-out has queued them all; but those that waited under a policy
	// just removed must hear of it.
	if !policy.Unpaced() || (prev != nil && !prev.policy.Unpaced()) {
		c.wakeSessions(key, members, prev, next)
	}
	c.announce(profile, policyErr, prev, next)
	if next.plan.Phase == rollout.PhaseComplete {
		c.metrics.ForgetRollout(profile.Namespace, profile.Name)
		return
	}
	p := next.plan
	c.metrics.ObserveRollout(profile.Namespace, profile.Name, metrics.RolloutProgress{
		Total: p.Total, Moved: p.Moved, Ready: p.Ready, Failed: p.Failed,
		Halted: p.Phase == rollout.PhaseHalted, Paused: p.Phase == rollout.PhasePaused,
	})
	klog.FromContext(ctx).V(4).Info("Planned rollout", "revision", RevisionName(profile.Name, hash),
		"phase", p.Phase, "moved", p.Moved, "ready", p.Ready, "failed", p.Failed, "total", p.Total, "admitted", len(p.Admitted))
}

// wakeSessions queues the sessions whose turn the plan changed. The first
// plan of a rollout wakes all the profile's sessions: those without a
// Deployment yet (not members of the plan) that synced before it waited for
// it too.
func (c *Controller) wakeSessions(profileKey string, members []rollout.Member, prev, next *profilePlan) {
	namespace, _, _ := cache.SplitMetaNamespaceKey(profileKey)
	if prev == nil {
		for _, key := range c.sessionKeysOf(profileKey) {
			c.queue.Add(key)
		}
		return
	}
	for _, name := range next.plan.Admitted {
		if !prev.plan.Admits(name) {
			c.queue.Add(namespace + "/" + name)
		}
	}
	if prev.plan.Phase == next.plan.Phase {
		return
	}
	for _, m := range members {
		if !m.OnTarget {
			c.queue.Add(namespace + "/" + m.Name)
		}
	}
}

// rolloutMembers returns the profile's sessions that have a Deployment of
// their own, as the rollout policy sees them. The sessions come from the
// profileRef index and their Deployments from the cache: no request.
// Sessions without a Deployment they may write (none yet, being deleted,
// blocked) are not part of the rollout.
func (c *Controller) rolloutMembers(profile *corev1.ConfigMap, hash string) []rollout.Member {
	keys := c.sessionKeysOf(profileKey(profile.Namespace, profile.Name))
	members := make([]rollout.Member, 0, len(keys))
	for _, key := range keys {
		_, name, _ := cache.SplitMetaNamespaceKey(key)
		session, err := c.sessionLister.GameSessions(profile.Namespace).Get(name)
		if err != nil || session.DeletionTimestamp != nil {
			continue
		}
		d, err := c.deploymentLister.Deployments(profile.Namespace).Get(name)
		if err != nil || blocks(d, session) {
			continue
		}
		rolled := rolledProfileHash(d, profile.Name)
		onTarget := rolled == hash
		members = append(members, rollout.Member{
			Name:     name,
			Revision: rolled,
			OnTarget: onTarget,
			Ready:    deploymentComplete(d),
			Failed:   onTarget && progressDeadlineExceeded(d),
		})
	}
	return members
}

// progressDeadlineExceeded reports whether the Deployment controller gave up
// waiting for the Deployment's rollout to progress.
func progressDeadlineExceeded(d *appsv1.Deployment) bool {
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentProgressing {
			return cond.Status == corev1.ConditionFalse && cond.Reason == "ProgressDeadlineExceeded"
		}
	}
	return false
}

// rolloutTurn is the decision of a profile's rollout for one session that
// does not run the profile's current revision.
type rolloutTurn struct {
	move   bool   // move to the current revision now
	hash   string // if not: the revision to run (the current one of the session, or the stable one for a new session)
	reason string // if not: why, a ProfileUpToDate reason; "" if nothing is known yet
}

// turnOf decides whether a session moves to its profile's current revision,
// hash: at once when the policy is unpaced, else as the profile's plan says.
// rolled is the revision the session's Deployment runs ("" if it has none
// of this profile). A session with no plan to go by yet (the controller has
// just started, or the profile just changed) waits for one: the plan queues
// it.
func (c *Controller) turnOf(session *gamesv1.GameSession, profile *corev1.ConfigMap, hash, rolled string, hasDeployment bool) rolloutTurn {
	policy, err := c.policyOf(profile)
	if err == nil && policy.Unpaced() {
		return rolloutTurn{move: true}
	}
	if hasDeployment && rolled == "" {
		// Its Deployment mounts no revision of this profile (its profileRef
		// changed, or it predates revisions): the session's spec moves it.
		return rolloutTurn{move: true}
	}
	key := profileKey(profile.Namespace, profile.Name)
	pp := c.plans.get(key, hash)
	if pp == nil {
		c.enqueueProfile(key)
		return rolloutTurn{hash: rolled}
	}
	if !hasDeployment {
		if pp.plan.NewSessionsOnTarget() || pp.plan.Stable == "" || !c.revisionCached(profile.Namespace, profile.Name, pp.plan.Stable) {
			return rolloutTurn{move: true}
		}
		return rolloutTurn{hash: pp.plan.Stable, reason: waitingReason(pp.plan.Phase)}
	}
	if pp.plan.Admits(session.Name) {
		return rolloutTurn{move: true}
	}
	return rolloutTurn{hash: rolled, reason: waitingReason(pp.plan.Phase)}
}

func waitingReason(phase rollout.Phase) string {
	switch phase {
	case rollout.PhaseHalted:
		return gamesv1.ReasonRolloutHalted
	case rollout.PhasePaused:
		return gamesv1.ReasonRolloutPaused
	}
	return gamesv1.ReasonWaitingForTurn
}

// requestPlan asks for a new plan of a profile whose rollout is in progress,
// after a session of it synced: its Deployment may have moved, become Ready or
// failed. Many such requests within planInterval make one plan.
func (c *Controller) requestPlan(profile *corev1.ConfigMap) {
	key := profileKey(profile.Namespace, profile.Name)
	if pp := c.plans.get(key, c.profileHashes.hash(profile)); pp != nil && pp.plan.Phase == rollout.PhaseComplete {
		return
	}
	c.profileQueue.AddAfter(key, planInterval)
}

// forgetRollout drops what the controller keeps of a deleted profile's rollout.
func (c *Controller) forgetRollout(namespace, name string) {
	c.plans.forget(profileKey(namespace, name))
	c.metrics.ForgetRollout(namespace, name)
}

// announce emits the Events of a rollout on its profile: a policy that does
// not parse, the start, each wave, a pause, a resume, a halt, the end.
// prev is the previous plan of the same rollout, nil for a new one. Events
// are for people: a restarted controller may announce a rollout again.
func (c *Controller) announce(profile *corev1.ConfigMap, policyErr error, prev, next *profilePlan) {
	if policyErr != nil && (prev == nil || prev.policy.String() != next.policy.String() || prev.plan.Phase != next.plan.Phase) {
		c.recorder.Eventf(profile, corev1.EventTypeWarning, EventReasonRolloutPolicyInvalid, MessageRolloutPolicyInvalid, policyErr)
	}
	p := next.plan
	revision := RevisionName(profile.Name, next.hash)
	progress := fmt.Sprintf(MessageRolloutProgress, p.Moved, p.Total, revision, p.Ready, p.Failed)
	var prevPhase rollout.Phase
	if prev == nil {
		if p.Phase == rollout.PhaseComplete {
			return // nothing to roll, or a restarted controller finding it done
		}
		c.recorder.Eventf(profile, corev1.EventTypeNormal, EventReasonRolloutStarted, MessageRolloutStarted,
			revision, p.Total, next.policy, progress)
	} else {
		prevPhase = prev.plan.Phase
	}
	switch {
	case p.Phase == prevPhase && p.Phase == rollout.PhaseComplete:
		// Completed was announced; Deployments becoming Ready afterwards,
		// or an edit of the profile's labels, are no rollout news.
	case p.Phase == prevPhase:
		// One Event per tenth of the sessions Ready: the recorder allows an
		// object 25 Events in a burst, which a rollout of thousands in small
		// waves would otherwise spend before it completes.
		if tenths(p.Ready, p.Total) > tenths(prev.plan.Ready, prev.plan.Total) {
			c.recorder.Eventf(profile, corev1.EventTypeNormal, EventReasonRolloutAdvanced, MessageRolloutAdvanced, progress)
		}
	case p.Phase == rollout.PhaseComplete:
		c.recorder.Eventf(profile, corev1.EventTypeNormal, EventReasonRolloutCompleted, MessageRolloutCompleted, revision, p.Total, p.Failed)
	case p.Phase == rollout.PhaseHalted:
		c.recorder.Eventf(profile, corev1.EventTypeWarning, EventReasonRolloutHalted, MessageRolloutHalted, progress, p.MaxFailed)
	case p.Phase == rollout.PhasePaused:
		c.recorder.Eventf(profile, corev1.EventTypeNormal, EventReasonRolloutPaused, MessageRolloutPaused, progress)
	case prevPhase == rollout.PhasePaused:
		c.recorder.Eventf(profile, corev1.EventTypeNormal, EventReasonRolloutResumed, MessageRolloutResumed, progress)
	}
}

// tenths is how many tenths of total n is, rounded down.
func tenths(n, total int) int {
	if total == 0 {
		return 0
	}
	return n * 10 / total
}
