package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

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
// desired state. It reads, decides and acts (decide.go): it reads the
// session, its profile and its Deployment from the caches, and what the
// profile's rollout and the ledger of moves say of them (view); a pure
// function decides what the Deployment is to be (decideSession); act writes
// what differs, then the status. A session that is already in order costs
// no request at all.
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
	c.echoes.syncing(key)
	from := c.lanes.handedFrom(key)
	// A place the budget kept for this session and the sync did not take
	// goes to the next one waiting, however the sync ends.
	defer func() { c.wake(c.moves.sweep(key)) }()

	session, err := c.sessionLister.GameSessions(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("GameSession deleted")
		c.forgetSession(key)
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

	profile, refusal, deployment, err := c.readInputs(session)
	if err != nil {
		return err
	}
	if err := c.confirmUnansweredWrite(ctx, key, session, deployment); err != nil {
		return err
	}
	if !c.expectations.satisfied(key, deployment) {
		// The cache has not caught up with our last write to the Deployment.
		// Its watch event is on its way and syncs the session again.
		logger.V(4).Info("Waiting for the cache to show the last Deployment write")
		return nil
	}
	liveProfile := c.cachedLiveProfile(session)
	if err := c.confirmUnansweredLiveWrite(ctx, key, session, liveProfile); err != nil {
		return err
	}
	if c.expectations.liveAwaited(key, liveProfile) {
		// Nor with our last write of the session's live profile: a sync
		// now would take the content it replaced for what the session runs.
		logger.V(4).Info("Waiting for the cache to show the last live profile write")
		return nil
	}
	// The cache shows the last write: a move it completed, or a move that
	// was refused or overtaken, frees its place in the ledger of moves.
	if deployment != nil {
		c.settleMove(key, session, deployment)
	} else if err := c.settleUncachedMove(ctx, key, session); err != nil {
		return err
	}

	view := c.view(session, profile, refusal, deployment, nil)
	done, err := c.act(ctx, view)
	// Requeues are decided here, from what the decision asked for.
	if done.requeueAfter > 0 {
		c.queue.AddAfter(key, done.requeueAfter)
	}
	if done.planNeeded && profile != nil {
		c.rollouts.enqueueProfile(profileKey(profile.Namespace, profile.Name))
	}
	if err != nil {
		return err
	}
	// A fan-out's first pass, or a status write while Deployment work waits:
	// the status goes to the status lane, behind the other sessions'
	// Deployments (see sessionLanes).
	deferStatus := rolling && done.wrote || from == firstLane && c.lanes.firstLaneWaiting() && done.status.changed()
	return c.report(ctx, done, deferStatus)
}

// confirmUnansweredWrite settles the session's last Deployment write when
// its answer (a server error, a timeout) did not say whether it applied and
// the cache still shows the Deployment from before it. Taken for unmoved,
// that copy would free the move's place in the ledger while the move may run
// (seed 100517479). Only the API server can tell: this rare live read asks
// it.
func (c *sessionController) confirmUnansweredWrite(ctx context.Context, key string, session *gamesv1.GameSession,
	cached *appsv1.Deployment) error {
	if !c.expectations.unconfirmed(key, cached) {
		return nil
	}
	live, err := c.uncachedDeployment(ctx, session)
	if err != nil {
		return err
	}
	c.expectations.confirm(key, live)
	return nil
}

// forgetSession ends what the controller keeps of a deleted session. No
// finalizer: the garbage collector deletes the Deployment through its
// ownerReference, and deleting a session never waits on us.
func (c *sessionController) forgetSession(key string) {
	c.expectations.forget(key)
	c.echoes.forget(key)
	c.inputChanges.settled(key)
	m, moving := c.moves.moveOf(key)
	c.wake(c.moves.forget(key))
	if moving && m.hasProfilePlace() {
		// Its ProfileRollout counts the place no longer.
		c.rollouts.requestPlanFor(m.profile)
	}
	// Its Deployment may run on (orphan propagation): the writes of it the
	// cache does not show yet keep their revisions until it does.
	c.revisions.forgetSession(key)
}

// report writes the session's new status, or leaves it to the status lane
// (deferStatus). Either way a status that changes asks the profile's rollout
// to count the session again.
func (c *sessionController) report(ctx context.Context, done actResult, deferStatus bool) error {
	v, profile := done.view, done.view.profile
	if deferStatus {
		c.requestPlan(profile)
		c.deferStatus(v.key)
		return nil
	}
	// A session not on its target, or in a rollout in progress, asks for
	// a plan at every sync, its echo's included (statusEchoes).
	planAgain := profile != nil && (done.decision.choice.hash != v.target || v.rolloutInProgress())
	wroteStatus, err := c.writeStatus(ctx, done, planAgain)
	if profile != nil && (done.wrote || wroteStatus || planAgain) {
		// The session moved, became Ready or not, or is not on its target,
		// or the rollout is in progress: a plan counts it again.
		c.requestPlan(profile)
	}
	return err
}

// echoNeedsNoSync reports whether the sync of the copy that writing done's
// status produces would find nothing to do: done left the Deployment as the
// cache shows it (a decision to leave it, or to write what it holds
// already), and the status decided again from the written one is the
// written one. The decision reads the session's status only where the cache
// shows no Deployment (mayRunUncached), which is not the case here.
func (c *sessionController) echoNeedsNoSync(done actResult) bool {
	v := done.view
	if done.wrote || (done.decision.action != actLeave && done.decision.action != actWrite) || v.deployment == nil || v.live {
		return false
	}
	written := *v.session
	written.Status = *done.status.status
	again := *v
	again.session = &written
	return !sessionStatusOf(&again, &done.decision, v.deployment, nil, c.progressDeadlineExceeded).changed()
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

// readInputs returns the session's profile and Deployment from the caches; nil
// for one the cache does not hold. The profile cache holds only labelled
// ConfigMaps, so a missing profile may exist without the label: the controller
// cannot tell, and must not look (that would mean caching or reading the
// cluster's other ConfigMaps). A profile of another namespace that the
// session may not use is as good as missing, and refusal says why: the
// Deployment keeps the revision it runs.
func (c *sessionController) readInputs(session *gamesv1.GameSession) (profile *corev1.ConfigMap, refusal string,
	deployment *appsv1.Deployment, err error) {
	profile, err = c.cachedProfile(profileOf(session))
	if err != nil {
		return nil, "", nil, err
	}
	if permitted, message := c.referencePermitted(session); !permitted {
		profile, refusal = nil, message
	}
	deployment, err = c.deploymentLister.Deployments(session.Namespace).Get(session.Name)
	if apierrors.IsNotFound(err) {
		deployment, err = nil, nil
	}
	return profile, refusal, deployment, err
}

// view reads what the session's decision needs (sessionView): once per
// sync, and again only for a Deployment a live read or a create found.
// liveWritten is the session's live profile as this sync wrote it, nil if
// it did not.
func (c *sessionController) view(session *gamesv1.GameSession, profile *corev1.ConfigMap, refusal string,
	deployment *appsv1.Deployment, liveWritten *corev1.ConfigMap) *sessionView {
	v := &sessionView{
		key:             cache.MetaObjectToName(session).String(),
		session:         session,
		now:             c.clock.Now(),
		profile:         profile,
		refusal:         refusal,
		profileSelector: c.profileSelector,
		ref:             refOf(session),
		deployment:      deployment,
		inputs:          c.inputs,
		available:       map[string]bool{},
		refused:         map[moveKind]ledgerRefusal{},
	}
	if deployment != nil {
		v.rolled = rolledProfileHash(deployment, v.ref)
		v.mounted = mountedProfileHash(deployment, v.ref)
		v.deadlineExceeded = c.progressDeadlineExceeded(deployment)
	} else {
		v.mayRunUncached = c.mayRunUncached(session)
	}
	c.readLive(v, liveWritten)
	v.have, v.want, v.digestsAdopted, v.inputsErr = c.sessionInputs(session, deployment)
	mayMount := func(hash string) {
		if _, known := v.available[hash]; hash != "" && !known {
			v.available[hash] = c.rollouts.revisionAvailable(session.Namespace, v.ref, hash)
		}
	}
	mayMount(v.mounted)
	if profile == nil {
		return v
	}
	key := profileKey(profile.Namespace, profile.Name)
	v.target = c.profileHashes.hash(profile)
	v.policy, v.policyErr = c.rollouts.policyOf(profile)
	v.delivery.wantsLive = c.liveOn() && v.policy.Live() && !mountsProfileBySubPath(session)
	if v.policyErr != nil {
		// A policy that does not parse changes nothing of how a session
		// runs.
		v.delivery.wantsLive = v.delivery.runsLive
	}
	if v.deployment == nil {
		v.delivery.runsLive = v.delivery.wantsLive
	}
	v.latest = c.rollouts.latestPlan(key)
	v.plan = c.rollouts.planOf(key, v.target, v.policy.String())
	stored := c.rollouts.storedRollout(profile)
	v.stored = memoryOf(stored, v.target)
	switch pp := v.latest; {
	case pp != nil && pp.hash == v.target && !pp.started.IsZero():
		v.stored.Started = pp.started
	case stored != nil && stored.Status.TargetHash == v.target && stored.Status.StartTime != nil:
		v.stored.Started = stored.Status.StartTime.Time
	}
	mayMount(v.target)
	if deployment != nil {
		mayMount(deployment.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation])
	}
	for _, pp := range []*profilePlan{v.latest, v.plan} {
		if pp != nil {
			mayMount(pp.plan.StableHash)
		}
	}
	v.changeDelay, v.changeDelayed = c.fanOut.delays(key)
	if deployment != nil && v.inputsErr == nil && !slices.Equal(v.want, v.have) {
		// A change of the session's Secrets or ConfigMaps: where it stands.
		m := move{kind: inputMove, to: v.want.key(), profile: key}
		v.inputChangeSeen = c.inputChanges.seenAt(v.key, m.to)
		v.member, v.reads = memberName(profile.Namespace, v.key), c.inputReads(session)
		v.hasProfilePlace = c.moves.hasProfilePlace(v.key, key)
		v.stalledInProfile = c.moves.stalledIn(key)
		v.budget = c.moves.shareOf(session.Namespace)
		if v.policyErr == nil && !v.policy.Unpaced() {
			v.permitted = len(c.permittedSessionKeysOf(profile.Namespace, profile.Name))
		}
		v.inputMoveWouldFit = c.moves.wouldAdmit(v.key, m, v.inputMoveLimit())
	}
	return v
}

// actResult is what act did: the last decision and the view it was made
// on, whether the Deployment was written, the status to write, and the
// requeue and plan it asks for.
type actResult struct {
	decision     sessionDecision
	view         *sessionView
	wrote        bool
	status       *sessionStatus
	requeueAfter time.Duration
	planNeeded   bool
}

// act carries out the session's decision. When the world answers what the
// decision could not know, it reads the answer into the view and decides
// again: a live read or a create that finds the Deployment, a ledger that
// refuses the move. Each answer adds what the next decision needs, so a
// sync decides at most a few times (a look, a create, two refusals).
func (c *sessionController) act(ctx context.Context, v *sessionView) (actResult, error) {
	var r actResult
	if v.inputsErr == nil && slices.Equal(v.want, v.have) {
		c.inputChanges.settled(v.key)
	}
	for {
		d := decideSession(v)
		r.decision, r.view = d, v
		r.requeueAfter, r.planNeeded = d.requeueAfter, r.planNeeded || d.planNeeded
		current := v.deployment
		var invalid error
		switch d.action {
		case actLookLive:
			live, err := c.uncachedDeployment(ctx, v.session)
			if err != nil {
				return r, err
			}
			if live == nil {
				v.looked = true
				continue
			}
			v = c.viewAgain(v, live)
			continue
		case actCreate:
			// Only a missing live profile: one the session has already, or
			// one nothing controls, may be mounted by a Deployment the
			// cache does not show, whose create below finds it; what it
			// holds moves by its turn. (For one another controls, the
			// decision creates nothing.)
			if v.delivery.liveProfile == nil {
				if retry, err := c.deliverLiveOrRead(ctx, v, d.choice, c.clock.Now()); err != nil {
					return r, err
				} else if retry {
					continue
				}
			}
			created, live, err := c.createDeployment(ctx, v.session, d.desired)
			switch {
			case apierrors.IsInvalid(err):
				invalid = err
			case err != nil:
				return r, err
			case created != nil:
				current, r.wrote = created, true
				c.inputChanges.settled(v.key)
				c.settleMove(v.key, v.session, created)
			default:
				// Ours or not, hidden from the cache: decide again on it. What
				// a live read shows, only the cache can follow: left unpatched
				// (a conflict) it stays without the managed-by label, outside
				// the cache; and one deleted before the cache received it may
				// never be announced at all. Until the cache holds it, no
				// event is sure to come: the decision looks again.
				v = c.viewAgain(v, live)
				continue
			}
		case actWrite:
			if d.move != nil && !c.admitMove(v.key, *d.move, d.profileLimit) {
				// No room in the ledger: decide again without the move.
				v.refused[d.move.kind] = refusedByCluster
				if c.moves.profileFull(v.key, *d.move, d.profileLimit) {
					v.refused[d.move.kind] = refusedByProfile
				}
				v.budget = c.moves.shareOf(v.session.Namespace)
				inBudget, waiting := c.moves.counts()
				klog.FromContext(ctx).V(4).Info("Move waits for the ledger of moves", "kind", d.move.kind, "moving", inBudget, "waiting", waiting)
				continue
			}
			// One time for the move's start, wherever it is recorded: on
			// the live profile, on the Deployment, or on both for a switch
			// to live, which a new leader counts once (seedLedger).
			started := c.clock.Now()
			if retry, err := c.deliverLiveOrRead(ctx, v, d.choice, started); err != nil {
				return r, err
			} else if retry {
				continue
			}
			written, wrote, err := c.writeSession(ctx, v, d, started)
			switch {
			case apierrors.IsInvalid(err):
				if v.profile != nil {
					// Refused: no move is under way, and none has a place.
					c.wake(c.moves.release(v.key))
				}
				invalid = err
			case err != nil:
				return r, err
			default:
				current, r.wrote = written, wrote
				c.settleMove(v.key, v.session, written)
			}
		}
		r.status = sessionStatusOf(v, &d, current, invalid, c.progressDeadlineExceeded)
		return r, nil
	}
}

// viewAgain is the session's view with d, the Deployment a live read or a
// create found, which the cache does not show; and with the live profile as
// this sync wrote it, if it did, which the cache does not show yet either.
func (c *sessionController) viewAgain(v *sessionView, d *appsv1.Deployment) *sessionView {
	again := c.view(v.session, v.profile, v.refusal, d, v.delivery.written)
	again.live = true
	return again
}

// writeSession writes the decision's Deployment, granted its move, after
// noting what it decided of the session's inputs. A move that writes the
// pod template records its start, at started.
func (c *sessionController) writeSession(ctx context.Context, v *sessionView, d sessionDecision, started time.Time) (*appsv1.Deployment, bool, error) {
	in := d.inputs
	if in.noteSeen {
		c.inputChanges.seen(v.key, v.want.key(), v.now)
	}
	if in.waitForPlace != "" {
		c.moves.waitForPlace(v.key, in.waitForPlace)
	}
	if in.requestPlan != "" {
		c.rollouts.requestPlanFor(in.requestPlan)
	}
	if in.wait != nil {
		// Neither a condition nor an Event: a rotation of a Secret shared by
		// thousands of sessions would write thousands of either.
		klog.FromContext(ctx).V(2).Info("A change of the session's Secrets or ConfigMaps waits", "why", in.wait.reason)
	}
	desired := d.desired
	// A move of content delivered live records its start on the live
	// profile (delivered-at), not here: the Deployment has nothing to
	// change. A switch to live writes the template, and records it here
	// too: a user may delete the live profile.
	profileMoves := d.move != nil && d.move.kind == profileMove && (!d.choice.live || !v.delivery.runsLive)
	if (profileMoves || c.startsInputMove(v.key, v.deployment, desired)) && c.moves.perMinute > 0 {
		// The write that starts a move records when, for a new leader's
		// budget per minute (seedLedger).
		desired.Annotations = maps.Clone(desired.Annotations)
		if desired.Annotations == nil {
			desired.Annotations = map[string]string{}
		}
		desired.Annotations[gamesv1.MoveStartsAnnotation] = c.moves.moveStarts(
			v.deployment.Annotations[gamesv1.MoveStartsAnnotation], started)
	}
	written, wrote, err := c.writeDeployment(ctx, v.session, v.deployment, desired)
	if err == nil && wrote && v.digestsAdopted {
		c.metrics.SecretDigestsAdopted.Inc()
		klog.FromContext(ctx).V(2).Info("The Deployment's Secret digest, made under a digest key no process holds any more, is taken over by the current key; its game servers keep running")
	}
	return written, wrote, err
}

// cachedAt reports whether the cache shows d at its resourceVersion: a write
// made from it is made from the cache's copy, which later copies follow.
func (c *sessionController) cachedAt(d *appsv1.Deployment) bool {
	cached, err := c.deploymentLister.Deployments(d.Namespace).Get(d.Name)
	return err == nil && cached.UID == d.UID && cached.ResourceVersion == d.ResourceVersion
}

// mayHaveApplied reports whether a write answered with err may have been
// applied all the same: a server error or a timeout, unlike a refusal
// (4xx), says nothing of what the API server did.
func mayHaveApplied(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code < 400 || code >= 500
	}
	return true
}

// mayRunUncached reports whether a session whose Deployment the cache does
// not show may have one all the same: its status describes one, a write of
// this controller's has not shown yet, or its Deployment left the cache
// (deleted, or its label removed), as this process saw or as the
// Deployment's ReplicaSets, which the cache still shows, tell a restarted
// one (they carry the pod template's managed-by label, not the
// Deployment's). A status written for an earlier spec tells nothing of a
// Deployment created since: created, stripped of its label and paused
// before it made a ReplicaSet, across a restart, it shows nowhere else
// (seed 99169144). A new session has none of these, and costs no request.
func (c *sessionController) mayRunUncached(session *gamesv1.GameSession) bool {
	if session.Status.ProfileHash != "" || session.Status.Replicas > 0 ||
		session.Status.ObservedGeneration > 0 && session.Status.ObservedGeneration < session.Generation {
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
	// waitForRevision leaves the Deployment as it is for now, though its
	// spec differs: the write waits for the revision to come.
	waitForRevision bool
	// live delivers the content through the session's live profile.
	live bool
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
	switch {
	case specChange && err != nil && mayHaveApplied(err) && c.cachedAt(observed):
		c.expectations.unanswered(key, observed.UID, observed.Generation+1, observed.ResourceVersion)
	case specChange && (err != nil || written.Generation == observed.Generation):
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

// blockedBy reports a Deployment of the session's name that the session
// cannot use: one being deleted or left by an earlier session of that name,
// which the garbage collector will remove by itself, or a foreign one, which
// only a user can remove. The controller never modifies either
// (blockedRecheck says when it looks again).
func (s *sessionStatus) blockedBy(d *appsv1.Deployment) {
	// d is not the session's: nothing of the session's runs.
	s.noDeployment()
	if d.DeletionTimestamp != nil || controlledByEarlierSession(d, s.session) {
		s.notReady(gamesv1.ReasonDeploymentDeleting, fmt.Sprintf(MessageDeploymentDeleting, d.Name))
		return
	}
	s.notReady(gamesv1.ReasonDeploymentNotControlled, fmt.Sprintf(MessageNotControlled, d.Name))
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
// conflict, retried quietly) instead of overwriting a newer one. A write
// whose watch event needs no sync is recorded first (statusEchoes).
func (c *sessionController) writeStatus(ctx context.Context, done actResult, planAgain bool) (bool, error) {
	session, status := done.view.session, done.status
	if !status.changed() {
		return false, nil
	}
	// A shallow copy: the request only reads it, and the spec it shares
	// with the cached session is the larger part of the object.
	updated := *session
	updated.Status = *status.status
	if c.echoNeedsNoSync(done) {
		planProfile := ""
		// The plans the echo's sync would ask for, all of the session's
		// profile (an input change's, decided in inputs.go, included).
		if done.view.profile != nil && (planAgain || done.decision.planNeeded || done.decision.inputs.requestPlan != "") {
			planProfile = profileKey(done.view.profile.Namespace, done.view.profile.Name)
		}
		c.echoes.expect(done.view.key, session, status.status, planProfile)
	}
	klog.FromContext(ctx).V(4).Info("Updating GameSession status")
	if err := c.putStatus(ctx, &updated, metav1.UpdateOptions{FieldManager: Name}); err != nil {
		c.echoes.withdraw(done.view.key, session.ResourceVersion)
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
	case gamesv1.ReasonDeploymentNotControlled, gamesv1.ReasonDeploymentInvalid, gamesv1.ReasonContainerConflict,
		gamesv1.ReasonLiveProfileNotControlled:
		return true
	}
	return false
}
