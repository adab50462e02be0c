package controller

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// informerCache plays one of the controller's informers. The informer itself
// never runs: the server's changes of its resource, filtered as its watch
// filters them, wait here in order, and the sequence delivers them one at a
// time, late and out of step with the other caches, as a watch would. Each
// delivery updates the indexer and then calls the controller's handler, as
// the informer does.
type informerCache struct {
	resource apiResource
	indexer  cache.Indexer
	handler  cache.ResourceEventHandlerFuncs
	// matches is the watch's label selector.
	matches func(object) bool
	// transform is the informer's transform, applied to what it stores
	// (the ReplicaSet informer's SlimReplicaSet); nil for none.
	transform func(interface{}) (interface{}, error)
	pending   []watchEvent
	// onDeliver hears of every event handed to the controller, with the
	// object the cache held before (nil if none).
	onDeliver func(ev watchEvent, prev object)
	// delivered holds a copy of every object handed to the controller, to
	// catch a controller that modifies the objects in its cache.
	delivered map[string]object
	// everHeld names every object this cache has held.
	everHeld map[string]bool
}

// watchEvent is a change as the cache's watch sees it: an object that leaves
// the selector is a deletion, one that enters it a creation.
type watchEvent struct {
	kind watch.EventType
	obj  object
	// change is the server write behind the event.
	change change
	// known is set when the controller learnt of the change before the event
	// reached it, by a live read.
	known bool
}

func (e watchEvent) String() string {
	return fmt.Sprintf("%s %s %s rv %s (by %s)", e.kind, e.change.resource, e.obj.GetName(), e.obj.GetResourceVersion(), e.change.author)
}

func newInformerCache(r apiResource, indexer cache.Indexer, handler cache.ResourceEventHandlerFuncs) *informerCache {
	c := &informerCache{resource: r, indexer: indexer, handler: handler, delivered: map[string]object{}, everHeld: map[string]bool{}, matches: func(object) bool { return true }}
	switch r {
	case profilesResource:
		c.matches = func(obj object) bool { return obj.GetLabels()[gamesv1.ProfileLabel] == gamesv1.ProfileLabelValue }
	case deploymentsResource, replicaSetsResource:
		c.matches = func(obj object) bool { return obj.GetLabels()[worldManagedByLabel] == worldManagedByValue }
		if r == replicaSetsResource {
			c.transform = SlimReplicaSet
		}
	case grantsResource:
		c.transform = SlimReferenceGrant
	case secretsResource, sessionConfigsResource:
		in := inputOf(r)
		c.matches, c.transform = in.labelled, in.transform
	case revisionsResource:
		c.matches = func(obj object) bool { return obj.GetLabels()[worldRevisionLabel] == worldRevisionLabelValue }
	case liveProfilesResource:
		// LiveProfileSelector, through SlimLiveProfile.
		c.matches = func(obj object) bool { return obj.GetLabels()[worldLiveProfileLabel] == "true" }
		c.transform = SlimLiveProfile
	case podsResource:
		// LivePodSelector, through SlimLivePod.
		c.matches = func(obj object) bool {
			return obj.GetLabels()[worldManagedByLabel] == worldManagedByValue && obj.GetLabels()[worldDeliveryLabel] == "live"
		}
		c.transform = SlimLivePod
	}
	return c
}

// observe queues a server change if the watch would report it.
func (c *informerCache) observe(ch change) {
	was := ch.old != nil && c.matches(ch.old)
	is := ch.new != nil && c.matches(ch.new)
	switch {
	case !was && is:
		c.pending = append(c.pending, watchEvent{kind: watch.Added, obj: ch.new, change: ch})
	case was && is:
		c.pending = append(c.pending, watchEvent{kind: watch.Modified, obj: ch.new, change: ch})
	case was && !is:
		obj := ch.old
		if ch.new != nil {
			obj = ch.new
		}
		c.pending = append(c.pending, watchEvent{kind: watch.Deleted, obj: obj, change: ch})
	}
}

// seen reports whether the watch reports the change at all.
func (c *informerCache) seen(ch change) bool {
	return (ch.old != nil && c.matches(ch.old)) || (ch.new != nil && c.matches(ch.new))
}

// deliver hands the oldest pending event to the controller.
func (c *informerCache) deliver() watchEvent {
	ev := c.pending[0]
	c.pending = c.pending[1:]
	key := cache.MetaObjectToName(ev.obj).String()
	prev := c.cached(key)
	obj := c.stored(ev.obj)
	switch {
	case ev.kind == watch.Deleted:
		must(c.indexer.Delete(obj))
		delete(c.delivered, key)
		if prev != nil {
			obj = prev
		}
		c.handler.OnDelete(obj)
	case prev != nil:
		must(c.indexer.Update(obj))
		c.delivered[key] = copyOf(obj)
		c.everHeld[key] = true
		c.handler.OnUpdate(prev, obj)
	default:
		must(c.indexer.Add(obj))
		c.delivered[key] = copyOf(obj)
		c.everHeld[key] = true
		c.handler.OnAdd(obj, false)
	}
	c.onDeliver(ev, prev)
	return ev
}

// relist replaces the cache's content by the server's current objects, as an
// informer does when its watch broke: the pending events are lost (relist
// returns them), and what was deleted meanwhile arrives as a tombstone.
func (c *informerCache) relist(current []object) []watchEvent {
	dropped := c.pending
	c.pending = nil
	listed := map[string]bool{}
	for _, obj := range current {
		if !c.matches(obj) {
			continue
		}
		key := cache.MetaObjectToName(obj).String()
		listed[key] = true
		prev := c.cached(key)
		if prev != nil && prev.GetResourceVersion() == obj.GetResourceVersion() {
			continue
		}
		obj = c.stored(obj)
		c.delivered[key] = copyOf(obj)
		c.everHeld[key] = true
		ev := watchEvent{kind: watch.Modified, obj: obj, change: change{resource: c.resource, author: byRelist, old: prev, new: obj}}
		if prev == nil {
			ev.kind = watch.Added
			must(c.indexer.Add(obj))
			c.handler.OnAdd(obj, false)
		} else {
			must(c.indexer.Update(obj))
			c.handler.OnUpdate(prev, obj)
		}
		c.onDeliver(ev, prev)
	}
	for _, key := range c.keys() {
		if listed[key] {
			continue
		}
		prev := c.cached(key)
		must(c.indexer.Delete(prev))
		delete(c.delivered, key)
		c.handler.OnDelete(cache.DeletedFinalStateUnknown{Key: key, Obj: prev})
		c.onDeliver(watchEvent{kind: watch.Deleted, obj: prev, change: change{resource: c.resource, author: byRelist, old: prev}}, prev)
	}
	return dropped
}

// fill loads a new informer's initial list; handlers run afterwards, in
// announce, once every cache is filled, as the controller starts working only
// when all its caches have synced.
func (c *informerCache) fill(current []object) {
	for _, obj := range current {
		if c.matches(obj) {
			obj = c.stored(obj)
			c.delivered[cache.MetaObjectToName(obj).String()] = copyOf(obj)
			c.everHeld[cache.MetaObjectToName(obj).String()] = true
			must(c.indexer.Add(obj))
		}
	}
}

// stored is a copy of obj as the informer stores it, transformed.
func (c *informerCache) stored(obj object) object {
	obj = copyOf(obj)
	if c.transform == nil {
		return obj
	}
	out, err := c.transform(obj)
	must(err)
	return out.(object)
}

func (c *informerCache) announce() {
	for _, key := range c.keys() {
		c.handler.OnAdd(c.cached(key), true)
	}
}

// resync calls the update handler for every cached object, unchanged, as a
// periodic resync does.
func (c *informerCache) resync() {
	for _, key := range c.keys() {
		obj := c.cached(key)
		c.handler.OnUpdate(obj, obj)
	}
}

func (c *informerCache) cached(key string) object {
	obj, exists, err := c.indexer.GetByKey(key)
	must(err)
	if !exists {
		return nil
	}
	return obj.(object)
}

// keys returns the cached keys in order: listing a cache follows map order,
// and the sequence must not.
func (c *informerCache) keys() []string {
	keys := c.indexer.ListKeys()
	slices.Sort(keys)
	return keys
}

// mutated returns the keys of cached objects that differ from what was
// delivered: objects in an informer's cache are shared, and a controller that
// modifies one corrupts every other reader's view.
func (c *informerCache) mutated() []string {
	var keys []string
	for _, key := range c.keys() {
		if !equality.Semantic.DeepEqual(c.cached(key), c.delivered[key]) {
			keys = append(keys, key)
		}
	}
	return keys
}

func (c *informerCache) session(name string) *gamesv1.GameSession {
	obj, _ := c.cached(worldNamespaceOf(name) + "/" + name).(*gamesv1.GameSession)
	return obj
}

func (c *informerCache) profile(name string) *corev1.ConfigMap {
	obj, _ := c.cached(worldNamespaceOf(name) + "/" + name).(*corev1.ConfigMap)
	return obj
}

func (c *informerCache) deployment(name string) *appsv1.Deployment {
	obj, _ := c.cached(worldNamespaceOf(name) + "/" + name).(*appsv1.Deployment)
	return obj
}

func (c *informerCache) revision(name string) *corev1.ConfigMap {
	obj, _ := c.cached(worldNamespaceOf(name) + "/" + name).(*corev1.ConfigMap)
	return obj
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
