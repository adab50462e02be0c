package controller

import (
	"slices"
	"testing"
	"time"

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

func TestSessionQueueHandsOutDeploymentWorkFirst(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	lanes := newLaneQueue(clk)
	q := newSessionQueue("", clk, lanes)
	defer q.ShutDown()

	deferStatus := func(key string) { lanes.markStatusOnly(key); q.Add(key) }
	deferStatus("s1")
	q.Add("d1")
	deferStatus("s2")
	q.Add("d2")
	if !lanes.firstLaneWaiting() {
		t.Error("firstLaneWaiting: false with two keys in the first lane")
	}
	// s2 is promoted: an unmarked add wants more than its status.
	q.Add("s2")
	// A marked add of a key in the first lane leaves it there.
	deferStatus("d1")

	keys, from := drain(t, q, lanes)
	if want := []string{"d1", "d2", "s2", "s1"}; !slices.Equal(keys, want) {
		t.Errorf("handed out %v, want %v", keys, want)
	}
	if want := []lane{firstLane, firstLane, firstLane, statusLane}; !slices.Equal(from, want) {
		t.Errorf("lanes %v, want %v", from, want)
	}
	if lanes.firstLaneWaiting() {
		t.Error("firstLaneWaiting: true with the queue empty")
	}
	if got := lanes.handedFrom("s1"); got != noLane {
		t.Errorf("handedFrom after it was asked: %v, want noLane", got)
	}
}

// A key marked while a worker holds it is queued when the worker is done,
// in the status lane: the workqueue pushes it then, not at the add.
func TestSessionQueueMarkWhileProcessing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	lanes := newLaneQueue(clk)
	q := newSessionQueue("", clk, lanes)
	defer q.ShutDown()

	q.Add("a")
	key, _ := q.Get()
	lanes.handedFrom(key)
	lanes.markStatusOnly("a")
	q.Add("a")
	q.Add("b")
	q.Done("a")
	keys, from := drain(t, q, lanes)
	if want := []string{"b", "a"}; !slices.Equal(keys, want) {
		t.Errorf("handed out %v, want %v", keys, want)
	}
	if want := []lane{firstLane, statusLane}; !slices.Equal(from, want) {
		t.Errorf("lanes %v, want %v", from, want)
	}
}

// The status lane is not starved: once its oldest key has waited
// statusLaneMaxWait, the lanes take turns.
func TestSessionQueueStatusLaneWaitsAtMost(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	lanes := newLaneQueue(clk)
	q := newSessionQueue("", clk, lanes)
	defer q.ShutDown()

	for _, key := range []string{"s1", "s2"} {
		lanes.markStatusOnly(key)
		q.Add(key)
	}
	for _, key := range []string{"d1", "d2", "d3"} {
		q.Add(key)
	}
	next := func() string {
		key, _ := q.Get()
		q.Done(key)
		return key
	}
	if got := next(); got != "d1" {
		t.Fatalf("first: %s, want d1", got)
	}
	clk.Step(statusLaneMaxWait)
	var got []string
	for range 4 {
		got = append(got, next())
	}
	if want := []string{"s1", "d2", "s2", "d3"}; !slices.Equal(got, want) {
		t.Errorf("after the wait: %v, want %v", got, want)
	}
}
