package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Fair shares, checked around every call into the controller. Under the
// cluster's limits a place goes to a session in one of two ways: woken off
// the fair queue with a place kept for it, or let straight through when
// nobody waits. So the ledger, as it stands before and after each call,
// tells every place the call handed out, and who it passed over: the
// namespaces with a session that waited before the call and waits still.
// What the invariant holds the controller to (fair-share):
//   - no session takes a place straight through while another waits (the
//     queue is first);
//   - a place goes to a namespace only while it holds no more places than
//     each namespace it passes over: so after the call it holds at most one
//     more than they do. (Places it held before the others began to wait
//     are its own: moves under way are never cut short.)
//
// The ledger's counts themselves are checked by books after every call.

// ledgerView is what the invariant reads of the ledger.
type ledgerView struct {
	limited bool
	// waiting are the sessions in the fair queue, by key, with their
	// tickets; kept, those woken with a place kept; placed, those moving
	// with a place of their own (not found rolling at the start, not
	// stalled).
	waiting map[string]uint64
	kept    map[string]bool
	placed  map[string]bool
	// usage is the places each namespace holds, as the fair queue counts
	// them; perMove, how many of them a move takes (one among those
	// moving, one among the starts of the minute, as the limits count).
	usage   map[string]int
	perMove int
}

func viewLedger(l *moveLedger) ledgerView {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := ledgerView{limited: l.limited(), waiting: map[string]uint64{}, kept: map[string]bool{}, placed: map[string]bool{},
		usage: map[string]int{}}
	if !v.limited {
		return v
	}
	v.perMove = b2i(l.maxMoving > 0) + b2i(l.perMinute > 0)
	namespaces := map[string]bool{}
	for key, s := range l.clusterQueue.queued {
		v.waiting[key] = s.ticket
		namespaces[namespaceOfKey(key)] = true
	}
	for key := range l.reserved {
		v.kept[key] = true
		namespaces[namespaceOfKey(key)] = true
	}
	for key, m := range l.moves {
		if !m.stalled && m.kind != seededMove {
			v.placed[key] = true
		}
		namespaces[namespaceOfKey(key)] = true
	}
	for namespace := range namespaces {
		v.usage[namespace] = l.usageLocked(namespace)
	}
	return v
}

// checkFairShare compares the ledger before and after one call.
func (w *world) checkFairShare(before, after ledgerView) {
	if !after.limited {
		return
	}
	// Passed over: waited before the call and waits still, the same
	// ticket (not refused again meanwhile).
	passedOver := map[string]bool{}
	for key, ticket := range after.waiting {
		if t, ok := before.waiting[key]; ok && t == ticket {
			passedOver[namespaceOfKey(key)] = true
		}
	}
	if len(passedOver) >= 2 {
		w.covered["fair: two namespaces wait at once"]++
	}
	// The places the call handed out: kept for a woken session, or taken
	// by one that held none, woken off the queue in the call itself or let
	// straight through. Each namespace's usage before its last: a kept
	// place counts one, a move its perMove.
	gained := map[string]int{}
	for _, key := range slices.Sorted(maps.Keys(after.placed)) {
		if before.placed[key] || before.kept[key] {
			continue
		}
		if _, waited := before.waiting[key]; waited {
			gained[namespaceOfKey(key)] = max(gained[namespaceOfKey(key)], after.perMove)
			continue
		}
		if waitedThrough(before, after, key) {
			w.violate("fair-share", "%s took a place straight through while others waited (%s)", key, describeWaiting(after))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(after.kept)) {
		if !before.kept[key] {
			gained[namespaceOfKey(key)] = max(gained[namespaceOfKey(key)], 1)
		}
	}
	// Its last place went to a namespace that held no more than each it
	// passed over: then, it held its usage now less what that place added.
	for _, namespace := range slices.Sorted(maps.Keys(gained)) {
		held := after.usage[namespace] - gained[namespace]
		for _, other := range slices.Sorted(maps.Keys(passedOver)) {
			if other == namespace {
				continue
			}
			w.covered["fair: a place handed out past another namespace"]++
			if held > after.usage[other] {
				w.violate("fair-share", "namespace %s was handed a place, holding %d places before it, past namespace %s, which holds %d (%s)",
					namespace, held, other, after.usage[other], describeWaiting(after))
			}
		}
	}
}

// waitedThrough reports whether some other session waited before the call
// and waits still: then nobody may take a place straight through.
func waitedThrough(before, after ledgerView, key string) bool {
	for k, ticket := range after.waiting {
		if t, ok := before.waiting[k]; ok && t == ticket && k != key {
			return true
		}
	}
	return false
}

func describeWaiting(v ledgerView) string {
	var s []string
	for _, namespace := range slices.Sorted(maps.Keys(v.usage)) {
		n := 0
		for key := range v.waiting {
			if namespaceOfKey(key) == namespace {
				n++
			}
		}
		s = append(s, fmt.Sprintf("%s: %d held, %d waiting", namespace, v.usage[namespace], n))
	}
	return strings.Join(s, "; ")
}
