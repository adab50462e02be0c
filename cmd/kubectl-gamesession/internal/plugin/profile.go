package plugin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
)

// getProfile reads the profile ConfigMap namespace/name.
func getProfile(ctx context.Context, c Clients, namespace, name string) (*corev1.ConfigMap, error) {
	cm, err := c.Kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("profile %s not found in namespace %s", name, namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading profile %s: %w", name, err)
	}
	if err := checkProfile(cm); err != nil {
		return nil, err
	}
	return cm, nil
}

// checkProfile refuses a revision given for a profile: revisions are
// immutable copies, and what they are copies of is their profile.
func checkProfile(cm *corev1.ConfigMap) error {
	if cm.Labels[controller.RevisionLabel] == controller.RevisionLabelValue {
		return fmt.Errorf("%s is a revision of profile %q, not a profile", cm.Name, cm.Annotations[controller.RevisionOfAnnotation])
	}
	return nil
}

// unlabelledNote is printed for a profile without the label the controller
// selects profiles by, by default: an edit of it rolls nothing.
func unlabelledNote(cm *corev1.ConfigMap) string {
	if cm.Labels[gamesv1.ProfileLabel] == gamesv1.ProfileLabelValue {
		return ""
	}
	return fmt.Sprintf("note: ConfigMap %s lacks the label %s=%s: a controller with the default --profile-selector ignores it",
		cm.Name, gamesv1.ProfileLabel, gamesv1.ProfileLabelValue)
}

// getRollout reads the ProfileRollout of a profile; nil when there is none
// (yet): the controller creates it on the profile's first sync.
func getRollout(ctx context.Context, c Clients, namespace, profile string) (*gamesv1.ProfileRollout, error) {
	pr, err := c.Game.GamesV1().ProfileRollouts(namespace).Get(ctx, profile, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the ProfileRollout %s: %w", profile, err)
	}
	return pr, nil
}

// revision is one revision ConfigMap of a profile.
type revision struct {
	cm *corev1.ConfigMap
	// number is its RevisionNumberAnnotation, 0 for revisions made before
	// the controller numbered them.
	number int
	hash   string
}

// label is how tables and messages name the revision's number.
func (r revision) label() string {
	if r.number == 0 {
		return "-"
	}
	return strconv.Itoa(r.number)
}

// listRevisions returns the revisions of profile, oldest first (see
// sortRevisions).
func listRevisions(ctx context.Context, c Clients, namespace, profile string) ([]revision, error) {
	list, err := c.Kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: controller.RevisionSelector()})
	if err != nil {
		return nil, fmt.Errorf("listing the revisions of profile %s: %w", profile, err)
	}
	var revisions []revision
	for i := range list.Items {
		cm := &list.Items[i]
		// An annotation, not a label, names the profile (profile names may be
		// longer than a label value), so the filter is on this side.
		if cm.Annotations[controller.RevisionOfAnnotation] != profile {
			continue
		}
		revisions = append(revisions, newRevision(cm))
	}
	sortRevisions(revisions)
	return revisions, nil
}

func newRevision(cm *corev1.ConfigMap) revision {
	n, err := strconv.Atoi(cm.Annotations[controller.RevisionNumberAnnotation])
	if err != nil || n < 0 {
		n = 0
	}
	return revision{cm: cm, number: n, hash: cm.Labels[gamesv1.ProfileHashAnnotation]}
}

// sortRevisions orders revisions oldest first. Unnumbered ones predate the
// numbering, so they come first, by creation time; then the numbered ones
// by number. Creation time and name break ties: the controller may, rarely,
// give two revisions one number, and timestamps have a resolution of a
// second.
func sortRevisions(revisions []revision) {
	slices.SortStableFunc(revisions, func(a, b revision) int {
		if a.number != b.number {
			return cmp.Compare(a.number, b.number)
		}
		if c := a.cm.CreationTimestamp.Compare(b.cm.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.cm.Name, b.cm.Name)
	})
}
