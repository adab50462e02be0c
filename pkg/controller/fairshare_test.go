package controller

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// One tenant's 300-session rollout fills the budget and queues the rest;
// another tenant's one-session fix, refused after all of them, takes the
// next place that frees.
func TestClusterBudgetSharedByNamespace(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	l := newMoveLedger(clk, 4, 0)
	rollout := move{kind: profileMove, to: "h2", named: "tenant-a/arena"}
	for i := range 300 {
		granted, _ := l.admit(fmt.Sprintf("tenant-a/gs-%03d", i), rollout, unlimited)
		if granted != (i < 4) {
			t.Fatalf("tenant-a/gs-%03d granted %t: a rollout alone in the cluster takes the whole budget, and no more", i, granted)
		}
	}
	fix := move{kind: profileMove, to: "f2", named: "tenant-b/lobby"}
	if granted, _ := l.admit("tenant-b/lobby-1", fix, unlimited); granted {
		t.Fatal("tenant-b's fix granted in a full budget")
	}
	share := l.shareOf("tenant-b")
	if want := "at most 4 sessions moving at once, shared by 2 namespaces: tenant-b holds 0 places of its fair share of 2; tenant-a holds 4"; share.String() != want {
		t.Errorf("tenant-b's share says %q, want %q", share, want)
	}
	if got := l.clusterWaitOf("tenant-b/lobby"); !slices.Equal(got, []namespaceWait{
		{namespace: "tenant-b", waiting: 1, held: 0, share: 2}, {namespace: "tenant-a", held: 4, share: 2}}) {
		t.Errorf("the fix's profile waits as %+v", got)
	}

	wake := l.release("tenant-a/gs-000")
	if !slices.Equal(wake.now, []string{"tenant-b/lobby-1"}) {
		t.Fatalf("the first place freed woke %v, want tenant-b's fix before 296 sessions of tenant-a refused before it", wake.now)
	}
	if !slices.Contains(wake.profiles, "tenant-b/lobby") {
		t.Errorf("the fix's profile, none of whose sessions waits any more, is not told: %v", wake.profiles)
	}
	if granted, _ := l.admit("tenant-a/gs-004", rollout, unlimited); granted {
		t.Error("tenant-a took the place kept for tenant-b's fix")
	}
	if granted, _ := l.admit("tenant-b/lobby-1", fix, unlimited); !granted {
		t.Fatal("tenant-b's fix refused the place it was woken for")
	}
	// tenant-b holds 1, tenant-a 3: tenant-a's rollout goes on, in order.
	if wake := l.release("tenant-a/gs-001"); !slices.Equal(wake.now, []string{"tenant-a/gs-004"}) {
		t.Errorf("the next place woke %v, want tenant-a's next session in order", wake.now)
	}
}

// Under a budget per minute alone, the next minute's first move goes to the
// namespace that started the fewest in the last.
func TestClusterRateSharedByNamespace(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	l := newMoveLedger(clk, 0, 3)
	for i := range 3 {
		if granted, _ := l.admit(fmt.Sprintf("tenant-a/gs-%d", i), move{kind: profileMove, to: "h"}, unlimited); !granted {
			t.Fatal("refused within the minute's budget")
		}
	}
	for i := 3; i < 8; i++ {
		_, wake := l.admit(fmt.Sprintf("tenant-a/gs-%d", i), move{kind: profileMove, to: "h"}, unlimited)
		if i == 3 && wake.later != "tenant-a/gs-3" {
			t.Fatalf("the first refused is woken for later %q, want tenant-a/gs-3 itself: nothing else frees the minute", wake.later)
		}
	}
	if granted, wake := l.admit("tenant-b/fix", move{kind: profileMove, to: "f"}, unlimited); granted || wake.later != "" {
		t.Fatalf("granted %t, woken later %q: want refused, and none woken for later but gs-3", granted, wake.later)
	}
	// gs-3 was woken for the first start to leave the minute; the next
	// places after it go by the starts of the minute: tenant-b has none.
	clk.Step(time.Minute)
	granted, wake := l.admit("tenant-a/gs-3", move{kind: profileMove, to: "h"}, unlimited)
	if !granted {
		t.Fatal("the session woken for the freed minute refused")
	}
	if !slices.Equal(wake.now, []string{"tenant-b/fix", "tenant-a/gs-4"}) {
		t.Errorf("the rest of the freed minute woke %v, want tenant-b/fix first, then tenant-a's next", wake.now)
	}
}

// A seeded model of the ledger's cluster limits: random interleavings of
// moves asked for, woken sessions syncing or not, moves ending and failing,
// sessions deleted and time passing, across three namespaces of uneven
// sizes and five budgets. After every step: the budget holds, no room stays
// idle while sessions wait, a session not woken takes no place while
// others wait, and each place a wake hands out goes to the first waiting
// session of a namespace that holds no more places than any other waiting
// one, as the model counts them.
func TestLedgerSequencesShareTheBudgetFairly(t *testing.T) {
	budgets := []struct{ moving, perMinute int }{{1, 0}, {3, 0}, {0, 2}, {2, 4}, {5, 3}}
	namespaces := []struct {
		name     string
		sessions int
	}{{"big", 12}, {"small", 1}, {"mid", 4}}
	const sequences, steps = 2000, 200
	handedOut, contested := 0, 0
	for seed := range uint64(sequences) {
		rng := rand.New(rand.NewPCG(seed, 0xfa1e))
		budget := budgets[rng.IntN(len(budgets))]
		clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
		l := newMoveLedger(clk, budget.moving, budget.perMinute)
		var keys []string
		for _, ns := range namespaces {
			for i := range ns.sessions {
				keys = append(keys, fmt.Sprintf("%s/gs-%d", ns.name, i))
			}
		}
		m := fairModel{moving: map[string]bool{}, kept: map[string]bool{}, queue: nil, budget: budget}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d (budget %+v), step %d: %s", seed, budget, m.step, fmt.Sprintf(format, args...))
		}
		picks := func(wake ledgerWake) {
			picked := slices.Clone(wake.now)
			if wake.later != "" {
				picked = append(picked, wake.later)
			}
			for _, key := range picked {
				if len(m.waitingNamespaces()) > 1 {
					contested++
				}
				if err := m.handOut(key, clk.Now()); err != "" {
					fail("woke %s: %s (wake %+v, queue %v)", key, err, wake, m.queue)
				}
				handedOut++
			}
			if wake.later != "" {
				if m.later != "" && m.later != wake.later && m.kept[m.later] {
					fail("woke %s for later while %s is", wake.later, m.later)
				}
				m.later = wake.later
			}
		}
		holds := func() {
			if wrong := l.books(); wrong != "" {
				fail("the ledger's books: %s", wrong)
			}
			if moving, waiting := l.counts(); moving != len(m.moving) || waiting != len(m.queue) {
				fail("ledger counts %d moving, %d waiting; the model %d, %d", moving, waiting, len(m.moving), len(m.queue))
			}
			if budget.moving > 0 && len(m.moving) > budget.moving {
				fail("%d moving, the budget allows %d", len(m.moving), budget.moving)
			}
			if budget.perMinute > 0 && m.startedWithin(clk.Now(), "") > budget.perMinute {
				fail("%d moves within a minute, the budget allows %d", m.startedWithin(clk.Now(), ""), budget.perMinute)
			}
			// Room the minute frees is handed out at the next ask or end
			// of a move; room a move's end frees, at once.
			if budget.perMinute == 0 && len(m.queue) > 0 && m.room(clk.Now()) > len(m.kept) {
				fail("room for %d idle while %v wait", m.room(clk.Now())-len(m.kept), m.queue)
			}
		}
		check := func(wake ledgerWake) {
			picks(wake)
			holds()
		}
		for m.step = 0; m.step < steps; m.step++ {
			key := keys[rng.IntN(len(keys))]
			r := rng.IntN(10)
			switch {
			case r < 4: // the session's sync asks for a move
				wasQueued := slices.Contains(m.queue, key)
				granted, wake := l.admit(key, move{kind: profileMove, to: fmt.Sprint(m.step), named: profileNamedBy(key)}, unlimited)
				switch {
				case granted && !m.kept[key] && !m.moving[key] && len(m.queue) > 0:
					fail("%s, neither woken nor moving, took a place while %v wait", key, m.queue)
				case granted:
					m.start(key, clk.Now())
				default:
					// Refused: a place kept for it is given up, and it
					// waits at the end of its namespace's queue, from
					// where the wake that follows may take it again.
					delete(m.kept, key)
					if m.later == key {
						m.later = ""
					}
					if !wasQueued {
						m.queue = append(m.queue, key)
					}
				}
				picks(wake)
				holds()
			case r < 6: // its move ends
				if m.moving[key] {
					delete(m.moving, key)
				}
				check(l.release(key))
			case r < 7: // a woken session's sync asks for nothing
				delete(m.kept, key)
				if m.later == key {
					m.later = ""
				}
				check(l.sweep(key))
			case r < 8: // the session is deleted
				delete(m.moving, key)
				delete(m.kept, key)
				if m.later == key {
					m.later = ""
				}
				m.queue = slices.DeleteFunc(m.queue, func(k string) bool { return k == key })
				check(l.forget(key))
			default: // time passes
				clk.Step(time.Duration(rng.IntN(40)) * time.Second)
			}
		}
	}
	if contested < sequences {
		t.Errorf("only %d of %d places handed out while other namespaces waited: the sequences hardly test the fair queue", contested, handedOut)
	}
	t.Logf("%d sequences: %d places handed out by wakes, %d of them while another namespace waited", sequences, handedOut, contested)
}

// fairModel is what TestLedgerSequencesShareTheBudgetFairly expects of the
// ledger's cluster limits, counted on its own.
type fairModel struct {
	step   int
	budget struct{ moving, perMinute int }
	moving map[string]bool
	// kept are the sessions woken and not yet synced, queue the waiting
	// ones in the order they were refused.
	kept   map[string]bool
	queue  []string
	starts []moveStarted
	// later is the session woken for when the minute frees room.
	later string
}

func (m *fairModel) start(key string, now time.Time) {
	delete(m.kept, key)
	m.queue = slices.DeleteFunc(m.queue, func(k string) bool { return k == key })
	if !m.moving[key] {
		m.moving[key] = true
	}
	m.starts = append(m.starts, moveStarted{at: now, namespace: namespaceOfKey(key)})
}

// startedWithin counts the moves of namespace ("" for all) started within
// the minute.
func (m *fairModel) startedWithin(now time.Time, namespace string) int {
	n := 0
	for _, s := range m.starts {
		if now.Sub(s.at) < time.Minute && (namespace == "" || s.namespace == namespace) {
			n++
		}
	}
	return n
}

func (m *fairModel) usage(namespace string, now time.Time) int {
	u := 0
	for key := range m.kept {
		if namespaceOfKey(key) == namespace {
			u++
		}
	}
	if m.budget.moving > 0 {
		for key := range m.moving {
			if namespaceOfKey(key) == namespace {
				u++
			}
		}
	}
	if m.budget.perMinute > 0 {
		u += m.startedWithin(now, namespace)
	}
	return u
}

func (m *fairModel) waitingNamespaces() []string {
	set := map[string]bool{}
	for _, key := range m.queue {
		set[namespaceOfKey(key)] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// room is how many more sessions the budget lets move now.
func (m *fairModel) room(now time.Time) int {
	room := 1 << 30
	if m.budget.moving > 0 {
		room = min(room, m.budget.moving-len(m.moving))
	}
	if m.budget.perMinute > 0 {
		room = min(room, m.budget.perMinute-m.startedWithin(now, ""))
	}
	return max(0, room)
}

// handOut checks a place the ledger hands out to key: key waits, is the
// first of its namespace to, and its namespace holds no more places than
// any other that waits. It records the place kept.
func (m *fairModel) handOut(key string, now time.Time) string {
	i := slices.Index(m.queue, key)
	if i < 0 {
		return "it does not wait"
	}
	ns := namespaceOfKey(key)
	for _, k := range m.queue[:i] {
		if namespaceOfKey(k) == ns {
			return fmt.Sprintf("%s of its namespace waits before it", k)
		}
	}
	for _, other := range m.waitingNamespaces() {
		if other != ns && m.usage(other, now) < m.usage(ns, now) {
			return fmt.Sprintf("namespace %s holds %d places, %s waits with %d", ns, m.usage(ns, now), other, m.usage(other, now))
		}
	}
	m.queue = slices.Delete(m.queue, i, i+1)
	m.kept[key] = true
	return ""
}

// profileNamedBy is the profile the model's session of key names: by the
// last digit of its name, each profile has sessions in several namespaces,
// as one shared by grant.
func profileNamedBy(key string) string {
	return "shared/p" + key[len(key)-1:]
}

// books checks that the ledger's counts agree with its moves and queues:
// the cluster places by namespace, the input moves by profile, the places
// kept, the starts of the minute, the fair queue's tickets and its count by
// profile and namespace. "" if they do.
func (l *moveLedger) books() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	moving, profiles, inputs := map[string]int{}, map[string]int{}, map[string]int{}
	total := 0
	for key, m := range l.moves {
		if m.kind == inputMove {
			inputs[m.profile]++
		}
		if !m.stalled {
			moving[namespaceOfKey(key)]++
			total++
		}
		if m.hasProfilePlace() {
			profiles[m.profile]++
		}
	}
	kept := map[string]int{}
	for key := range l.reserved {
		kept[namespaceOfKey(key)]++
	}
	started := map[string]int{}
	for _, s := range l.starts {
		started[s.namespace]++
	}
	byProfile := map[string]map[string]int{}
	for key, s := range l.clusterQueue.queued {
		if s.profile != "" {
			if byProfile[s.profile] == nil {
				byProfile[s.profile] = map[string]int{}
			}
			byProfile[s.profile][namespaceOfKey(key)]++
		}
		found := false
		for _, k := range l.clusterQueue.byNamespace[namespaceOfKey(key)] {
			found = found || k.key == key && k.ticket == s.ticket
		}
		switch {
		case !found:
			return fmt.Sprintf("%s waits, but not in its namespace's queue", key)
		case l.reserved[key]:
			return fmt.Sprintf("%s waits with a place kept for it", key)
		}
	}
	switch {
	case total != l.clusterMoving || !maps.Equal(moving, l.nsMoving):
		return fmt.Sprintf("cluster places %d by namespace %v, the moves hold %d by namespace %v", l.clusterMoving, l.nsMoving, total, moving)
	case !maps.Equal(profiles, l.profileMoving):
		return fmt.Sprintf("profile places %v, the moves hold %v", l.profileMoving, profiles)
	case !maps.Equal(inputs, l.inputsMoving):
		return fmt.Sprintf("input moves by profile %v, the moves hold %v", l.inputsMoving, inputs)
	case !maps.Equal(kept, l.nsKept):
		return fmt.Sprintf("kept places by namespace %v, the kept sessions %v", l.nsKept, kept)
	case !maps.Equal(started, l.nsStarted):
		return fmt.Sprintf("starts by namespace %v, the starts of the minute %v", l.nsStarted, started)
	case !maps.EqualFunc(byProfile, l.clusterQueue.waitingOf, maps.Equal):
		return fmt.Sprintf("waiting by profile and namespace %v, the queue holds %v", l.clusterQueue.waitingOf, byProfile)
	case l.wokenLater != "" && !l.reserved[l.wokenLater]:
		return fmt.Sprintf("%s is woken for later without a place kept", l.wokenLater)
	}
	return ""
}
