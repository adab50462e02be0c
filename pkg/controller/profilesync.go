package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/metrics"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// The profile sync runs per profile, on a queue of its own, and does what
// concerns a profile as a whole. Its steps fail independently: each runs
// whatever the others did, and their errors are returned together.
//
//  1. It creates the revision of the profile's current content, if missing
//     (ensureRevision, revision.go).
//  2. It deletes the revisions no pod can mount any more (deleteStaleRevisions).
//  3. It plans the rollout (pkg/rollout): from the caches, which sessions run
//     the new revision, which are Ready, failed or blocked; from the
//     profile's ProfileRollout, what the rollout remembers (a halt, the
//     stable revision); which sessions may move next.
//  4. It writes the ProfileRollout's status, once per rollout step.
//
// The plan is kept in memory for the session syncs to read. A restarted
// controller, or a new leader, computes the same plan from the same caches
// and the same ProfileRollout, and so goes on with the same rollout, within
// the same budget, moving no session twice and releasing no halt.
//
// Session syncs ask for a new plan (at most one per planInterval per
// profile, however many Deployments change) while a rollout is in progress;
// the plan queues the sessions it admits. A rollout that has not settled is
// planned again every replanInterval even without events, so that a missed
// event never wedges it.

// planInterval bounds how often a profile with a rollout in progress is
// planned again: its sessions' Deployments change many times a second during
// a rollout, and one plan looks at every session of the profile.
const planInterval = 250 * time.Millisecond

// recordInterval is planInterval for a profile whose rollout is unpaced:
// its plans gate no session, they only record the rollout's progress in the
// ProfileRollout, so they come less often.
const recordInterval = time.Second

// replanInterval is how often a profile whose rollout has not settled, or
// whose revision is not available, is planned again without an event.
const replanInterval = 30 * time.Second

// profilePlans holds the latest rollout plan of each profile, and the
// ProfileRollout the controller last wrote for it.
type profilePlans struct {
	mu      sync.Mutex
	plans   map[string]*profilePlan
	written map[string]*gamesv1.ProfileRollout
	// syncStarted is when each profile's latest sync began: the next plan
	// comes planInterval later at the earliest (requestPlan). A plan in
	// progress counts, so that requests during it make one plan after it,
	// not a second one at once.
	syncStarted map[string]time.Time
}

// profilePlan is a profile's rollout plan towards one content under one
// policy: a session may go by it only while both are the profile's.
type profilePlan struct {
	hash     string // content hash of the target revision
	policy   string // rollout.Policy.String() of the policy it was made with
	plan     rollout.Plan
	memory   rollout.Memory // what the rollout remembers after this plan
	revision revisionState
	// unavailableIn holds, by namespace, the revisions of the content that
	// cannot be had, with why: a session says its own namespace's reason,
	// not another's (a quota in one tenant's namespace, say).
	unavailableIn map[string]revisionState
	// started is when the rollout towards hash began: max-defer counts
	// from it, and the ProfileRollout records it (status.startTime).
	started time.Time
	// window is the policy's maintenance window, "" if none.
	window string
	// unpaced tells a plan that gates no session (rollout.Policy.Unpaced).
	unpaced bool
	// live tells a plan that delivers live (live.go): its moved sessions
	// hold the content in their live profiles, and its Ready ones are
	// those whose every game server applied it.
	live bool
	// inputs is where the profile's input moves stood in the ledger when
	// the plan was made, with the canaries of its rotations.
	inputs gamesv1.InputRolloutStatus
	// clusterBudget is whose share of the cluster's limits the profile's
	// sessions waited for when the plan was made; nil if none waited.
	clusterBudget *gamesv1.ClusterBudgetWait
	// inputCanaries are the canaries of the rotations of the objects its
	// sessions read, by object (inputcanary.go); nil when the policy has no
	// canary.
	inputCanaries map[inputObject]inputCanary
}

func newProfilePlans() *profilePlans {
	return &profilePlans{plans: map[string]*profilePlan{}, written: map[string]*gamesv1.ProfileRollout{}, syncStarted: map[string]time.Time{}}
}

// started records that a sync of the profile began at t.
func (p *profilePlans) started(profileKey string, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.syncStarted[profileKey] = t
}

// lastStarted returns when the profile's latest sync began.
func (p *profilePlans) lastStarted(profileKey string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.syncStarted[profileKey]
	return t, ok
}

// get returns the plan of profileKey towards hash under policy, or nil if
// none was made for them yet.
func (p *profilePlans) get(profileKey, hash, policy string) *profilePlan {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pp := p.plans[profileKey]; pp != nil && pp.hash == hash && pp.policy == policy {
		return pp
	}
	return nil
}

// latest returns the latest plan of profileKey, whatever its target.
func (p *profilePlans) latest(profileKey string) *profilePlan {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.plans[profileKey]
}

func (p *profilePlans) set(profileKey string, pp *profilePlan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans[profileKey] = pp
}

// forgetPlan drops the profile's plan, for a change of its data: the next
// plan is a new rollout's, which tells every session where it stands, even
// if the data came back to the content of the plan dropped.
func (p *profilePlans) forgetPlan(profileKey string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.plans, profileKey)
}

func (p *profilePlans) forget(profileKey string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.plans, profileKey)
	delete(p.written, profileKey)
	delete(p.syncStarted, profileKey)
}

// lastWritten returns the ProfileRollout the controller last wrote for the
// profile, if the cache may not show it yet.
func (p *profilePlans) lastWritten(profileKey string) *gamesv1.ProfileRollout {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.written[profileKey]
}

func (p *profilePlans) setWritten(profileKey string, r *gamesv1.ProfileRollout) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r == nil {
		delete(p.written, profileKey)
		return
	}
	p.written[profileKey] = r
}

func (c *profileController) enqueueProfile(profileKey string) {
	c.queue.Add(profileKey)
}

// syncProfile creates the revision of a profile's current content, deletes
// stale revisions, plans the rollout and records it. A deleted profile (or
// one that lost its label) keeps every revision a pod may mount: its
// sessions go on running them.
func (c *profileController) syncProfile(ctx context.Context, key string) error {
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
	if profile == nil {
		c.forgetRollout(namespace, name)
		// Without a profile there is nothing to roll back to: only the
		// revisions a pod may mount stay. Its ProfileRollout goes with the
		// profile (an owner reference); one of a profile that only lost its
		// label stays as it was.
		recheck, err := c.deleteStaleRevisions(ctx, key, nil, 0, func(string) bool { return false })
		if !recheck.IsZero() {
			c.queue.AddAfter(key, max(0, recheck.Sub(c.clock.Now()))+time.Second)
		}
		return err
	}
	c.plans.started(key, c.clock.Now())
	c.forgetCaughtUpWrite(key, profile)
	hash := c.profileHashes.hash(profile)
	consumers := c.consumerNamespaces(namespace, name)
	revision, unavailableIn, createErr := c.ensureRevisions(ctx, profile, hash, consumers)
	kept := []string{hash}
	if stable := c.stableHash(profile, hash); stable != "" {
		kept = append(kept, stable)
	}
	recheck, deleteErr := c.deleteStaleRevisions(ctx, key, kept, c.revisionHistoryLimit, func(ns string) bool {
		return ns == namespace || slices.Contains(consumers, ns)
	})
	pp := c.planRollout(ctx, profile, hash, revision, unavailableIn)
	// Recorded at once, the revision on its way or not: a GitOps tool that
	// waits on the ProfileRollout must never read the previous content's
	// Complete as this one's.
	writeErr := c.recordRollout(ctx, profile, pp)
	if !pp.plan.Settled || !revision.available {
		c.queue.AddAfter(key, replanInterval)
	}
	// The window opening or closing, and max-defer passing, change the plan
	// with no event to announce them, as a write that never shows in the
	// cache ends its hold on a revision. A second late is a second past the
	// change, whatever the rounding of the queue's clock.
	now := c.clock.Now()
	for _, at := range []time.Time{pp.plan.Resumes, pp.plan.WindowCloses, pp.plan.DeferralEnds, recheck} {
		if !at.IsZero() {
			c.queue.AddAfter(key, max(0, at.Sub(now))+time.Second)
		}
	}
	return errors.Join(createErr, deleteErr, writeErr)
}

// ensureRevisions creates the revision of the profile's current content,
// hash, in its namespace and in each of namespaces, whose sessions use it by
// grant. The state it returns is the first that is not available, the
// profile's own first: the rollout waits for every namespace's. With it
// come the namespaces whose revision cannot be had, and why. The creates
// in other namespaces go out revisionCreators at a time: the fan-out waits
// for the last of them, and fifty in turn would add a second to it.
func (c *profileController) ensureRevisions(ctx context.Context, profile *corev1.ConfigMap, hash string,
	namespaces []string) (revisionState, map[string]revisionState, error) {
	state, err := c.ensureRevision(ctx, profile, hash, profile.Namespace)
	states := make([]revisionState, len(namespaces))
	errs := make([]error, len(namespaces)+1)
	errs[len(namespaces)] = err
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(revisionCreators, len(namespaces)) {
		wg.Go(func() {
			for i := range next {
				states[i], errs[i] = c.ensureRevision(ctx, profile, hash, namespaces[i])
			}
		})
	}
	for i := range namespaces {
		next <- i
	}
	close(next)
	wg.Wait()
	var unavailable map[string]revisionState
	note := func(namespace string, s revisionState) {
		if s.reason != "" && !s.available {
			if unavailable == nil {
				unavailable = map[string]revisionState{}
			}
			unavailable[namespace] = s
		}
	}
	note(profile.Namespace, state)
	for i, s := range states {
		note(namespaces[i], s)
		if state.available && !s.available {
			state = s
		}
	}
	return state, unavailable, errors.Join(errs...)
}

// revisionCreators bounds the revision creates one profile sync sends at
// once.
const revisionCreators = 8

// revisionsReady reports whether the revision of content hash is in the
// cache in the profile's namespace and in each namespace using it by grant.
func (c *profileController) revisionsReady(profile *corev1.ConfigMap, hash string) bool {
	if !c.revisionAvailable(profile.Namespace, profile.Name, hash) {
		return false
	}
	for _, namespace := range c.consumerNamespaces(profile.Namespace, profile.Name) {
		if !c.revisionAvailable(namespace, refOfProfile(namespace, profile), hash) {
			return false
		}
	}
	return true
}

// cachedProfile returns the profile from the cache, nil if it is not there.
// A revision is never a profile, whatever the profile selector says.
func (c *caches) cachedProfile(namespace, name string) (*corev1.ConfigMap, error) {
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

// policyOf returns a profile's rollout policy; an annotation that does not
// parse pauses the rollout (see rollout.PolicyFor). So does a live delivery
// this controller was not started for (--live-delivery): delivered by
// restart instead, the edit would restart the very game servers its author
// meant to keep running.
func (c *profileController) policyOf(profile *corev1.ConfigMap) (rollout.Policy, error) {
	policy, err := rollout.PolicyFor(profile.Annotations, c.rolloutDefaults)
	if err == nil && policy.Live() && !c.liveOn() {
		paused := c.rolloutDefaults
		paused.Paused = true
		return paused, fmt.Errorf("annotation %s: %q needs the controller's --live-delivery, which is off: start it with --live-delivery, or remove the annotation",
			rollout.AnnotationDelivery, rollout.DeliveryLive)
	}
	return policy, err
}

// storedRollout returns the profile's ProfileRollout as the controller last
// knew it (its own last write, or the cache), nil if there is none of this
// profile.
func (c *profileController) storedRollout(profile *corev1.ConfigMap) *gamesv1.ProfileRollout {
	key := profileKey(profile.Namespace, profile.Name)
	cached, err := c.rolloutLister.ProfileRollouts(profile.Namespace).Get(profile.Name)
	if err != nil {
		cached = nil
	}
	// Our last write, until the cache shows it (forgetCaughtUpWrite): the
	// cache's copy then, which is the same object or a newer one.
	written := c.plans.lastWritten(key)
	if written != nil && (cached == nil || cached.UID == written.UID && cached.ResourceVersion != written.ResourceVersion) {
		cached = written
	}
	if cached == nil || !metav1.IsControlledBy(cached, profile) {
		return nil // none, or one of an earlier profile of that name, which the garbage collector removes
	}
	return cached
}

// forgetCaughtUpWrite forgets the ProfileRollout the controller last wrote
// once the cache shows it. It runs in the profile's own sync, which every
// ProfileRollout event queues after that write's sync ended, so a readers'
// view (storedRollout) writes nothing.
func (c *profileController) forgetCaughtUpWrite(key string, profile *corev1.ConfigMap) {
	written := c.plans.lastWritten(key)
	if written == nil {
		return
	}
	if cached, err := c.rolloutLister.ProfileRollouts(profile.Namespace).Get(profile.Name); err == nil && cached.ResourceVersion == written.ResourceVersion {
		c.plans.setWritten(key, nil)
	}
}

// stableHash returns the stable content of the profile's rollout towards
// hash, as its memory holds it ("" if none).
func (c *profileController) stableHash(profile *corev1.ConfigMap, hash string) string {
	stable := memoryOf(c.storedRollout(profile), hash).StableHash
	if prev := c.plans.latest(profileKey(profile.Namespace, profile.Name)); prev != nil && prev.memory.StableHash != "" {
		stable = prev.memory.StableHash
	}
	return stable
}

// memoryOf returns what the rollout of profile towards hash remembers.
func memoryOf(stored *gamesv1.ProfileRollout, hash string) rollout.Memory {
	if stored == nil {
		return rollout.Memory{}
	}
	return rollout.Memory{Halted: stored.Status.HaltedHash == hash, StableHash: stored.Status.StableHash}
}

// recordedStart is the start of a rollout that begins at now, as the
// ProfileRollout keeps it: to the second, rounded up. Rounded down, it would
// count up to a second the rollout did not run, and let max-defer pass that
// much early; rounded up, busy sessions wait up to a second longer. Kept as
// stored, it is the instant a restarted controller counts from too.
func recordedStart(now time.Time) time.Time {
	start := now.Truncate(time.Second)
	if start.Before(now) {
		start = start.Add(time.Second)
	}
	return start
}

// rolloutInputs is what a profile's plan reads: its content and policy,
// what its ProfileRollout and the previous plan remember, its members.
type rolloutInputs struct {
	hash          string
	policy        rollout.Policy
	stored        *gamesv1.ProfileRollout
	prev          *profilePlan
	members       []rollout.Member
	revision      revisionState
	unavailableIn map[string]revisionState
	inputs        gamesv1.InputRolloutStatus
	clusterBudget *gamesv1.ClusterBudgetWait
	// canaryMembers are the members as the canaries of rotations see them,
	// read only when the policy has a canary.
	canaryMembers []canaryMember
	// live: the content is delivered live.
	live bool
	now  time.Time
}

// decideRollout is the profile's plan towards in.hash: what the rollout
// remembers (a halt, the stable content, its start), from the ProfileRollout
// and this process's previous plan, then rollout.Decide. It reads nothing
// but in.
func decideRollout(in rolloutInputs) *profilePlan {
	hash, prev, stored := in.hash, in.prev, in.stored
	memory := memoryOf(stored, hash)
	// This process's own plan is never older than the cache: a halt it found
	// holds, and a stable content it recorded counts, before its write shows.
	if prev != nil && prev.memory.StableHash != "" {
		memory.StableHash = prev.memory.StableHash
	}
	if prev != nil && prev.hash == hash {
		memory.Halted = memory.Halted || prev.memory.Halted
	}
	previousTarget := ""
	if prev != nil {
		previousTarget = prev.hash
	} else if stored != nil {
		previousTarget = stored.Status.TargetHash
	}
	if previousTarget != hash && allReadyOn(in.members, previousTarget) {
		// The rollout before this one completed, though no plan saw it
		// settle before the profile changed again: its content is stable.
		memory.StableHash = previousTarget
	}
	memory.Started = recordedStart(in.now)
	switch {
	case prev != nil && prev.hash == hash:
		memory.Started = prev.started
	case stored != nil && stored.Status.TargetHash == hash && stored.Status.StartTime != nil:
		memory.Started = stored.Status.StartTime.Time
	}
	plan := rollout.Decide(in.policy, in.members, memory, in.now)
	next := &profilePlan{hash: hash, policy: in.policy.String(), plan: plan, revision: in.revision,
		unavailableIn: in.unavailableIn, started: memory.Started, window: windowString(in.policy), unpaced: in.policy.Unpaced(),
		live:   in.live,
		memory: rollout.Memory{Halted: plan.Phase == rollout.PhaseHalted, StableHash: memory.StableHash, Started: memory.Started},
		inputs: in.inputs, clusterBudget: in.clusterBudget}
	if in.policy.AsksForCanary() {
		next.inputCanaries = decideInputCanaries(in.policy.CanaryOf(len(in.members)), in.canaryMembers)
		next.inputs.Canaries = inputCanaryStatus(next.inputCanaries)
	}
	if plan.Settled && plan.Failed == 0 {
		next.memory.StableHash = hash
	}
	return next
}

// waitedForUnpacedPlan reports whether sessions of a profile whose policy
// is now unpaced may wait for next, a plan towards hash, which no turn of
// theirs wakes: those that synced under the paced policy the previous plan,
// or without one (a restart) the stored ProfileRollout, records, before
// their cache showed the new one (seed 100156461: a new session, no
// member, waited for good); and those a halt held (turnOf) that next no
// longer holds.
func waitedForUnpacedPlan(stored *gamesv1.ProfileRollout, hash string, prev, next *profilePlan) bool {
	if prev != nil {
		return prev.memory.Halted && !next.memory.Halted
	}
	return stored != nil && (stored.Status.Policy != next.policy || stored.Status.HaltedHash == hash && !next.memory.Halted)
}

// planRollout plans the rollout of a profile's current revision: it reads
// what the plan needs, decides it (decideRollout), stores the plan, queues
// the sessions whose turn came, and reports progress.
func (c *profileController) planRollout(ctx context.Context, profile *corev1.ConfigMap, hash string, revision revisionState,
	unavailableIn map[string]revisionState) *profilePlan {
	key := profileKey(profile.Namespace, profile.Name)
	policy, policyErr := c.policyOf(profile)
	// One lookup of the profile's sessions serves the whole plan: it sorts
	// thousands of keys.
	keys := c.permittedSessionKeysOf(profile.Namespace, profile.Name)
	in := rolloutInputs{
		hash: hash, policy: policy, stored: c.storedRollout(profile), prev: c.plans.latest(key),
		revision: revision, unavailableIn: unavailableIn,
		inputs: c.inputRollout(key, policy, len(keys)), clusterBudget: c.clusterBudgetWait(key), now: c.clock.Now(),
		live: policyErr == nil && policy.Live() && c.liveOn(),
	}
	var readers []readingMember
	in.members, readers = c.rolloutMembers(profile, keys, hash, policy, policyErr)
	if policy.AsksForCanary() {
		in.canaryMembers = c.canaryMembers(readers, policy.CanaryOf(len(in.members)))
	}
	next := decideRollout(in)
	c.plans.set(key, next)
	prev, members := in.prev, in.members
	if prev != nil && prev.hash != hash {
		prev = nil // another rollout
	}
	plan := next.plan

	// Wake the sessions the plan changed for: those it admits now, and, when
	// the rollout pauses, halts, gets stuck or goes on, those waiting, whose
	// status says why they wait. Sessions of an unpaced profile do not wait
	// for plans: the fan-out has queued them all; but those that waited
	// under a policy just removed must hear of it.
	if !policy.Unpaced() || (prev != nil && prev.policy != next.policy) {
		c.wakeSessions(key, members, prev, next)
	} else if revisionNews(prev, next) || waitedForUnpacedPlan(in.stored, hash, prev, next) {
		// Sessions waiting for the revision say why: it cannot be created.
		// Those that waited for a plan hear of it.
		c.sessions.enqueueSessionsOf(key)
	}
	if in.prev != nil && in.prev.policy == next.policy && !sameInputCanaries(in.prev.inputCanaries, next.inputCanaries) {
		// A rotation's canary was picked, passed or failed: the sessions
		// that wait for it hear of it.
		c.sessions.enqueueSessionsOf(key)
	}
	c.announce(profile, policyErr, prev, next)
	if plan.Settled {
		c.metrics.ForgetRollout(profile.Namespace, profile.Name)
	} else {
		c.metrics.ObserveRollout(profile.Namespace, profile.Name, metrics.RolloutProgress{
			Total: plan.Total, Moved: plan.Moved, Ready: plan.Ready, Failed: plan.Failed, Deferred: plan.Deferred,
			Halted: plan.Phase == rollout.PhaseHalted, Paused: plan.Phase == rollout.PhasePaused,
			Waiting: plan.Phase == rollout.PhaseWaiting,
		})
	}
	klog.FromContext(ctx).V(4).Info("Planned rollout", "revision", RevisionName(profile.Name, hash),
		"phase", plan.Phase, "moved", plan.Moved, "ready", plan.Ready, "failed", plan.Failed, "total", plan.Total,
		"deferred", plan.Deferred, "admitted", len(plan.Admitted), "blocked", len(plan.Blocked), "stuck", plan.Stuck)
	return next
}

// windowString is the policy's window as written, "" if it has none.
func windowString(policy rollout.Policy) string {
	if policy.Window == nil {
		return ""
	}
	return policy.Window.String()
}

// allReadyOn reports whether every member runs content hash and is Ready.
func allReadyOn(members []rollout.Member, hash string) bool {
	for _, m := range members {
		if m.Hash != hash || !m.Ready {
			return false
		}
	}
	return hash != "" && len(members) > 0
}

// wakeSessions queues the sessions whose turn the plan changed. The first
// plan of a rollout (or under a new policy) wakes all the profile's
// sessions: those without a Deployment yet (not members of the plan) that
// synced before it waited for it too.
func (c *profileController) wakeSessions(profileKey string, members []rollout.Member, prev, next *profilePlan) {
	namespace, _, _ := cache.SplitMetaNamespaceKey(profileKey)
	keyOf := func(member string) string { return memberKey(namespace, member) }
	if prev == nil || prev.policy != next.policy {
		for _, key := range c.sessionKeysOf(profileKey) {
			c.sessions.enqueueKey(key)
		}
		return
	}
	for _, name := range next.plan.Admitted {
		if !prev.plan.Admits(name) {
			c.sessions.enqueueKey(keyOf(name))
		}
	}
	if revisionNews(prev, next) {
		// Sessions without a Deployment wait for the revision too.
		c.sessions.enqueueSessionsOf(profileKey)
		return
	}
	// The waiting sessions' status names the sessions a stuck rollout waits
	// on: a change of those is news to them too.
	heldUpBy := func(pp *profilePlan) string {
		if !pp.plan.Stuck {
			return ""
		}
		return blockedList(pp.plan.Blocked)
	}
	if prev.plan.Phase == next.plan.Phase && heldUpBy(prev) == heldUpBy(next) &&
		prev.revision.reason == next.revision.reason {
		return
	}
	for _, m := range members {
		if !m.OnTarget {
			c.sessions.enqueueKey(keyOf(m.Name))
		}
	}
}

// revisionUnavailable reports whether the plan found its revision not to
// be had (a create refused, a name taken); false for no plan.
func revisionUnavailable(pp *profilePlan) bool {
	return pp != nil && pp.revision.reason != "" && !pp.revision.available
}

// revisionNews reports whether the revision became unavailable, available
// again, or unavailable for another reason (the sessions quote the API
// server's message), in the profile's namespace or in one that uses it by
// grant: each session says its own namespace's.
func revisionNews(prev, next *profilePlan) bool {
	if revisionUnavailable(prev) != revisionUnavailable(next) ||
		revisionUnavailable(next) && prev.revision.message != next.revision.message {
		return true
	}
	var before map[string]revisionState
	if prev != nil {
		before = prev.unavailableIn
	}
	return !maps.EqualFunc(before, next.unavailableIn, func(a, b revisionState) bool { return a.message == b.message })
}

// rolloutMembers returns the sessions of keys, the profile's permitted
// sessions, that have a Deployment of their own, as the rollout policy sees
// them. The sessions and their Deployments come from the caches, by key: no
// request. Sessions without a Deployment they may write (none yet, being
// deleted, blocked by a foreign one) are not part of the rollout.
// A policy that asks for canaries asks, in the same pass, for the members
// whose Deployments the cache shows that read labelled Secrets or
// ConfigMaps: the canaries of rotations are picked among them
// (canaryMembers). A policy that does not parse changes nobody's delivery:
// each member counts as delivered the way it is.
func (c *profileController) rolloutMembers(profile *corev1.ConfigMap, keys []string, hash string, policy rollout.Policy,
	policyErr error) (members []rollout.Member, readers []readingMember) {
	members = make([]rollout.Member, 0, len(keys))
	withReaders, wantsLive := policy.AsksForCanary(), c.liveOn() && policy.Live()
	for _, key := range keys {
		namespace := namespaceOfKey(key)
		member := memberName(profile.Namespace, key)
		session, ok := cachedByKey[*gamesv1.GameSession](c.sessionIndexer, key)
		if !ok || session.DeletionTimestamp != nil {
			continue
		}
		d, ok := cachedByKey[*appsv1.Deployment](c.deploymentIndexer, key)
		if !ok {
			// A Deployment the cache does not show may still have been
			// moved by this controller: one that lost its label is written
			// through a live read. Such a move keeps its place until the cache
			// shows it, or the budget would let another session move too.
			if m, _, ok := c.movedOutOfSight(profile, key, hash); ok {
				members = append(members, m)
			}
			continue
		}
		if blocks(d, session) {
			continue
		}
		if withReaders {
			if reads := c.inputReads(session); len(reads) > 0 {
				readers = append(readers, readingMember{name: member, session: session, deployment: d, reads: reads})
			}
		}
		deliversLive := policyErr == nil && wantsLive && !mountsProfileBySubPath(session)
		if labelledLive(d) {
			m := c.liveMember(profile, key, session, d, hash, policyErr != nil || deliversLive, policy)
			if !m.OnTarget && deliversLive {
				m = c.movingLiveOutOfSight(profile, key, hash, m)
			}
			members = append(members, m)
			continue
		}
		rolled := rolledProfileHash(d, refOfProfile(namespace, profile))
		if deliversLive {
			// Delivered by restart while the profile asks for live: the
			// switch is a move still to make.
			m := rollout.Member{Name: member, Hash: rolled, Ready: deploymentComplete(d),
				Blocked: memberBlocked(session, d), Busy: isBusy(session)}
			members = append(members, c.movingLiveOutOfSight(profile, key, hash, m))
			continue
		}
		if rolled != hash {
			// A move the API server made and the cache does not show yet
			// keeps its place.
			if m, answered, ok := c.movedOutOfSight(profile, key, hash); ok && answered {
				m.Blocked, m.Busy = memberBlocked(session, d), isBusy(session)
				members = append(members, m)
				continue
			}
		}
		onTarget := rolled == hash
		members = append(members, rollout.Member{
			Name:     member,
			Hash:     rolled,
			OnTarget: onTarget,
			Ready:    deploymentComplete(d),
			Failed:   onTarget && c.progressDeadlineExceeded(d),
			Blocked:  memberBlocked(session, d),
			Busy:     isBusy(session),
		})
	}
	return members, readers
}

// cachedByKey is the object of key ("namespace/name") in indexer, as its
// lister's Get returns it, without building the key again.
func cachedByKey[T any](indexer cache.Indexer, key string) (T, bool) {
	obj, exists, err := indexer.GetByKey(key)
	if err != nil || !exists {
		var none T
		return none, false
	}
	return obj.(T), true
}

// memberName is the name of the session of key in the rollout of a profile
// of namespace: its name when it is of that namespace, as ProfileRollouts
// have always named them; "namespace/name" when it uses the profile by
// grant.
func memberName(namespace, key string) string {
	if sessionNamespace, name, _ := strings.Cut(key, "/"); sessionNamespace != namespace {
		return key
	} else {
		return name
	}
}

// memberKey is the queue key of a member of the rollout of a profile of
// namespace: the inverse of memberName.
func memberKey(namespace, member string) string {
	if strings.Contains(member, "/") {
		return member
	}
	return namespace + "/" + member
}

// movedOutOfSight returns the member a session is while the cache does not
// show the controller's latest write to its Deployment (or the Deployment at
// all) and that write mounts the revision of target: moving, not Ready. It
// keeps its place in the budget until the cache shows the write. answered
// says whether the API server answered the write: a Deployment the cache
// shows at an older version counts as moved only then, since a write whose
// answer was lost may not have been made, and its session must move again.
func (c *profileController) movedOutOfSight(profile *corev1.ConfigMap, sessionKey, target string) (m rollout.Member, answered, ok bool) {
	namespace, _, _ := cache.SplitMetaNamespaceKey(sessionKey)
	revision, hash, answered, ok := c.revisions.lastMount(sessionKey)
	if !ok || hash != target || revision != namespace+"/"+RevisionName(refOfProfile(namespace, profile), target) {
		return rollout.Member{}, false, false
	}
	return rollout.Member{Name: memberName(profile.Namespace, sessionKey), Hash: hash, OnTarget: true}, answered, true
}

// movingLiveOutOfSight is m, the member the caches show for the session of
// key, or the member it is while the ledger holds its live move to target
// and the caches do not show that move yet (its live profile's write, or
// its Deployment's switch to live, is on its way): on target, moving, not
// Ready. As movedOutOfSight does for a restart, it keeps the move's place
// in the plan: a plan that missed it would let another session move in its
// stead, as the ledger frees the place once the caches show the move, and
// the delivery has failed (seed 70585).
func (c *profileController) movingLiveOutOfSight(profile *corev1.ConfigMap, key, target string, m rollout.Member) rollout.Member {
	moving, ok := c.moves.moveOf(key)
	if !ok || moving.kind != profileMove || !moving.live || moving.to != target ||
		moving.profile != profileKey(profile.Namespace, profile.Name) {
		return m
	}
	return rollout.Member{Name: m.Name, Hash: target, OnTarget: true, Blocked: m.Blocked, Busy: m.Busy}
}

// memberBlocked says why a session cannot take a move or complete one, ""
// if it can: its Deployment is paused, or the session's last sync of its
// current spec found the Deployment refusing the controller's writes.
func memberBlocked(session *gamesv1.GameSession, d *appsv1.Deployment) string {
	if d.Spec.Paused {
		return gamesv1.ReasonDeploymentPaused
	}
	ready := meta.FindStatusCondition(session.Status.Conditions, gamesv1.ConditionReady)
	if ready != nil && ready.ObservedGeneration == session.Generation && needsUser(ready.Reason) {
		return ready.Reason
	}
	return ""
}

// progressDeadlineExceeded reports whether the Deployment controller gave up
// waiting for the rollout of the Deployment's current template. A condition
// left from before does not count: one of an earlier generation (a
// fix-forward the Deployment controller has not seen yet), or one that names
// a ReplicaSet whose pods mount another revision, or other data of their
// Secrets and ConfigMaps, than the template does. The Deployment controller
// keeps a timed-out condition, and its message naming the old ReplicaSet,
// until the new ReplicaSet makes progress, though it records the new
// generation as observed at once, when the new template's ReplicaSet
// existed already: a move back to a profile's or a Secret's earlier data,
// the fix of a bad change, would read as failed on the fix.
func (c *caches) progressDeadlineExceeded(d *appsv1.Deployment) bool {
	cond := timedOutCondition(d)
	if cond == nil {
		return false
	}
	name := timedOutReplicaSet(cond.Message)
	if name == "" {
		return true
	}
	obj, exists, err := c.replicaSetIndexer.GetByKey(d.Namespace + "/" + name)
	if err != nil || !exists {
		return true
	}
	timedOut := &obj.(*appsv1.ReplicaSet).Spec.Template
	if mountedRevision(timedOut) != mountedRevision(&d.Spec.Template) {
		return false
	}
	for _, in := range c.inputs {
		_, digest := in.annotations()
		if timedOut.Annotations[digest] != d.Spec.Template.Annotations[digest] {
			return false
		}
	}
	return true
}

// timedOutCondition is the Deployment's Progressing condition if it says
// ProgressDeadlineExceeded for the Deployment's current generation, nil
// otherwise.
func timedOutCondition(d *appsv1.Deployment) *appsv1.DeploymentCondition {
	if d.Status.ObservedGeneration < d.Generation {
		return nil
	}
	for i, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentProgressing {
			if cond.Status == corev1.ConditionFalse && cond.Reason == "ProgressDeadlineExceeded" {
				return &d.Status.Conditions[i]
			}
			return nil
		}
	}
	return nil
}

// timedOutReplicaSet is the ReplicaSet a ProgressDeadlineExceeded message of
// the Deployment controller names (`ReplicaSet "arena-7d9f5c" has timed out
// progressing.`), "" if the message is not of that form.
func timedOutReplicaSet(message string) string {
	rest, ok := strings.CutPrefix(message, `ReplicaSet "`)
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, `"`)
	if !ok {
		return ""
	}
	return name
}

// forgetRollout drops what the controller keeps of a deleted profile's rollout.
func (c *profileController) forgetRollout(namespace, name string) {
	c.plans.forget(profileKey(namespace, name))
	c.metrics.ForgetRollout(namespace, name)
}

// inputRollout is where the profile's input moves stand in the ledger, and
// whether their brake holds (inputsToRun): its max-failed counts the
// permitted sessions.
func (c *profileController) inputRollout(profileKey string, policy rollout.Policy, permitted int) gamesv1.InputRolloutStatus {
	moving, failed, waiting := c.moves.inputsOf(profileKey)
	maxFailed, brake := policy.MaxFailedOf(permitted)
	return gamesv1.InputRolloutStatus{MovingSessions: int32(moving), FailedSessions: int32(failed),
		WaitingSessions: int32(waiting), Halted: brake && failed > maxFailed}
}

// clusterBudgetWait is whose share of the cluster's limits the profile's
// sessions wait for, from the ledger's fair queue; nil if none waits.
func (c *profileController) clusterBudgetWait(profileKey string) *gamesv1.ClusterBudgetWait {
	namespaces := c.moves.clusterWaitOf(profileKey)
	if len(namespaces) == 0 {
		return nil
	}
	wait := &gamesv1.ClusterBudgetWait{}
	for i, n := range namespaces {
		wait.WaitingSessions += int32(n.waiting)
		if i < 10 {
			wait.Namespaces = append(wait.Namespaces, gamesv1.NamespaceShare{Namespace: n.namespace,
				WaitingSessions: int32(n.waiting), HeldPlaces: int32(n.held), FairShare: int32(n.share)})
		}
	}
	return wait
}

// recordRollout writes the profile's ProfileRollout when the plan changed it
// by a rollout step: a phase, the target or stable revision, the halt, the
// blocked sessions, the revision's availability, a failure, or a tenth of
// the sessions moved or Ready. Never once per session.
func (c *profileController) recordRollout(ctx context.Context, profile *corev1.ConfigMap, pp *profilePlan) error {
	key := profileKey(profile.Namespace, profile.Name)
	stored := c.storedRollout(profile)
	var prev *gamesv1.ProfileRolloutStatus
	if stored != nil {
		prev = &stored.Status
	}
	status := rolloutStatus(profile, pp, prev, metav1.NewTime(c.clock.Now()))
	if prev != nil && !rolloutStepped(prev, status) {
		return nil
	}

	client := c.gameClient.GamesV1().ProfileRollouts(profile.Namespace)
	if stored == nil {
		created, err := client.Create(ctx, newProfileRollout(profile), metav1.CreateOptions{FieldManager: Name})
		if apierrors.IsAlreadyExists(err) {
			// One of an earlier profile of that name, which the garbage
			// collector deletes: its delete event queues the profile again.
			klog.FromContext(ctx).V(2).Info("Waiting for the garbage collector to remove the ProfileRollout of an earlier profile")
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating the ProfileRollout: %w", err)
		}
		stored = created
	}
	next := stored.DeepCopy()
	next.Status = *status
	written, err := client.UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: Name})
	if err != nil {
		c.plans.setWritten(key, nil) // go by the cache again: a NotFound creates it anew
		return fmt.Errorf("writing the ProfileRollout status: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Recorded rollout", "phase", status.Phase, "target", status.TargetRevision,
		"moved", status.MovedSessions, "ready", status.ReadySessions, "total", status.TotalSessions)
	c.plans.setWritten(key, written)
	return nil
}

// newProfileRollout returns the ProfileRollout of a profile, without status.
// The profile owns it, so it goes with the profile. Not blockOwnerDeletion:
// nothing needs to wait for it, and that would need a permission on the
// profile's finalizers.
func newProfileRollout(profile *corev1.ConfigMap) *gamesv1.ProfileRollout {
	return &gamesv1.ProfileRollout{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: profile.Namespace,
			Name:      profile.Name,
			Labels:    map[string]string{LabelManagedBy: ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ConfigMap", Name: profile.Name, UID: profile.UID, Controller: ptr.To(true),
			}},
		},
	}
}

// rolloutStatus returns the ProfileRollout status of the plan; prev is the
// stored one (nil if none), whose times and revision condition carry over.
func rolloutStatus(profile *corev1.ConfigMap, pp *profilePlan, prev *gamesv1.ProfileRolloutStatus, now metav1.Time) *gamesv1.ProfileRolloutStatus {
	p := pp.plan
	s := &gamesv1.ProfileRolloutStatus{
		TargetHash:       pp.hash,
		TargetRevision:   RevisionName(profile.Name, pp.hash),
		Phase:            gamesv1.RolloutPhase(p.Phase),
		TotalSessions:    int32(p.Total),
		MovedSessions:    int32(p.Moved),
		ReadySessions:    int32(p.Ready),
		FailedSessions:   int32(p.Failed),
		DeferredSessions: int32(p.Deferred),
		PendingSessions:  int32(max(p.Moved-p.Ready-p.Failed, 0)),
		Delivery:         string(rollout.DeliveryRestart),
		Policy:           pp.policy,
	}
	if pp.live {
		s.Delivery = string(rollout.DeliveryLive)
	}
	if !p.Resumes.IsZero() {
		s.ResumeTime = &metav1.Time{Time: p.Resumes.Truncate(time.Second)}
	}
	if !p.DeferralEnds.IsZero() {
		s.DeferralEndTime = &metav1.Time{Time: p.DeferralEnds.Truncate(time.Second)}
	}
	if pp.memory.StableHash != "" {
		s.StableHash, s.StableRevision = pp.memory.StableHash, RevisionName(profile.Name, pp.memory.StableHash)
	}
	if pp.memory.Halted {
		s.HaltedHash = pp.hash
	}
	if !equality.Semantic.DeepEqual(pp.inputs, gamesv1.InputRolloutStatus{}) {
		s.Inputs = ptr.To(pp.inputs)
	}
	s.ClusterBudget = pp.clusterBudget
	for _, b := range p.Blocked[:min(len(p.Blocked), 10)] {
		s.Blocked = append(s.Blocked, gamesv1.BlockedSession{Name: b.Name, Reason: b.Reason})
	}
	if prev != nil {
		s.Conditions = slices.Clone(prev.Conditions)
		s.StartTime, s.CompletionTime = prev.StartTime, prev.CompletionTime
	}
	if prev == nil || prev.TargetHash != pp.hash {
		s.StartTime, s.CompletionTime = &now, nil
		if !pp.started.IsZero() {
			s.StartTime = &metav1.Time{Time: pp.started}
		}
	}
	if p.Settled && s.CompletionTime == nil {
		s.CompletionTime = &now
	}
	if !p.Settled {
		s.CompletionTime = nil
	}
	s.Message = rolloutMessage(s, pp)

	set := func(conditionType string, status metav1.ConditionStatus, reason string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: conditionType, Status: status,
			Reason: reason, Message: s.Message, LastTransitionTime: now})
	}
	switch {
	case pp.revision.reason != "":
		status := metav1.ConditionFalse
		if pp.revision.available {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: gamesv1.ConditionRevisionAvailable,
			Status: status, Reason: pp.revision.reason, Message: pp.revision.message, LastTransitionTime: now})
	case prev != nil && prev.TargetHash != pp.hash:
		// The new revision is on its way: what was said of the previous
		// one's no longer holds.
		meta.RemoveStatusCondition(&s.Conditions, gamesv1.ConditionRevisionAvailable)
	}
	reason := phaseReason(p)
	if p.Settled {
		set(gamesv1.ConditionComplete, metav1.ConditionTrue, gamesv1.ReasonRolloutComplete)
	} else {
		set(gamesv1.ConditionComplete, metav1.ConditionFalse, reason)
	}
	// The kstatus summary: each present only while True, as on sessions.
	stalled, reconciling := "", ""
	switch {
	case pp.revision.reason != "" && !pp.revision.available:
		stalled = pp.revision.reason
	case p.Phase == rollout.PhaseHalted || p.Stuck:
		stalled = reason
	case !p.Settled:
		reconciling = reason
	}
	for conditionType, reason := range map[string]string{gamesv1.ConditionStalled: stalled, gamesv1.ConditionReconciling: reconciling} {
		if reason == "" {
			meta.RemoveStatusCondition(&s.Conditions, conditionType)
		} else {
			set(conditionType, metav1.ConditionTrue, reason)
		}
	}
	return s
}

// phaseReason is the condition reason of a plan that has not settled.
func phaseReason(p rollout.Plan) string {
	switch {
	case p.Phase == rollout.PhaseHalted:
		return gamesv1.ReasonRolloutHalted
	case p.Phase == rollout.PhasePaused:
		return gamesv1.ReasonRolloutPaused
	case p.Phase == rollout.PhaseWaiting:
		return gamesv1.ReasonOutsideWindow
	case p.Stuck:
		return gamesv1.ReasonSessionsBlocked
	case waitsOnBusy(p):
		return gamesv1.ReasonSessionsDeferred
	}
	return gamesv1.ReasonRolloutProgressing
}

// rolloutMessage says in a sentence where the rollout stands. It names no
// counts, so that it changes only with a rollout step.
func rolloutMessage(s *gamesv1.ProfileRolloutStatus, pp *profilePlan) string {
	p := pp.plan
	switch {
	case pp.revision.reason != "" && !pp.revision.available:
		return pp.revision.message
	case p.Phase == rollout.PhaseHalted:
		return fmt.Sprintf(MessageRolloutStatusHalted, s.TargetRevision)
	case p.Phase == rollout.PhasePaused:
		return fmt.Sprintf(MessageRolloutStatusPaused, s.TargetRevision, pp.policy)
	case p.Phase == rollout.PhaseWaiting:
		return fmt.Sprintf(MessageRolloutStatusWaiting, s.TargetRevision, pp.window, p.Resumes.UTC().Format(time.RFC3339))
	case waitsOnBusy(p):
		return fmt.Sprintf(MessageRolloutStatusDeferred, s.TargetRevision, pp.policy, deferredUntil(p))
	case p.Stuck:
		return fmt.Sprintf(MessageRolloutStatusBlocked, s.TargetRevision, blockedList(p.Blocked))
	case p.Settled:
		return fmt.Sprintf(MessageRolloutStatusComplete, s.TargetRevision)
	case p.Phase == rollout.PhaseCanary:
		return fmt.Sprintf(MessageRolloutStatusCanary, s.TargetRevision, p.Canary)
	}
	return fmt.Sprintf(MessageRolloutStatusRolling, s.TargetRevision, pp.policy)
}

// waitsOnBusy reports whether the rollout waits for busy sessions: some are
// deferred, and nothing else moves or may move now (the rest moved and are
// Ready, or wait behind busy canaries).
func waitsOnBusy(p rollout.Plan) bool {
	return p.Deferred > 0 && len(p.Admitted) == 0 && p.Rolling == 0 && !p.Stuck &&
		(p.Phase == rollout.PhaseRolling || p.Phase == rollout.PhaseCanary)
}

// deferredUntil says when deferred sessions move without being idle, for a
// message: "" if never.
func deferredUntil(p rollout.Plan) string {
	if p.DeferralEnds.IsZero() {
		return ""
	}
	return fmt.Sprintf(MessageDeferredUntil, p.DeferralEnds.UTC().Format(time.RFC3339))
}

// blockedList names blocked members for a message: the first three, and how
// many more.
func blockedList(blocked []rollout.BlockedMember) string {
	parts := make([]string, 0, 4)
	for _, b := range blocked[:min(len(blocked), 3)] {
		parts = append(parts, fmt.Sprintf("%s (%s)", b.Name, b.Reason))
	}
	if len(blocked) > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", len(blocked)-3))
	}
	return strings.Join(parts, ", ")
}

// rolloutStepped reports whether next differs from the stored status by a
// rollout step. Counts alone change it only when a tenth of the sessions
// moved, became Ready or joined, or a session failed.
func rolloutStepped(prev, next *gamesv1.ProfileRolloutStatus) bool {
	tenth := func(n, total int32) int32 {
		if total == 0 {
			return 0
		}
		return n * 10 / total
	}
	// The number of sessions changes by a tenth, or to or from none.
	joined := prev.TotalSessions != next.TotalSessions && (prev.TotalSessions == 0 || next.TotalSessions == 0 ||
		10*abs(prev.TotalSessions-next.TotalSessions) >= min(prev.TotalSessions, next.TotalSessions))
	// Busy sessions turning idle one by one are no step, unless a tenth
	// of them did, or the last one.
	deferred := (prev.DeferredSessions == 0) != (next.DeferredSessions == 0) ||
		tenth(prev.DeferredSessions, next.TotalSessions) != tenth(next.DeferredSessions, next.TotalSessions)
	// Input moves: a failure, the brake, or a tenth of the sessions moving
	// or waiting, as for the profile's own moves.
	var a, b gamesv1.InputRolloutStatus
	if prev.Inputs != nil {
		a = *prev.Inputs
	}
	if next.Inputs != nil {
		b = *next.Inputs
	}
	inputs := a.FailedSessions != b.FailedSessions || a.Halted != b.Halted || !equality.Semantic.DeepEqual(a.Canaries, b.Canaries) ||
		(a.MovingSessions == 0) != (b.MovingSessions == 0) || (a.WaitingSessions == 0) != (b.WaitingSessions == 0) ||
		tenth(a.MovingSessions, next.TotalSessions) != tenth(b.MovingSessions, next.TotalSessions) ||
		tenth(a.WaitingSessions, next.TotalSessions) != tenth(b.WaitingSessions, next.TotalSessions)
	// The cluster's budget: sessions start or stop waiting for it, a tenth
	// more or fewer wait, or other namespaces share it.
	var c, d gamesv1.ClusterBudgetWait
	if prev.ClusterBudget != nil {
		c = *prev.ClusterBudget
	}
	if next.ClusterBudget != nil {
		d = *next.ClusterBudget
	}
	budget := (c.WaitingSessions == 0) != (d.WaitingSessions == 0) ||
		tenth(c.WaitingSessions, next.TotalSessions) != tenth(d.WaitingSessions, next.TotalSessions) ||
		!slices.EqualFunc(c.Namespaces, d.Namespaces, func(a, b gamesv1.NamespaceShare) bool { return a.Namespace == b.Namespace })
	if inputs || budget || joined || deferred || prev.FailedSessions != next.FailedSessions ||
		tenth(prev.MovedSessions, next.TotalSessions) != tenth(next.MovedSessions, next.TotalSessions) ||
		tenth(prev.ReadySessions, next.TotalSessions) != tenth(next.ReadySessions, next.TotalSessions) {
		return true
	}
	x, y := *prev, *next
	x.TotalSessions, x.MovedSessions, x.ReadySessions, x.DeferredSessions, x.Inputs, x.ClusterBudget = 0, 0, 0, 0, nil, nil
	y.TotalSessions, y.MovedSessions, y.ReadySessions, y.DeferredSessions, y.Inputs, y.ClusterBudget = 0, 0, 0, 0, nil, nil
	return !equality.Semantic.DeepEqual(x, y)
}

func abs(n int32) int32 {
	if n < 0 {
		return -n
	}
	return n
}

// announce emits the Events of a rollout on its profile: a policy that does
// not parse, the start, each tenth, a pause, a resume, a halt, a session that
// holds it up, the end. prev is the previous plan of the same rollout, nil
// for a new one. Events are for people: a restarted controller may announce
// a rollout again.
func (c *profileController) announce(profile *corev1.ConfigMap, policyErr error, prev, next *profilePlan) {
	if policyErr != nil && (prev == nil || prev.policy != next.policy || prev.plan.Phase != next.plan.Phase) {
		c.recorder.Eventf(profile, corev1.EventTypeWarning, EventReasonRolloutPolicyInvalid, MessageRolloutPolicyInvalid, policyErr)
	}
	if r := next.revision; r.reason != "" && !r.available && (prev == nil || prev.revision.message != r.message) {
		c.recorder.Event(profile, corev1.EventTypeWarning, r.reason, r.message)
	}
	p := next.plan
	revision := RevisionName(profile.Name, next.hash)
	progress := fmt.Sprintf(MessageRolloutProgress, p.Moved, p.Total, revision, p.Ready, p.Failed)
	if p.Deferred > 0 {
		progress += fmt.Sprintf(MessageProgressDeferred, p.Deferred)
	}
	if waitsOnBusy(p) && (prev == nil || !waitsOnBusy(prev.plan)) {
		c.recorder.Eventf(profile, corev1.EventTypeNormal, EventReasonRolloutDeferred, MessageRolloutDeferred, progress, deferredUntil(p))
	}
	if p.Stuck && (prev == nil || !prev.plan.Stuck) {
		c.recorder.Eventf(profile, corev1.EventTypeWarning, EventReasonRolloutBlocked, MessageRolloutHeldUp, progress, blockedList(p.Blocked))
	}
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
	if next.inputs.Halted && (prev == nil || !prev.inputs.Halted) {
		c.recorder.Eventf(profile, corev1.EventTypeWarning, EventReasonInputsHalted, MessageInputsHalted,
			next.inputs.FailedSessions, next.policy)
	}
	for object, canary := range next.inputCanaries {
		if canary.failed != "" && (prev == nil || prev.inputCanaries[object].failed != canary.failed) {
			c.recorder.Eventf(profile, corev1.EventTypeWarning, EventReasonInputCanaryFailed, MessageInputCanaryFailed,
				canary.failed, object.kind, object.key)
		}
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
	case p.Phase == rollout.PhaseWaiting:
		c.recorder.Eventf(profile, corev1.EventTypeNormal, EventReasonRolloutWaiting, MessageRolloutWaiting,
			next.window, p.Resumes.UTC().Format(time.RFC3339), progress)
	case prevPhase == rollout.PhasePaused || prevPhase == rollout.PhaseWaiting:
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
