package controller

import (
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
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
}

type expectation struct {
	uid        types.UID
	generation int64
	recorded   time.Time
}

func newWriteExpectations(clk clock.PassiveClock) *writeExpectations {
	return &writeExpectations{clock: clk, bySession: make(map[string]expectation)}
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

// forget drops the session's expectation, for a deleted session.
func (e *writeExpectations) forget(sessionKey string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.bySession, sessionKey)
}
