package controller

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// profileRefIndex is the name of the GameSession informer index that maps a
// profile ConfigMap, as "namespace/name", to the sessions referencing it. It
// turns "which sessions use this profile?" into a map lookup instead of a scan
// of every session on every ConfigMap event.
const profileRefIndex = "profileRef"

// grantingNamespaceIndex maps a namespace to the sessions of other
// namespaces whose profile is in it: a ReferenceGrant there decides whether
// they may use it, and a change of one queues them.
const grantingNamespaceIndex = "grantingNamespace"

// profileRefIndexFunc indexes a GameSession by the profile it references. The
// key carries the namespace: two tenants may both have a profile called
// "default", and a session may use another namespace's profile by grant.
func profileRefIndexFunc(obj interface{}) ([]string, error) {
	session, ok := obj.(*gamesv1.GameSession)
	if !ok {
		return nil, fmt.Errorf("profileRef index: expected *GameSession, got %T", obj)
	}
	if session.Spec.ProfileRef == "" {
		return nil, nil
	}
	namespace, name := profileOf(session)
	return []string{profileKey(namespace, name)}, nil
}

// grantingNamespaceIndexFunc indexes a session whose profile is in another
// namespace by that namespace.
func grantingNamespaceIndexFunc(obj interface{}) ([]string, error) {
	session, ok := obj.(*gamesv1.GameSession)
	if !ok {
		return nil, fmt.Errorf("grantingNamespace index: expected *GameSession, got %T", obj)
	}
	if namespace, _ := profileOf(session); session.Spec.ProfileRef != "" && namespace != session.Namespace {
		return []string{namespace}, nil
	}
	return nil, nil
}

func profileKey(namespace, name string) string {
	return namespace + "/" + name
}

// profileOf returns the namespace and name of the session's profile:
// spec.profileRef is "name", in the session's namespace, or
// "namespace/name".
func profileOf(session *gamesv1.GameSession) (namespace, name string) {
	if namespace, name, ok := strings.Cut(session.Spec.ProfileRef, "/"); ok {
		return namespace, name
	}
	return session.Namespace, session.Spec.ProfileRef
}

// refOf is the session's profile as it names it, normalised: "name" for a
// profile of its own namespace (however spec.profileRef spells it), and
// "namespace/name" for another namespace's. It is the prefix of the
// revisions the session's pods mount (RevisionName), and what its status
// messages quote.
func refOf(session *gamesv1.GameSession) string {
	namespace, name := profileOf(session)
	return refFrom(session.Namespace, namespace, name)
}

// refFrom is how a session of namespace consumer refers to the profile
// namespace/name: see refOf.
func refFrom(consumer, namespace, name string) string {
	if namespace == consumer {
		return name
	}
	return profileKey(namespace, name)
}

// refOfProfile is refFrom for a profile object.
func refOfProfile(consumer string, profile *corev1.ConfigMap) string {
	return refFrom(consumer, profile.Namespace, profile.Name)
}

// ProfileHash returns a stable hash of a profile's data and binaryData. It does
// not depend on map iteration order, and every key and value is length-prefixed
// so that no two different profiles serialise to the same bytes (for example
// data {"ab": "c"} and {"a": "bc"}, or the same key in data and binaryData).
func ProfileHash(profile *corev1.ConfigMap) string {
	h := sha256.New()
	writeSection(h, 'd', profile.Data)
	writeSection(h, 'b', profile.BinaryData)
	// 80 bits keep the annotation short while collisions stay out of reach.
	return hex.EncodeToString(h.Sum(nil)[:10])
}

func writeSection[V string | []byte](h hash.Hash, tag byte, entries map[string]V) {
	h.Write([]byte{tag})
	writeLength(h, len(entries))
	for _, key := range slices.Sorted(maps.Keys(entries)) {
		value := entries[key]
		writeLength(h, len(key))
		h.Write([]byte(key))
		writeLength(h, len(value))
		h.Write([]byte(value))
	}
}

func writeLength(h hash.Hash, n int) {
	var buf [binary.MaxVarintLen64]byte
	h.Write(buf[:binary.PutUvarint(buf[:], uint64(n))])
}

// profileDataEqual reports whether two versions of a profile carry the same
// data. Only data reach the pods, so a label or annotation edit, or a periodic
// resync, must not roll thousands of Deployments.
func profileDataEqual(a, b *corev1.ConfigMap) bool {
	return maps.Equal(a.Data, b.Data) &&
		maps.EqualFunc(a.BinaryData, b.BinaryData, func(x, y []byte) bool { return string(x) == string(y) })
}

// profileHashCache memoizes ProfileHash by ConfigMap UID and resourceVersion.
// When one profile edit fans out to thousands of sessions, each sync asks for
// the same hash; the cache makes that one hash per change, not one per session.
type profileHashCache struct {
	mu      sync.Mutex
	entries map[types.UID]profileHashEntry
}

type profileHashEntry struct {
	resourceVersion string
	hash            string
}

func newProfileHashCache() *profileHashCache {
	return &profileHashCache{entries: make(map[types.UID]profileHashEntry)}
}

func (c *profileHashCache) hash(profile *corev1.ConfigMap) string {
	c.mu.Lock()
	entry, ok := c.entries[profile.UID]
	c.mu.Unlock()
	if ok && entry.resourceVersion == profile.ResourceVersion {
		return entry.hash
	}
	// Hash outside the lock: concurrent workers may hash the same new version
	// twice at worst, but never wait on each other.
	sum := ProfileHash(profile)
	c.mu.Lock()
	c.entries[profile.UID] = profileHashEntry{resourceVersion: profile.ResourceVersion, hash: sum}
	c.mu.Unlock()
	return sum
}

func (c *profileHashCache) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.entries, uid)
	c.mu.Unlock()
}
