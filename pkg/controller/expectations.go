package controller

import (
	"maps"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// expectationTimeout bounds how long a sync waits for the cache to show the
// controller's own write. The watch event comes in milliseconds; the bound
// only matters if it is lost, and then the sync goes ahead as if it had come.
const expectationTimeout = 5 * time.Minute

// writeExpectations hold, per session, the Deployment generation that the
// controller's last write produced, until the cache shows it: the way the
// ReplicaSet controller waits for its own pod creations.
//
// The cache lags behind the controller's writes by a watch round trip. A sync
// in that window (the fan-out's status pass, a status event) would see the
// Deployment from before the write and patch it again: harmless, as the
// server finds nothing to change, but a request per session in a fan-out of
// thousands. Generations, unlike resourceVersions, may be compared, and the
// UID tells a recreated Deployment from the one written, so nothing else is
// kept: no copy of any object. A restart forgets the expectations, which costs
// at most one such idle patch per session.
type writeExpectations struct {
	clock clock.PassiveClock

	mu        sync.Mutex
	bySession map[string]expectation
	// liveBySession holds each session's last write of its live profile
	// (live.go) until the cache shows it.
	liveBySession map[string]liveWrite
}

// liveWrite is a write of a session's live profile: the resourceVersion it
// was made on, "" for a create. A ConfigMap has no generation, and
// resourceVersions may not be compared: the cache shows the write once it
// no longer shows the version the write replaced.
type liveWrite struct {
	from     string
	recorded time.Time
	// unanswered: the answer (a server error, a timeout) did not say
	// whether the write applied; only a live read tells.
	unanswered bool
}

type expectation struct {
	uid        types.UID
	generation int64
	recorded   time.Time
	// unconfirmedFrom, if set, is the resourceVersion the write was made
	// from, when its answer (a server error, a timeout) did not say whether
	// it applied: until the cache moves past that version, only a live read
	// tells (unconfirmed).
	unconfirmedFrom string
}

func newWriteExpectations(clk clock.PassiveClock) *writeExpectations {
	return &writeExpectations{clock: clk, bySession: make(map[string]expectation), liveBySession: make(map[string]liveWrite)}
}

// expect records that a write to the session's Deployment produced written.
func (e *writeExpectations) expect(sessionKey string, written *appsv1.Deployment) {
	e.expectGeneration(sessionKey, written.UID, written.Generation)
}

// expectGeneration records that a write to the session's Deployment of that
// UID produces that generation. A write that changes the spec records it
// before its request: the watch event of the write may come before its
// answer, and must be known for the controller's own (awaits).
func (e *writeExpectations) expectGeneration(sessionKey string, uid types.UID, generation int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bySession[sessionKey] = expectation{uid: uid, generation: generation, recorded: e.clock.Now()}
}

// withdraw drops the expectation of that UID and generation, if it is the
// session's: a write recorded before its request that failed, or changed
// nothing after all.
func (e *writeExpectations) withdraw(sessionKey string, uid types.UID, generation int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.bySession[sessionKey]; ok && exp.uid == uid && exp.generation == generation {
		delete(e.bySession, sessionKey)
	}
}

// unanswered keeps the expectation of a write whose answer did not say
// whether it applied, made from the Deployment at resourceVersion from. Were
// it withdrawn, a sync on the cache from before the write would take the
// Deployment for unmoved, and free the move's place in the ledger while the
// move may be running.
func (e *writeExpectations) unanswered(sessionKey string, uid types.UID, generation int64, from string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.bySession[sessionKey]; ok && exp.uid == uid && exp.generation == generation {
		exp.unconfirmedFrom = from
		e.bySession[sessionKey] = exp
	}
}

// unconfirmed reports whether the session's last write is one whose answer
// did not say whether it applied, and cached, the Deployment as the cache
// holds it, is still the one it was made from.
func (e *writeExpectations) unconfirmed(sessionKey string, cached *appsv1.Deployment) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.bySession[sessionKey]
	return ok && exp.unconfirmedFrom != "" && cached != nil && cached.UID == exp.uid &&
		cached.ResourceVersion == exp.unconfirmedFrom
}

// confirm settles an unconfirmed write by a live read of its Deployment (nil:
// none). Unchanged since the write was made from it, or replaced, the
// Deployment shows the write did not apply, and the expectation goes;
// otherwise the cache is behind the API server, and the sync waits for it to
// show the live generation.
func (e *writeExpectations) confirm(sessionKey string, live *appsv1.Deployment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.bySession[sessionKey]
	switch {
	case !ok || exp.unconfirmedFrom == "":
	case live == nil || live.UID != exp.uid || live.ResourceVersion == exp.unconfirmedFrom:
		delete(e.bySession, sessionKey)
	default:
		e.bySession[sessionKey] = expectation{uid: live.UID, generation: live.Generation, recorded: e.clock.Now()}
	}
}

// satisfied reports whether cached, the session's Deployment as the cache
// holds it (nil if none), shows the last write, and forgets the expectation
// once it does. A Deployment that was replaced satisfies it: there is
// nothing left to wait for. One the cache does not hold lets the sync go on
// (it reads the Deployment live), but the expectation stays: a Deployment
// written through a live read may yet reach the cache by an older version
// first, which must not pass for the state after the write (seed 99132069).
func (e *writeExpectations) satisfied(sessionKey string, cached *appsv1.Deployment) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.bySession[sessionKey]
	if !ok {
		return true
	}
	if cached == nil && e.clock.Since(exp.recorded) < expectationTimeout {
		return true
	}
	if exp.unconfirmedFrom != "" && cached != nil && cached.UID == exp.uid && cached.ResourceVersion != exp.unconfirmedFrom &&
		cached.Generation < exp.generation {
		// The cache moved past the version the write was made from, and
		// not by the write: had it applied, it would be the next version,
		// of the generation expected or later.
		delete(e.bySession, sessionKey)
		return true
	}
	if cached != nil && cached.UID == exp.uid && cached.Generation < exp.generation &&
		e.clock.Since(exp.recorded) < expectationTimeout {
		return false
	}
	delete(e.bySession, sessionKey)
	return true
}

// awaits reports whether d is the Deployment the session's last write
// produced, and the cache has not yet been seen to show it: the watch event
// of that write.
func (e *writeExpectations) awaits(sessionKey string, d *appsv1.Deployment) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.bySession[sessionKey]
	return ok && exp.uid == d.UID && exp.generation == d.Generation
}

// forget drops the session's expectations, for a deleted session.
func (e *writeExpectations) forget(sessionKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.bySession, sessionKey)
	delete(e.liveBySession, sessionKey)
}

// expectLive records a write of the session's live profile about to be
// made on resourceVersion from ("" for a create).
func (e *writeExpectations) expectLive(sessionKey, from string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.liveBySession[sessionKey] = liveWrite{from: from, recorded: e.clock.Now()}
}

// answeredLive settles the record of the live write made on from by its
// answer, written or err: a refusal, or a write that changed nothing, drops
// it; an answer that does not say whether it applied marks it for a live
// read (unansweredLive).
func (e *writeExpectations) answeredLive(sessionKey, from string, written *corev1.ConfigMap, err error) {
	if err == nil && (from == "" || written.ResourceVersion != from) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.liveBySession[sessionKey]
	switch {
	case !ok || w.from != from:
	case err != nil && mayHaveApplied(err):
		w.unanswered = true
		e.liveBySession[sessionKey] = w
	default:
		delete(e.liveBySession, sessionKey)
	}
}

// liveAwaited reports whether cached, the session's live profile as the
// cache shows it (nil for none), is still what its last write replaced:
// the event of that write is on its way.
func (e *writeExpectations) liveAwaited(sessionKey string, cached *corev1.ConfigMap) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.liveBySession[sessionKey]
	if !ok {
		return false
	}
	if e.clock.Since(w.recorded) >= expectationTimeout || !w.replaces(cached) {
		delete(e.liveBySession, sessionKey)
		return false
	}
	return true
}

// liveObserved is told of each event of the session's live profile, cm:
// one that brings another version than the one the last write was made on
// shows that write, or what came after it (the write was made on the
// version the cache showed, so every later event is of it or later).
func (e *writeExpectations) liveObserved(sessionKey string, cm *corev1.ConfigMap, deleted bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w, ok := e.liveBySession[sessionKey]; ok && (deleted || cm.ResourceVersion != w.from) {
		delete(e.liveBySession, sessionKey)
	}
}

// unansweredLive reports whether the session's last live write is one
// whose answer did not say whether it applied, and the cache still shows
// what it would have replaced.
func (e *writeExpectations) unansweredLive(sessionKey string, cached *corev1.ConfigMap) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.liveBySession[sessionKey]
	return ok && w.unanswered && w.replaces(cached)
}

// confirmLive settles an unanswered live write by a live read of the live
// profile (nil: none): still the version the write was made on, the write
// did not apply; else the cache is behind, and the write is awaited as
// any other.
func (e *writeExpectations) confirmLive(sessionKey string, live *corev1.ConfigMap) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.liveBySession[sessionKey]
	switch {
	case !ok || !w.unanswered:
	case w.replaces(live):
		delete(e.liveBySession, sessionKey)
	default:
		w.unanswered = false
		e.liveBySession[sessionKey] = w
	}
}

// replaces reports whether the write was made on cm, the live profile as
// something shows it (nil for none).
func (w liveWrite) replaces(cm *corev1.ConfigMap) bool {
	if w.from == "" {
		return cm == nil
	}
	return cm != nil && cm.ResourceVersion == w.from
}

// statusEchoes hold, per session, the status write whose watch event
// needs no sync: the event of a write that only reported, when a sync of
// the copy it produces would find nothing to do. In a fan-out that is one
// sync per session per edit fewer, a third of the controller's syncs.
//
// The write is recorded before its request, by the resourceVersion it was
// made on and the status it sends: the event may come before the answer. The
// event whose old copy has that resourceVersion is the write's own, as the
// write was conditioned on it, unless a relist skipped versions: so the new
// copy must also differ from the old in the status alone, and hold the status
// written. Anything else, or a sync of the session in between (which read the
// copy before the write), lets the event sync the session as any other.
// A restart forgets them: the next event of each syncs, as without them.
type statusEchoes struct {
	mu        sync.Mutex
	bySession map[string]*statusEcho
}

type statusEcho struct {
	uid types.UID
	// from is the resourceVersion the write was made on.
	from string
	// status is what was written, its times as the API server stores them.
	status *gamesv1.GameSessionStatus
	// planProfile is the profile whose plan the event asks for, "" if
	// none: the plan counts the session by the status the cache shows,
	// which the plan the write itself asked for may have come too early to
	// see.
	planProfile string
	// overtaken: a sync of the session began before the event, on the copy
	// from before the write, and may have decided on it.
	overtaken bool
}

func newStatusEchoes() *statusEchoes {
	return &statusEchoes{bySession: make(map[string]*statusEcho)}
}

// expect records the status write about to be made on session.
func (e *statusEchoes) expect(key string, session *gamesv1.GameSession, written *gamesv1.GameSessionStatus, planProfile string) {
	status := *written
	status.Conditions = inSeconds(written.Conditions)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bySession[key] = &statusEcho{uid: session.UID, from: session.ResourceVersion, status: &status, planProfile: planProfile}
}

// withdraw drops the record of the write made on resourceVersion from,
// which failed.
func (e *statusEchoes) withdraw(key, from string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if echo, ok := e.bySession[key]; ok && echo.from == from {
		delete(e.bySession, key)
	}
}

// syncing notes that a sync of the session begins: an event still to come
// must sync it again.
func (e *statusEchoes) syncing(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if echo, ok := e.bySession[key]; ok {
		echo.overtaken = true
	}
}

// echoed reports whether the update from old to updated is the watch event
// of the session's recorded status write, and needs no sync; if so, it
// returns the profile whose plan the write asks for. Any update made on the
// recorded copy ends the record.
func (e *statusEchoes) echoed(key string, old, updated *gamesv1.GameSession) (planProfile string, ok bool) {
	if old.ResourceVersion == updated.ResourceVersion {
		return "", false // a resync
	}
	e.mu.Lock()
	echo, recorded := e.bySession[key]
	if recorded && echo.from == old.ResourceVersion {
		delete(e.bySession, key)
	}
	e.mu.Unlock()
	if !recorded || echo.from != old.ResourceVersion || echo.overtaken || updated.UID != echo.uid ||
		!onlyStatusDiffers(old, updated) || !sameStatusInSeconds(&updated.Status, echo.status) {
		return "", false
	}
	return echo.planProfile, true
}

// forget drops the session's record, for a deleted session.
func (e *statusEchoes) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.bySession, key)
}

// onlyStatusDiffers reports whether updated differs from old in nothing a
// session's sync reads but its status: the spec (by generation, which the
// status subresource leaves alone) and the metadata.
func onlyStatusDiffers(old, updated *gamesv1.GameSession) bool {
	return old.Generation == updated.Generation &&
		old.DeletionTimestamp.Equal(updated.DeletionTimestamp) &&
		maps.Equal(old.Labels, updated.Labels) &&
		maps.Equal(old.Annotations, updated.Annotations) &&
		slices.Equal(old.Finalizers, updated.Finalizers) &&
		equality.Semantic.DeepEqual(old.OwnerReferences, updated.OwnerReferences)
}

// sameStatusInSeconds reports whether observed is written, its times
// compared as the API server stores them: in whole seconds.
func sameStatusInSeconds(observed, written *gamesv1.GameSessionStatus) bool {
	inStore := *observed
	inStore.Conditions = inSeconds(observed.Conditions)
	return equality.Semantic.DeepEqual(&inStore, written)
}

// inSeconds is a copy of conditions with their times as serialized.
func inSeconds(conditions []metav1.Condition) []metav1.Condition {
	out := slices.Clone(conditions)
	for i := range out {
		out[i].LastTransitionTime = out[i].LastTransitionTime.Rfc3339Copy()
	}
	return out
}
