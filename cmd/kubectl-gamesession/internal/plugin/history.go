package plugin

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// History prints the revisions of a profile, oldest first, as a table:
// REVISION, NAME, HASH, CREATED (when its rollout started) and AGE, and
// STATUS marking the revision the sessions move to (current) and the last
// one whose rollout completed (stable), as the ProfileRollout says. now is
// what ages are counted from.
func History(ctx context.Context, c Clients, out io.Writer, namespace, profile string, now time.Time) error {
	revisions, err := listRevisions(ctx, c, namespace, profile)
	if err != nil {
		return err
	}
	if len(revisions) == 0 {
		// Revisions outlive nothing: without a profile, say that.
		if _, err := getProfile(ctx, c, namespace, profile); err != nil {
			return err
		}
		_, err := fmt.Fprintf(out, "profile %s has no revisions yet\n", profile)
		return err
	}
	pr, err := getRollout(ctx, c, namespace, profile)
	if err != nil {
		return err
	}
	w := printers.GetNewTabWriter(out)
	fmt.Fprintln(w, "REVISION\tNAME\tHASH\tCREATED\tAGE\tSTATUS")
	for _, r := range revisions {
		created := r.cm.CreationTimestamp
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.label(), r.cm.Name, r.hash,
			created.UTC().Format(time.RFC3339), duration.HumanDuration(now.Sub(created.Time)), markers(r, pr))
	}
	return w.Flush()
}

// markers is the STATUS of a revision: current, stable, both or neither.
func markers(r revision, pr *gamesv1.ProfileRollout) string {
	if pr == nil || r.hash == "" {
		return ""
	}
	var m []string
	if r.hash == pr.Status.TargetHash {
		m = append(m, "current")
	}
	if r.hash == pr.Status.StableHash {
		m = append(m, "stable")
	}
	return strings.Join(m, ",")
}
