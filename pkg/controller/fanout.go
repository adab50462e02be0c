package controller

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// profileFanOut turns a change of a profile's data into syncs of exactly the
// sessions that reference it, and shapes those syncs in two ways:
//
//   - The delay. Profile edits come in bursts (a script writing key by key, an
//     apply of several files), and every rollout restarts game servers. The
//     sessions of a changed profile are queued after ProfileChangeDelay, and
//     edits within that window join the rollout already scheduled, so a burst
//     rolls each session once, with the latest data.
//   - Deployments before statuses. A rollout is two writes per session: the
//     Deployment, which is what rolls the game servers, and the status, which
//     reports it. Made in turn by each sync, the last Deployment of a
//     7,340-session fan-out would wait behind 14,679 writes. A session that
//     the fan-out queued writes its Deployment and goes back to the end of the
//     queue, where its next sync writes the status: the same writes, but every
//     game server gets its new profile first.
//
// It holds no timers and no goroutines: delayed work waits in the controller's
// queue (AddAfter), which stops with the controller, and time comes from an
// injected clock, so tests step it instead of sleeping. What it remembers is
// an optimisation of when syncs run, never an input to what they write: a
// restarted controller that has lost it rolls the same sessions to the same
// state, only without the delay and the ordering.
type profileFanOut struct {
	clock clock.PassiveClock
	delay time.Duration
	// sessionsOf returns the keys of the sessions referencing a profile.
	sessionsOf func(profileKey string) []string
	// enqueueAfter adds a session key to the controller's queue after a delay.
	enqueueAfter func(sessionKey string, delay time.Duration)

	mu sync.Mutex
	// delaying maps a profile ("namespace/name") to the end of its delay.
	delaying map[string]time.Time
	// rolling holds the sessions queued by a fan-out that have not synced since.
	rolling map[string]struct{}
}

func newProfileFanOut(clk clock.PassiveClock, delay time.Duration,
	sessionsOf func(profileKey string) []string, enqueueAfter func(sessionKey string, delay time.Duration)) *profileFanOut {
	return &profileFanOut{
		clock:        clk,
		delay:        delay,
		sessionsOf:   sessionsOf,
		enqueueAfter: enqueueAfter,
		delaying:     make(map[string]time.Time),
		rolling:      make(map[string]struct{}),
	}
}

// profileChanged starts the rollout of a change of a profile's data: its
// sessions are queued for the end of the delay. It returns how many sessions
// the profile has and false if the change joined a rollout already waiting
// out its delay.
//
// The sessions mount the revision of the new data, which the profile sync
// creates: until the revision is in the cache (revisionReady false), they
// are not queued, and revisionCreated queues them when it arrives. A sync
// before that would find nothing to mount.
//
// A joined change queues the profile's sessions again, for the end of the
// delay. Most are queued already and the queue keeps one of each, but a
// session that synced during the delay for a reason of its own (a spec edit,
// which is not held back) rolled the data of the first change, and a session
// that has just started to reference the profile was not queued at all:
// without this, both would keep data older than the latest edit.
func (f *profileFanOut) profileChanged(profileKey string, revisionReady bool) (sessions int, started bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	delay, started := f.delay, true
	if f.delayingLocked(profileKey, now) {
		delay, started = f.delaying[profileKey].Sub(now), false
	} else if f.delay > 0 {
		f.delaying[profileKey] = now.Add(f.delay)
	}
	if !revisionReady {
		return len(f.sessionsOf(profileKey)), started
	}
	return f.queueLocked(profileKey, delay), started
}

// revisionCreated queues the sessions of a profile whose new revision has
// reached the cache, for what is left of the delay.
func (f *profileFanOut) revisionCreated(profileKey string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	var delay time.Duration
	if f.delayingLocked(profileKey, now) {
		delay = f.delaying[profileKey].Sub(now)
	}
	f.queueLocked(profileKey, delay)
}

func (f *profileFanOut) queueLocked(profileKey string, delay time.Duration) int {
	keys := f.sessionsOf(profileKey)
	// Marked before they are queued, so no worker can sync one unmarked.
	for _, key := range keys {
		f.rolling[key] = struct{}{}
	}
	for _, key := range keys {
		f.enqueueAfter(key, delay)
	}
	return len(keys)
}

// delays reports whether a change of the profile is waiting out its delay.
// Until it is over, a session of the profile that syncs for another reason (a
// Deployment status change, a resync) must not roll the new data ahead of the
// fan-out, or a burst of edits would roll every busy session once per edit.
// It returns how long the delay has still to run.
func (f *profileFanOut) delays(profileKey string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	if !f.delayingLocked(profileKey, now) {
		return 0, false
	}
	return f.delaying[profileKey].Sub(now), true
}

func (f *profileFanOut) delayingLocked(profileKey string, now time.Time) bool {
	until, ok := f.delaying[profileKey]
	if ok && !now.Before(until) {
		delete(f.delaying, profileKey)
		ok = false
	}
	return ok
}

// takeRolling reports whether the session was queued by a fan-out and has
// not synced since, and forgets it. Each sync takes it first, so that only the
// first sync after a fan-out puts its status write behind the other sessions'
// Deployments, and a deleted session leaves nothing behind.
func (f *profileFanOut) takeRolling(sessionKey string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.rolling[sessionKey]
	delete(f.rolling, sessionKey)
	return ok
}

// forgetProfile drops the delay of a deleted profile.
func (f *profileFanOut) forgetProfile(profileKey string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.delaying, profileKey)
}
