package plugin

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Undo writes the content (data and binaryData) of an earlier revision of a
// profile back into the profile: revision toRevision, or for 0 the one
// before the current revision. The current revision is the one the
// ProfileRollout targets, or without a ProfileRollout the newest. The
// controller rolls the sessions to it as after any edit.
//
// The Update carries the resourceVersion of the profile as read, so that an
// edit in between makes it fail with a Conflict instead of being lost; the
// profile's labels and annotations stay as they are.
func Undo(ctx context.Context, c Clients, out io.Writer, namespace, profile string, toRevision int) error {
	cm, err := getProfile(ctx, c, namespace, profile)
	if err != nil {
		return err
	}
	pr, err := getRollout(ctx, c, namespace, profile)
	if err != nil {
		return err
	}
	revisions, err := listRevisions(ctx, c, namespace, profile)
	if err != nil {
		return err
	}
	to, err := chooseRevision(profile, revisions, pr, toRevision)
	if err != nil {
		return err
	}
	if sameContent(cm.Data, to.cm.Data) && sameContent(cm.BinaryData, to.cm.BinaryData) {
		return fmt.Errorf("profile %s has the content of revision %s (%s) already", profile, to.label(), to.cm.Name)
	}
	cm = cm.DeepCopy()
	cm.Data, cm.BinaryData = to.cm.Data, to.cm.BinaryData
	if _, err := c.Kube.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("profile %s changed while rolling it back, nothing written: check the change, then run undo again: %w", profile, err)
		}
		return fmt.Errorf("writing profile %s: %w", profile, err)
	}
	_, err = fmt.Fprintf(out, "profile %s rolled back to revision %s (%s)\n", profile, to.label(), to.cm.Name)
	return err
}

// chooseRevision picks the revision undo goes back to, from the profile's
// revisions oldest first: the one numbered toRevision, or for 0 the one
// before the current.
func chooseRevision(profile string, revisions []revision, pr *gamesv1.ProfileRollout, toRevision int) (revision, error) {
	if toRevision > 0 {
		for _, r := range revisions {
			if r.number == toRevision {
				return r, nil
			}
		}
		return revision{}, fmt.Errorf("profile %s has no revision %d (see rollout history)", profile, toRevision)
	}
	if len(revisions) == 0 {
		return revision{}, fmt.Errorf("profile %s has no revisions to roll back to", profile)
	}
	// The newest stands for the current one without a ProfileRollout, and
	// when the target's revision is not there: a revision the controller
	// could not create would be newer than every other.
	current := len(revisions) - 1
	if pr != nil && pr.Status.TargetHash != "" {
		if i := slices.IndexFunc(revisions, func(r revision) bool { return r.hash == pr.Status.TargetHash }); i >= 0 {
			current = i
		} else {
			current = len(revisions)
		}
	}
	if current == 0 {
		r := revisions[0]
		return revision{}, fmt.Errorf("profile %s has no revision before the current one, %s (%s)", profile, r.label(), r.cm.Name)
	}
	return revisions[current-1], nil
}

// sameContent compares data maps, nil and empty alike: the API server
// stores an empty map as none.
func sameContent[V string | []byte](a, b map[string]V) bool {
	return maps.EqualFunc(a, b, func(x, y V) bool { return string(x) == string(y) })
}
