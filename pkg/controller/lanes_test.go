package controller

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

// drain hands out every queued key, marking each Done at once, and returns
// them with the lane each came from.
func drain(t *testing.T, q interface {
	Get() (string, bool)
	Done(string)
	Len() int
}, lanes sessionLanes) (keys []string, from []lane) {
	t.Helper()
	for q.Len() > 0 {
		key, shutdown := q.Get()
		if shutdown {
			t.Fatal("queue shut down")
		}
		keys = append(keys, key)
		from = append(from, lanes.handedFrom(key))
		q.Done(key)
	}
	return keys, from
}

// expectDrained drains the queue and checks the keys it handed out, in
// order, and the lane each came from.
func expectDrained(t *testing.T, q interface {
	Get() (string, bool)
	Done(string)
	Len() int
}, lanes sessionLanes, keys []string, from []lane) {
	t.Helper()
	gotKeys, gotFrom := drain(t, q, lanes)
	if !slices.Equal(gotKeys, keys) {
		t.Errorf("handed out %v, want %v", gotKeys, keys)
	}
	if !slices.Equal(gotFrom, from) {
		t.Errorf("lanes %v, want %v", gotFrom, from)
	}
}

func TestSessionQueueHandsOutDeploymentWorkFirst(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := newSessionQueue("", clk)
	defer q.ShutDown()

	lanes.addStatusOnly("s1")
	q.Add("d1")
	lanes.addStatusOnly("s2")
	q.Add("d2")
	if !lanes.firstLaneWaiting() {
		t.Error("firstLaneWaiting: false with two keys in the first lane")
	}
	// s2 is promoted: an unmarked add wants more than its status.
	q.Add("s2")
	// A status-only add of a key in the first lane leaves it there.
	lanes.addStatusOnly("d1")

	expectDrained(t, q, lanes, []string{"d1", "d2", "s2", "s1"}, []lane{firstLane, firstLane, firstLane, statusLane})
	if lanes.firstLaneWaiting() {
		t.Error("firstLaneWaiting: true with the queue empty")
	}
	if got := lanes.handedFrom("s1"); got != noLane {
		t.Errorf("handedFrom after it was asked: %v, want noLane", got)
	}
}

// A key added status-only while a worker holds it is queued when the worker
// is done, in the status lane: the workqueue pushes it then, not at the add.
func TestSessionQueueStatusOnlyAddWhileProcessing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := newSessionQueue("", clk)
	defer q.ShutDown()

	q.Add("a")
	key, _ := q.Get()
	lanes.handedFrom(key)
	lanes.addStatusOnly("a")
	q.Add("b")
	q.Done("a")
	expectDrained(t, q, lanes, []string{"b", "a"}, []lane{firstLane, statusLane})
}

// The status lane is not starved: once its oldest key has waited
// statusLaneMaxWait, it gets one key for every firstLanePerStatusKey keys of
// the first lane, and the first lane keeps the rest.
func TestSessionQueueStatusLaneWaitsAtMost(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := newSessionQueue("", clk)
	defer q.ShutDown()

	for _, key := range []string{"s1", "s2", "s3"} {
		lanes.addStatusOnly(key)
	}
	var first []string
	for i := range 2*firstLanePerStatusKey + 1 {
		first = append(first, fmt.Sprintf("d%d", i+1))
		q.Add(first[i])
	}
	next := func() string {
		key, _ := q.Get()
		q.Done(key)
		return key
	}
	if got := next(); got != "d1" {
		t.Fatalf("first: %s, want d1", got)
	}
	// Short of the bound, the first lane goes first.
	clk.Step(statusLaneMaxWait - time.Second)
	if got := next(); got != "d2" {
		t.Fatalf("before the wait: %s, want d2", got)
	}
	clk.Step(time.Second)
	var got []string
	for q.Len() > 0 {
		got = append(got, next())
	}
	// d2 counts: the status lane's first key comes after firstLanePerStatusKey
	// keys of the first lane, its second as many keys later, and its last
	// when the first lane is empty.
	want := slices.Concat(first[2:firstLanePerStatusKey], []string{"s1"},
		first[firstLanePerStatusKey:2*firstLanePerStatusKey], []string{"s2"},
		first[2*firstLanePerStatusKey:], []string{"s3"})
	if !slices.Equal(got, want) {
		t.Errorf("after the wait: %v, want %v", got, want)
	}
}

// An event that wants a full sync (a user's edit of the Deployment) and
// lands while a worker holds the key keeps it in the first lane, even if the
// worker's sync then defers its status: the workqueue pushes the key once,
// at Done, for both adds.
func TestSessionQueueAddWhileProcessingKeepsFirstLane(t *testing.T) {
	for _, tc := range []struct {
		name string
		adds func(q workqueue.TypedRateLimitingInterface[string], lanes *laneQueue)
	}{
		{"event, then the status deferred", func(q workqueue.TypedRateLimitingInterface[string], lanes *laneQueue) {
			q.Add("a")
			lanes.addStatusOnly("a")
		}},
		{"the status deferred, then event", func(q workqueue.TypedRateLimitingInterface[string], lanes *laneQueue) {
			lanes.addStatusOnly("a")
			q.Add("a")
		}},
		{"event through the delaying queue", func(q workqueue.TypedRateLimitingInterface[string], lanes *laneQueue) {
			q.AddAfter("a", 0)
			lanes.addStatusOnly("a")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			q, lanes := newSessionQueue("", clk)
			defer q.ShutDown()

			lanes.addStatusOnly("s")
			q.Add("a")
			if key, _ := q.Get(); key != "a" {
				t.Fatalf("handed out %s, want a", key)
			}
			lanes.handedFrom("a")
			tc.adds(q, lanes)
			q.Done("a")

			expectDrained(t, q, lanes, []string{"a", "s"}, []lane{firstLane, statusLane})
			if len(lanes.adds) != 0 || len(lanes.handed) != 0 {
				t.Errorf("state left with the queue empty: adds %v, handed %v", lanes.adds, lanes.handed)
			}
		})
	}
}

// Adds from many goroutines while a worker holds the key: whatever their
// order, one that is not status-only keeps the key in the first lane.
func TestSessionQueueConcurrentAddsWhileProcessing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := newSessionQueue("", clk)
	defer q.ShutDown()

	lanes.addStatusOnly("s")
	q.Add("a")
	q.Get()
	lanes.handedFrom("a")
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 7 {
				q.Add("a")
				return
			}
			lanes.addStatusOnly("a")
		}()
	}
	wg.Wait()
	q.Done("a")

	expectDrained(t, q, lanes, []string{"a", "s"}, []lane{firstLane, statusLane})
	if len(lanes.adds) != 0 {
		t.Errorf("adds left with the queue empty: %v", lanes.adds)
	}
}
