package controller

import "sync"

// rollingSessions holds the sessions a profile fan-out enqueued that have not
// synced since.
//
// A fan-out is two writes per session: the Deployment, which is what rolls the
// game servers, and the status, which reports it. Made in turn by each sync,
// every Deployment would wait behind the status writes of the sessions before
// it, and the last game server of a 7,340-session fan-out would get its new
// profile only after 14,680 writes. A marked session's sync writes its
// Deployment and puts the session back at the end of the queue, behind the
// rest of the fan-out, where its next sync writes the status: the same writes,
// but every Deployment first.
type rollingSessions struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func newRollingSessions() *rollingSessions {
	return &rollingSessions{keys: make(map[string]struct{})}
}

func (r *rollingSessions) add(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		r.keys[k] = struct{}{}
	}
}

// take reports whether key was marked, and unmarks it: only the first sync
// after a fan-out defers the status.
func (r *rollingSessions) take(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[key]
	delete(r.keys, key)
	return ok
}
