package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// A session may use a profile of another namespace only when that namespace
// grants it, with a Gateway API ReferenceGrant: the owner of the profile
// decides who may mount it, not the tenant who names it. A grant in the
// profile's namespace permits the reference when one of its spec.from
// entries is {group: games.example.com, kind: GameSession, namespace: the
// session's} and one of its spec.to entries is {group: "", kind: ConfigMap}
// with no name (every profile of the namespace) or the profile's name.
//
// The controller reads grants through a dynamic informer of their own, with
// no label filter (a grant belongs to the namespace that writes it, not to
// this controller), trimmed to their spec: importing Gateway API's Go types
// would bring controller-runtime into the module graph. Without the
// ReferenceGrant API (its CRD is an optional install), every cross-namespace
// reference is refused.

// ReferenceGrantVersions are the versions of Gateway API's ReferenceGrant the
// controller reads, the preferred first: v1 since Gateway API v1.5, v1beta1
// before (and still served beside it).
var ReferenceGrantVersions = []schema.GroupVersionResource{
	{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "referencegrants"},
	{Group: "gateway.networking.k8s.io", Version: "v1beta1", Resource: "referencegrants"},
}

// grantChecker answers whether a namespace grants another's sessions one of
// its profiles, from the grant cache. A nil checker (no ReferenceGrant API)
// grants nothing.
type grantChecker struct {
	indexer cache.Indexer
}

// permits reports whether the grants of profileNamespace let sessions of
// sessionNamespace use the profile name.
func (g *grantChecker) permits(sessionNamespace, profileNamespace, name string) bool {
	if g == nil {
		return false
	}
	objs, err := g.indexer.ByIndex(cache.NamespaceIndex, profileNamespace)
	if err != nil {
		return false
	}
	for _, obj := range objs {
		grant, ok := obj.(*unstructured.Unstructured)
		if ok && grantPermits(grant, sessionNamespace, name) {
			return true
		}
	}
	return false
}

// grantPermits reports whether one grant lets sessions of sessionNamespace
// use the profile name of the grant's namespace. Entries that do not parse
// permit nothing.
func grantPermits(grant *unstructured.Unstructured, sessionNamespace, name string) bool {
	from, _, _ := unstructured.NestedSlice(grant.Object, "spec", "from")
	to, _, _ := unstructured.NestedSlice(grant.Object, "spec", "to")
	fromOK := false
	for _, entry := range from {
		e, ok := entry.(map[string]interface{})
		if ok && e["group"] == gamesv1.SchemeGroupVersion.Group && e["kind"] == gameSessionKind.Kind && e["namespace"] == sessionNamespace {
			fromOK = true
			break
		}
	}
	if !fromOK {
		return false
	}
	for _, entry := range to {
		e, ok := entry.(map[string]interface{})
		if !ok || e["kind"] != "ConfigMap" {
			continue
		}
		if group, _ := e["group"].(string); group != "" && group != "core" {
			continue
		}
		if n, _ := e["name"].(string); n == "" || n == name {
			return true
		}
	}
	return false
}

// SlimReferenceGrant is the transform of the grant informer: it keeps a
// grant's identity and spec, and drops the rest (managedFields,
// annotations: a kubectl apply's last-applied copy of the whole object).
func SlimReferenceGrant(obj interface{}) (interface{}, error) {
	grant, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone holds an object already slimmed
	}
	slim := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": grant.GetAPIVersion(),
		"kind":       grant.GetKind(),
	}}
	slim.SetNamespace(grant.GetNamespace())
	slim.SetName(grant.GetName())
	slim.SetUID(grant.GetUID())
	slim.SetResourceVersion(grant.GetResourceVersion())
	if spec, ok := grant.Object["spec"]; ok {
		slim.Object["spec"] = spec
	}
	return slim, nil
}

// referencePermitted reports whether the session may use its profile: one of
// its own namespace always, another's only by grant. The reason says why
// not, for the ProfileResolved condition.
func (c *caches) referencePermitted(session *gamesv1.GameSession) (ok bool, message string) {
	namespace, name := profileOf(session)
	if namespace == session.Namespace {
		return true, ""
	}
	switch {
	case c.namespace != "":
		return false, fmt.Sprintf(MessageNamespacedController, session.Spec.ProfileRef, c.namespace)
	case c.grants.Load() == nil:
		return false, fmt.Sprintf(MessageNoReferenceGrantAPI, session.Spec.ProfileRef)
	case !c.grants.Load().permits(session.Namespace, namespace, name):
		return false, fmt.Sprintf(MessageReferenceNotPermitted, session.Spec.ProfileRef, namespace,
			gamesv1.SchemeGroupVersion.Group, gameSessionKind.Kind, session.Namespace, name)
	}
	return true, ""
}

// permittedKey reports whether the session of key may use the profile
// profileNamespace/name, by its namespace alone: grants are by namespace.
func (c *caches) permittedKey(key, profileNamespace, name string) bool {
	namespace := namespaceOfKey(key)
	return namespace == profileNamespace || c.grants.Load().permits(namespace, profileNamespace, name)
}

// permittedSessionKeysOf returns the keys of the sessions that reference the
// profile and may use it: those of its namespace, and those of the
// namespaces that its namespace grants it to. The others keep what they run:
// they are no part of its rollouts, and count in none of its numbers.
func (c *caches) permittedSessionKeysOf(profileNamespace, name string) []string {
	var keys []string
	for _, key := range c.sessionKeysOf(profileKey(profileNamespace, name)) {
		if c.permittedKey(key, profileNamespace, name) {
			keys = append(keys, key)
		}
	}
	return keys
}

// consumerNamespaces returns the namespaces other than the profile's whose
// sessions use it by grant: each needs a revision of its own.
func (c *caches) consumerNamespaces(profileNamespace, name string) []string {
	grants := c.grants.Load()
	seen := map[string]bool{}
	var out []string
	for _, key := range c.sessionKeysOf(profileKey(profileNamespace, name)) {
		namespace, _, _ := cache.SplitMetaNamespaceKey(key)
		if namespace == profileNamespace || seen[namespace] {
			continue
		}
		seen[namespace] = true
		if grants.permits(namespace, profileNamespace, name) {
			out = append(out, namespace)
		}
	}
	return out
}

// EnableGrants makes the controller read grants from informer, for a
// ReferenceGrant API that the cluster started to serve after the controller
// started (its CRD installed later). It registers the grant handlers, waits
// until the informer, which the caller starts, has synced, and then queues
// every session that uses a profile of another namespace: each may be
// permitted now. It returns false if ctx ends first.
func (c *Controller) EnableGrants(ctx context.Context, informer cache.SharedIndexInformer) (bool, error) {
	if _, err := informer.AddEventHandler(c.eventHandlers().grants); err != nil {
		return false, err
	}
	if !cache.WaitForNamedCacheSync("referencegrants", ctx.Done(), informer.HasSynced) {
		return false, nil
	}
	c.caches.grants.Store(&grantChecker{indexer: informer.GetIndexer()})
	for _, namespace := range c.caches.sessionIndexer.ListIndexFuncValues(grantingNamespaceIndex) {
		keys, _ := c.caches.sessionIndexer.IndexKeys(grantingNamespaceIndex, namespace)
		for _, key := range keys {
			c.sessions.enqueueKey(key)
		}
	}
	c.caches.logger.Info("Reading ReferenceGrants: GameSessions may now use profiles of other namespaces by grant")
	return true, nil
}

// grantChanged queues what a grant of namespace may have changed: the
// sessions of other namespaces using its profiles (now permitted, or no
// longer) and, through their syncs, the profiles' plans.
func (c *sessionController) grantChanged(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	grant, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	keys, _ := c.sessionIndexer.IndexKeys(grantingNamespaceIndex, grant.GetNamespace())
	profiles := map[string]bool{}
	for _, key := range keys {
		c.queue.Add(key)
		if obj, exists, err := c.sessionIndexer.GetByKey(key); err == nil && exists {
			namespace, name := profileOf(obj.(*gamesv1.GameSession))
			profiles[profileKey(namespace, name)] = true
		}
	}
	for key := range profiles {
		c.rollouts.enqueueProfile(key)
	}
}
