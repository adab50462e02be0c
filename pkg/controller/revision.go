package controller

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// A revision is an immutable copy of one content of a profile, and what the
// Deployments mount: never the live profile. The kubelet rewrites the files of
// a mounted ConfigMap in running pods within about a minute of an edit, so a
// Deployment mounting the profile itself would run the new content before its
// rollout reached it, and with the old content gone, could not roll back. A
// revision never changes; a Deployment's pods read exactly what its hash
// annotation says, and a pod recreated after its profile was deleted still
// finds its revision.
//
// Revisions are named after their profile and content hash, so one content is
// one revision, whoever asks for it and however often: editing a profile back
// to an earlier content goes back to that revision. The controller creates
// them (the profile sync, once per content) and deletes them (the same sync,
// once no Deployment mounts them and they are not among the newest
// --revision-history-limit of the profile's other revisions). They carry no owner reference:
// owned by the profile, they would go with it and strand running pods; owned
// by the Deployments that mount them, one revision shared by 7,340 sessions
// would carry 7,340 owner references, more than an object may hold.

// Labels and annotations of profile revisions.
const (
	// RevisionLabel marks a ConfigMap as a profile revision. The revision
	// informer is filtered on it, and the profile informer's objects are
	// checked for it, so a revision is never taken for a profile.
	RevisionLabel      = "games.example.com/profile-revision"
	RevisionLabelValue = "true"
	// RevisionOfAnnotation names the profile a revision was copied from. An
	// annotation, not a label: profile names may be longer than a label
	// value may be.
	RevisionOfAnnotation = "games.example.com/revision-of"
)

// revisionOfIndex maps a profile ("namespace/name") to its revisions in the
// revision informer; mountedRevisionIndex maps a revision to the Deployments
// that mount it in the Deployment informer.
const (
	revisionOfIndex      = "revisionOf"
	mountedRevisionIndex = "mountedRevision"
)

// mountGuard is how long the controller's own mounts and deletions of
// revisions override what its caches show (see recentMounts).
// Ten seconds are a thousand times the usual lag, and let a stale revision go
// soon after its rollout.
const mountGuard = 10 * time.Second

// recentMounts remembers the revisions the controller mounted, and those it
// deleted, in the last mountGuard, because the caches that show both lag
// behind its own writes:
//   - a revision that stopped being current a moment after a session was
//     moved to it could be deleted before the Deployment cache shows the
//     Deployment that mounts it;
//   - a revision just deleted is still in the revision cache for a moment,
//     and a session could be moved to it.
//
// Either way, if its profile went too, nothing could recreate it. So a
// revision mounted lately is not deleted, and one deleted lately is not
// mounted (the profile sync recreates it first, if it is still needed). This
// only ever makes the controller more careful; a restarted controller, whose
// caches start in sync, needs none of it.
type recentMounts struct {
	clock   clock.PassiveClock
	mu      sync.Mutex
	at      map[string]time.Time // "namespace/revision" → when mounted
	deleted map[string]time.Time // "namespace/revision" → when deleted
	created map[string]time.Time // "namespace/revision" → when created
}

func newRecentMounts(clk clock.PassiveClock) *recentMounts {
	return &recentMounts{clock: clk, at: make(map[string]time.Time),
		deleted: make(map[string]time.Time), created: make(map[string]time.Time)}
}

// deletedRevision records that the controller deleted the revision.
func (m *recentMounts) deletedRevision(namespace, revision string) {
	m.record(m.deleted, namespace, revision)
}

// createdRevision records that the controller created the revision (again).
func (m *recentMounts) createdRevision(namespace, revision string) {
	m.mu.Lock()
	delete(m.deleted, namespace+"/"+revision)
	m.mu.Unlock()
	m.record(m.created, namespace, revision)
}

// mounted records that a Deployment was written to mount the revision.
func (m *recentMounts) mounted(namespace, revision string) {
	m.record(m.at, namespace, revision)
}

// createdLately reports whether the controller created the revision in the
// last mountGuard: a create of it answered AlreadyExists is then its own,
// not yet in the cache, not a ConfigMap of someone else's in the way.
func (m *recentMounts) createdLately(namespace, revision string) bool {
	return m.left(m.created, namespace, revision) > 0
}

// deletedLately reports whether the controller deleted the revision in the
// last mountGuard.
func (m *recentMounts) deletedLately(namespace, revision string) bool {
	return m.left(m.deleted, namespace, revision) > 0
}

// guarded returns how much longer the revision is kept from deletion, 0 if
// it is not.
func (m *recentMounts) guarded(namespace, revision string) time.Duration {
	return m.left(m.at, namespace, revision)
}

// record notes the revision in times, now, and forgets what is older than
// mountGuard in all three maps, so they hold only the last mountGuard.
func (m *recentMounts) record(times map[string]time.Time, namespace, revision string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, all := range []map[string]time.Time{m.at, m.deleted, m.created} {
		for key, at := range all {
			if m.clock.Since(at) >= mountGuard {
				delete(all, key)
			}
		}
	}
	times[namespace+"/"+revision] = m.clock.Now()
}

// left returns how much of mountGuard is left since the revision was noted
// in times, 0 if it was not or the guard is over.
func (m *recentMounts) left(times map[string]time.Time, namespace, revision string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := namespace + "/" + revision
	at, ok := times[key]
	if !ok {
		return 0
	}
	if left := mountGuard - m.clock.Since(at); left > 0 {
		return left
	}
	delete(times, key)
	return 0
}

// maxNameLength is the longest ConfigMap name (a DNS subdomain).
const maxNameLength = 253

// RevisionSelector selects the revisions this controller creates.
func RevisionSelector() string {
	return labels.SelectorFromSet(labels.Set{RevisionLabel: RevisionLabelValue}).String()
}

// RevisionName returns the name of the revision of profile with content hash
// hash: the profile's name, shortened if need be, a dash and the hash. It is
// always a valid ConfigMap name: the hash is lowercase hex, and the shortened
// name is cut back to end in a letter or digit, as a DNS subdomain must
// before the dash. Two profiles whose long names differ only past the cut
// share the revisions of equal content, which is harmless: equal hashes are
// equal content, and a revision is deleted only when no Deployment mounts it.
func RevisionName(profile, hash string) string {
	prefix := profile
	if limit := maxNameLength - len(hash) - 1; len(prefix) > limit {
		prefix = strings.TrimRight(prefix[:limit], "-.")
	}
	return prefix + "-" + hash
}

// newRevision returns the revision of profile's current content, hash.
func newRevision(profile *corev1.ConfigMap, hash string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   profile.Namespace,
			Name:        RevisionName(profile.Name, hash),
			Labels:      map[string]string{RevisionLabel: RevisionLabelValue, labelProfileHash: hash},
			Annotations: map[string]string{RevisionOfAnnotation: profile.Name},
		},
		Immutable:  ptr.To(true),
		Data:       profile.Data,
		BinaryData: profile.BinaryData,
	}
}

// labelProfileHash on a revision holds its content hash.
const labelProfileHash = gamesv1.ProfileHashAnnotation

// isRevision reports whether a ConfigMap is one of the controller's
// revisions: labelled as one, and named as the revision of the profile and
// hash it claims. Only those are ever deleted.
func isRevision(cm *corev1.ConfigMap) bool {
	profile, hash := cm.Annotations[RevisionOfAnnotation], cm.Labels[labelProfileHash]
	return cm.Labels[RevisionLabel] == RevisionLabelValue && profile != "" && hash != "" &&
		cm.Name == RevisionName(profile, hash)
}

// revisionOfIndexFunc indexes a revision by its profile.
func revisionOfIndexFunc(obj interface{}) ([]string, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || !isRevision(cm) {
		return nil, nil
	}
	return []string{profileKey(cm.Namespace, cm.Annotations[RevisionOfAnnotation])}, nil
}

// staleRevisions returns the revisions of a profile that may be deleted. The
// revision of its current content (currentName, "" if the profile is gone)
// and those a Deployment mounts (inUse) always stay; of the others, the keep
// newest (by creation time, then name) stay for rollback.
func staleRevisions(revisions []*corev1.ConfigMap, currentName string, inUse func(name string) bool, keep int) []*corev1.ConfigMap {
	revisions = slices.Clone(revisions)
	slices.SortFunc(revisions, func(a, b *corev1.ConfigMap) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	var stale []*corev1.ConfigMap
	for _, r := range revisions {
		switch {
		case r.Name == currentName || inUse(r.Name):
		case keep > 0:
			keep--
		default:
			stale = append(stale, r)
		}
	}
	return stale
}
