package controller

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// The write ledger checks that no Deployment is written more than once per
// change. Each change of a Deployment's desired state that the controller
// learns of gives that Deployment (by name) credit; a controller write that
// changes the Deployment spends it, and a write without any is a violation.
// The changes are:
//   - a GameSession appearing, or its spec changing (a new generation);
//   - its profile appearing (created, or labelled), or its data changing;
//   - someone else changing a Deployment field the controller owns, or
//     deleting the Deployment;
//   - the data of a labelled input the session reads changing, or the input
//     coming or going (world_inputs_test.go): one write that changes the
//     Deployment's input annotations, whatever number of kinds it carries.
//
// Deployments mount a revision of their profile's content, which the
// profile sync creates. Until the revision of the current content is in the
// controller's revision cache, a session keeps the revision it runs, and
// applies only a change of its own spec. So a write may bring a Deployment
// all the way to its desired state (a move: it then mounts the revision of
// the content the controller's profile cache shows), or leave the move for a
// second write once the revision has arrived. Credit comes in two kinds:
// spec credits (credits), which any write spends, and owed moves (moves),
// which only a move spends. A profile's data change owes a move; a profile
// appearing owes a move and gives a spec credit too, as the session's spec
// waited for the profile. A write that is not a move needs a spec credit; a
// move needs credit of either kind. Revision creates and deletes are not
// Deployment writes.
//
// The controller learns of a change when its cache receives it, not when it
// happens on the server; sooner for a Deployment it reads live (a GET, or a
// Create, whose answer says whether the name is free); and at a restart, when
// the new caches start from the server. A profile edit counts once the
// profile-change delay after the first edit of its burst is over: later edits
// within the delay join the burst, since a burst must roll each session once.
// Writes the server finds change nothing are not writes. A sync that succeeds
// without writing the Deployment, while the cache already shows the
// controller's own writes, has found it in order with everything it knew: its
// credits lapse. (Before the cache shows them, its live profile's included,
// a sync may rightly wait; and a
// sync that found the current revision missing from its cache has not found
// the Deployment in order: it waits for the revision, whose arrival queues it
// again; nor have the syncs after a live read that, following a write
// answered 500, found the Deployment newer than the cache: they wait for
// the cache to show it (cacheBehindLiveRead).
// Nor has a sync that leaves the session saying it waits for its
// rollout's turn, a plan, its revision or room in the cluster-wide budget
// (waitsForRollout): its turn, not a change, brings the move, and the budget
// wakes it with its place kept. What the sync says is the status it wrote, or
// if none, its cache's copy, which it found still true; not the server's,
// which may be another sync's write the cache has yet to show. A rotation of
// its inputs says nothing while it waits (rotationWaits): a sync that leaves
// one due turns its credit into an owed input move, as a change of the
// inputs themselves gives; a spec change that brings the session back to a
// template its Deployment runs, but with its inputs' new data, is such a
// rotation.)

// Live profiles (world_live_test.go) have a share of the ledger of their
// own: each change that credits a session's Deployment owes its live
// profile a write too, as the write may carry new content; a change of a
// live session's content that leaves it live owes its live profile a write
// and not its Deployment (creditContent), since its pod template does not
// change with the content; a switch of its profile's delivery owes a
// Deployment write, a move (noteLiveDelivered).

func (w *world) credit(name string) {
	w.credits[name]++
	if w.live.on {
		w.live.owed[name]++
	}
}

// creditMove owes Deployment name a move to its profile's current revision.
func (w *world) creditMove(name string) {
	w.moves[name]++
	if w.live.on {
		w.live.owed[name]++
	}
}

// spendCredits is told of each controller write that changed a Deployment.
func (w *world) spendCredits(after *appsv1.Deployment) {
	w.matureBursts()
	name := after.Name
	move := w.isMove(after)
	if w.credits[name] == 0 && (!move || w.moves[name] == 0) {
		held := ""
		for _, profile := range slices.Sorted(maps.Keys(w.bursts)) {
			if b := w.bursts[profile]; b.sessions[name] {
				held = fmt.Sprintf(" (an edit of profile %s is held back until %.3fs)", profile, b.due.Sub(w.start).Seconds())
			}
		}
		what := "written"
		if !move && w.moves[name] > 0 {
			what = fmt.Sprintf("written without moving to its profile's current revision (a move is owed, but it mounts %q)", mountedConfigMap(after))
		}
		w.violate("duplicate-write", "Deployment %s %s (rv %s) with no change of its desired state delivered to the controller "+
			"since its last write of it, or since a sync found it in order%s", name, what, after.ResourceVersion, held)
	}
	w.credits[name] = 0
	if w.rotationDue(name, after) {
		// Written without the rotation its inputs are due (it waits for
		// its canary, its turn, a place): that wait's end, not a change,
		// brings the write that takes it (seed 43214).
		w.inputMoves[name] = max(w.inputMoves[name], 1)
	}
	if move {
		w.moves[name] = 0
	} else if w.pacedInCache(name) {
		// Written elsewhere than its profile's current content by a paced
		// rollout: it owes the move its turn will bring.
		w.moves[name] = max(w.moves[name], 1)
	}
}

// pacedInCache reports whether the session's profile, as the controller's
// cache shows it, has a policy that paces its rollout, and the session's
// Deployment, as the cache shows it, is not on the current content: its
// move waits for its turn, not for a change.
func (w *world) pacedInCache(name string) bool {
	s := w.caches[sessionsResource].session(name)
	if s == nil {
		return false
	}
	p := w.cachedProfileOf(s)
	return p != nil && !worldPolicy(p).Unpaced()
}

// isMove reports whether a controller write left the Deployment mounting
// the revision of its session's profile content, as the controller's caches
// show them; or, if the profile asks for live delivery, mounting the
// session's live profile, whose content is the live profile's business.
func (w *world) isMove(after *appsv1.Deployment) bool {
	s := w.caches[sessionsResource].session(after.Name)
	if s == nil {
		return true
	}
	p := w.cachedProfileOf(s)
	if p != nil && w.live.on && wantsLive(p, after, after.Name) {
		return worldDeliversLive(after, after.Name)
	}
	return p == nil || mountsRevision(after, p.Name, ProfileHash(p))
}

// heldForRevision reports whether the sync of a session key, about to run,
// finds that its Deployment does not run its profile's current revision,
// and that the revision cache lacks that revision, or still shows one the
// controller deleted (which it will not mount before it has created it
// again): the sync then writes at most the session's spec, keeping the
// revision the Deployment runs, and the revision's arrival queues the
// session again. With its profile missing, a session's sync is held when the
// revision its Deployment runs is missing so: it then leaves the Deployment
// exactly as it is, and that revision's arrival queues it again.
func (w *world) heldForRevision(key string) bool {
	name := worldNameOfKey(key)
	s := w.caches[sessionsResource].session(name)
	if s == nil || s.DeletionTimestamp != nil {
		return false
	}
	d := w.caches[deploymentsResource].deployment(name)
	if d != nil && (d.DeletionTimestamp != nil || !controlledBy(d, s.UID)) {
		return false // blocked: the sync does not get as far as the revision
	}
	p := w.cachedProfileOf(s)
	if p == nil {
		// Without its profile, the session's spec is applied only with the
		// revision its Deployment runs in the cache (decideWithoutProfile).
		if d == nil {
			return false
		}
		if w.live.on && worldDeliversLive(d, name) {
			// A live one's, with its live profile in the cache: its
			// arrival queues the session again.
			held, _ := contentOf(s, d, w.cachedLiveProfileOf(name))
			return held == ""
		}
		running := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
		return running != "" && mountsRevision(d, s.Spec.ProfileRef, running) &&
			w.revisionMissingFromCache(worldRevisionName(s.Namespace, s.Spec.ProfileRef, running))
	}
	hash := ProfileHash(p)
	if mountsRevision(d, p.Name, hash) {
		return false
	}
	if w.live.on && worldDeliversLive(d, name) && wantsLive(p, d, name) {
		// A live session on the current content goes no further.
		if held, _ := contentOf(s, d, w.cachedLiveProfileOf(name)); held == hash {
			return false
		}
	}
	return w.revisionMissingFromCache(worldRevisionName(s.Namespace, p.Name, hash))
}

// revisionMissingFromCache reports whether the revision cache lacks the
// revision of that name, or still shows one the controller deleted.
func (w *world) revisionMissingFromCache(revision string) bool {
	cached := w.caches[revisionsResource].revision(revision)
	deleted, lately := w.deletedLately[revision]
	return cached == nil || (lately && cached.UID == deleted)
}

// cacheBehindLiveRead reports whether the controller read Deployment name
// live after a write of it was answered 500, found it newer than its cache,
// and the cache has not shown that version yet: its syncs may rightly wait.
func (w *world) cacheBehindLiveRead(name string) bool {
	want, ok := w.awaitsCache[name]
	if !ok {
		return false
	}
	d := w.caches[deploymentsResource].deployment(name)
	if d == nil || resourceVersionAtLeast(d.ResourceVersion, want) {
		delete(w.awaitsCache, name)
		return false
	}
	return true
}

// resourceVersionAtLeast compares the world's resourceVersions, which are
// counters.
func resourceVersionAtLeast(rv, than string) bool {
	a, errA := strconv.ParseInt(rv, 10, 64)
	b, errB := strconv.ParseInt(than, 10, 64)
	return errA == nil && errB == nil && a >= b
}

// lapseCredits is told of each sync that succeeded without writing the
// Deployment, and found it in order.
func (w *world) lapseCredits(name string) {
	pending := w.caches[deploymentsResource].pending
	for _, ev := range pending {
		if ev.change.author == byController && ev.obj.GetName() == name {
			return
		}
	}
	for _, ev := range w.caches[liveProfilesResource].pending {
		// Nor its live profile's: the sync waits for that too.
		if ev.change.author == byController && ev.obj.GetName() == worldLiveProfileName(name) {
			return
		}
	}
	if w.credits[name] > 0 && w.rotationWaits(name) {
		// What it was owed is a rotation, which waits for its place or
		// turn: that, not a change, brings the write.
		w.inputMoves[name] = max(w.inputMoves[name], 1)
	}
	w.credits[name] = 0
	if d := w.caches[deploymentsResource].deployment(name); d == nil || !w.pacedInCache(name) || w.isMove(d) {
		w.moves[name] = 0
	}
	if w.live.on {
		w.lapseLive(name)
	}
	// What a live read showed is gone with the sync that made it: the
	// controller learns it again when its cache receives it.
	for i := range pending {
		if pending[i].obj.GetName() == name {
			pending[i].known = false
		}
	}
}

// noteDelivered is told of each event an informer cache hands the controller.
func (w *world) noteDelivered(r apiResource, ev watchEvent, prev object) {
	w.matureBursts()
	if w.live.on {
		w.noteLiveDelivered(r, ev, prev)
	}
	switch r {
	case sessionsResource:
		if ev.kind != watch.Deleted && (prev == nil || prev.GetUID() != ev.obj.GetUID() || prev.GetGeneration() != ev.obj.GetGeneration()) {
			w.credit(ev.obj.GetName())
		}
		// What the controller's cache shows of a profileRef sets the
		// session back as the server's change does: a cache that hands over
		// pf-y, pf-x, pf-y, all edited before the first, is three moves.
		if ev.kind != watch.Deleted && (prev == nil || prev.GetUID() != ev.obj.GetUID() ||
			prev.(*gamesv1.GameSession).Spec.ProfileRef != ev.obj.(*gamesv1.GameSession).Spec.ProfileRef) {
			w.refEpoch[ev.obj.GetName()]++
		}
		// A session that changes profiles moves to the new profile's
		// revision, which may take a second write once that revision is in
		// the cache, as a profile appearing does.
		if ev.kind != watch.Deleted && prev != nil && prev.GetUID() == ev.obj.GetUID() &&
			prev.(*gamesv1.GameSession).Spec.ProfileRef != ev.obj.(*gamesv1.GameSession).Spec.ProfileRef {
			w.creditMove(ev.obj.GetName())
		}
	case profilesResource:
		name := ev.obj.GetName()
		if ev.kind == watch.Deleted {
			w.noteProfileSeen(name, nil)
		} else {
			w.noteProfileSeen(name, ev.obj.(*corev1.ConfigMap))
		}
		switch {
		case ev.kind == watch.Deleted:
			// The controller forgets a deleted profile's delay: whatever it
			// held back is not held any more.
			if b := w.bursts[name]; b != nil {
				w.creditContent(b.sessions)
				delete(w.bursts, name)
			}
		case prev != nil && ProfileHash(prev.(*corev1.ConfigMap)) != ProfileHash(ev.obj.(*corev1.ConfigMap)):
			// Also a profile deleted and recreated while a relist replaced
			// its events: the informer hands that over as an update too,
			// and the controller holds it back like any edit.
			w.profileEdited(name)
		case prev == nil || prev.GetUID() != ev.obj.GetUID():
			w.creditAppeared(w.cachedSessionsOf(name))
		}
		// The policy's progress deadline is a setting of the sessions'
		// Deployments: a change of it is one of their desired state.
		if prev != nil && ev.kind != watch.Deleted && policyDeadline(prev) != policyDeadline(ev.obj) {
			for session := range w.cachedSessionsOf(name) {
				w.credit(session)
			}
		}
	case deploymentsResource:
		if !ev.known && ev.change.author != byController && ownedFieldsChanged(ev.change) {
			w.credit(ev.obj.GetName())
		}
	case secretsResource, sessionConfigsResource:
		w.noteInputDelivered(inputOf(r), ev, prev)
	case grantsResource:
		// A grant made is the platform's profile appearing to the sessions
		// that use it; one revoked may let a spec change through that
		// waited for the revision.
		granted := w.grantedInCache()
		if granted != w.cacheGranted {
			for name := range w.cachedSessionsOf(worldPlatformProfile) {
				if worldNamespaceOf(name) == worldPlatformNamespace {
					continue // the platform's own need no grant
				}
				if granted {
					w.creditAppeared(map[string]bool{name: true})
				} else {
					w.credit(name)
				}
			}
		}
		w.cacheGranted = granted
	case liveProfilesResource, podsResource:
	case revisionsResource:
		// A session whose profile is missing applies its spec only while
		// the revision its Deployment mounts exists: the revision's
		// arrival lets a spec change that waited through.
		if ev.kind == watch.Added {
			for _, s := range w.server.sessions() {
				d := w.caches[deploymentsResource].deployment(s.Name)
				if d != nil && w.cachedProfileOf(s) == nil && mountedConfigMap(d) == ev.obj.GetName() {
					w.credit(s.Name)
				}
			}
		}
	}
}

// noteLiveRead is told of the controller's GET or Create of a Deployment: it
// learns at once what its cache has yet to receive.
func (w *world) noteLiveRead(name string) {
	learnt := false
	pending := w.caches[deploymentsResource].pending
	for i := range pending {
		ev := &pending[i]
		if ev.obj.GetName() == name && !ev.known && ev.change.author != byController && ownedFieldsChanged(ev.change) {
			ev.known, learnt = true, true
		}
	}
	if learnt {
		w.credit(name)
	}
}

// noteUnseen is told of the Deployment changes that no cache of the
// controller receives (they happen outside the label selector): the
// controller can still learn of them by a live read after AlreadyExists.
func (w *world) noteUnseen(ch change) {
	if ch.resource == deploymentsResource && ch.author != byController && ownedFieldsChanged(ch) {
		w.credit(nameOf(ch))
	}
}

// profileBurst is a profile's data edits within one profile-change delay,
// and the sessions that referenced the profile meanwhile.
type profileBurst struct {
	due      time.Time
	sessions map[string]bool
}

func (w *world) profileEdited(profile string) {
	sessions := w.cachedSessionsOf(profile)
	if w.live.on {
		// A session without a Deployment in the cache is created with the
		// current content at once, its live profile first.
		for name := range sessions {
			if w.caches[deploymentsResource].deployment(name) == nil {
				w.live.owed[name]++
			}
		}
	}
	if w.profileChangeDelay <= 0 {
		w.creditContent(sessions)
		return
	}
	b := w.bursts[profile]
	if b == nil {
		b = &profileBurst{due: w.clock.Now().Add(w.profileChangeDelay), sessions: map[string]bool{}}
		w.bursts[profile] = b
	}
	for name := range sessions {
		b.sessions[name] = true
	}
}

// matureBursts credits the sessions of the bursts whose delay is over.
// A session that took up the profile during the delay is held back with the
// others, so it is credited too.
func (w *world) matureBursts() {
	now := w.clock.Now()
	for profile, b := range w.bursts {
		if !now.Before(b.due) {
			w.creditContent(b.sessions)
			w.creditContent(w.cachedSessionsOf(profile))
			delete(w.bursts, profile)
		}
	}
}

// creditAppeared credits the sessions of a profile that appeared: their
// spec waited for it, and they move to its revision.
func (w *world) creditAppeared(sessions map[string]bool) {
	for name := range sessions {
		w.credit(name)
		w.creditMove(name)
	}
}

func (w *world) cachedSessionsOf(profile string) map[string]bool {
	names := map[string]bool{}
	for _, obj := range w.caches[sessionsResource].indexer.List() {
		if s := obj.(*gamesv1.GameSession); uses(s, profile) {
			names[s.Name] = true
		}
	}
	return names
}

// creditRestart is told of a controller restart: what its caches had not
// yet received, and the profile edits it held back, the new controller sees at
// once, and may carry in one write per Deployment.
func (w *world) creditRestart() {
	for _, c := range w.caches {
		w.creditMissed(c.pending)
	}
	for profile, b := range w.bursts {
		w.creditContent(b.sessions)
		delete(w.bursts, profile)
	}
}

// creditMissed is told of events a cache will never deliver, as a relist or a
// restart replaces them by what it lists.
func (w *world) creditMissed(events []watchEvent) {
	names, appeared := map[string]bool{}, map[string]bool{}
	for _, ev := range events {
		switch ev.change.resource {
		case revisionsResource, podsResource:
			// Not a change of any Deployment's desired state.
		case liveProfilesResource:
			// A live profile another changed, delivered anew.
			if session, ok := strings.CutSuffix(ev.obj.GetName(), worldLiveSuffix); ok && ev.change.author != byController {
				w.live.owed[session]++
			}
		case profilesResource:
			for _, s := range w.server.sessions() {
				if uses(s, ev.obj.GetName()) {
					appeared[s.Name] = true
				}
			}
		case grantsResource:
			for _, s := range w.server.sessions() {
				if crossNamespace(s) {
					appeared[s.Name] = true
				}
			}
		case secretsResource, sessionConfigsResource:
			for _, s := range w.server.sessions() {
				w.oweInputMove(inputOf(ev.change.resource), ev.obj.GetName(), s)
			}
		default:
			names[ev.obj.GetName()] = true
		}
	}
	for name := range names {
		w.credit(name)
	}
	w.creditAppeared(appeared)
}

// ownedFieldsChanged reports whether a Deployment write changed a field the
// controller owns, or created or deleted the Deployment.
func ownedFieldsChanged(ch change) bool {
	if ch.old == nil || ch.new == nil {
		return true
	}
	// The whole spec is the session's but paused.
	o, n := ch.old.(*appsv1.Deployment), ch.new.(*appsv1.Deployment)
	os, ns := o.Spec, n.Spec
	os.Paused, ns.Paused = false, false
	return !equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(os, ns)
}

func nameOf(ch change) string {
	if ch.new != nil {
		return ch.new.GetName()
	}
	return ch.old.GetName()
}

// policyDeadline is the progress deadline a profile's policy gives the
// Deployments of its sessions: "" where a policy that does not parse leaves
// them as they are.
func policyDeadline(profile object) string {
	p, err := rollout.PolicyFor(profile.GetAnnotations(), rollout.DefaultPolicy())
	if err != nil {
		return ""
	}
	return fmt.Sprint(ptr.Deref(p.ProgressDeadlineSeconds, defaultProgressDeadlineSeconds))
}
