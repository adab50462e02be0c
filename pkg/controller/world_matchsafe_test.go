package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// Match-safe rollouts in the world. Half the sequences are match-safe,
// chosen from a random stream of their own so that the other half are
// exactly the sequences they were before match-safe rollouts existed (the
// regression seeds replay them both ways): their sessions turn busy and idle
// (the busy label, as a matchmaker sets it), their paced profiles' policies
// carry max-defer and maintenance windows, and their controller runs with a
// cluster-wide budget.
//
// What must hold, checked as the controller writes (checkMatchSafeMove):
//   - busy-moved: no session that the controller's cache shows busy is
//     moved to another revision of its profile before the window has been
//     open for max-defer (all the time, without a window), as the cached
//     policy sets them, since the content was first seen;
//   - window-moved: no move while the cached policy's window is closed;
//   - cluster-budget-exceeded: the sessions of all profiles that the
//     controller moved and whose Deployments have not since been complete,
//     failed, paused, moved elsewhere, deleted or set to be deleted (nor
//     their session) never number more than the budget's moving sessions;
//   - cluster-rate-exceeded: no more moves start within a minute than the
//     budget allows, across restarts and failovers: a restarted controller
//     rebuilds the starts of the last minute from its Deployments. Only
//     what it cannot see is forgotten at a restart: the moves of
//     Deployments deleted, or stripped of the managed-by label, since.
//
// And at rest (heldAtRest, checkRolloutsAtRest): a session that says it is
// busy is; a rollout that waits for busy sessions has some, and one that
// waits for its window has it closed.

// worldBudgets are the cluster-wide budgets of match-safe sequences:
// sessions moving at once, and moves per minute (0: no limit).
var worldBudgets = []struct{ moving, perMinute int }{{0, 0}, {1, 0}, {2, 0}, {0, 2}, {1, 3}}

// worldMaxDefers are the max-defer values of match-safe policies; "" leaves
// the annotation out.
var worldMaxDefers = []string{"", "never", "0s", "20s", "5m", "1 hour"}

// worldWindows are maintenance windows around the world's start, Sunday
// 2026-03-01 12:00 UTC: always open, opening a minute in, closing two
// minutes in, closed for the whole sequence, and one that does not parse.
var worldWindows = []string{"", "00:00-24:00", "12:01-13:00", "11:00-12:02 UTC", "Mon 03:00-04:00 Europe/Berlin", "12h-13h"}

// matchSafeOf decides whether a sequence is match-safe, from a stream of
// its own.
func matchSafeOf(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0xb05e)).IntN(2) == 0
}

// clusterMove is a move of a session's Deployment that holds a place in the
// cluster-wide budget: to a revision of its profile (hash), or to new data
// of its inputs (inputs, their pod-template annotations).
type clusterMove struct {
	uid    types.UID
	hash   string
	inputs string
	// live: a move onto content delivered live, which holds its place
	// until every pod applied it, or it failed (pruneLiveMoves).
	live bool
}

// matchSafeWorld is what the match-safe invariants remember.
type matchSafeWorld struct {
	on                   bool
	maxMoving, perMinute int
	// firstSeen is when the controller's cache first held each content of
	// each profile ("profile/hash"): max-defer counts from no earlier.
	firstSeen map[string]time.Time
	// clusterMoving are the moves delaying a place in the budget, by session.
	clusterMoving map[string]clusterMove
	// moveStarts are the moves started, by any controller process.
	moveStarts []moveStart
}

// moveStart is a move the controller started: when, and of which
// Deployment.
type moveStart struct {
	at  time.Time
	uid types.UID
}

func newMatchSafeWorld(on bool, rng *rand.Rand) matchSafeWorld {
	m := matchSafeWorld{on: on, firstSeen: map[string]time.Time{}, clusterMoving: map[string]clusterMove{}}
	if on {
		b := worldBudgets[rng.IntN(len(worldBudgets))]
		m.maxMoving, m.perMinute = b.moving, b.perMinute
	}
	return m
}

// ---- Users ----

// flipBusy turns a session busy or idle, as whoever starts matches does.
func (w *world) flipBusy() bool {
	s := w.liveSession()
	if s == nil {
		return false
	}
	busy := !isBusy(s)
	if busy {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[gamesv1.BusyLabel] = gamesv1.BusyLabelValue
	} else {
		delete(s.Labels, gamesv1.BusyLabel)
	}
	updated, err := w.server.update(byUser, sessionsResource, s, true)
	must(err)
	w.covered["busy flipped"]++
	w.logf("matchmaker: gamesession %s busy %t (rv %s)", s.Name, busy, updated.GetResourceVersion())
	return true
}

// addMatchSafePolicy adds a max-defer and a window to a paced profile's
// annotations, now and then.
func (w *world) addMatchSafePolicy(a map[string]string) {
	if !w.matchSafe.on {
		return
	}
	if v := pick(w, worldMaxDefers); v != "" {
		a[rollout.AnnotationMaxDefer] = v
	}
	if v := pick(w, worldWindows); v != "" && w.rng.IntN(2) == 0 {
		a[rollout.AnnotationWindow] = v
	}
}

// editMatchSafePolicy sets, changes or removes a profile's max-defer or
// window.
func (w *world) editMatchSafePolicy() bool {
	p := w.pacedProfile()
	if p == nil {
		return false
	}
	key, values := rollout.AnnotationMaxDefer, worldMaxDefers
	if w.rng.IntN(2) == 0 {
		key, values = rollout.AnnotationWindow, worldWindows
	}
	setOrDelete(p.Annotations, key, pick(w, values))
	w.updatePolicy(p)
	return true
}

// ---- What the world remembers ----

// noteContentSeen is told of each profile the controller's cache receives.
func (w *world) noteContentSeen(name string, p *corev1.ConfigMap) {
	if p == nil {
		return
	}
	key := name + "/" + ProfileHash(p)
	if _, ok := w.matchSafe.firstSeen[key]; !ok {
		w.matchSafe.firstSeen[key] = w.clock.Now()
	}
}

// noteBudgetChange is told of every server change: a move stops delaying its
// place once its Deployment is complete, failed, paused, moved elsewhere,
// being deleted, gone, orphaned or no longer labelled as the controller's,
// or its session is deleted. The controller can only learn of it
// later, through its cache.
func (w *world) noteBudgetChange(ch change) {
	name := nameOf(ch)
	m, ok := w.matchSafe.clusterMoving[name]
	if !ok {
		return
	}
	switch ch.resource {
	case sessionsResource:
		if ch.new == nil {
			delete(w.matchSafe.clusterMoving, name)
		}
	case deploymentsResource:
		var d *appsv1.Deployment
		if ch.new != nil {
			d = ch.new.(*appsv1.Deployment)
		}
		// Orphaned (its session deleted with propagation Orphan), or being
		// deleted (foreground propagation keeps it while its pods go), the
		// Deployment is no longer the session's move: the controller may not
		// write it, and lets its place go (settleMove).
		if m.live {
			if d == nil || d.UID != m.uid || metav1.GetControllerOf(d) == nil || d.DeletionTimestamp != nil || d.Spec.Paused ||
				!worldDeliversLive(d, name) || d.Labels[worldManagedByLabel] != worldManagedByValue {
				delete(w.matchSafe.clusterMoving, name)
			}
			return
		}
		if d == nil || d.UID != m.uid || metav1.GetControllerOf(d) == nil || d.DeletionTimestamp != nil || d.Spec.Paused || d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] != m.hash ||
			(m.inputs != "" && worldInputsRun(d) != m.inputs) ||
			deploymentComplete(d) || w.failedOnTarget(d) || d.Labels[worldManagedByLabel] != worldManagedByValue {
			delete(w.matchSafe.clusterMoving, name)
		}
	}
}

// ---- Checked as the controller writes ----

// checkMatchSafeMove is told of each move of a session's Deployment from
// one revision of its profile to another.
// liveChange is a move of content within live delivery, which restarts no
// game server; live, a move onto content delivered live.
func (w *world) checkMatchSafeMove(s *gamesv1.GameSession, d *appsv1.Deployment, profile, hash, what string, liveChange, live bool) {
	now := w.clock.Now()
	cached := w.caches[profilesResource].profile(profile)
	if cached != nil {
		policy := worldPolicy(cached)
		if isBusy(s) && liveChange && !policy.LiveDefersBusy {
			// Nothing restarts: a busy session takes it at once.
			w.covered["busy live move"]++
		} else if isBusy(s) {
			w.covered["busy moved"]++
			first, seen := w.matchSafe.firstSeen[profile+"/"+hash]
			// The rollout started no earlier than the content was seen,
			// not even by the second the ProfileRollout rounds it to.
			waits, _ := policy.Defers(first, now)
			if policy.MaxDefer == nil || (seen && waits) {
				w.violate("busy-moved", "Deployment %s %s onto revision %s while its session is busy, under max-defer %v (content first seen at %s)",
					d.Name, what, worldRevisionName(d.Namespace, profile, hash), policy.MaxDefer, first.Sub(w.start))
			}
		}
		if policy.Window != nil {
			w.covered["move in a window"]++
			if !policy.Window.Open(now) {
				w.violate("window-moved", "Deployment %s %s onto revision %s at %s, outside the window %s",
					d.Name, what, worldRevisionName(d.Namespace, profile, hash), now.Format(time.RFC3339), policy.Window)
			}
		}
	}
	w.checkClusterMove(s, d, clusterMove{uid: d.UID, hash: hash, live: live}, what)
}

// checkClusterMove is told of each move of a session's Deployment, of any
// kind: all count in the one cluster-wide budget and rate.
func (w *world) checkClusterMove(s *gamesv1.GameSession, d *appsv1.Deployment, m clusterMove, what string) {
	if !w.matchSafe.on {
		return
	}
	now := w.clock.Now()
	ms := &w.matchSafe
	ms.moveStarts = append(ms.moveStarts, moveStart{at: now, uid: d.UID})
	// A session deleted on the server, not yet in the cache, holds no
	// place: the controller hears of the delete and frees it, and the
	// garbage collector deletes its Deployment. Nor does a paused
	// Deployment, which restarts nothing until it is resumed.
	if live := w.server.session(s.Name); live != nil && live.UID == s.UID && !d.Spec.Paused {
		ms.clusterMoving[d.Name] = m
	}
	if ms.maxMoving > 0 {
		w.covered["cluster budget move"]++
		if m.inputs != "" {
			w.covered["cluster budget input move"]++
		}
		if len(ms.clusterMoving) == ms.maxMoving {
			w.covered["cluster budget filled"]++
		}
		if len(ms.clusterMoving) > ms.maxMoving {
			names := make([]string, 0, len(ms.clusterMoving))
			for name, m := range ms.clusterMoving {
				if m.inputs != "" {
					names = append(names, name+"→inputs")
				} else {
					names = append(names, name+"→"+m.hash)
				}
			}
			slices.Sort(names)
			w.violate("cluster-budget-exceeded", "Deployment %s %s: %d sessions moving (%s), the cluster-wide budget allows %d",
				d.Name, what, len(ms.clusterMoving), strings.Join(names, ", "), ms.maxMoving)
		}
	}
	if ms.perMinute > 0 {
		recent := 0
		for _, m := range ms.moveStarts {
			if now.Sub(m.at) < time.Minute {
				recent++
			}
		}
		if recent == ms.perMinute {
			w.covered["cluster rate filled"]++
		}
		if recent > ms.perMinute {
			var starts []string
			for _, m := range ms.moveStarts {
				if now.Sub(m.at) < time.Minute {
					starts = append(starts, fmt.Sprintf("%s at %.3fs", m.uid, m.at.Sub(w.start).Seconds()))
				}
			}
			w.violate("cluster-rate-exceeded", "Deployment %s %s: the %d. move within a minute (%s), the cluster-wide budget allows %d a minute",
				d.Name, what, recent, strings.Join(starts, ", "), ms.perMinute)
		}
	}
}

// scheduledHorizon is how far ahead settling looks for a window to open or
// close, or max-defer to pass: those within it are waited for, those beyond
// it are part of the rest.
const scheduledHorizon = 10 * time.Minute

// nextScheduledChange returns when, within the horizon, a window of a
// profile's policy opens or closes, or a rollout's max-defer passes, plus
// the second the controller waits beyond it.
func (w *world) nextScheduledChange() (time.Time, bool) {
	now := w.clock.Now()
	// The controller plans a second after each change: one that happened
	// within the last two seconds may not have been planned yet.
	const late = time.Second + time.Millisecond
	since := now.Add(-2 * time.Second)
	var next time.Time
	consider := func(change time.Time) {
		at := change.Add(late)
		if at.After(now) && at.Sub(now) <= scheduledHorizon && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	for _, p := range listAs[*corev1.ConfigMap](w.server.list(profilesResource)) {
		if window := worldPolicy(p).Window; window != nil {
			consider(window.NextOpen(since))
			consider(window.NextClose(since))
		}
		if r := w.rolloutOf(p); r != nil && r.Status.DeferredSessions > 0 && r.Status.DeferralEndTime != nil {
			consider(r.Status.DeferralEndTime.Time)
		}
	}
	return next, !next.IsZero()
}

// ---- Checked at rest ----

// busyAtRest checks a session at rest whose ProfileUpToDate says it is busy:
// the server shows it busy, and it runs a revision of its profile. It
// reports whether the condition says so.
func (w *world) busyAtRest(s *gamesv1.GameSession, upToDate *metav1.Condition) bool {
	if upToDate == nil || upToDate.Reason != gamesv1.ReasonSessionBusy {
		return false
	}
	w.covered["at rest busy"]++
	if !isBusy(s) {
		w.violate("condition-lie", "GameSession %s: ProfileUpToDate is %s at rest, but the session is not busy", s.Name, describeCondition(upToDate))
	}
	return true
}

// waitsOnBusyAtRest reports whether a ProfileRollout at rest waits for busy
// sessions, and checks that it has some.
func (w *world) waitsOnBusyAtRest(r *gamesv1.ProfileRollout) bool {
	c := meta.FindStatusCondition(r.Status.Conditions, gamesv1.ConditionComplete)
	if c == nil || c.Reason != gamesv1.ReasonSessionsDeferred {
		return false
	}
	busy := 0
	for _, m := range w.serverMembers(r.Name) {
		if w.live.on {
			// A session running live, of a live profile, takes live changes
			// at once, busy or not, unless the policy defers them.
			p := w.server.profile(r.Name)
			if hash, _ := contentOf(m.session, m.deployment, w.liveProfileOf(m.session.Name)); isBusy(m.session) &&
				(hash != r.Status.TargetHash || p != nil && !w.runsCurrent(m.session, p, m.deployment)) &&
				(p == nil || !worldDeliversLive(m.deployment, m.session.Name) || !wantsLive(p, m.deployment, m.session.Name) || worldPolicy(p).LiveDefersBusy) {
				busy++
			}
			continue
		}
		if isBusy(m.session) && !mountsRevision(m.deployment, r.Name, r.Status.TargetHash) {
			busy++
		}
	}
	if busy == 0 || int(r.Status.DeferredSessions) != busy {
		w.violate("rollout-lie", "ProfileRollout %s waits for %d busy sessions at rest; the server shows %d busy sessions not moved",
			r.Name, r.Status.DeferredSessions, busy)
	}
	return true
}

// windowClosedAtRest checks a ProfileRollout at rest in the Waiting phase:
// the profile's window is closed, and opens when the status says.
func (w *world) windowClosedAtRest(r *gamesv1.ProfileRollout, p *corev1.ConfigMap) {
	policy := worldPolicy(p)
	now := w.clock.Now()
	switch {
	case policy.Window == nil:
		w.violate("rollout-lie", "ProfileRollout %s waits for a window, but the policy %s has none", r.Name, describePolicy(p.Annotations))
	case policy.Window.Open(now):
		w.violate("rollout-lie", "ProfileRollout %s waits for its window at rest, but %s is open at %s", r.Name, policy.Window, now.Format(time.RFC3339))
	case r.Status.ResumeTime == nil || !r.Status.ResumeTime.Time.Equal(policy.Window.NextOpen(now)):
		w.violate("rollout-lie", "ProfileRollout %s says it resumes at %v; the window %s opens at %s", r.Name, r.Status.ResumeTime,
			policy.Window, policy.Window.NextOpen(now).Format(time.RFC3339))
	}
}

// forgetUnseenMoves forgets, at a restart, the moves a new controller
// cannot know of: those of Deployments no longer on the server, or no
// longer carrying the managed-by label that its cache filters on.
func (w *world) forgetUnseenMoves() {
	w.matchSafe.moveStarts = slices.DeleteFunc(w.matchSafe.moveStarts, func(m moveStart) bool {
		return !slices.ContainsFunc(w.server.deployments(), func(d *appsv1.Deployment) bool {
			return d.UID == m.uid && d.Labels[worldManagedByLabel] == worldManagedByValue
		})
	})
}

func describeBudget(m matchSafeWorld) string {
	if !m.on {
		return "off"
	}
	return fmt.Sprintf("on, cluster budget %d moving, %d a minute", m.maxMoving, m.perMinute)
}
