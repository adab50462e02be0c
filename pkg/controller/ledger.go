package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// moveLedger is the one record of the moves that restart running game
// servers, of every kind: a session's Deployment moved to another revision
// of its profile (a profileMove), or to new data of the Secrets and
// ConfigMaps its pod template reads (an inputMove). It holds two limits:
//
//   - the cluster's, over all profiles and kinds together: at most maxMoving
//     sessions moved and not yet Ready (or failed) at once, and at most
//     perMinute moves started in any minute, so that one GitOps sync editing
//     fifty profiles, or a rotation of a Secret shared by every session,
//     cannot restart every game server at once;
//   - each paced profile's max-rolling, over both kinds together: at most
//     max-rolling of its sessions moved and not yet Ready. The profile's
//     rollout plan (turn.go) picks which sessions move to new content and
//     when (the canary, busy sessions, windows); the ledger counts them
//     with the moves for new inputs, so that a rotation and a rollout of
//     the profile never restart more game servers than max-rolling
//     between them. Each kind's failures (ProgressDeadlineExceeded) hold
//     back that kind only, as its brake, and free their cluster place: a
//     failed move to new content holds its place in its plan, which counts
//     it among those rolling; a failed input move keeps its place here,
//     against other input moves, so that a rotation that breaks game
//     servers stops after max-rolling of them. Held against the other kind
//     too, a failure of a session the other kind does not move first (its
//     canary, fixed by name) would hold that kind for good.
//
// A new session's first Deployment, or a change of a session's own spec,
// restarts no running match and is not a move. A write that changes the
// template anyway takes a pending input change along, as one move.
//
// Refused sessions wait: for the cluster's limits in their namespace's
// queue (fairQueue: the limits are shared fairly by namespace), where a
// release or a freed minute wakes as many as there is room for, each of the
// namespace holding the fewest places, and keeps their places until their
// next sync; for a profile's max-rolling all
// together, queued again when one of its places frees. Waiting costs no
// polling.
//
// A restart or a failover loses the ledger; seedLedger rebuilds it from the
// caches: every Deployment still rolling counts as moving, in the cluster
// and in its profile's places, and the moves started within the last minute
// are read from the Deployments' gamesv1.MoveStartsAnnotation, written with
// each move.
type moveLedger struct {
	clock     clock.PassiveClock
	maxMoving int // 0: no limit
	perMinute int // 0: no limit

	mu sync.Mutex
	// moves maps a session key to its move.
	moves map[string]move
	// clusterMoving counts the moves that have a cluster place (not stalled);
	// profileMoving counts the moves that have a place of each profile's
	// max-rolling, stalled or not.
	clusterMoving int
	profileMoving map[string]int
	// nsMoving, nsKept and nsStarted count by namespace the cluster
	// places held, kept for woken sessions, and the moves started within
	// the last minute: what the fair queue serves the namespaces by.
	nsMoving, nsKept, nsStarted map[string]int
	// starts are the moves started within the last minute, oldest first.
	starts []moveStarted
	// The cluster's limits are shared by namespace (fairQueue): the
	// sessions they refused wait in their namespace's queue, and a place
	// that frees goes to the namespace that holds the fewest.
	clusterQueue fairQueue
	// reserved are the woken sessions, each with a place kept for it until
	// its next sync: one that syncs for another reason must not take it.
	reserved map[string]bool
	// wokenLater is the woken session whose place the budget per minute
	// frees only later (wakeLocked): one at a time.
	wokenLater string
	// profileWaiting are the sessions a profile's max-rolling refused.
	profileWaiting map[string][]string
	// inputsStalled counts each profile's failed input moves, for the
	// max-failed of its input moves (a failed move to new content counts in
	// its plan's).
	inputsStalled map[string]int
	// inputsMoving counts each profile's input moves, failed ones included,
	// for its ProfileRollout: its plan reads them without walking the moves.
	inputsMoving map[string]int
}

// moveKind is what a move changes in a session's pod template.
type moveKind int

const (
	// profileMove: the profile revision the pods mount.
	profileMove moveKind = iota
	// inputMove: the data of the Secrets and ConfigMaps the pods read.
	inputMove
	// seededMove: found rolling when the controller started; which kind
	// cannot be told.
	seededMove
)

func (k moveKind) String() string {
	switch k {
	case profileMove:
		return "profile"
	case inputMove:
		return "inputs"
	}
	return "found rolling"
}

// move is one session's move in the ledger.
type move struct {
	kind moveKind
	// to is what the Deployment moves to: the revision's hash for a profile
	// move or a seeded one, the inputSets.key for an input move.
	to string
	// live: the content moved to is delivered live. A switch of delivery
	// with the same content is another move: it restarts the game servers.
	live bool
	// profile is the key of the profile whose max-rolling the move counts
	// in; "" for none (an unpaced policy).
	profile string
	// stalled marks an input move whose Deployment failed: it keeps its
	// profile place and frees its cluster place.
	stalled bool
	// named is the key of the profile the session names, paced or not: its
	// ProfileRollout counts the session while it waits for the cluster's
	// limits.
	named string
}

// moveStarted is a move started within the last minute, and the namespace
// of its session.
type moveStarted struct {
	at        time.Time
	namespace string
	// key is the session's; "" for a start found recorded at the start.
	key string
}

// hasProfilePlace reports whether the move takes one of its profile's
// max-rolling places.
func (m move) hasProfilePlace() bool {
	return m.profile != ""
}

// placeIn reports whether the move gives its session a place of profile's
// max-rolling to move again in. One found rolling at the start does not: it
// may have rolled for the session's own spec, not a move, and counts only to
// keep the limit on the safe side until it ends (seedLedger); a move of the
// session then needs a place like any other's.
func (m move) placeIn(profile string) bool {
	return m.profile == profile && m.kind != seededMove
}

// ledgerWake says which waiting sessions to sync now, and which one to sync
// after a delay (the budget per minute frees room then).
type ledgerWake struct {
	now   []string
	later string
	after time.Duration
	// profiles are those whose sessions waiting for the cluster's limits
	// went from none to some or back: their ProfileRollouts say so.
	profiles []string
}

func (w *ledgerWake) add(o ledgerWake) {
	w.now = append(w.now, o.now...)
	w.profiles = append(w.profiles, o.profiles...)
	if o.later != "" {
		w.later, w.after = o.later, o.after
	}
}

func newMoveLedger(clk clock.PassiveClock, maxMoving, perMinute int) *moveLedger {
	return &moveLedger{clock: clk, maxMoving: max(0, maxMoving), perMinute: max(0, perMinute),
		moves: map[string]move{}, profileMoving: map[string]int{}, reserved: map[string]bool{},
		profileWaiting: map[string][]string{}, inputsStalled: map[string]int{}, inputsMoving: map[string]int{}, clusterQueue: newFairQueue(),
		nsMoving: map[string]int{}, nsKept: map[string]int{}, nsStarted: map[string]int{}}
}

// limited reports whether the cluster's limits limit anything.
func (l *moveLedger) limited() bool {
	return l.maxMoving > 0 || l.perMinute > 0
}

// admit grants the session move m if the cluster's limits, and for a move
// with a profile place its profile's limit, leave room, and records it. A
// session granted the same move before is granted again without counting
// twice (a write retried after a conflict), its start moved to now: the
// budget per minute counts from the write that restarts game servers, which
// may be this one. A refused session waits for its wake.
//
// Without a limit to keep, nothing needs to know of the move: an unpaced
// profile's moves are recorded only under cluster limits.
func (l *moveLedger) admit(key string, m move, profileLimit int) (bool, ledgerWake) {
	if !l.limited() && profileLimit == unlimited {
		return true, ledgerWake{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	previous, moving := l.moves[key]
	if moving && previous.kind == m.kind && previous.to == m.to && previous.live == m.live && previous.profile == m.profile && !previous.stalled {
		l.restartLocked(key, now)
		return true, l.wakeLocked(now)
	}
	if l.profileRefusesLocked(key, m, profileLimit) {
		if !slices.Contains(l.profileWaiting[m.profile], key) {
			l.profileWaiting[m.profile] = append(l.profileWaiting[m.profile], key)
		}
		return false, ledgerWake{}
	}
	if l.limited() {
		hasClusterPlace := moving && previous.kind != seededMove && !previous.stalled
		// A session neither woken nor moving takes no place while others
		// wait: room that time freed (the minute's oldest start left it)
		// goes to them first, fairly, this one among them. Woken and
		// refused all the same (another took the room first), it waits
		// again, at the end of its namespace's queue.
		queueFirst := !hasClusterPlace && !l.reserved[key] && l.clusterQueue.len() > 0
		if queueFirst || !l.clusterRoomLocked(key, now, hasClusterPlace) {
			l.unkeepLocked(key)
			var wake ledgerWake
			if l.clusterQueue.push(key, m.named) {
				wake.profiles = append(wake.profiles, m.named)
			}
			wake.add(l.wakeLocked(now))
			return false, wake
		}
		l.startLocked(key, now)
	}
	var wake ledgerWake
	if moving {
		wake = l.dropLocked(key)
	}
	l.putLocked(key, m)
	l.unkeepLocked(key)
	if profile, last := l.clusterQueue.remove(key); last {
		wake.profiles = append(wake.profiles, profile)
	}
	l.profileWaiting[m.profile] = slices.DeleteFunc(l.profileWaiting[m.profile], func(k string) bool { return k == key })
	if len(l.profileWaiting[m.profile]) == 0 {
		delete(l.profileWaiting, m.profile)
	}
	wake.add(l.wakeLocked(now))
	return true, wake
}

// wouldAdmit reports whether admit would grant move m now, without
// recording anything.
func (l *moveLedger) wouldAdmit(key string, m move, profileLimit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	previous, moving := l.moves[key]
	if moving && previous.kind == m.kind && previous.to == m.to && !previous.stalled {
		return true
	}
	if l.profileRefusesLocked(key, m, profileLimit) {
		return false
	}
	if !l.limited() {
		return true
	}
	return l.clusterRoomLocked(key, l.clock.Now(), moving && previous.kind != seededMove && !previous.stalled)
}

// clusterRoomLocked reports whether the cluster's limits leave the session
// room for a move now, beside the places kept for the other woken
// sessions: they are not its own. A session this process let move has its
// place among those moving: a new move of it takes no other. One found
// rolling at the start may have rolled for another reason (its own spec),
// so its first move here needs a place like any other.
func (l *moveLedger) clusterRoomLocked(key string, now time.Time, hasClusterPlace bool) bool {
	others := len(l.reserved)
	if l.reserved[key] {
		others--
	}
	return l.rateRoomLocked(now) > others && (hasClusterPlace || l.movingRoom() > others)
}

// startLocked records a move of the session started at now.
func (l *moveLedger) startLocked(key string, now time.Time) {
	namespace := namespaceOfKey(key)
	l.starts = append(l.starts, moveStarted{at: now, namespace: namespace, key: key})
	l.nsStarted[namespace]++
}

// restartLocked moves the session's last start within the minute to now:
// its move is written again (seed 100383317: a write refused by a conflict,
// retried 1.4 s later, would otherwise let the minute's next move start
// 1.4 s early).
func (l *moveLedger) restartLocked(key string, now time.Time) {
	for i := len(l.starts) - 1; i >= 0; i-- {
		if l.starts[i].key == key {
			l.starts = append(slices.Delete(l.starts, i, i+1), moveStarted{at: now, namespace: namespaceOfKey(key), key: key})
			return
		}
	}
}

// keepLocked keeps a place for the woken session until its next sync.
func (l *moveLedger) keepLocked(key string) {
	if !l.reserved[key] {
		l.reserved[key] = true
		l.nsKept[namespaceOfKey(key)]++
	}
}

// unkeepLocked gives up the place kept for the session, if any.
func (l *moveLedger) unkeepLocked(key string) {
	if l.reserved[key] {
		delete(l.reserved, key)
		decrement(l.nsKept, namespaceOfKey(key))
	}
	if l.wokenLater == key {
		l.wokenLater = ""
	}
}

// decrement counts one less of key in counts, forgetting a count of none.
func decrement(counts map[string]int, key string) {
	if counts[key]--; counts[key] <= 0 {
		delete(counts, key)
	}
}

// putLocked records m, counting its places.
func (l *moveLedger) putLocked(key string, m move) {
	l.moves[key] = m
	if !m.stalled {
		l.clusterMoving++
		l.nsMoving[namespaceOfKey(key)]++
	} else if m.kind == inputMove {
		l.inputsStalled[m.profile]++
	}
	if m.kind == inputMove {
		l.inputsMoving[m.profile]++
	}
	if m.hasProfilePlace() {
		l.profileMoving[m.profile]++
	}
}

// dropLocked removes the session's move, and returns the profile's waiting
// sessions if it freed one of its places.
func (l *moveLedger) dropLocked(key string) ledgerWake {
	m, ok := l.moves[key]
	if !ok {
		return ledgerWake{}
	}
	delete(l.moves, key)
	if m.kind == inputMove {
		decrement(l.inputsMoving, m.profile)
	}
	if !m.stalled {
		l.clusterMoving--
		decrement(l.nsMoving, namespaceOfKey(key))
	} else if m.kind == inputMove {
		if l.inputsStalled[m.profile]--; l.inputsStalled[m.profile] <= 0 {
			delete(l.inputsStalled, m.profile)
		}
	}
	if !m.hasProfilePlace() {
		return ledgerWake{}
	}
	if l.profileMoving[m.profile]--; l.profileMoving[m.profile] <= 0 {
		delete(l.profileMoving, m.profile)
	}
	// All of them: each syncs, and those without room wait again. A change
	// rarely has many waiting at once, and a place freed is rarely taken by
	// the first alone.
	wake := ledgerWake{now: l.profileWaiting[m.profile]}
	delete(l.profileWaiting, m.profile)
	return wake
}

// sweep ends a sync of the session: a place kept for it that the sync did
// not ask for (it no longer moves, or is not due yet) goes to the next
// waiting session. Asked for, the place was either taken or refused.
func (l *moveLedger) sweep(key string) ledgerWake {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.reserved[key] {
		return ledgerWake{}
	}
	l.unkeepLocked(key)
	return l.wakeLocked(l.clock.Now())
}

// release ends a session's move: its Deployment is Ready or failed on what
// it moved to, paused, moved elsewhere, or no longer the session's; its
// write was refused, or the session is gone. It returns the waiting
// sessions the room it frees may admit.
func (l *moveLedger) release(key string) ledgerWake {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.moves[key]; !ok {
		return ledgerWake{}
	}
	wake := l.dropLocked(key)
	wake.add(l.wakeLocked(l.clock.Now()))
	return wake
}

// stall marks the session's input move failed: it frees its cluster place
// and keeps its profile place.
func (l *moveLedger) stall(key string) ledgerWake {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.moves[key]
	if !ok || m.stalled {
		return ledgerWake{}
	}
	m.stalled = true
	l.moves[key] = m
	l.clusterMoving--
	decrement(l.nsMoving, namespaceOfKey(key))
	if m.kind == inputMove {
		l.inputsStalled[m.profile]++
	}
	return l.wakeLocked(l.clock.Now())
}

// leaveProfile ends the session's place among its move's profile's
// max-rolling: the session now names another profile. A move still rolling
// keeps its cluster place; a failed one, which held only the profile's
// place, ends. It returns the profile's waiting sessions.
func (l *moveLedger) leaveProfile(key string) ledgerWake {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.moves[key]
	if !ok || !m.hasProfilePlace() {
		return ledgerWake{}
	}
	wake := l.dropLocked(key)
	if !m.stalled {
		m.profile = ""
		l.putLocked(key, m)
	}
	return wake
}

// forget drops a deleted session, moving or waiting.
func (l *moveLedger) forget(key string) ledgerWake {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Out of the queues first, so that the room it frees goes to others.
	var wake ledgerWake
	if profile, last := l.clusterQueue.remove(key); last {
		wake.profiles = append(wake.profiles, profile)
	}
	for profile, waiting := range l.profileWaiting {
		if waiting = slices.DeleteFunc(waiting, func(k string) bool { return k == key }); len(waiting) == 0 {
			delete(l.profileWaiting, profile)
		} else {
			l.profileWaiting[profile] = waiting
		}
	}
	l.unkeepLocked(key)
	if _, ok := l.moves[key]; ok {
		wake.add(l.dropLocked(key))
	}
	wake.add(l.wakeLocked(l.clock.Now()))
	return wake
}

// moveOf returns the session's move, if it has one.
func (l *moveLedger) moveOf(key string) (move, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.moves[key]
	return m, ok
}

// inputsOf returns how many of the profile's sessions have a place among its
// max-rolling for new inputs (moving, failed ones included), how many of
// those failed, and how many sessions, of either kind of move, wait for a
// place. The moves to new content are its plan's to count.
func (l *moveLedger) inputsOf(profile string) (moving, failed, waiting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inputsMoving[profile], l.inputsStalled[profile], len(l.profileWaiting[profile])
}

// profileFull reports whether the profile's max-rolling, limit, leaves the
// session no place for move m: what refused it, when the cluster's limits
// did not.
func (l *moveLedger) profileFull(key string, m move, limit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.profileRefusesLocked(key, m, limit)
}

// profileRefusesLocked reports whether the profile's max-rolling, limit,
// leaves the session no place for move m. A session that has a place of the
// profile moves again in it: to new data that may fix a failed move, or to
// new content.
func (l *moveLedger) profileRefusesLocked(key string, m move, limit int) bool {
	previous, moving := l.moves[key]
	return m.hasProfilePlace() && !(moving && previous.placeIn(m.profile)) && l.placesTakenLocked(m.profile, m.kind) >= limit
}

// placesTakenLocked counts the places of the profile's max-rolling that
// hold back a move of kind: every move still rolling, of either kind, and
// for an input move the failed input moves too (the brake of moveLedger).
func (l *moveLedger) placesTakenLocked(profile string, kind moveKind) int {
	if kind == inputMove {
		return l.profileMoving[profile]
	}
	return l.profileMoving[profile] - l.inputsStalled[profile]
}

// waitForPlace queues the session among those waiting for a place of the
// profile: it syncs again when one frees.
func (l *moveLedger) waitForPlace(key, profile string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.profileWaiting[profile], key) {
		l.profileWaiting[profile] = append(l.profileWaiting[profile], key)
	}
}

// stalledIn returns how many of the profile's input moves failed.
func (l *moveLedger) stalledIn(profile string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inputsStalled[profile]
}

// hasProfilePlace reports whether the session has one of the profile's
// places.
func (l *moveLedger) hasProfilePlace(key, profile string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.moves[key]
	return ok && m.hasProfilePlace() && m.profile == profile
}

// counts returns how many sessions have a cluster place and how many wait
// for one.
func (l *moveLedger) counts() (moving, waiting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clusterMoving, l.clusterQueue.len()
}

// seed records what a controller finds when it starts: the sessions whose
// Deployments still roll, each as moving, and the moves started within the
// last minute, at their times.
func (l *moveLedger) seed(moving map[string]move, starts []moveStarted) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, m := range moving {
		if _, ok := l.moves[key]; !ok {
			l.putLocked(key, m)
		}
	}
	for _, s := range starts {
		l.nsStarted[s.namespace]++
	}
	l.starts = append(l.starts, starts...)
	slices.SortFunc(l.starts, func(a, b moveStarted) int { return a.at.Compare(b.at) })
}

// moveStarts is the gamesv1.MoveStartsAnnotation of a Deployment whose move
// starts at now, previous its annotation before: the starts of previous
// within the minute, and now. At most perMinute of them, the newest: the
// budget lets no more start in a minute.
func (l *moveLedger) moveStarts(previous string, now time.Time) string {
	starts := append(parseMoveStarts(previous, now), now)
	starts = starts[max(0, len(starts)-l.perMinute):]
	values := make([]string, len(starts))
	for i, t := range starts {
		values[i] = t.UTC().Format(time.RFC3339Nano)
	}
	return strings.Join(values, ",")
}

// parseMoveStarts returns the starts a gamesv1.MoveStartsAnnotation records
// within the minute before now, oldest first. One later than now (another
// leader's clock ahead of this one's) counts as it is: it leaves the minute
// later, never earlier. What does not parse is no start.
func parseMoveStarts(value string, now time.Time) []time.Time {
	var starts []time.Time
	for _, v := range strings.Split(value, ",") {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err == nil && now.Sub(t) < time.Minute {
			starts = append(starts, t)
		}
	}
	slices.SortFunc(starts, time.Time.Compare)
	return starts
}

// unlimited stands for no limit in the room computations.
const unlimited = int(^uint(0) >> 1)

// movingRoom is how many more sessions may be moving at once.
func (l *moveLedger) movingRoom() int {
	if l.maxMoving == 0 {
		return unlimited
	}
	return max(0, l.maxMoving-l.clusterMoving)
}

// rateRoomLocked is how many more moves may start in the minute up to now.
// It forgets the starts older than a minute.
func (l *moveLedger) rateRoomLocked(now time.Time) int {
	i := 0
	for i < len(l.starts) && now.Sub(l.starts[i].at) >= time.Minute {
		decrement(l.nsStarted, l.starts[i].namespace)
		i++
	}
	l.starts = l.starts[i:]
	if l.perMinute == 0 {
		return unlimited
	}
	return max(0, l.perMinute-len(l.starts))
}

// roomLocked is how many more moves of sessions not moving may start now.
func (l *moveLedger) roomLocked(now time.Time) int {
	return min(l.movingRoom(), l.rateRoomLocked(now))
}

// wakeLocked takes as many waiting sessions off the queue as there is room
// for now, beside the places kept already, and keeps a place for each: each
// the session of the namespace holding the fewest places (fairQueue). A
// release wakes the others.
func (l *moveLedger) wakeLocked(now time.Time) ledgerWake {
	var wake ledgerWake
	room := max(0, l.roomLocked(now)-len(l.reserved))
	for ; room > 0; room-- {
		key, ok := l.nextWaitingLocked(&wake)
		if !ok {
			break
		}
		wake.now = append(wake.now, key)
	}
	// When only the budget per minute keeps the next one waiting, it is
	// woken, with its place kept, once the oldest start leaves the minute.
	if l.clusterQueue.len() > 0 && room == 0 && l.movingRoom() > len(l.reserved) && len(l.starts) > 0 && l.wokenLater == "" {
		key, _ := l.nextWaitingLocked(&wake)
		wake.later, wake.after = key, l.starts[0].at.Add(time.Minute).Sub(now)
		l.wokenLater = key
	}
	return wake
}

// nextWaitingLocked takes the session due the next place off the queue and
// keeps a place for it; wake learns of its profile's last waiting session.
func (l *moveLedger) nextWaitingLocked(wake *ledgerWake) (string, bool) {
	key, ok := l.clusterQueue.next(l.usageLocked)
	if !ok {
		return "", false
	}
	if profile, last := l.clusterQueue.remove(key); last {
		wake.profiles = append(wake.profiles, profile)
	}
	l.keepLocked(key)
	return key, true
}

// seedLedger gives a starting controller's ledger what the caches just
// synced show of the moves before it.
//
// Moving: every session whose Deployment runs a revision and has neither
// completed nor failed its rollout, in the cluster's count and in its
// profile's places. Some of them roll for a change of their own spec, not a
// move: counting them too keeps both limits on the safe side until they
// are Ready.
//
// Started within the last minute: the times each Deployment's
// gamesv1.MoveStartsAnnotation records, completed moves included, so that a
// failover does not let a new leader start --max-moves-per-minute more in
// the minute its predecessor started as many. The annotation goes with the
// move's own write: it costs no request, and it is exact, where what the
// API shows otherwise is not: a Deployment's Progressing condition moves
// with every step of its rollout, and a move back to an earlier revision
// reuses the ReplicaSet of that template, created long before (a
// ReplicaSet's creationTimestamp is also to the second only). A Deployment
// still rolling without the annotation (written by a controller that did
// not record, or rolling for its own spec) counts as started now: when it
// started cannot be told, and it might have been a move within the minute.
// What the cache cannot show, it cannot count: a Deployment moved, then
// deleted or stripped of its managed-by label within the minute.
func (c *sessionController) seedLedger() {
	moving := map[string]move{}
	var starts []moveStarted
	deployments, err := c.deploymentLister.List(labels.Everything())
	if err != nil {
		return // a lister over a synced cache does not fail
	}
	now := c.clock.Now()
	for _, d := range deployments {
		annotation, known := d.Annotations[gamesv1.MoveStartsAnnotation]
		recorded := parseMoveStarts(annotation, now)
		for _, at := range recorded {
			starts = append(starts, moveStarted{at: at, namespace: d.Namespace})
		}
		ref := metav1.GetControllerOf(d)
		if ref != nil && ref.Kind == gameSessionKind.Kind && deliversLive(d, ref.Name) {
			m, delivered, ok := c.seedLiveMove(d, ref)
			if ok {
				moving[d.Namespace+"/"+ref.Name] = m
			}
			if !delivered.IsZero() && now.Sub(delivered) < time.Minute && !slices.ContainsFunc(recorded, delivered.Equal) {
				// Every delivery of the minute, applied or not, once: a
				// switch to live recorded it on the Deployment too.
				starts = append(starts, moveStarted{at: delivered, namespace: d.Namespace})
			}
			continue
		}
		hash := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
		if ref == nil || ref.Kind != gameSessionKind.Kind || hash == "" || d.Spec.Paused ||
			deploymentComplete(d) || c.progressDeadlineExceeded(d) {
			continue
		}
		m := move{kind: seededMove, to: hash}
		if session, err := c.sessionLister.GameSessions(d.Namespace).Get(ref.Name); err == nil && session.UID == ref.UID {
			m.profile = profileKey(profileOf(session))
		}
		moving[d.Namespace+"/"+ref.Name] = m
		if !known {
			starts = append(starts, moveStarted{at: now, namespace: d.Namespace})
		}
	}
	c.moves.seed(moving, starts)
	c.logger.Info("Ledger of moves", "maxMovingSessions", c.moves.maxMoving,
		"maxMovesPerMinute", c.moves.perMinute, "moving", len(moving), "startedWithinAMinute", len(starts))
}

// admitMove asks the ledger for a session's move, and wakes the sessions a
// grant or a refusal lets move.
func (c *sessionController) admitMove(key string, m move, profileLimit int) bool {
	granted, wake := c.moves.admit(key, m, profileLimit)
	c.wake(wake)
	return granted
}

// settleMove ends a session's move in the ledger once its Deployment d (as
// the controller last wrote or saw it, in the cache or by a live read) no
// longer rolls what it moved to: Ready, paused, moved elsewhere and done
// rolling, or no longer the session's to write (being deleted, or another
// owner's). A failed move ends too, but for an input move with a profile
// place, which keeps it (the brake of moveLedger). A Deployment the cache
// does not show is no evidence of any of these: see settleUncachedMove.
func (c *sessionController) settleMove(key string, session *gamesv1.GameSession, d *appsv1.Deployment) {
	m, ok := c.moves.moveOf(key)
	if !ok {
		return
	}
	if profile := profileKey(profileOf(session)); m.hasProfilePlace() && m.profile != profile {
		// The session left the profile: its move no longer counts among
		// that profile's max-rolling, nor holds its brake.
		c.wake(c.moves.leaveProfile(key))
		c.rollouts.requestPlanFor(m.profile)
		if m, ok = c.moves.moveOf(key); !ok {
			return
		}
	}
	if m.kind != inputMove && deliversLive(d, session.Name) {
		c.settleLiveMove(key, session, d, m)
		return
	}
	failed := c.progressDeadlineExceeded(d)
	switch {
	case blocks(d, session) || d.Spec.Paused || deploymentComplete(d):
		c.endMove(key, m)
	case !c.runsMove(d, m):
		// Moved elsewhere: the write of the move was refused (a conflict)
		// after the ledger granted it, or another write overtook it. While
		// the Deployment still rolls what it runs now, game servers
		// restart: the place is kept until that rollout ends (seed
		// 99837506).
		if failed {
			c.endMove(key, m)
		}
	case failed && !m.stalled && m.kind == inputMove && m.hasProfilePlace():
		c.wake(c.moves.stall(key))
		c.rollouts.requestPlanFor(m.profile)
	case failed && !m.stalled:
		c.endMove(key, m)
	}
}

// runsMove reports whether d's pod template is what the move moved it to.
func (c *caches) runsMove(d *appsv1.Deployment, m move) bool {
	if m.kind == inputMove {
		return c.observedInputs(d).key() == m.to
	}
	return d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == m.to
}

// settleUncachedMove settles the move of a session whose Deployment the
// cache does not show. Its absence proves nothing: the cache holds only the
// Deployments that carry the managed-by label, and learns of a Deployment
// the session's sync created or moved through a live read (a create that
// found the name taken) only by a watch event that may be late, or never
// come (the label removed by someone). A live read decides: no Deployment
// at all ends the move; one still rolling keeps the place, and the session
// looks again after uncachedRecheckInterval, as no event may announce the
// end of its rollout. A session that has no place costs no request.
func (c *sessionController) settleUncachedMove(ctx context.Context, key string, session *gamesv1.GameSession) error {
	m, ok := c.moves.moveOf(key)
	if !ok {
		return nil
	}
	live, err := c.uncachedDeployment(ctx, session)
	switch {
	case apierrors.IsForbidden(err):
		// Refused (no get on Deployments): the end of the move cannot be
		// told, so it keeps its place, and the sync goes on without it; a
		// Deployment deleted meanwhile is created again. The cache settles
		// the move once it shows the session's Deployment.
		klog.FromContext(ctx).V(2).Info("Cannot read the Deployment of a moving session; its move keeps its place", "err", err)
		return nil
	case err != nil:
		return err
	case live == nil:
		c.endMove(key, m)
		return nil
	}
	c.settleMove(key, session, live)
	if _, ok := c.moves.moveOf(key); ok {
		c.queue.AddAfter(key, uncachedRecheckInterval)
	}
	return nil
}

// startsInputMove reports whether writing desired over observed starts the
// input move the ledger just granted the session.
func (c *sessionController) startsInputMove(key string, observed, desired *appsv1.Deployment) bool {
	m, ok := c.moves.moveOf(key)
	return ok && m.kind == inputMove && observed != nil && c.observedInputs(desired).key() == m.to &&
		c.observedInputs(observed).key() != m.to
}

// endMove frees the session's places and wakes the sessions they let move.
// A profile's places are on its ProfileRollout: its plan counts them again.
func (c *sessionController) endMove(key string, m move) {
	c.logger.V(4).Info("Move ends", "gameSession", key, "kind", m.kind, "to", m.to)
	c.wake(c.moves.release(key))
	if m.hasProfilePlace() {
		c.rollouts.requestPlanFor(m.profile)
	}
}

// wake queues the sessions the ledger has room for.
func (c *sessionController) wake(w ledgerWake) {
	for _, key := range w.now {
		c.queue.Add(key)
	}
	for _, profile := range w.profiles {
		c.rollouts.requestPlanFor(profile)
	}
	if w.later != "" {
		c.queue.AddAfter(w.later, w.after)
	}
	if !c.moves.limited() {
		return
	}
	moving, waiting := c.moves.counts()
	c.metrics.ObserveBudget(moving, waiting)
}

// String is the budget as the flags set it, for messages.
func (l *moveLedger) String() string {
	var parts []string
	if l.maxMoving > 0 {
		parts = append(parts, fmt.Sprintf("at most %d sessions moving at once", l.maxMoving))
	}
	if l.perMinute > 0 {
		parts = append(parts, fmt.Sprintf("at most %d moves started per minute", l.perMinute))
	}
	return strings.Join(parts, ", ")
}
