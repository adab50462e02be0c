package faults

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/pkg/controller"
)

// rollouts follows the controller's Deployments through a watch and records,
// for each, every profile hash its pod template carried, in order, with the
// generation it had then.
//
// A watch delivers every change of every object, in order, unless it has to
// start over from a fresh list, which the RetryWatcher never does: it resumes
// where it stopped, or reports that it cannot. The history is therefore
// complete, or the test knows it is not (after an API server restart the
// watch cache starts afresh and cannot resume an old watch).
type rollouts struct {
	t *testing.T

	mu      sync.Mutex
	history map[string][]rollStep // by Deployment name
	count   map[string]int        // Deployments carrying each hash now
	changed chan struct{}         // closed and replaced on every change
	err     error                 // why the watch ended early

	// For paced rollouts: the Deployments as last seen, and the most that
	// carried budgetHash without being rolled out and ready, at any event.
	latest     map[string]*appsv1.Deployment
	budgetHash string
	maxRolling int

	// stop ends the watch; what was recorded stays. Tests stop it before a
	// fault it cannot survive, so that its retries do not flood the log.
	stop func()
}

// rollStep is a hash a Deployment's template carried, and its generation
// when it first did.
type rollStep struct {
	hash       string
	generation int64
}

// trackRollouts lists the Deployments and watches them until the test ends.
func (e *env) trackRollouts() *rollouts {
	e.t.Helper()
	r := &rollouts{t: e.t, history: map[string][]rollStep{}, count: map[string]int{}, changed: make(chan struct{}),
		latest: map[string]*appsv1.Deployment{}}
	selector := controller.ManagedDeploymentSelector()
	list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		e.t.Fatalf("list Deployments: %v", err)
	}
	for i := range list.Items {
		r.observe(&list.Items[i])
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return e.kube.AppsV1().Deployments(e.ns).Watch(ctx, o)
		},
	})
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	r.stop = sync.OnceFunc(func() {
		cancel()
		w.Stop()
		<-w.Done()
	})
	e.t.Cleanup(r.stop)
	go func() {
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				r.observe(ev.Object.(*appsv1.Deployment))
			case watch.Error:
				r.fail(fmt.Errorf("the Deployment watch ended: %v", apierrors.FromObject(ev.Object)))
				return
			}
		}
	}()
	return r
}

func (r *rollouts) observe(d *appsv1.Deployment) {
	hash := templateHash(d)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latest[d.Name] = d
	if r.budgetHash != "" {
		r.maxRolling = max(r.maxRolling, r.rollingLocked())
	}
	steps := r.history[d.Name]
	if len(steps) > 0 && steps[len(steps)-1].hash == hash {
		return
	}
	if len(steps) > 0 {
		r.count[steps[len(steps)-1].hash]--
	}
	r.history[d.Name] = append(steps, rollStep{hash: hash, generation: d.Generation})
	r.count[hash]++
	close(r.changed)
	r.changed = make(chan struct{})
}

// watchBudget starts counting, at every event, the Deployments that carry
// hash and are not rolled out and ready: the sessions moved and not Ready,
// which a rollout budget bounds.
func (r *rollouts) watchBudget(hash string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.budgetHash, r.maxRolling = hash, r.rollingLocked()
}

// maxRollingSeen is the most Deployments watchBudget saw rolling at once.
func (r *rollouts) maxRollingSeen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxRolling
}

func (r *rollouts) rollingLocked() int {
	n := 0
	for _, d := range r.latest {
		want := ptr.Deref(d.Spec.Replicas, 1)
		complete := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
			d.Status.Replicas == want && d.Status.ReadyReplicas == want
		if templateHash(d) == r.budgetHash && !complete {
			n++
		}
	}
	return n
}

func (r *rollouts) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitCarrying waits until at least n Deployments carry hash, as the watch
// sees them, and returns how many do.
func (r *rollouts) waitCarrying(hash string, n int, timeout time.Duration) int {
	r.t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		got, changed, err := r.count[hash], r.changed, r.err
		r.mu.Unlock()
		if got >= n {
			return got
		}
		if err != nil {
			r.t.Fatalf("waiting for %d Deployments with hash %s: %v", n, hash, err)
		}
		select {
		case <-changed:
		case <-deadline:
			r.t.Fatalf("after %s, %d Deployments carry hash %s, want at least %d", timeout, got, hash, n)
		case <-r.t.Context().Done():
			r.t.Fatal(r.t.Context().Err())
		}
	}
}

// check verifies each Deployment's history against the edits (hashes, in
// the order they were made) and its generation now:
//   - it starts at the seeded hash and ends at the last one;
//   - it only ever moves forward through the edits, never back to an older
//     hash nor twice to the same one;
//   - its generation rose exactly once per hash it moved to. Nothing else
//     changes the spec in these tests, so a rise the history does not
//     explain is a write that should not have been.
//
// A Deployment may skip edits: one that had not been rolled yet when the next
// edit came goes straight to the newer hash, and receiving an edit once is
// all that is asked.
func (r *rollouts) check(hashes []string, deployments map[string]*appsv1.Deployment) (received map[int]int) {
	r.t.Helper()
	return r.checkHistories(hashes, deployments, true)
}

// checkHashes is check without the generations, for when another writer
// changes the spec too.
func (r *rollouts) checkHashes(hashes []string, deployments map[string]*appsv1.Deployment) {
	r.t.Helper()
	r.checkHistories(hashes, deployments, false)
}

func (r *rollouts) checkHistories(hashes []string, deployments map[string]*appsv1.Deployment, generations bool) (received map[int]int) {
	r.t.Helper()
	// The caller saw the last hash everywhere in a list; the watch may lag
	// behind it by a moment.
	r.waitCarrying(hashes[len(hashes)-1], len(deployments), time.Minute)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		r.t.Fatalf("the rollout history is incomplete: %v", r.err)
	}
	received = map[int]int{} // number of edits received -> Deployments
	var offenders []string
	for name, d := range deployments {
		steps := r.history[name]
		edits := make([]int, len(steps))
		for i, s := range steps {
			edits[i] = slices.Index(hashes, s.hash)
		}
		var why string
		switch {
		case len(steps) == 0:
			why = "never seen by the watch"
		case edits[0] != 0:
			why = "did not start at the seeded hash"
		case edits[len(edits)-1] != len(hashes)-1:
			why = "does not end at the last hash"
		case !slices.IsSorted(edits):
			// Repeats in a row are dropped as they come, so a sorted history
			// is strictly increasing: no hash twice, none older than before.
			why = "went back to an older hash"
		case generations && d.Generation-steps[0].generation != int64(len(steps)-1):
			why = fmt.Sprintf("generation rose by %d for %d rolls", d.Generation-steps[0].generation, len(steps)-1)
		}
		if why != "" {
			offenders = append(offenders, fmt.Sprintf("%s: %s; edits %v, generation now %d, history %v", name, why, edits, d.Generation, steps))
			continue
		}
		received[len(steps)-1]++
	}
	slices.Sort(offenders)
	report(r.t, offenders, "Deployments whose rollout history is wrong")
	return received
}

// hashesOf returns the hashes the Deployment carried, in order.
func (r *rollouts) hashesOf(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var hashes []string
	for _, s := range r.history[name] {
		hashes = append(hashes, s.hash)
	}
	return hashes
}
