package controller

import (
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestClusterBudgetMovingAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newClusterBudget(clk, 2, 0)
	for _, key := range []string{"ns/a", "ns/b"} {
		if ok, _ := b.admit(key, "h1"); !ok {
			t.Fatalf("%s refused with room left", key)
		}
	}
	for _, key := range []string{"ns/c", "ns/d"} {
		if ok, wake := b.admit(key, "h1"); ok || len(wake.now) > 0 || wake.later != "" {
			t.Fatalf("%s: granted %v, wake %+v; want refused, no wake while two move", key, ok, wake)
		}
	}
	if ok, _ := b.admit("ns/a", "h1"); !ok {
		t.Error("a move granted before is granted again")
	}
	if ok, _ := b.admit("ns/a", "h2"); !ok {
		t.Error("a moving session's next move takes its own place, and was refused")
	}
	if wake := b.release("ns/b"); !slices.Equal(wake.now, []string{"ns/c"}) {
		t.Errorf("release woke %v, want the first waiting, ns/c", wake.now)
	}
	if ok, _ := b.admit("ns/d", "h1"); ok {
		t.Error("ns/d took the place woken for ns/c")
	}
	if ok, _ := b.admit("ns/c", "h1"); !ok {
		t.Error("ns/c refused the place it was woken for")
	}
	if wake := b.forget("ns/d"); len(wake.now) > 0 {
		t.Errorf("forgetting a waiting session woke %v", wake.now)
	}
	if moving, waiting := b.counts(); moving != 2 || waiting != 0 {
		t.Errorf("counts: %d moving, %d waiting; want 2, 0", moving, waiting)
	}
}

func TestClusterBudgetPerMinuteWakesLater(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newClusterBudget(clk, 0, 2)
	b.admit("ns/a", "h")
	clk.Step(10 * time.Second)
	b.admit("ns/b", "h")
	ok, wake := b.admit("ns/c", "h")
	if ok || wake.later != "ns/c" || wake.after != 50*time.Second {
		t.Fatalf("third move in a minute: granted %v, wake %+v; want refused, ns/c woken in 50s", ok, wake)
	}
	b.release("ns/a") // Ready: frees no start within the minute
	if ok, _ := b.admit("ns/c", "h"); ok {
		t.Error("a release made room in the budget per minute")
	}
	clk.Step(50 * time.Second)
	if ok, _ := b.admit("ns/c", "h"); !ok {
		t.Error("refused a minute after the first start")
	}
}

func TestClusterBudgetSeedCountsAsStarted(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	b := newClusterBudget(clk, 3, 3)
	b.seed(map[string]string{"ns/a": "h", "ns/b": "h"})
	if ok, _ := b.admit("ns/c", "h"); !ok {
		t.Fatal("refused with one place left")
	}
	if ok, _ := b.admit("ns/d", "h"); ok {
		t.Error("granted past the seeded moves")
	}
	b.release("ns/a")
	if ok, _ := b.admit("ns/d", "h"); ok {
		t.Error("a seeded move counts as started this minute: no fourth start")
	}
	clk.Step(time.Minute)
	if ok, _ := b.admit("ns/b", "h2"); ok {
		t.Error("a session found rolling moved without a place of its own")
	}
	b.release("ns/c")
	if ok, _ := b.admit("ns/b", "h2"); !ok {
		t.Error("a session found rolling refused a free place")
	}
	if unlimited := newClusterBudget(clk, 0, 0); unlimited.limited() {
		t.Error("a budget of zeros limits")
	}
}
