package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// tracker watches every Deployment's profile-hash annotation and stamps the
// moment each one changes. Fan-out times end when the watch, not a poll, has
// seen the last Deployment carry the new hash.
//
// It watches in protobuf (see protobufConfig; client-go's typed clients speak
// JSON unless told otherwise), as the controller's Deployment informer does:
// the API server then encodes each event of a controller round once for both
// watchers, as it encodes each event of a ceiling round once for this one,
// so the benchmark's own watch costs both sides alike and next to nothing.
type tracker struct {
	client kubernetes.Interface

	mu      sync.Mutex
	hashes  map[string]string    // namespace/name -> annotation value
	counts  map[string]int       // namespace|value -> Deployments carrying it
	changes map[string]int       // namespace/name -> annotation changes seen
	since   map[string]time.Time // namespace/name -> when the watch delivered its current value
	// written is, per Deployment, the API server's time of the last write
	// of its spec (managedFields, whole seconds): against since, it tells a
	// write made late from a write the watch delivered late.
	written map[string]time.Time
	// reopened counts the watches the server ended and the tracker reopened:
	// each is a gap in which events wait.
	reopened  int
	waiters   []*waiter
	observers []*rolloutObserver // paced rollouts being followed (paced.go)
}

type waiter struct {
	keys []string // namespace|value: the Deployments of each namespace that count
	n    int
	at   time.Time
	done chan struct{}
}

// countLocked is how many Deployments carry what the waiter waits for.
func (t *tracker) countLocked(w *waiter) int {
	n := 0
	for _, k := range w.keys {
		n += t.counts[k]
	}
	return n
}

func newTracker(client kubernetes.Interface) *tracker {
	return &tracker{client: client, hashes: map[string]string{}, counts: map[string]int{}, changes: map[string]int{},
		since: map[string]time.Time{}, written: map[string]time.Time{}}
}

// run lists once, then watches from that resourceVersion until ctx ends,
// resuming after the server closes a watch and relisting only when the
// resourceVersion has expired.
func (t *tracker) run(ctx context.Context, ready chan<- struct{}) {
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			var err error
			if rv, err = t.relist(ctx); err != nil {
				logf("tracker: list: %v", err)
				sleepCtx(ctx, time.Second)
				continue
			}
			if ready != nil {
				close(ready)
				ready = nil
			}
		}
		var err error
		rv, err = t.watch(ctx, rv)
		if ctx.Err() == nil {
			t.mu.Lock()
			t.reopened++
			t.mu.Unlock()
		}
		if err != nil && ctx.Err() == nil {
			logf("tracker: watch: %v", err)
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
}

func (t *tracker) relist(ctx context.Context) (string, error) {
	list, err := t.client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.hashes {
		t.setLocked(k, "", now)
	}
	for i := range list.Items {
		d := &list.Items[i]
		t.setLocked(d.Namespace+"/"+d.Name, d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation], now)
		t.writtenLocked(d)
		t.observeLocked(d, now)
	}
	return list.ResourceVersion, nil
}

// watch follows one watch request; it returns the resourceVersion to resume
// from, or "" when a relist is needed.
func (t *tracker) watch(ctx context.Context, rv string) (string, error) {
	timeout := int64(3600)
	w, err := t.client.AppsV1().Deployments("").Watch(ctx, metav1.ListOptions{
		ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		return rv, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		now := time.Now()
		switch ev.Type {
		case watch.Error:
			if status, ok := ev.Object.(*metav1.Status); ok && status.Code == http.StatusGone {
				return "", nil // expired: relist
			}
			return rv, fmt.Errorf("watch error: %v", ev.Object)
		case watch.Bookmark:
		case watch.Deleted:
			d := ev.Object.(*appsv1.Deployment)
			t.set(d.Namespace+"/"+d.Name, "", now)
		default:
			d := ev.Object.(*appsv1.Deployment)
			t.mu.Lock()
			t.setLocked(d.Namespace+"/"+d.Name, d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation], now)
			t.writtenLocked(d)
			t.observeLocked(d, now)
			t.mu.Unlock()
		}
		if m, err := meta.Accessor(ev.Object); err == nil {
			rv = m.GetResourceVersion()
		}
	}
	return rv, nil
}

// writtenLocked notes when the API server says d's spec was last written:
// the latest managedFields entry of an update of the main resource.
func (t *tracker) writtenLocked(d *appsv1.Deployment) {
	var last time.Time
	for _, f := range d.ManagedFields {
		if f.Subresource == "" && f.Time != nil && f.Time.After(last) {
			last = f.Time.Time
		}
	}
	if !last.IsZero() {
		t.written[d.Namespace+"/"+d.Name] = last
	}
}

func (t *tracker) set(key, value string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setLocked(key, value, at)
}

func (t *tracker) setLocked(key, value string, at time.Time) {
	old, known := t.hashes[key]
	if known && old == value {
		return
	}
	ns := namespaceOf(key)
	if known {
		t.counts[ns+"|"+old]--
		t.changes[key]++
	}
	if value == "" {
		delete(t.hashes, key)
		delete(t.since, key)
		delete(t.written, key)
	} else {
		t.hashes[key] = value
		t.since[key] = at
		t.counts[ns+"|"+value]++
	}
	kept := t.waiters[:0]
	for _, w := range t.waiters {
		if t.countLocked(w) >= w.n {
			w.at = at
			close(w.done)
			continue
		}
		kept = append(kept, w)
	}
	t.waiters = kept
}

// await returns when n Deployments of namespace carry value, with the time the
// watch delivered the last of them.
func (t *tracker) await(ctx context.Context, namespace, value string, n int) (time.Time, error) {
	return t.awaitIn(ctx, []string{namespace}, value, n)
}

// awaitIn returns when n Deployments of the namespaces, together, carry
// value, with the time the watch delivered the last of them.
func (t *tracker) awaitIn(ctx context.Context, namespaces []string, value string, n int) (time.Time, error) {
	w := &waiter{n: n, done: make(chan struct{})}
	for _, ns := range namespaces {
		w.keys = append(w.keys, ns+"|"+value)
	}
	t.mu.Lock()
	if t.countLocked(w) >= n {
		t.mu.Unlock()
		return time.Now(), nil
	}
	t.waiters = append(t.waiters, w)
	t.mu.Unlock()
	select {
	case <-w.done:
		return w.at, nil
	case <-ctx.Done():
		t.mu.Lock()
		got := t.countLocked(w)
		t.mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d Deployments in %d namespace(s) carry %s: %w", got, n, len(namespaces), value, ctx.Err())
	}
}

// arrivals are the times the watch delivered value to each Deployment of
// namespace that carries it now.
func (t *tracker) arrivals(namespace, value string) []time.Time {
	return t.timesOf(t.since, namespace, value)
}

// writes are the API server's times of the last spec write of each
// Deployment of namespace that carries value now (whole seconds).
func (t *tracker) writes(namespace, value string) []time.Time {
	return t.timesOf(t.written, namespace, value)
}

// timesOf picks from times, a map by namespace/name, the entries of the
// Deployments of namespace that carry value now.
func (t *tracker) timesOf(times map[string]time.Time, namespace, value string) []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Time
	for key, v := range t.hashes {
		if at, ok := times[key]; ok && v == value && namespaceOf(key) == namespace {
			out = append(out, at)
		}
	}
	return out
}

// watchesReopened is how many times the tracker has reopened its watch.
func (t *tracker) watchesReopened() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reopened
}

// count is how many Deployments of namespace carry value now.
func (t *tracker) count(namespace, value string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[namespace+"|"+value]
}

// changesOf sums the annotation changes seen on the given Deployments.
func (t *tracker) changesOf(keys []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, k := range keys {
		n += t.changes[k]
	}
	return n
}

func namespaceOf(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i]
		}
	}
	return ""
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
