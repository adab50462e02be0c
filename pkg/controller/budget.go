package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// clusterBudget bounds the profile moves of all profiles together: at most
// maxMoving sessions moved to a new revision of their profile and not yet
// Ready (or failed) at once, and at most perMinute moves started in any
// minute. A profile's own policy paces its sessions; this is the cluster's
// limit, so that one GitOps sync editing fifty profiles cannot restart every
// game server at once.
//
// Only moves count: a session whose Deployment runs a revision of its
// profile and is to run another one. A new session's first Deployment, or a
// change of a session's own spec, restarts no running match of a profile
// rollout and is not held back.
//
// What it holds is a ledger of grants, rebuilt from the caches when the
// controller starts (seedBudget): a restarted controller or a new leader
// counts the sessions still rolling as moving, and the moves started within
// the last minute as its Deployments record them (gamesv1.MoveStartsAnnotation,
// written with each move). Sessions refused a grant wait in a first-come
// queue; a release or a freed minute wakes as many of them as there is room
// for, so waiting costs no polling.
type clusterBudget struct {
	clock     clock.PassiveClock
	maxMoving int // 0: no limit
	perMinute int // 0: no limit

	mu sync.Mutex
	// moving maps a session key to the content it was granted a move to.
	moving map[string]string
	// starts are the times of the grants within the last minute, oldest
	// first.
	starts []time.Time
	// waiting are the sessions refused a grant, in the order they were.
	waiting []string
	// reserved are the woken sessions, each with a place kept for it until
	// its next sync: one that syncs for another reason must not take it.
	reserved map[string]bool
	// seeded are the moving sessions found rolling at the start (seed),
	// which may not be moves at all: a move of one needs a place of its own.
	seeded map[string]bool
}

// budgetWake says which waiting sessions to sync now, and which one to sync
// after a delay (the budget per minute frees room then).
type budgetWake struct {
	now   []string
	later string
	after time.Duration
}

func newClusterBudget(clk clock.PassiveClock, maxMoving, perMinute int) *clusterBudget {
	return &clusterBudget{clock: clk, maxMoving: max(0, maxMoving), perMinute: max(0, perMinute),
		moving: map[string]string{}, reserved: map[string]bool{}, seeded: map[string]bool{}}
}

// limited reports whether the budget limits anything.
func (b *clusterBudget) limited() bool {
	return b.maxMoving > 0 || b.perMinute > 0
}

// admit grants the session a move to target if the budget has room, and
// records it. A session granted a move to target before is granted again
// without counting twice (a write retried after a conflict). A refused
// session waits for its wake.
func (b *clusterBudget) admit(key, target string) (granted bool, wake budgetWake) {
	if !b.limited() {
		return true, budgetWake{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	previous, moving := b.moving[key]
	if moving && previous == target {
		return true, b.wakeLocked(now)
	}
	// The places kept for the other woken sessions are not this one's. A
	// session this process let move to another content already holds its
	// place among those moving: a new move of it takes no other. One found
	// rolling at the start may have rolled for another reason (its own spec),
	// so its first move here needs a place like any other.
	others := len(b.reserved)
	if b.reserved[key] {
		others--
	}
	holdsPlace := moving && !b.seeded[key]
	if b.rateRoomLocked(now) <= others || (!holdsPlace && b.movingRoom() <= others) {
		// Woken and refused all the same (another took the room first): it
		// waits again, at the end.
		delete(b.reserved, key)
		if !slices.Contains(b.waiting, key) {
			b.waiting = append(b.waiting, key)
		}
		return false, b.wakeLocked(now)
	}
	b.moving[key] = target
	b.starts = append(b.starts, now)
	delete(b.reserved, key)
	delete(b.seeded, key)
	b.waiting = slices.DeleteFunc(b.waiting, func(k string) bool { return k == key })
	return true, b.wakeLocked(now)
}

// sweep ends a sync of the session: a place kept for it that the sync did
// not ask for (it no longer moves, or is not due yet) goes to the next
// waiting session. Asked for, the place was either taken or refused.
func (b *clusterBudget) sweep(key string) budgetWake {
	if !b.limited() {
		return budgetWake{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.reserved[key] {
		return budgetWake{}
	}
	delete(b.reserved, key)
	return b.wakeLocked(b.clock.Now())
}

// release ends a session's move: its Deployment is Ready or failed on the
// content it moved to, its write was refused, or the session is gone. It
// returns the waiting sessions the room it frees may admit.
func (b *clusterBudget) release(key string) budgetWake {
	if !b.limited() {
		return budgetWake{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.moving[key]; !ok {
		return budgetWake{}
	}
	delete(b.moving, key)
	delete(b.seeded, key)
	return b.wakeLocked(b.clock.Now())
}

// forget drops a deleted session, moving or waiting.
func (b *clusterBudget) forget(key string) budgetWake {
	wake := b.release(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting = slices.DeleteFunc(b.waiting, func(k string) bool { return k == key })
	if b.reserved[key] {
		delete(b.reserved, key)
		wake.now = append(wake.now, b.wakeLocked(b.clock.Now()).now...)
	}
	return wake
}

// movingTo returns the content the session was granted a move to, "" if none.
func (b *clusterBudget) movingTo(key string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.moving[key]
}

// counts returns how many sessions are moving and how many wait.
func (b *clusterBudget) counts() (moving, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.moving), len(b.waiting)
}

// seed records what a controller finds when it starts: the sessions whose
// Deployments still roll a revision of their profile, each as moving, and
// the moves started within the last minute, at their times.
func (b *clusterBudget) seed(moving map[string]string, starts []time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, hash := range moving {
		if _, ok := b.moving[key]; !ok {
			b.moving[key] = hash
			b.seeded[key] = true
		}
	}
	b.starts = append(b.starts, starts...)
	slices.SortFunc(b.starts, time.Time.Compare)
}

// moveStarts is the gamesv1.MoveStartsAnnotation of a Deployment whose move
// starts at now, previous its annotation before: the starts of previous
// within the minute, and now. At most perMinute of them, the newest: the
// budget lets no more start in a minute.
func (b *clusterBudget) moveStarts(previous string, now time.Time) string {
	starts := append(parseMoveStarts(previous, now), now)
	starts = starts[max(0, len(starts)-b.perMinute):]
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
func (b *clusterBudget) movingRoom() int {
	if b.maxMoving == 0 {
		return unlimited
	}
	return max(0, b.maxMoving-len(b.moving))
}

// rateRoomLocked is how many more moves may start in the minute up to now.
// It forgets the starts older than a minute.
func (b *clusterBudget) rateRoomLocked(now time.Time) int {
	i := 0
	for i < len(b.starts) && now.Sub(b.starts[i]) >= time.Minute {
		i++
	}
	b.starts = b.starts[i:]
	if b.perMinute == 0 {
		return unlimited
	}
	return max(0, b.perMinute-len(b.starts))
}

// roomLocked is how many more moves of sessions not moving may start now.
func (b *clusterBudget) roomLocked(now time.Time) int {
	return min(b.movingRoom(), b.rateRoomLocked(now))
}

// wakeLocked takes as many waiting sessions off the queue as there is room
// for now, beside the places kept already, and keeps a place for each. A
// release wakes the others.
func (b *clusterBudget) wakeLocked(now time.Time) budgetWake {
	var wake budgetWake
	room := max(0, b.roomLocked(now)-len(b.reserved))
	n := min(room, len(b.waiting))
	wake.now = slices.Clone(b.waiting[:n])
	b.waiting = b.waiting[n:]
	for _, key := range wake.now {
		b.reserved[key] = true
	}
	// When only the budget per minute keeps the first one waiting, it is
	// woken, with its place kept, once the oldest start leaves the minute.
	if len(b.waiting) > 0 && room == 0 && b.movingRoom() > len(b.reserved) && len(b.starts) > 0 {
		wake.later, wake.after = b.waiting[0], b.starts[0].Add(time.Minute).Sub(now)
		b.waiting = b.waiting[1:]
		b.reserved[wake.later] = true
	}
	return wake
}

// seedBudget gives a starting controller's budget what the caches just
// synced show of the moves before it.
//
// Moving: every session whose Deployment runs a revision and has neither
// completed nor failed its rollout. Some of them roll for a change of their
// own spec, not a profile move: counting them too keeps the budget on the
// safe side until they are Ready.
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
func (c *Controller) seedBudget() {
	if !c.budget.limited() {
		return
	}
	moving := map[string]string{}
	var starts []time.Time
	deployments, err := c.deploymentLister.List(labels.Everything())
	if err != nil {
		return // a lister over a synced cache does not fail
	}
	now := c.clock.Now()
	for _, d := range deployments {
		recorded, known := d.Annotations[gamesv1.MoveStartsAnnotation]
		starts = append(starts, parseMoveStarts(recorded, now)...)
		ref := metav1.GetControllerOf(d)
		hash := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
		if ref == nil || ref.Kind != gameSessionKind.Kind || hash == "" || d.Spec.Paused ||
			deploymentComplete(d) || c.progressDeadlineExceeded(d) {
			continue
		}
		moving[d.Namespace+"/"+ref.Name] = hash
		if !known {
			starts = append(starts, now)
		}
	}
	c.budget.seed(moving, starts)
	c.logger.Info("Cluster-wide rollout budget", "maxMovingSessions", c.budget.maxMoving,
		"maxMovesPerMinute", c.budget.perMinute, "moving", len(moving), "startedWithinAMinute", len(starts))
}

// admitMove asks the cluster-wide budget for a session's move from rolled to
// target, and wakes the sessions a grant or a refusal lets move.
func (c *Controller) admitMove(key, target string) bool {
	granted, wake := c.budget.admit(key, target)
	c.wake(wake)
	return granted
}

// settleMove ends a session's move in the budget once its Deployment d (as
// the controller last wrote or saw it, in the cache or by a live read) no
// longer rolls the content it moved to: Ready, failed, paused, moved
// elsewhere, or no longer the session's to write (being deleted, or another
// owner's). A Deployment the cache does not show is no evidence of any of
// these: see settleUncachedMove.
func (c *Controller) settleMove(key string, session *gamesv1.GameSession, d *appsv1.Deployment) {
	if !c.budget.limited() {
		return
	}
	target := c.budget.movingTo(key)
	if target == "" {
		return
	}
	if blocks(d, session) || d.Spec.Paused || d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] != target ||
		deploymentComplete(d) || c.progressDeadlineExceeded(d) {
		c.endMove(key, target)
	}
}

// settleUncachedMove settles the move of a session whose Deployment the
// cache does not show. Its absence proves nothing: the cache holds only the
// Deployments that carry the managed-by label, and learns of a Deployment
// the session's sync created or moved through a live read (a create that
// found the name taken) only by a watch event that may be late, or never
// come (the label removed by someone). A live read decides: no Deployment
// at all ends the move; one still rolling keeps the place, and the session
// looks again after uncachedRecheckInterval, as no event may announce the
// end of its rollout. A session that holds no place costs no request.
func (c *Controller) settleUncachedMove(ctx context.Context, key string, session *gamesv1.GameSession) error {
	if !c.budget.limited() {
		return nil
	}
	target := c.budget.movingTo(key)
	if target == "" {
		return nil
	}
	live, err := c.uncachedDeployment(ctx, session)
	switch {
	case err != nil:
		return err
	case live == nil:
		c.endMove(key, target)
		return nil
	}
	c.settleMove(key, session, live)
	if c.budget.movingTo(key) != "" {
		c.queue.AddAfter(key, uncachedRecheckInterval)
	}
	return nil
}

// endMove frees the session's place and wakes the sessions it lets move.
func (c *Controller) endMove(key, target string) {
	c.logger.V(4).Info("Move ends in the cluster-wide budget", "gameSession", key, "hash", target)
	c.wake(c.budget.release(key))
}

// wake queues the sessions the budget has room for.
func (c *Controller) wake(w budgetWake) {
	for _, key := range w.now {
		c.queue.Add(key)
	}
	if w.later != "" {
		c.queue.AddAfter(w.later, w.after)
	}
	if !c.budget.limited() {
		return
	}
	moving, waiting := c.budget.counts()
	c.metrics.ObserveBudget(moving, waiting)
}

// String is the budget as the flags set it, for messages.
func (b *clusterBudget) String() string {
	var parts []string
	if b.maxMoving > 0 {
		parts = append(parts, fmt.Sprintf("at most %d sessions moving at once", b.maxMoving))
	}
	if b.perMinute > 0 {
		parts = append(parts, fmt.Sprintf("at most %d moves started per minute", b.perMinute))
	}
	return strings.Join(parts, ", ")
}
