package controller

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
