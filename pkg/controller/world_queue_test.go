package controller

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

// stepQueue is the controller's work queue in a sequence. It keeps the
// workqueue's contract (a key is queued once, and never handed out while it
// is being processed) but nothing happens by itself: delayed keys wait until
// the sequence moves the fake clock past them, and Get never blocks.
//
// Keys the controller adds during one handler call or sync are queued in
// sorted order when the call ends: a handler that enqueues the sessions of a
// profile reads them from an index in map order, and a sequence must replay
// the same way every time.
type stepQueue struct {
	mu    sync.Mutex
	clock *clocktesting.FakeClock
	// pick chooses which of the first n ready keys Get hands out; with more
	// than one worker, the oldest key is not always the next one synced.
	pick func(n int) int
	// onGet hears of each key handed out.
	onGet func(key string)

	ready      []string
	dirty      map[string]bool
	processing map[string]bool
	waiting    map[string]time.Time
	requeues   map[string]int
	shutDown   bool

	inCall  bool
	staged  []string
	limited []string // keys rate-limited during the current call

	// The lanes, as laneQueue keeps them: adds holds the adds not yet seen
	// by a push or touch, inStatusLane the ready keys of the status lane,
	// handed the lane of each key handed out.
	adds         addsSince
	inStatusLane map[string]bool
	handed       map[string]lane
	// deferred holds the keys added status-only since the last takeDeferred.
	deferred map[string]bool
}

var (
	_ workqueue.TypedRateLimitingInterface[string] = &stepQueue{}
	_ sessionLanes                                 = &stepQueue{}
)

func newStepQueue(clk *clocktesting.FakeClock, pick func(n int) int) *stepQueue {
	return &stepQueue{
		clock: clk, pick: pick,
		dirty: map[string]bool{}, processing: map[string]bool{},
		waiting: map[string]time.Time{}, requeues: map[string]int{},
		adds: addsSince{}, inStatusLane: map[string]bool{}, handed: map[string]lane{}, deferred: map[string]bool{},
	}
}

// call runs fn, one controller entry point, and then queues what it added.
// It returns the keys fn rate-limited, that is, the syncs that failed.
func (q *stepQueue) call(fn func()) []string {
	q.mu.Lock()
	q.inCall, q.staged, q.limited = true, nil, nil
	q.mu.Unlock()
	fn()
	q.mu.Lock()
	defer q.mu.Unlock()
	staged := q.staged
	q.inCall, q.staged = false, nil
	slices.Sort(staged)
	for _, key := range staged {
		q.addLocked(key)
	}
	return q.limited
}

// queued reports whether key is queued, ready or not yet handed out.
func (q *stepQueue) queued(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dirty[key]
}

// Add notes the add at once, as laneQueue does before the workqueue acts
// on it, even if it is staged until the call ends.
func (q *stepQueue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.adds.note(key, false)
	q.stageLocked(key)
}

func (q *stepQueue) stageLocked(key string) {
	if q.inCall {
		q.staged = append(q.staged, key)
		return
	}
	q.addLocked(key)
}

// addLocked follows the workqueue's Add, and calls push and touch where it
// calls the storage's Push and Touch.
func (q *stepQueue) addLocked(key string) {
	if q.shutDown {
		return
	}
	if q.dirty[key] {
		if !q.processing[key] {
			q.touch(key)
		}
		return
	}
	q.dirty[key] = true
	if !q.processing[key] {
		q.push(key)
	}
}

func (q *stepQueue) push(key string) {
	q.ready = append(q.ready, key)
	if statusOnly, _ := q.adds.take(key); statusOnly {
		q.inStatusLane[key] = true
	}
}

func (q *stepQueue) touch(key string) {
	if statusOnly, added := q.adds.take(key); added && !statusOnly {
		delete(q.inStatusLane, key)
	}
}

func (q *stepQueue) addStatusOnly(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.adds.note(key, true)
	q.deferred[key] = true
	q.stageLocked(key)
}

// takeDeferred reports whether key was added status-only since it was last
// asked, and forgets it.
func (q *stepQueue) takeDeferred(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	deferred := q.deferred[key]
	delete(q.deferred, key)
	return deferred
}

func (q *stepQueue) handedFrom(key string) lane {
	q.mu.Lock()
	defer q.mu.Unlock()
	from := q.handed[key]
	delete(q.handed, key)
	return from
}

func (q *stepQueue) firstLaneWaiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready) > len(q.inStatusLane)
}

func (q *stepQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// Get hands out a ready key. The sequence calls it only when there is one;
// blocking would hang the test.
func (q *stepQueue) Get() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutDown && len(q.ready) == 0 {
		return "", true
	}
	if len(q.ready) == 0 {
		panic("harness: Get on an empty queue")
	}
	// The first lane's keys go first; within a lane, one of the oldest two.
	lane := make([]int, 0, 2)
	fromStatus := len(q.ready) == len(q.inStatusLane)
	for i, key := range q.ready {
		if len(lane) < 2 && q.inStatusLane[key] == fromStatus {
			lane = append(lane, i)
		}
	}
	i := lane[q.pick(len(lane))]
	key := q.ready[i]
	q.ready = slices.Delete(q.ready, i, i+1)
	delete(q.inStatusLane, key)
	q.handed[key] = firstLane
	if fromStatus {
		q.handed[key] = statusLane
	}
	q.processing[key] = true
	delete(q.dirty, key)
	if q.onGet != nil {
		q.onGet(key)
	}
	return key, false
}

func (q *stepQueue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		q.push(key)
	}
}

func (q *stepQueue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutDown = true
}

func (q *stepQueue) ShutDownWithDrain() { q.ShutDown() }

func (q *stepQueue) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shutDown
}

// AddAfter keeps the earlier time if the key already waits, as the
// workqueue's delaying queue does.
func (q *stepQueue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	at := q.clock.Now().Add(d)
	if t, ok := q.waiting[key]; !ok || at.Before(t) {
		q.waiting[key] = at
	}
}

// AddRateLimited backs off per key as client-go's default controller rate
// limiter does: 5ms, doubling with every failure.
func (q *stepQueue) AddRateLimited(key string) {
	q.mu.Lock()
	n := q.requeues[key]
	q.requeues[key] = n + 1
	q.limited = append(q.limited, key)
	q.mu.Unlock()
	q.AddAfter(key, min(5*time.Millisecond<<min(n, 30), 1000*time.Second))
}

func (q *stepQueue) Forget(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.requeues, key)
}

func (q *stepQueue) NumRequeues(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.requeues[key]
}

// hasReady reports whether Get would hand out a key.
func (q *stepQueue) hasReady() bool { return q.Len() > 0 }

// nextWaiting returns when the next delayed key becomes ready.
func (q *stepQueue) nextWaiting() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var next time.Time
	for _, t := range q.waiting {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next, !next.IsZero()
}

// release queues the delayed keys whose time has come, earliest first.
func (q *stepQueue) release() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	var due []string
	for key, t := range q.waiting {
		if !t.After(now) {
			due = append(due, key)
		}
	}
	slices.SortFunc(due, func(a, b string) int {
		return cmp.Or(q.waiting[a].Compare(q.waiting[b]), cmp.Compare(a, b))
	})
	for _, key := range due {
		delete(q.waiting, key)
		q.adds.note(key, false)
		q.addLocked(key)
	}
	return due
}

// waitingKeys returns the delayed keys, in order.
func (q *stepQueue) waitingKeys() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Sorted(maps.Keys(q.waiting))
}
