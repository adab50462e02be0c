package controller

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// fairQueue holds the sessions that wait for a place in the cluster's
// limits, one queue per namespace, in the spirit of API Priority and
// Fairness: the namespaces are the flows, and a place that frees goes to the
// waiting session of the namespace that holds the fewest places
// (moveLedger.usageLocked), the first it refused; of namespaces that hold as
// many, the one that has waited longest. So a namespace never waits behind
// another's rollout for more than its share: one tenant's fix takes the next
// place that frees however many sessions another tenant's rollout queued
// before it, and a namespace alone in the queue takes every place. Moves
// under way are never cut short to make room (a restart cannot be undone),
// so a namespace's wait for its first place lasts until one frees.
//
// A session names its namespace in its key. A profile shared across
// namespaces by grant is as many flows as namespaces: its sessions in a
// tenant's namespace take the tenant's share, not the platform's.
type fairQueue struct {
	// byNamespace are the sessions in the order each namespace's were
	// refused. One removed from queued, or queued again since (another
	// ticket), is dropped from them lazily.
	byNamespace map[string][]queuedKey
	queued      map[string]queuedSession
	tickets     uint64
	// waitingOf counts the queued sessions by the profile they name, then
	// by namespace, for the profiles' ProfileRollouts: kept as sessions
	// join and leave, so that a plan reads them without walking the queue.
	waitingOf map[string]map[string]int
}

// queuedKey is a session's place in its namespace's queue.
type queuedKey struct {
	key    string
	ticket uint64
}

// queuedSession is a session in the queue: when it joined (a ticket, in
// order) and the profile it names.
type queuedSession struct {
	ticket  uint64
	profile string
}

func newFairQueue() fairQueue {
	return fairQueue{byNamespace: map[string][]queuedKey{}, queued: map[string]queuedSession{}, waitingOf: map[string]map[string]int{}}
}

// namespaceOfKey is the namespace of a session's key.
func namespaceOfKey(key string) string {
	namespace, _, _ := strings.Cut(key, "/")
	return namespace
}

// len is how many sessions wait.
func (q *fairQueue) len() int { return len(q.queued) }

// has reports whether the session waits.
func (q *fairQueue) has(key string) bool {
	_, ok := q.queued[key]
	return ok
}

// push queues the session at the end of its namespace's queue, unless it
// waits already. It reports whether its profile had no session waiting
// before.
func (q *fairQueue) push(key, profile string) (firstOfProfile bool) {
	if q.has(key) {
		return false
	}
	q.tickets++
	q.queued[key] = queuedSession{ticket: q.tickets, profile: profile}
	namespace := namespaceOfKey(key)
	q.byNamespace[namespace] = append(q.byNamespace[namespace], queuedKey{key: key, ticket: q.tickets})
	if profile == "" {
		return false
	}
	byNamespace, waiting := q.waitingOf[profile]
	if !waiting {
		byNamespace = map[string]int{}
		q.waitingOf[profile] = byNamespace
	}
	byNamespace[namespace]++
	return !waiting
}

// remove takes the session out of the queue. It reports the profile it
// named if no other session of that profile waits any more.
func (q *fairQueue) remove(key string) (lastOfProfile string, ok bool) {
	s, queued := q.queued[key]
	if !queued {
		return "", false
	}
	delete(q.queued, key)
	if s.profile == "" {
		return "", false
	}
	byNamespace := q.waitingOf[s.profile]
	if decrement(byNamespace, namespaceOfKey(key)); len(byNamespace) > 0 {
		return "", false
	}
	delete(q.waitingOf, s.profile)
	return s.profile, true
}

// head is the first session still queued of the namespace, its stale keys
// dropped.
func (q *fairQueue) head(namespace string) (string, queuedSession, bool) {
	keys := q.byNamespace[namespace]
	for len(keys) > 0 {
		if s, ok := q.queued[keys[0].key]; ok && s.ticket == keys[0].ticket {
			q.byNamespace[namespace] = keys
			return keys[0].key, s, true
		}
		keys = keys[1:]
	}
	delete(q.byNamespace, namespace)
	return "", queuedSession{}, false
}

// next is the session due the next place: the first of the namespace that
// holds the fewest places by usage, of those that hold as many the one
// whose first session has waited longest. It stays queued.
func (q *fairQueue) next(usage func(namespace string) int) (string, bool) {
	var best string
	var bestTicket uint64
	bestUsage := -1
	// head may delete the namespace it is asked of from byNamespace: an
	// entry deleted once the range reached it changes nothing in the range.
	for namespace := range q.byNamespace {
		key, s, ok := q.head(namespace)
		if !ok {
			continue
		}
		u := usage(namespace)
		if bestUsage < 0 || u < bestUsage || (u == bestUsage && s.ticket < bestTicket) {
			best, bestTicket, bestUsage = key, s.ticket, u
		}
	}
	return best, bestUsage >= 0
}

// waitingIn counts, by namespace, the sessions that wait and name profile;
// nil if none does. The map is the queue's: the caller only reads it, under
// the ledger's lock.
func (q *fairQueue) waitingIn(profile string) map[string]int {
	return q.waitingOf[profile]
}

// namespaces are the namespaces that have sessions waiting.
func (q *fairQueue) namespaces() []string {
	var out []string
	for namespace := range q.byNamespace {
		if _, _, ok := q.head(namespace); ok {
			out = append(out, namespace)
		}
	}
	return out
}

// budgetShare is where a namespace stands in the cluster's limits: the
// message of a session that waits for them says whose share it waits for.
type budgetShare struct {
	// limits is the budget as the flags set it; "" without limits.
	limits string
	// unit names what a place is: a session moving, or a move started
	// within the minute when only the budget per minute limits.
	unit      string
	namespace string
	// held is how many places the namespace holds, share how many it is
	// due while every namespace that moves or waits wants more, sharedBy
	// the number of those namespaces.
	held, share, sharedBy int
	// beyond are the namespaces that hold more than their share, most
	// first, at most three.
	beyond []namespacePlaces
}

// namespacePlaces is a namespace and the places it holds.
type namespacePlaces struct {
	namespace string
	held      int
}

func (b budgetShare) String() string {
	if b.limits == "" {
		return ""
	}
	var s strings.Builder
	s.WriteString(b.limits)
	if b.sharedBy <= 1 {
		fmt.Fprintf(&s, "; namespace %s holds %d %s", b.namespace, b.held, b.unit)
		return s.String()
	}
	fmt.Fprintf(&s, ", shared by %d namespaces: %s holds %d %s of its fair share of %d", b.sharedBy, b.namespace, b.held, b.unit, b.share)
	for _, o := range b.beyond {
		fmt.Fprintf(&s, "; %s holds %d", o.namespace, o.held)
	}
	return s.String()
}

// shareLocked is where namespace stands in the cluster's limits. The share
// divides the tighter limit among the namespaces that hold a place or wait
// for one, namespace among them.
func (l *moveLedger) shareLocked(namespace string) budgetShare {
	if !l.limited() {
		return budgetShare{}
	}
	l.rateRoomLocked(l.clock.Now()) // forget the starts older than a minute
	limit, unit := l.maxMoving, "places"
	if limit == 0 {
		limit, unit = l.perMinute, "moves of the minute"
	}
	active := map[string]bool{namespace: true}
	for ns, n := range l.nsMoving {
		if n > 0 {
			active[ns] = true
		}
	}
	for ns, n := range l.nsStarted {
		if n > 0 && l.perMinute > 0 {
			active[ns] = true
		}
	}
	for ns, n := range l.nsKept {
		if n > 0 {
			active[ns] = true
		}
	}
	for _, ns := range l.clusterQueue.namespaces() {
		active[ns] = true
	}
	b := budgetShare{limits: l.String(), unit: unit, namespace: namespace, held: l.usageLocked(namespace),
		sharedBy: len(active)}
	b.share = (limit + b.sharedBy - 1) / b.sharedBy
	for ns := range active {
		if held := l.usageLocked(ns); ns != namespace && held > b.share {
			b.beyond = append(b.beyond, namespacePlaces{namespace: ns, held: held})
		}
	}
	slices.SortFunc(b.beyond, func(a, c namespacePlaces) int {
		return cmp.Or(cmp.Compare(c.held, a.held), cmp.Compare(a.namespace, c.namespace))
	})
	b.beyond = b.beyond[:min(3, len(b.beyond))]
	return b
}

// shareOf is where namespace stands in the cluster's limits.
func (l *moveLedger) shareOf(namespace string) budgetShare {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shareLocked(namespace)
}

// usageLocked is how many places of the cluster's limits the namespace
// holds, by which the fair queue serves it: its sessions moving (under
// --max-moving-sessions), its moves started within the minute (under
// --max-moves-per-minute), and the places kept for its woken sessions.
func (l *moveLedger) usageLocked(namespace string) int {
	u := l.nsKept[namespace]
	if l.maxMoving > 0 {
		u += l.nsMoving[namespace]
	}
	if l.perMinute > 0 {
		u += l.nsStarted[namespace]
	}
	return u
}

// clusterWaitOf is where the profile's sessions that wait for the cluster's
// limits stand: each namespace of them, with how many of them wait there,
// and each namespace that holds more than its share. Nil when none waits.
func (l *moveLedger) clusterWaitOf(profile string) []namespaceWait {
	l.mu.Lock()
	defer l.mu.Unlock()
	waiting := l.clusterQueue.waitingIn(profile)
	if len(waiting) == 0 {
		return nil
	}
	// Each namespace once, in an order of its own: a waiting namespace may
	// also be beyond another's share, and a map's order would make the
	// ProfileRollout's status differ from one plan to the next.
	namespaces := slices.Sorted(maps.Keys(waiting))
	seen := make(map[string]bool, len(namespaces))
	for _, namespace := range namespaces {
		seen[namespace] = true
	}
	var out []namespaceWait
	for _, namespace := range namespaces {
		b := l.shareLocked(namespace)
		out = append(out, namespaceWait{namespace: namespace, waiting: waiting[namespace], held: b.held, share: b.share})
		for _, o := range b.beyond {
			if !seen[o.namespace] {
				seen[o.namespace] = true
				out = append(out, namespaceWait{namespace: o.namespace, held: o.held, share: b.share})
			}
		}
	}
	slices.SortFunc(out, func(a, b namespaceWait) int {
		return cmp.Or(cmp.Compare(b.waiting, a.waiting), cmp.Compare(b.held, a.held), cmp.Compare(a.namespace, b.namespace))
	})
	return out
}

// namespaceWait is a namespace in a profile's wait for the cluster's
// limits: how many of the profile's sessions wait there, how many places it
// holds, and its fair share.
type namespaceWait struct {
	namespace            string
	waiting, held, share int
}
