package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// How often a session looks again at a Deployment of its name that no event
// may announce the end of. It may be outside the controller's label-filtered
// cache: one being deleted goes by itself, soon; a foreign one goes when a
// user deletes it, as the session's status asks; one seen only by a live read
// may change or go before the cache ever holds it.
const (
	deletionRecheckInterval = 2 * time.Second
	uncachedRecheckInterval = 10 * time.Second
)

// syncGameSession drives one session's Deployment and status towards the
// desired state: read the inputs from the caches, reconcile the Deployment,
// write the status. Each step writes only what differs, so a session that is
// already in order costs no request at all.
//
// The write path keeps no copies of objects between syncs. A cache that lags
// behind the controller's own writes is handled where it shows: a create
// answered AlreadyExists leads to a live read of the Deployment; a sync that
// finds the Deployment older than the generation our last patch produced
// waits for the watch event (writeExpectations); a patch or a status update
// computed from a stale copy is refused with a conflict (both carry the
// resourceVersion they were computed from) and retried once the cache has
// caught up.
func (c *sessionController) syncGameSession(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("invalid queue key %q: %w", key, err)
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "gameSession", klog.KRef(namespace, name))
	ctx = klog.NewContext(ctx, logger)
	// Taken first, so that every sync, even one that ends early, clears it.
	rolling := c.fanOut.takeRolling(key)
	from := c.lanes.handedFrom(key)
	// A place the budget kept for this session and the sync did not take
	// goes to the next one waiting, however the sync ends.
	defer func() { c.wake(c.moves.sweep(key)) }()

	session, err := c.sessionLister.GameSessions(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		// No finalizer: the garbage collector deletes the Deployment through
		// its ownerReference, and deleting a session never waits on us.
		logger.V(4).Info("GameSession deleted")
		c.expectations.forget(key)
		c.inputChanges.settled(key)
		c.wake(c.moves.forget(key))
		// Its Deployment may run on (orphan propagation): the writes of it
		// the cache does not show yet keep their revisions until it does.
		c.revisions.forgetSession(key)
		return nil
	}
	if err != nil {
		return err
	}
	if session.DeletionTimestamp != nil {
		// With foreground deletion the session stays until the garbage
		// collector has deleted its Deployment; a new one would be deleted
		// again, and again, for as long as the session lingers.
		logger.V(4).Info("GameSession is being deleted; its Deployment is left to the garbage collector")
		return nil
	}
	logger.V(4).Info("Syncing GameSession", "resourceVersion", session.ResourceVersion)

	profile, deployment, err := c.readInputs(session)
	if err != nil {
		return err
	}
	refusal := ""
	if permitted, message := c.referencePermitted(session); !permitted {
		// Another namespace's profile, not granted: as good as missing.
		// The Deployment keeps the revision it runs.
		profile, refusal = nil, message
	}
	if !c.expectations.satisfied(key, deployment) {
		// The cache has not caught up with our last write to the Deployment.
		// Its watch event is on its way and syncs the session again.
		logger.V(4).Info("Waiting for the cache to show the last Deployment write")
		return nil
	}
	// The cache shows the last write: a move it completed, or a move that
	// was refused or overtaken, frees its place in the ledger of moves.
	if deployment != nil {
		c.settleMove(key, session, deployment)
	} else if err := c.settleUncachedMove(ctx, key, session); err != nil {
		return err
	}
	status := newSessionStatus(session)
	status.deadlineExceeded = c.progressDeadlineExceeded
	status.refusal = refusal
	result, err := c.reconcileDeployment(ctx, session, profile, deployment, status)
	// Requeues are decided here, from what the steps returned.
	if result.requeueAfter > 0 {
		c.queue.AddAfter(key, result.requeueAfter)
	}
	if result.planNeeded && profile != nil {
		c.rollouts.enqueueProfile(profileKey(profile.Namespace, profile.Name))
	}
	if err != nil {
		return err
	}
	if (rolling && result.wrote) || (from == firstLane && c.lanes.firstLaneWaiting() && status.changed()) {
		// A fan-out's first pass, or a status write while Deployment work
		// waits: the status goes to the status lane, behind the other
		// sessions' Deployments (see sessionLanes). It changes, so a plan
		// counts the session again, as below.
		c.requestPlan(profile)
		c.deferStatus(key)
		return nil
	}
	wroteStatus, err := c.writeStatus(ctx, session, status)
	if profile != nil && (result.wrote || wroteStatus || result.choice.hash != c.profileHashes.hash(profile) || c.rolloutInProgress(profile)) {
		// The session moved, became Ready or not, or is not on its target,
		// or the rollout is in progress: a plan counts it again.
		c.requestPlan(profile)
	}
	return err
}

// deferStatus queues the session in the status lane, unless another add of
// it wants more (sessionLanes).
func (c *sessionController) deferStatus(key string) {
	c.lanes.addStatusOnly(key)
}

// requestPlan asks the profile controller for a plan of the session's
// profile soon (profileController.requestPlanFor).
func (c *sessionController) requestPlan(profile *corev1.ConfigMap) {
	if profile == nil {
		return
	}
	c.rollouts.requestPlanFor(profileKey(profile.Namespace, profile.Name))
}

// reconcileResult is what reconcileDeployment did and what it asks for.
type reconcileResult struct {
	// wrote reports whether the Deployment was written.
	wrote bool
	// choice is the revision the Deployment was to run, and why.
	choice revisionChoice
	// requeueAfter asks for the session to be synced again after that long:
	// a Deployment no event may announce the end of, or a change held back.
	requeueAfter time.Duration
	// planNeeded asks for a profile sync: the session waits for a plan or a
	// revision that only the profile sync makes.
	planNeeded bool
}

// readInputs returns the session's profile and Deployment from the caches; nil
// for one the cache does not hold. The profile cache holds only labelled
// ConfigMaps, so a missing profile may exist without the label: the controller
// cannot tell, and must not look (that would mean caching or reading the
// cluster's other ConfigMaps).
func (c *sessionController) readInputs(session *gamesv1.GameSession) (*corev1.ConfigMap, *appsv1.Deployment, error) {
	profile, err := c.cachedProfile(profileOf(session))
	if err != nil {
		return nil, nil, err
	}
	deployment, err := c.deploymentLister.Deployments(session.Namespace).Get(session.Name)
	if apierrors.IsNotFound(err) {
		deployment, err = nil, nil
	}
	return profile, deployment, err
}

// reconcileDeployment makes the session's Deployment match its spec and
// profile, and records the outcome in status. Problems the user has to solve
// (a foreign Deployment, a missing profile, a Deployment the API server
// rejects) go into status, not into the error, which is for what a retry
// can fix.
func (c *sessionController) reconcileDeployment(ctx context.Context, session *gamesv1.GameSession,
	profile *corev1.ConfigMap, observed *appsv1.Deployment, status *sessionStatus) (reconcileResult, error) {
	var result reconcileResult
	switch {
	case status.refusal != "":
		status.referenceRefused()
	case profile == nil:
		status.profileNotFound(c.profileSelector)
	default:
		// Until the Deployment carries it, the profile is only found.
		status.profileFound(c.profileHashes.hash(profile))
	}
	if observed != nil && blocks(observed, session) {
		result.requeueAfter = c.blockedBy(session, observed, status)
		return result, nil
	}
	if profile == nil {
		return c.reconcileWithoutProfile(ctx, session, observed, status)
	}

	target := c.profileHashes.hash(profile)
	result.choice = c.chooseRevision(session, profile, observed)
	result.planNeeded = result.choice.planNeeded
	result.requeueAfter = result.choice.requeueAfter
	if result.choice.hash == "" && observed == nil && c.mayRunUncached(session) {
		// With nothing to mount, no create would find the Deployment the
		// session ran before it left the cache (its label removed): look.
		live, err := c.uncachedDeployment(ctx, session)
		if err != nil {
			return result, err
		}
		if live != nil && blocks(live, session) {
			result.requeueAfter = c.blockedBy(session, live, status)
			return result, nil
		}
		if live != nil {
			observed = live
			result.choice = c.chooseRevision(session, profile, observed)
			result.planNeeded = result.planNeeded || result.choice.planNeeded
			result.requeueAfter = uncachedRecheckInterval
		}
	}
	if result.choice.hash == "" {
		// Nothing to mount yet: the profile sync is creating the revision,
		// or planning the rollout, and either queues the session again.
		status.nothingToMount(observed, result.choice)
		return result, nil
	}
	if result.choice.hold {
		status.profileResolved(result.choice.hash, target)
		status.deployment(observed)
		status.waiting(result.choice.reason, result.choice.message)
		return result, nil
	}
	if observed == nil {
		created, live, err := c.createDeployment(ctx, session, c.desiredDeployment(session, profile, result.choice.hash, nil))
		switch {
		case apierrors.IsInvalid(err):
			status.deploymentInvalid(err)
			return result, nil
		case err != nil:
			return result, err
		case created != nil:
			observed, result.wrote = created, true
		case blocks(live, session):
			result.requeueAfter = c.blockedBy(session, live, status)
			return result, nil
		default:
			// Ours, hidden from the cache. What a live read shows, only the
			// cache can follow: left unpatched (a conflict) it stays without
			// the managed-by label, outside the cache; and one deleted before
			// the cache received it may never be announced at all (a relist
			// after both shows nothing). Until the cache holds it, no event
			// is sure to come: look again.
			observed = live
			// The revision was chosen without it: choose again, as if the
			// cache had shown it (its rollout turn, the fan-out delay).
			result.choice = c.chooseRevision(session, profile, observed)
			result.planNeeded = result.planNeeded || result.choice.planNeeded
			result.requeueAfter = uncachedRecheckInterval
			if result.choice.hash == "" {
				status.nothingToMount(observed, result.choice)
				return result, nil
			}
		}
	}

	key := cache.MetaObjectToName(session).String()
	ref := refOfProfile(session.Namespace, profile)
	rolled := rolledProfileHash(observed, ref)
	moving := result.choice.hash == target && rolled != "" && rolled != target
	if moving && !c.admitMove(key, move{kind: profileMove, to: target}, unlimited) {
		// A move of a running session: the cluster-wide budget has no room.
		// Its own spec is still applied, with the revision it runs.
		moving = false
		inBudget, waiting := c.moves.counts()
		klog.FromContext(ctx).V(4).Info("Move waits for the cluster-wide budget", "moving", inBudget, "waiting", waiting)
		result.choice = revisionChoice{hash: rolled, reason: gamesv1.ReasonWaitingForClusterBudget,
			message: fmt.Sprintf(MessageWaitingForClusterBudget, RevisionName(ref, rolled),
				RevisionName(ref, target), c.moves)}
	}
	desired, hold := c.desiredWithInputs(session, profile, result.choice.hash, observed, true)
	if (moving || c.startsInputMove(key, observed, desired)) && c.moves.perMinute > 0 {
		// The write that starts a move records when, for a new leader's
		// budget per minute (seedLedger).
		desired.Annotations = map[string]string{gamesv1.MoveStartsAnnotation: c.moves.moveStarts(
			observed.Annotations[gamesv1.MoveStartsAnnotation], c.clock.Now())}
	}
	if hold != nil {
		// Neither a condition nor an Event: a rotation of a Secret shared by
		// thousands of sessions would write thousands of either.
		klog.FromContext(ctx).V(2).Info("A change of the session's Secrets or ConfigMaps waits", "why", hold.reason)
		if after := hold.requeueAfter; after > 0 && (result.requeueAfter == 0 || after < result.requeueAfter) {
			result.requeueAfter = after
		}
	}
	current, patched, err := c.writeDeployment(ctx, session, observed, desired)
	switch {
	case apierrors.IsInvalid(err):
		// Refused: no move is under way, and none holds a place.
		c.wake(c.moves.release(key))
		status.leftAsIs(observed, target)
		status.deploymentInvalid(err)
		return result, nil
	case err != nil:
		return result, err
	}
	c.settleMove(key, session, current)
	result.wrote = result.wrote || patched
	status.profileResolved(result.choice.hash, target)
	status.deployment(current)
	if result.choice.hash == target {
		status.upToDate(target)
	} else {
		status.waiting(result.choice.reason, result.choice.message)
	}
	return result, nil
}

// mayRunUncached reports whether a session whose Deployment the cache does
// not show may have one all the same: its status describes one, a write of
// this controller's has not shown yet, or its Deployment left the cache
// (deleted, or its label removed), as this process saw or as the
// Deployment's ReplicaSets, which the cache still shows, tell a restarted
// one (they carry the pod template's managed-by label, not the
// Deployment's). A new session has none of these, and costs no request.
func (c *sessionController) mayRunUncached(session *gamesv1.GameSession) bool {
	if session.Status.ProfileHash != "" || session.Status.Replicas > 0 {
		return true
	}
	key := cache.MetaObjectToName(session).String()
	_, _, _, pending := c.revisions.lastMount(key)
	if pending || c.revisions.mayHaveLeft(key) {
		return true
	}
	replicaSets, err := c.replicaSetIndexer.IndexKeys(replicaSetsOfIndex, key)
	return err != nil || len(replicaSets) > 0
}

// uncachedDeployment reads the session's Deployment from the API server; nil
// if there is none.
func (c *sessionController) uncachedDeployment(ctx context.Context, session *gamesv1.GameSession) (*appsv1.Deployment, error) {
	live, err := c.kubeClient.AppsV1().Deployments(session.Namespace).Get(ctx, session.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.liveRead(session, nil)
		return nil, nil
	}
	if err == nil {
		c.liveRead(session, live)
	}
	return live, err
}

// liveRead tells the revision expectations what a live read found of the
// session's Deployment (nil: none), and looks again at the revisions the
// writes it supersedes held.
func (c *sessionController) liveRead(session *gamesv1.GameSession, live *appsv1.Deployment) {
	ours := live != nil && !blocks(live, session)
	cached := func() string {
		d, err := c.deploymentLister.Deployments(session.Namespace).Get(session.Name)
		if err != nil {
			return ""
		}
		return d.ResourceVersion
	}
	c.rollouts.enqueueProfilesOfRevisions(c.revisions.liveRead(cache.MetaObjectToName(session).String(), live, ours, cached))
}

// nothingToMount reports a session that has no revision to mount yet, and
// so leaves its Deployment d (nil if none) as it is: Ready says why, not
// what an earlier sync found, and the counts are d's, zero without one.
func (s *sessionStatus) nothingToMount(d *appsv1.Deployment, choice revisionChoice) {
	s.waiting(choice.reason, choice.message)
	s.notReady(choice.reason, choice.message)
	if d == nil {
		s.noDeployment()
		return
	}
	s.status.ProfileHash = d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	s.replicas(d)
}

// reconcileWithoutProfile handles a session whose profile is missing. A
// running game server is never torn down or changed for a missing profile:
// its Deployment keeps the revision it runs. The session's own spec (a
// scale, say) is still applied when that revision exists, since its pods can
// then be recreated; otherwise the Deployment is left exactly as it is.
func (c *sessionController) reconcileWithoutProfile(ctx context.Context, session *gamesv1.GameSession,
	observed *appsv1.Deployment, status *sessionStatus) (reconcileResult, error) {
	var result reconcileResult
	rolled := ""
	if observed != nil {
		rolled = rolledProfileHash(observed, refOf(session))
	}
	if rolled == "" || !c.rollouts.revisionAvailable(session.Namespace, refOf(session), rolled) {
		status.profileMissing(observed)
		return result, nil
	}
	result.choice = revisionChoice{hash: rolled}
	current, patched, err := c.writeDeployment(ctx, session, observed, c.desiredDeployment(session, nil, rolled, observed))
	switch {
	case apierrors.IsInvalid(err):
		status.profileMissing(observed)
		return result, nil
	case err != nil:
		return result, err
	}
	result.wrote = patched
	status.deployment(current)
	status.profileGone()
	return result, nil
}

// blocks reports whether d, the Deployment of the session's name, is one the
// session may not write: being deleted, or not controlled by the session.
func blocks(d *appsv1.Deployment, session *gamesv1.GameSession) bool {
	return d.DeletionTimestamp != nil || !metav1.IsControlledBy(d, session)
}

// revisionChoice is the revision a session's Deployment is to run, and why
// when it is not the profile's current one.
type revisionChoice struct {
	// hash is the content to run; "" if there is nothing to mount yet.
	hash string
	// reason and message are the ProfileUpToDate condition's, when hash is
	// not the profile's current content.
	reason, message string
	// requeueAfter asks for another sync after that long (a change held
	// back by the fan-out delay).
	requeueAfter time.Duration
	// planNeeded asks for a profile sync.
	planNeeded bool
	// hold leaves the Deployment as it is for now, though its spec differs:
	// the write waits for the revision to come.
	hold bool
}

// chooseRevision returns the revision the session's Deployment is to mount:
// the profile's current one, unless
//   - its revision is not available yet, or cannot be created: the session
//     keeps the revision it runs, or, with none, waits;
//   - the profile's rollout has not given the session its turn (see turnOf);
//   - the change waits out the fan-out delay (see heldBack).
//
// In each case a change of the session's own spec is still applied, with the
// revision it keeps.
func (c *sessionController) chooseRevision(session *gamesv1.GameSession, profile *corev1.ConfigMap, observed *appsv1.Deployment) revisionChoice {
	target := c.profileHashes.hash(profile)
	ref := refOfProfile(session.Namespace, profile)
	rolled := ""
	if observed != nil {
		rolled = rolledProfileHash(observed, ref)
	}
	if rolled == target {
		return revisionChoice{hash: target}
	}
	targetRevision := RevisionName(ref, target)
	if !c.rollouts.revisionAvailable(session.Namespace, ref, target) {
		if rolled == "" && observed != nil {
			// Its profile volume was edited away from the revision its
			// annotation names: put that one back meanwhile.
			if hash := observed.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; hash != "" &&
				c.rollouts.revisionAvailable(session.Namespace, ref, hash) {
				rolled = hash
			}
		}
		choice := revisionChoice{hash: rolled, reason: gamesv1.ReasonRevisionPending, planNeeded: true,
			message: fmt.Sprintf(MessageRevisionPending, targetRevision)}
		if pp := c.rollouts.latestPlan(profileKey(profile.Namespace, profile.Name)); pp != nil && pp.hash == target {
			if st, ok := pp.unavailableIn[session.Namespace]; ok {
				choice.reason, choice.message = gamesv1.ReasonRevisionUnavailable, st.message
				return choice
			}
		}
		// A change of the session's own spec waits for the revision, which
		// is on its way, when the session moves at once: one write takes
		// both along, and the game servers restart once, not twice. The
		// revision's arrival queues the session (profileFanOut.revisionCreated).
		if policy, err := c.rollouts.policyOf(profile); err == nil && policy.Unpaced() && rolled != "" &&
			deploymentNeedsUpdate(observed, c.desiredDeployment(session, profile, rolled, observed)) {
			choice.hold = true
		}
		return choice
	}
	if choice, move := c.turnOf(session, profile, target, rolled, observed != nil); !move {
		return choice
	}
	if rolled != "" {
		if remaining, held := c.heldBack(session, profile, observed, rolled); held {
			return revisionChoice{hash: rolled, reason: gamesv1.ReasonWaitingForTurn, requeueAfter: remaining,
				message: fmt.Sprintf(MessageChangeDelayed, RevisionName(ref, rolled), targetRevision)}
		}
	}
	return revisionChoice{hash: target}
}

// heldBack reports whether a session's move to its profile's new content
// waits out the fan-out delay, and for how long. It does unless the
// Deployment needs a write anyway (the session's spec changed): that write
// takes the new profile along, so the game servers restart once, not twice.
func (c *sessionController) heldBack(session *gamesv1.GameSession, profile *corev1.ConfigMap,
	observed *appsv1.Deployment, rolled string) (time.Duration, bool) {
	remaining, holding := c.fanOut.holdsBack(profileKey(profile.Namespace, profile.Name))
	if !holding || deploymentNeedsUpdate(observed, c.desiredDeployment(session, profile, rolled, observed)) {
		return 0, false
	}
	return remaining, true
}

// desiredDeployment is NewDeployment with the progress deadline of the
// profile's rollout policy. Without the profile (nil), or with a policy that
// does not parse, the controller cannot know the deadline: the session's own,
// if it sets one, or else whatever the Deployment has, stays.
//
// Its pod template carries the labelled Secrets and ConfigMaps it is to run
// with (inputsToRun): observed is the Deployment as the sync found it, nil if
// none.
func (c *sessionController) desiredDeployment(session *gamesv1.GameSession, profile *corev1.ConfigMap, hash string,
	observed *appsv1.Deployment) *appsv1.Deployment {
	d, _ := c.desiredWithInputs(session, profile, hash, observed, false)
	return d
}

// desiredWithInputs is desiredDeployment, and why a change of the
// session's referenced inputs waits (nil if none does). reserve takes the
// place a paced change moves in: only for the write.
func (c *sessionController) desiredWithInputs(session *gamesv1.GameSession, profile *corev1.ConfigMap, hash string,
	observed *appsv1.Deployment, reserve bool) (*appsv1.Deployment, *inputHold) {
	d := c.deploymentWithoutInputs(session, profile, hash)
	sets, hold, err := c.inputsToRun(session, profile, observed, d, reserve)
	if err != nil {
		// A cache answers nothing but found or not; whatever else comes,
		// the pods keep what they run.
		sets, hold = c.observedInputs(observed), nil
	}
	c.withInputs(d, sets)
	return d, hold
}

// deploymentWithoutInputs is the desired Deployment before its referenced
// inputs.
func (c *sessionController) deploymentWithoutInputs(session *gamesv1.GameSession, profile *corev1.ConfigMap, hash string) *appsv1.Deployment {
	d := NewDeployment(session, hash)
	if session.Spec.ProgressDeadlineSeconds != nil {
		return d
	}
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](defaultProgressDeadlineSeconds)
	if profile == nil {
		d.Spec.ProgressDeadlineSeconds = nil
		return d
	}
	policy, err := c.rollouts.policyOf(profile)
	if err != nil {
		d.Spec.ProgressDeadlineSeconds = nil
		return d
	}
	return withProgressDeadline(d, session, policy.ProgressDeadlineSeconds)
}

// createDeployment creates the session's Deployment. If the name is taken by
// a Deployment the cache does not hold, it returns that Deployment, read live,
// instead: the session's own, created moments ago or stripped of the
// managed-by label that the cache filters on, or someone else's. Only a live
// read can tell, and this is the one place the controller makes one.
func (c *sessionController) createDeployment(ctx context.Context, session *gamesv1.GameSession,
	desired *appsv1.Deployment) (created, live *appsv1.Deployment, err error) {
	client := c.kubeClient.AppsV1().Deployments(session.Namespace)
	key := cache.MetaObjectToName(session).String()
	// Recorded before the request: a create whose answer is lost may have
	// been made all the same.
	write := c.revisions.mounting(key, "", 1, false, desired)
	created, err = client.Create(ctx, desired, metav1.CreateOptions{FieldManager: Name})
	c.rollouts.enqueueProfilesOfRevisions(c.revisions.wrote(key, write, created, err))
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Created Deployment", "deployment", klog.KObj(created))
		c.recorder.Eventf(session, corev1.EventTypeNormal, EventReasonCreated, MessageDeploymentCreated, created.Name)
		return created, nil, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, nil, err
	}
	// NotFound: deleted meanwhile, and the retry creates it.
	live, err = client.Get(ctx, desired.Name, metav1.GetOptions{})
	if err == nil {
		c.liveRead(session, live)
	}
	return nil, live, err
}

// writeDeployment writes the controller's fields of observed that differ
// from desired, and returns the Deployment as the API server now has it and
// whether the write changed it. The write is an update of observed with those
// fields changed (deploymentUpdate) or, with Options.PatchDeployments, a
// patch of those fields alone (deploymentPatch). Both carry observed's
// resourceVersion: a Deployment changed since the read is refused with a
// Conflict, and the sync runs again on the newer copy.
func (c *sessionController) writeDeployment(ctx context.Context, session *gamesv1.GameSession,
	observed, desired *appsv1.Deployment) (*appsv1.Deployment, bool, error) {
	diff := deploymentChanges(observed, desired)
	if diff == (deploymentDiff{}) {
		return observed, false, nil
	}
	client := c.kubeClient.AppsV1().Deployments(session.Namespace)
	send := func() (*appsv1.Deployment, error) {
		return client.Update(ctx, deploymentUpdate(observed, desired, diff), metav1.UpdateOptions{FieldManager: Name})
	}
	if c.patchDeployments {
		patchType, patch, err := deploymentPatch(observed, desired, diff)
		if err != nil {
			return nil, false, err
		}
		send = func() (*appsv1.Deployment, error) {
			return client.Patch(ctx, desired.Name, patchType, patch, metav1.PatchOptions{FieldManager: Name})
		}
	}
	// Recorded before the request, as for a create: until the cache shows
	// the write, the revision it mounts is in use. Every write counts, not
	// only a move: the Deployment may be one the cache does not hold at all
	// (its managed-by label removed, and put back by this write).
	key := cache.MetaObjectToName(session).String()
	generation := observed.Generation
	if diff.templateChange() {
		generation++
	}
	write := c.revisions.mounting(key, observed.UID, generation, diff.templateChange(), desired)
	// A spec change gives the Deployment the next generation; its watch
	// event may come before the answer, and is known as the controller's
	// own only if expected by then (updateDeployment).
	specChange := diff.templateChange() || diff.replicas || diff.settings
	if specChange {
		c.expectations.expectGeneration(key, observed.UID, observed.Generation+1)
	}
	written, err := send()
	c.rollouts.enqueueProfilesOfRevisions(c.revisions.wrote(key, write, written, err))
	if specChange && (err != nil || written.Generation == observed.Generation) {
		c.expectations.withdraw(key, observed.UID, observed.Generation+1)
	}
	if err != nil {
		return nil, false, err
	}
	// An unchanged resourceVersion means the server had it already.
	wrote := written.ResourceVersion != observed.ResourceVersion
	if wrote {
		if logger := klog.FromContext(ctx).V(2); logger.Enabled() {
			logger.Info("Wrote Deployment", "deployment", klog.KObj(written), "changed", diff.String())
		}
	}
	if written.Generation > observed.Generation {
		c.expectations.expect(key, written)
	}
	return written, wrote, nil
}

// blockedBy reports a Deployment of the session's name that the session cannot
// use: one being deleted or left by an earlier session of that name, which the
// garbage collector will remove by itself, or a foreign one, which only a user
// can remove. The controller never modifies either. It returns when to look
// again: no event may announce the end of either.
func (c *sessionController) blockedBy(session *gamesv1.GameSession, d *appsv1.Deployment, status *sessionStatus) time.Duration {
	// d is not the session's: nothing of the session's runs.
	status.noDeployment()
	if d.DeletionTimestamp != nil || controlledByEarlierSession(d, session) {
		status.notReady(gamesv1.ReasonDeploymentDeleting, fmt.Sprintf(MessageDeploymentDeleting, d.Name))
		return deletionRecheckInterval
	}
	status.notReady(gamesv1.ReasonDeploymentNotControlled, fmt.Sprintf(MessageNotControlled, d.Name))
	return uncachedRecheckInterval
}

// controlledByEarlierSession reports whether d is controlled by a GameSession
// of the same name but another UID: a deleted session's Deployment, which the
// garbage collector is about to delete (or orphan).
func controlledByEarlierSession(d *appsv1.Deployment, session *gamesv1.GameSession) bool {
	ref := metav1.GetControllerOf(d)
	return ref != nil && ref.APIVersion == gameSessionKind.GroupVersion().String() &&
		ref.Kind == gameSessionKind.Kind && ref.Name == session.Name && ref.UID != session.UID
}

// writeStatus writes the new status if it differs from the cached one, then
// announces its transitions as Events. The write carries the cached
// resourceVersion, so a status computed from a stale copy is refused (a
// conflict, retried quietly) instead of overwriting a newer one.
func (c *sessionController) writeStatus(ctx context.Context, session *gamesv1.GameSession, status *sessionStatus) (bool, error) {
	if !status.changed() {
		return false, nil
	}
	// A shallow copy: the request only reads it, and the spec it shares
	// with the cached session is the larger part of the object.
	updated := *session
	updated.Status = *status.status
	klog.FromContext(ctx).V(4).Info("Updating GameSession status")
	if err := c.putStatus(ctx, &updated, metav1.UpdateOptions{FieldManager: Name}); err != nil {
		return false, err
	}
	c.recordTransitions(session, &session.Status, status.status)
	return true, nil
}

// recordTransitions emits an Event for each change worth a user's attention,
// once per change: a lasting problem warns once, not on every resync.
func (c *sessionController) recordTransitions(session *gamesv1.GameSession, prev, next *gamesv1.GameSessionStatus) {
	if conditionChanged(prev.Conditions, next.Conditions, gamesv1.ConditionProfileResolved) {
		switch cond := meta.FindStatusCondition(next.Conditions, gamesv1.ConditionProfileResolved); {
		case cond.Status == metav1.ConditionFalse:
			c.recorder.Event(session, corev1.EventTypeWarning, cond.Reason, cond.Message)
		case meta.FindStatusCondition(prev.Conditions, gamesv1.ConditionProfileResolved) != nil:
			c.recorder.Eventf(session, corev1.EventTypeNormal, gamesv1.ReasonProfileResolved,
				MessageProfileResolved, refOf(session), next.ProfileHash)
		}
	}
	if conditionChanged(prev.Conditions, next.Conditions, gamesv1.ConditionReady) {
		if cond := meta.FindStatusCondition(next.Conditions, gamesv1.ConditionReady); needsUser(cond.Reason) {
			c.recorder.Event(session, corev1.EventTypeWarning, cond.Reason, cond.Message)
		}
	}
	// A profile rollout leaves no Event on each session: one edit of a
	// profile shared by 7,340 sessions would post 7,340 of them, and the
	// event recorder drops what does not fit its buffer of a thousand, so
	// many would be lost anyway. The rollout's Events go to the profile
	// (RolloutStarted ... RolloutCompleted), and each session's
	// ProfileUpToDate condition says which revision it runs, since when.
}

// needsUser reports whether a Ready reason is a problem only a user can solve.
// The others (progressing, waiting for a profile or for a deletion) resolve by
// themselves or are reported by the ProfileResolved condition already.
func needsUser(reason string) bool {
	switch reason {
	case gamesv1.ReasonDeploymentNotControlled, gamesv1.ReasonDeploymentInvalid, gamesv1.ReasonContainerConflict:
		return true
	}
	return false
}
