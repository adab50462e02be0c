package controller

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// statusLaneMaxWait bounds how long a key waits in the status lane while
// Deployment work keeps coming: past it, the status lane gets a share of the
// workers (firstLanePerStatusKey). It is a guard against starving the
// statuses, not a schedule: a fan-out of 7,340 sessions writes its
// Deployments in 25-32s on the reference machine, and one in a slow round
// in more, so the bound sits well above that.
const statusLaneMaxWait = time.Minute

// firstLanePerStatusKey is how many first-lane keys are handed out for each
// status-lane key once the status lane's oldest has waited statusLaneMaxWait.
// A status write costs the API server about four Deployment writes, so the
// first lane keeps about two thirds of the server: starved statuses drain,
// and the Deployment writes still queued slow by half at most. Taking turns
// instead gave the statuses four fifths and slowed the Deployment writes
// fivefold: the last 1,900 of a slow 7,340 fan-out waited 40s more.
const firstLanePerStatusKey = 8

// sessionLanes orders the GameSession queue in two lanes. A status write
// costs the API server about four times a Deployment write, and a session
// whose Deployment already runs what it should loses nothing by reporting so
// a little later; one still waiting for its Deployment write loses time to
// every status written before it. So a sync that would only write a status
// while other keys wait in the first lane leaves it to the status lane, which
// is handed out only when the first lane is empty (or, at a lesser pace, once
// its head has waited statusLaneMaxWait). In a paced rollout that keeps the
// next wave's Deployment writes ahead of the previous wave's status writes,
// and a status written late is often written once, with the Deployment
// already complete, instead of once per step of its rollout.
//
// A key goes to the status lane only if every add of it since it was last
// queued or handed out asked for a status write alone: an event that lands
// while a worker holds the key (a user's edit of the Deployment) wants a
// full sync, even if that worker's sync then defers its status.
//
// It is the workqueue's storage (workqueue.Queue), so the workqueue's
// guarantees stand: a key is queued once, and never handed to two workers.
type sessionLanes interface {
	// addStatusOnly adds key for a status write alone. Queued by such adds
	// only, it goes to the status lane; any other add of it, before or
	// after, queues it in the first lane or promotes it there. One call, so
	// that no other add can be taken for it.
	addStatusOnly(key string)
	// handedFrom reports the lane key was last handed out from, and
	// forgets it: noLane for a sync the queue did not hand out (a test's).
	handedFrom(key string) lane
	// firstLaneWaiting reports whether keys wait in the first lane.
	firstLaneWaiting() bool
}

// lane names the lane a key was handed out from.
type lane int

const (
	noLane lane = iota
	firstLane
	statusLane
)

// laneQueue implements sessionLanes as a workqueue.Queue. The workqueue calls
// Touch, Push, Len and Pop under its own lock; the controller calls the
// sessionLanes methods without it, so laneQueue has a lock of its own,
// always taken after the workqueue's, and released before it calls fifo.
type laneQueue struct {
	clock clock.PassiveClock
	// fifo is the workqueue whose storage laneQueue is; adds reach it
	// through laneQueue.add, which notes them first.
	fifo workqueue.TypedInterface[string]

	mu sync.Mutex
	// adds holds the adds not yet seen by a Push or Touch of their key:
	// the workqueue pushes a key added while a worker holds it only at Done.
	adds addsSince
	// queued is each queued key's entry; the lanes may hold stale entries
	// of keys promoted or handed out since, which Pop skips.
	queued      map[string]laneEntry
	first       []laneEntry
	status      []laneEntry
	statusCount int
	seq         uint64
	// handed holds the lane of each key handed out and not yet asked about.
	handed map[string]lane
	// firstSinceStatus counts the first lane's keys handed out since the
	// status lane's last.
	firstSinceStatus int
}

type laneEntry struct {
	key    string
	seq    uint64
	status bool
	since  time.Time
}

var _ workqueue.Queue[string] = &laneQueue{}

// addsSince records, for each key added since its last Push or Touch,
// whether every one of those adds was status-only. An entry lives until the
// next Push or Touch of its key, which follows every add that the workqueue
// does not drop for shutting down.
type addsSince map[string]bool

func (a addsSince) note(key string, statusOnly bool) {
	onlyStatusSoFar, added := a[key]
	a[key] = statusOnly && (onlyStatusSoFar || !added)
}

// take returns and forgets key's record: statusOnly if every add was,
// added false if no add is left unseen (a Push or Touch that ran between
// another add's note and its call into the workqueue has seen it).
func (a addsSince) take(key string) (statusOnly, added bool) {
	statusOnly, added = a[key]
	delete(a, key)
	return statusOnly, added
}

// newSessionQueue returns the GameSession work queue and its lanes.
func newSessionQueue(name string, clk clock.WithTicker) (workqueue.TypedRateLimitingInterface[string], *laneQueue) {
	lanes := &laneQueue{clock: clk, adds: addsSince{}, queued: map[string]laneEntry{}, handed: map[string]lane{}}
	lanes.fifo = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name, Clock: clk, Queue: lanes})
	// The delaying queue, and the rate limiter through it, add to
	// laneFIFO: delayed and rate-limited adds are noted like direct ones.
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{
		Name: name, Clock: clk, Queue: laneFIFO{TypedInterface: lanes.fifo, lanes: lanes}})
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name, Clock: clk, DelayingQueue: delaying})
	return queue, lanes
}

// laneFIFO is the lanes' workqueue as the delaying queue sees it: every add
// that does not say it is status-only wants a full sync.
type laneFIFO struct {
	workqueue.TypedInterface[string]
	lanes *laneQueue
}

func (f laneFIFO) Add(key string) { f.lanes.add(key, false) }

func (q *laneQueue) addStatusOnly(key string) { q.add(key, true) }

// add notes an add before the workqueue acts on it, so that the Push or
// Touch it leads to, now or at Done, sees it.
func (q *laneQueue) add(key string, statusOnly bool) {
	q.mu.Lock()
	q.adds.note(key, statusOnly)
	q.mu.Unlock()
	q.fifo.Add(key)
}

func (q *laneQueue) handedFrom(key string) lane {
	q.mu.Lock()
	defer q.mu.Unlock()
	from := q.handed[key]
	delete(q.handed, key)
	return from
}

func (q *laneQueue) firstLaneWaiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queued) > q.statusCount
}

// Push queues a key that is not queued: in the status lane if every add
// since its last Push or Touch was status-only. At Done that covers the adds
// made while a worker held the key, whichever came last. With no add left to
// see, the key goes to the first lane, where any add may send it.
func (q *laneQueue) Push(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	statusOnly, _ := q.adds.take(key)
	q.pushLocked(key, statusOnly)
}

// Touch hears of an add of a key that is queued already. An add that is not
// status-only wants more than a status write: a key in the status lane
// moves to the end of the first.
func (q *laneQueue) Touch(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if statusOnly, added := q.adds.take(key); !added || statusOnly {
		return
	}
	if e, ok := q.queued[key]; ok && e.status {
		q.statusCount--
		q.pushLocked(key, false)
	}
}

func (q *laneQueue) pushLocked(key string, status bool) {
	q.seq++
	e := laneEntry{key: key, seq: q.seq, status: status, since: q.clock.Now()}
	q.queued[key] = e
	if status {
		q.statusCount++
		q.status = append(q.status, e)
		return
	}
	q.first = append(q.first, e)
}

func (q *laneQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queued)
}

// Pop hands out the first lane's oldest key, or the status lane's when the
// first is empty or, once the status lane's oldest has waited
// statusLaneMaxWait, after every firstLanePerStatusKey keys of the first.
// The workqueue calls it only when Len > 0.
func (q *laneQueue) Pop() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.first = dropStale(q.first, q.queued)
	q.status = dropStale(q.status, q.queued)
	overdue := len(q.status) > 0 && q.clock.Since(q.status[0].since) >= statusLaneMaxWait
	fromStatus := len(q.first) == 0 || overdue && q.firstSinceStatus >= firstLanePerStatusKey
	from, entries := firstLane, &q.first
	if fromStatus {
		from, entries = statusLane, &q.status
		q.statusCount--
		q.firstSinceStatus = 0
	} else {
		q.firstSinceStatus++
	}
	e := (*entries)[0]
	(*entries)[0] = laneEntry{}
	*entries = (*entries)[1:]
	delete(q.queued, e.key)
	q.handed[e.key] = from
	return e.key
}

// dropStale drops the entries at the head of a lane that are no longer their
// key's entry.
func dropStale(lane []laneEntry, queued map[string]laneEntry) []laneEntry {
	for len(lane) > 0 && queued[lane[0].key].seq != lane[0].seq {
		lane[0] = laneEntry{}
		lane = lane[1:]
	}
	return lane
}
