package controller

import "sync"

// writeTracker remembers the objects the controller wrote until its informer
// cache has caught up with them.
//
// The cache lags behind the controller's own writes by a watch round trip. A
// sync in that window (the write's own status update, a Deployment status
// change, a resync) would read the version from before the write, find it out
// of date, and write again: a duplicate Deployment patch, an AlreadyExists for
// a Deployment the controller just created, a status update that can only
// conflict. With the tracker, a sync uses the object its last write returned
// for as long as the cache still holds the very version that write replaced.
// This needs no ordering of resourceVersions, which are opaque: equality is
// all it compares.
type writeTracker[T any] struct {
	mu     sync.Mutex
	writes map[string]trackedWrite[T]
}

type trackedWrite[T any] struct {
	// replaced is the resourceVersion the write replaced ("" for a create).
	replaced string
	written  T
}

func newWriteTracker[T any]() *writeTracker[T] {
	return &writeTracker[T]{writes: make(map[string]trackedWrite[T])}
}

// record notes that a write replaced version replaced of key with written.
func (w *writeTracker[T]) record(key, replaced string, written T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes[key] = trackedWrite[T]{replaced: replaced, written: written}
}

// latest returns the freshest known version of key: the written object while
// the cache still holds the version it replaced (cachedVersion, "" if the
// cache holds none), else cached. Once the cache has moved on, the record is
// dropped.
func (w *writeTracker[T]) latest(key string, cached T, cachedVersion string) T {
	w.mu.Lock()
	defer w.mu.Unlock()
	tw, ok := w.writes[key]
	if !ok {
		return cached
	}
	if tw.replaced == cachedVersion {
		return tw.written
	}
	delete(w.writes, key)
	return cached
}

func (w *writeTracker[T]) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.writes, key)
}
