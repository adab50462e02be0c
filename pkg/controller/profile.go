package controller

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
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

// profileRefIndexFunc indexes a GameSession by the profile it references. The
// key carries the namespace because profileRef is namespace-local: two tenants
// may both have a profile called "default".
func profileRefIndexFunc(obj interface{}) ([]string, error) {
	session, ok := obj.(*gamesv1.GameSession)
	if !ok {
		return nil, fmt.Errorf("profileRef index: expected *GameSession, got %T", obj)
	}
	if session.Spec.ProfileRef == "" {
		return nil, nil
	}
	return []string{profileKey(session.Namespace, session.Spec.ProfileRef)}, nil
}

func profileKey(namespace, name string) string {
	return namespace + "/" + name
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
