package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// statusLaneMaxWait bounds how long a key waits in the status lane while
// Deployment work keeps coming: past it, the two lanes take turns. A fan-out
// of 7,340 sessions writes its Deployments in about 25s on the reference
// machine, so the bound does not cut into one.
const statusLaneMaxWait = 30 * time.Second

// sessionLanes orders the GameSession queue in two lanes. A status write
// costs the API server about four times a Deployment write, and a session
// whose Deployment already runs what it should loses nothing by reporting so
// a little later; one still waiting for its Deployment write loses time to
// every status written before it. So a sync that would only write a status
// while other keys wait in the first lane leaves it to the status lane, which
// is handed out only when the first lane is empty (or its head has waited
// statusLaneMaxWait). In a paced rollout that keeps the next wave's
// Deployment writes ahead of the previous wave's status writes, and a status
// written late is often written once, with the Deployment already complete,
// instead of once per step of its rollout.
//
// It is the workqueue's storage (workqueue.Queue), so the workqueue's
// guarantees stand: a key is queued once, and never handed to two workers.
type sessionLanes interface {
	// markStatusOnly says that the next add of key, if it queues the key, is
	// for a status write alone: the key goes to the status lane. An add of a
	// key that is already queued promotes it to the first lane, unless it is
	// marked.
	markStatusOnly(key string)
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
// always taken after the workqueue's.
type laneQueue struct {
	clock clock.PassiveClock

	mu sync.Mutex
	// statusOnly holds the marks of markStatusOnly not yet consumed by a
	// Push or Touch of their key.
	statusOnly sets.Set[string]
	// queued is each queued key's entry; the lanes may hold stale entries
	// of keys promoted or handed out since, which Pop skips.
	queued      map[string]laneEntry
	first       []laneEntry
	status      []laneEntry
	statusCount int
	seq         uint64
	// handed holds the lane of each key handed out and not yet asked about.
	handed         map[string]lane
	lastFromStatus bool
}

type laneEntry struct {
	key    string
	seq    uint64
	status bool
	since  time.Time
}

var _ workqueue.Queue[string] = &laneQueue{}

func newLaneQueue(clk clock.PassiveClock) *laneQueue {
	return &laneQueue{clock: clk, statusOnly: sets.New[string](), queued: map[string]laneEntry{}, handed: map[string]lane{}}
}

// newSessionQueue returns the GameSession work queue, ordered by lanes.
func newSessionQueue(name string, clk clock.WithTicker, lanes *laneQueue) workqueue.TypedRateLimitingInterface[string] {
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: name, Clock: clk, Queue: lanes})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: name, Clock: clk, Queue: fifo})
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name, Clock: clk, DelayingQueue: delaying})
}

func (q *laneQueue) markStatusOnly(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.statusOnly.Insert(key)
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

// Push queues a key that is not queued: in the status lane if it is marked.
func (q *laneQueue) Push(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	status := q.statusOnly.Has(key)
	q.statusOnly.Delete(key)
	q.pushLocked(key, status)
}

// Touch hears of an add of a key that is queued already. An unmarked add
// wants more than a status write: a key in the status lane moves to the
// end of the first.
func (q *laneQueue) Touch(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.statusOnly.Has(key) {
		q.statusOnly.Delete(key)
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
// first is empty or, every other time, when the status lane's oldest has
// waited statusLaneMaxWait. The workqueue calls it only when Len > 0.
func (q *laneQueue) Pop() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.first = dropStale(q.first, q.queued)
	q.status = dropStale(q.status, q.queued)
	fromStatus := len(q.first) == 0 ||
		(len(q.status) > 0 && !q.lastFromStatus && q.clock.Since(q.status[0].since) >= statusLaneMaxWait)
	from, entries := firstLane, &q.first
	if fromStatus {
		from, entries = statusLane, &q.status
		q.statusCount--
	}
	q.lastFromStatus = fromStatus
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
