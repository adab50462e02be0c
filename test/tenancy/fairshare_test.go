package tenancy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// rolledOut reports whether the Deployment's rollout is complete: what the
// controller's ledger waits for before it frees a move's place.
func rolledOut(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.ReadyReplicas == want
}

// tenantMoves follows the Deployments of the tenants' namespaces through one
// cluster-wide watch, so in the API server's one order across namespaces: a
// Deployment moves when its pod template first carries its namespace's
// target hash, and is moving until its rollout is complete. The controller
// frees a place when its cache shows that completion, and starts the next
// move after it, so in this order the number moving never exceeds the
// budget, exactly, not only at samples.
type tenantMoves struct {
	mu      sync.Mutex
	targets map[string]string // namespace → the hash its moves go to
	tracked map[string]*trackedDeployment
	moving  int
	most    int
	// notMoved counts the Deployments not yet on their target.
	notMoved int
	// budget is the cluster's; a place counts as free from when the
	// watch sees fewer moving (after the first move) while some session
	// has yet to move, to when it sees the budget full again or none left
	// to move: longestFree is the longest such span.
	budget      int
	freeSince   time.Time
	longestFree time.Duration
	closed      bool // the watch ended before the test stopped it
	done        chan struct{}
}

type trackedDeployment struct {
	namespace string
	hash      string
	moved     time.Time // when it first carried its target
	ready     time.Time // when it was first complete on its target
	// unmoved is how many Deployments of each namespace did not carry
	// their target yet when this one moved.
	unmoved  map[string]int
	isMoving bool
}

func (e *env) watchTenantMoves(targets map[string]string, budget int) *tenantMoves {
	e.t.Helper()
	list, err := e.kube.AppsV1().Deployments("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	tm := &tenantMoves{targets: targets, budget: budget, tracked: map[string]*trackedDeployment{}, done: make(chan struct{})}
	for i := range list.Items {
		tm.observe(&list.Items[i])
	}
	w, err := e.kube.AppsV1().Deployments("").Watch(e.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(tm.done)
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type != watch.Deleted {
				tm.observe(d)
			}
		}
		select {
		case <-stopped:
		default:
			tm.mu.Lock()
			tm.closed = true
			tm.mu.Unlock()
		}
	}()
	e.t.Cleanup(func() { close(stopped); w.Stop(); <-tm.done })
	return tm
}

func (tm *tenantMoves) observe(d *appsv1.Deployment) {
	target, ok := tm.targets[d.Namespace]
	if !ok {
		return
	}
	now := time.Now()
	tm.mu.Lock()
	defer tm.mu.Unlock()
	key := d.Namespace + "/" + d.Name
	td := tm.tracked[key]
	known := td != nil
	if !known {
		td = &trackedDeployment{namespace: d.Namespace}
		tm.tracked[key] = td
	}
	wasUnmoved := td.moved.IsZero()
	td.hash = d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	onTarget := td.hash == target
	if onTarget && td.moved.IsZero() {
		td.moved = now
		td.unmoved = map[string]int{}
		for _, o := range tm.tracked {
			if o.hash != tm.targets[o.namespace] {
				td.unmoved[o.namespace]++
			}
		}
	}
	switch {
	case !known && td.moved.IsZero():
		tm.notMoved++
	case known && wasUnmoved && !td.moved.IsZero():
		tm.notMoved--
	}
	complete := rolledOut(d)
	if onTarget && complete && td.ready.IsZero() {
		td.ready = now
	}
	if moving := onTarget && !complete; moving != td.isMoving {
		td.isMoving = moving
		if moving {
			tm.moving++
		} else {
			tm.moving--
		}
	}
	tm.most = max(tm.most, tm.moving)
	free := tm.moving < tm.budget && tm.notMoved > 0
	switch {
	case free && tm.freeSince.IsZero() && tm.most > 0:
		tm.freeSince = now
	case !free && !tm.freeSince.IsZero():
		tm.longestFree = max(tm.longestFree, now.Sub(tm.freeSince))
		tm.freeSince = time.Time{}
	}
}

// of returns a copy of the tracked Deployment, and whether it is tracked.
func (tm *tenantMoves) of(namespace, name string) (trackedDeployment, bool) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	td, ok := tm.tracked[namespace+"/"+name]
	if !ok {
		return trackedDeployment{}, false
	}
	return *td, true
}

// movedIn counts the Deployments of the namespace that moved.
func (tm *tenantMoves) movedIn(namespace string) int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	n := 0
	for _, td := range tm.tracked {
		if td.namespace == namespace && !td.moved.IsZero() {
			n++
		}
	}
	return n
}

// moveDurations returns how long each completed move of the namespace took,
// from the write the watch saw to its rollout complete, shortest first.
func (tm *tenantMoves) moveDurations(namespace string) []time.Duration {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	var out []time.Duration
	for _, td := range tm.tracked {
		if td.namespace == namespace && !td.moved.IsZero() && !td.ready.IsZero() {
			out = append(out, td.ready.Sub(td.moved))
		}
	}
	slices.Sort(out)
	return out
}

func (tm *tenantMoves) mostMoving() (most int, closed bool) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.most, tm.closed
}

// longestWithAPlaceFree is the longest span the watch saw fewer sessions
// moving than the budget while some had yet to move, up to now.
func (tm *tenantMoves) longestWithAPlaceFree() time.Duration {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if !tm.freeSince.IsZero() {
		return max(tm.longestFree, time.Since(tm.freeSince))
	}
	return tm.longestFree
}

// budgetSamples is what the sampler saw every half second, by its own
// reads of the API: lists of the Deployments of both tenants (each list one
// snapshot), the big tenant's ProfileRollout, and the small tenant's
// session while its fix waits.
type budgetSamples struct {
	mu      sync.Mutex
	samples int
	most    int
	over    []string // samples that saw more moving than the budget
	errs    []error
	// rollout are the distinct clusterBudget statuses the big tenant's
	// ProfileRollout showed, in order; rolloutOK is whether one of them
	// showed its namespace waiting, with a fair share.
	rollout   []string
	rolloutOK bool
	// fixWaiting is a WaitingForClusterBudget message of the small
	// tenant's session, if a sample caught one.
	fixWaiting string
}

// TestFairSharesUnderASmallBudget: under a cluster-wide budget of 4 moving
// sessions, tenant A's edit of a profile of 300 sessions queues almost all
// of them; tenant B's one-session fix, made once A's rollout is well under
// way, moves at the next place that frees, not behind A's queue: within
// about one move of A's (measured in the same run), while A still has most
// of its sessions to move. The budget holds throughout, exactly by the
// watch of Deployments and at every half-second sample, and A's
// ProfileRollout says its sessions wait for the shared budget.
func TestFairSharesUnderASmallBudget(t *testing.T) {
	const (
		budget    = 4
		sessionsA = 300
		// The fix must have moved while A still had at least this many
		// sessions to move: a fix queued behind A's rollout would move
		// only near its end.
		minLeftInA = 100
	)
	begin := time.Now()
	e := newEnv(t)
	cfg := e.controllerIdentity()
	// Registered before the namespaces, so it runs after their deletion:
	// the next test's cluster-wide controller must not find 300 sessions
	// of a terminating namespace (creating there is refused, which tests
	// that check for refused requests would count).
	var namespaces []string
	t.Cleanup(func() { waitNamespacesGone(t, e, namespaces) })
	tenantA, tenantB := e.namespace(), e.namespace()
	namespaces = []string{tenantA, tenantB}

	dataA := func(v string) map[string]string { return map[string]string{"game.cfg": "mode=arena\nversion=" + v} }
	dataB := func(v string) map[string]string { return map[string]string{"game.cfg": "mode=lobby\nversion=" + v} }
	e.createProfile(tenantA, "arena", dataA("1"))
	e.createProfile(tenantB, "lobby", dataB("1"))
	for i := range sessionsA {
		e.createSession(tenantA, fmt.Sprintf("s%03d", i), "arena")
	}
	e.createSession(tenantB, "fix", "lobby")

	var changeDelay time.Duration
	e.startController(cfg, func(o *app.Options) {
		o.MaxMovingSessions, o.MaxMovesPerMinute = budget, 0
		// Unpaced profiles (these have no rollout annotations): the
		// budget is the only limit on how many move.
		o.RolloutMaxRolling, o.RolloutCanary = "100%", "0"
		changeDelay = o.ProfileChangeDelay
	})

	// Every session runs the first content, its Deployment complete.
	settled := func(ns, hash string, n int) func() (bool, error) {
		return func() (bool, error) {
			list, err := e.kube.AppsV1().Deployments(ns).List(e.ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			done := 0
			for i := range list.Items {
				d := &list.Items[i]
				if d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == hash && rolledOut(d) {
					done++
				}
			}
			return done == n, fmt.Errorf("%d of %d Deployments of %s complete on %s", done, n, ns, hash)
		}
	}
	// 300 sessions created, scheduled and run by kwok at once: 17 to 23 s
	// here on 2 cores; a bound of well over twice that.
	e.eventuallyWithin(2*time.Minute, "tenant A's 300 Deployments complete", settled(tenantA, hashOf(dataA("1")), sessionsA))
	e.eventually("tenant B's Deployment complete", settled(tenantB, hashOf(dataB("1")), 1))
	t.Logf("setup: 301 sessions Ready in %v", time.Since(begin).Round(100*time.Millisecond))

	targetA, targetB := hashOf(dataA("2")), hashOf(dataB("2"))
	moves := e.watchTenantMoves(map[string]string{tenantA: targetA, tenantB: targetB}, budget)
	samples := &budgetSamples{}
	var fixEdited time.Time // set before the sampler reads it, under samples.mu
	stopSampling := e.sampleBudget(samples, budget, tenantA, tenantB, targetA, targetB, &fixEdited)
	defer stopSampling()

	rolloutStart := time.Now()
	e.editProfile(tenantA, "arena", dataA("2"))
	e.eventually(fmt.Sprintf("tenant A's rollout under way (%d sessions moved)", 2*budget), func() (bool, error) {
		n := moves.movedIn(tenantA)
		return n >= 2*budget, fmt.Errorf("%d moved", n)
	})
	underWay := time.Since(rolloutStart)
	movedBeforeFix := moves.movedIn(tenantA)

	samples.mu.Lock()
	fixEdited = time.Now()
	samples.mu.Unlock()
	e.editProfile(tenantB, "lobby", dataB("2"))

	// The fix's move. A bound far above what it should take (the bound
	// asserted below is computed from the moves measured), so that a
	// fairness broken shows as figures, not as a timeout alone.
	var fix trackedDeployment
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		fix, _ = moves.of(tenantB, "fix")
		return !fix.moved.IsZero(), nil
	})
	durations := moves.moveDurations(tenantA)
	logDurations := func() {
		if len(durations) == 0 {
			t.Logf("no move of tenant A completed")
			return
		}
		t.Logf("tenant A's single moves (write → complete), %d measured: min %v, median %v, max %v",
			len(durations), durations[0].Round(time.Millisecond), durations[len(durations)/2].Round(time.Millisecond),
			durations[len(durations)-1].Round(time.Millisecond))
	}
	if err != nil {
		logDurations()
		t.Fatalf("tenant B's fix did not move within %v of its edit; tenant A has moved %d of %d sessions meanwhile (%d when the fix was edited)",
			waitTimeout, moves.movedIn(tenantA), sessionsA, movedBeforeFix)
	}
	latency := fix.moved.Sub(fixEdited)
	leftInA := fix.unmoved[tenantA]
	e.eventually("tenant B's fix complete", func() (bool, error) {
		fix, _ = moves.of(tenantB, "fix")
		return !fix.ready.IsZero(), nil
	})
	// A few more samples after the fix is Ready.
	time.Sleep(2 * time.Second)
	stopSampling()

	durations = moves.moveDurations(tenantA)
	if len(durations) == 0 {
		t.Fatal("no move of tenant A completed: nothing to bound the fix's wait by")
	}
	slowest := durations[len(durations)-1]
	// The fix waits for its profile change to be seen (changeDelay) and
	// its revision made, then for the first of A's moves under way to end:
	// at most the slowest single move, doubled for the noise of 2 busy
	// cores. The seconds added cover its own syncs and the watch's delay,
	// and the ledger's: it frees a place when the session's sync sees its
	// Deployment complete (up to 3 s when that sync waited in the status
	// lane behind A's waiting sessions; 0.2 s since it takes the first
	// lane). A fix queued behind A's rollout waits about 300/4 moves
	// instead.
	bound := changeDelay + 2*slowest + 5*time.Second
	most, closed := moves.mostMoving()
	freeSpan := moves.longestWithAPlaceFree()
	samples.mu.Lock()
	defer samples.mu.Unlock()

	t.Logf("budget %d; tenant A's rollout under way (%d moved) %v after its edit; fix edited with %d of A's moved",
		budget, 2*budget, underWay.Round(time.Millisecond), movedBeforeFix)
	t.Logf("fix latency (edit → its Deployment on the new revision) %v, bound %v; Ready %v after its edit",
		latency.Round(time.Millisecond), bound.Round(time.Millisecond), fix.ready.Sub(fixEdited).Round(time.Millisecond))
	logDurations()
	t.Logf("tenant A had %d of %d sessions not moved when the fix moved", leftInA, sessionsA)
	t.Logf("most moving at once: %d by the watch, %d over %d samples", most, samples.most, samples.samples)
	// Not asserted: how long a place stayed free while sessions waited
	// (the ledger frees a place when the controller syncs the session
	// whose move completed, not when the watch sees it complete).
	t.Logf("longest span the watch saw fewer than %d moving while sessions waited to move: %v", budget,
		freeSpan.Round(time.Millisecond))
	for _, r := range samples.rollout {
		t.Logf("tenant A's ProfileRollout clusterBudget: %s", r)
	}
	if samples.fixWaiting != "" {
		t.Logf("tenant B's session waited: %s", samples.fixWaiting)
	} else {
		t.Logf("no sample caught tenant B's session waiting for the budget")
	}

	if closed {
		t.Errorf("the watch of Deployments ended early: the exact count is incomplete")
	}
	if most > budget {
		t.Errorf("the watch saw %d sessions moving at once, over the budget of %d", most, budget)
	}
	if samples.most > budget {
		t.Errorf("samples saw up to %d sessions moving at once, over the budget of %d: %v", samples.most, budget, samples.over)
	}
	if most == 0 || samples.samples == 0 {
		t.Errorf("saw no session moving (watch: %d) or took no sample (%d)", most, samples.samples)
	}
	for _, err := range samples.errs[:min(5, len(samples.errs))] {
		t.Errorf("sample: %v", err)
	}
	if latency > bound {
		t.Errorf("tenant B's fix moved %v after its edit, over %v: it waited for more than one freed place",
			latency.Round(time.Millisecond), bound.Round(time.Millisecond))
	}
	if leftInA < minLeftInA {
		t.Errorf("tenant B's fix moved when tenant A had %d sessions left to move, want at least %d: it waited behind A's rollout",
			leftInA, minLeftInA)
	}
	if !samples.rolloutOK {
		t.Errorf("tenant A's ProfileRollout never showed its sessions waiting in %s with a fair share of the budget", tenantA)
	}
}

// sampleBudget samples every half second until the returned func is
// called (more than once is fine): the sessions moving in both tenants,
// tenant A's ProfileRollout, and tenant B's session once its fix is edited
// (fixEdited set, read under s.mu) and until it moved.
func (e *env) sampleBudget(s *budgetSamples, budget int, tenantA, tenantB, targetA, targetB string, fixEdited *time.Time) func() {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	targets := map[string]string{tenantA: targetA, tenantB: targetB}
	sample := func() {
		list, err := e.kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			if ctx.Err() == nil {
				s.mu.Lock()
				s.errs = append(s.errs, err)
				s.mu.Unlock()
			}
			return
		}
		moving, fixMoved := 0, false
		for i := range list.Items {
			d := &list.Items[i]
			target, ok := targets[d.Namespace]
			if !ok {
				continue
			}
			onTarget := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == target
			if onTarget && !rolledOut(d) {
				moving++
			}
			fixMoved = fixMoved || d.Namespace == tenantB && onTarget
		}
		r, err := e.game.GamesV1().ProfileRollouts(tenantA).Get(ctx, "arena", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			s.mu.Unlock()
		}
		s.mu.Lock()
		edited := !fixEdited.IsZero()
		s.mu.Unlock()
		var waiting string
		if edited && !fixMoved {
			if fix, err := e.game.GamesV1().GameSessions(tenantB).Get(ctx, "fix", metav1.GetOptions{}); err == nil {
				if c := meta.FindStatusCondition(fix.Status.Conditions, gamesv1.ConditionProfileUpToDate); c != nil &&
					c.Reason == gamesv1.ReasonWaitingForClusterBudget {
					waiting = c.Message
				}
			}
		}

		s.mu.Lock()
		defer s.mu.Unlock()
		s.samples++
		s.most = max(s.most, moving)
		if moving > budget {
			s.over = append(s.over, fmt.Sprintf("%d at %s", moving, time.Now().Format("15:04:05.000")))
		}
		if waiting != "" {
			s.fixWaiting = waiting
		}
		if err != nil || r.Status.ClusterBudget == nil {
			return
		}
		cb := r.Status.ClusterBudget
		var parts []string
		for _, n := range cb.Namespaces {
			parts = append(parts, fmt.Sprintf("%s waiting %d held %d share %d", n.Namespace, n.WaitingSessions, n.HeldPlaces, n.FairShare))
			// Its namespace waits, holding no more than the budget, with
			// a share of the budget as one or two namespaces divide it.
			if n.Namespace == tenantA && n.WaitingSessions > 0 && n.HeldPlaces <= int32(budget) &&
				n.FairShare >= int32((budget+1)/2) && n.FairShare <= int32(budget) && cb.WaitingSessions >= n.WaitingSessions {
				s.rolloutOK = true
			}
		}
		seen := fmt.Sprintf("waitingSessions %d: %s", cb.WaitingSessions, strings.Join(parts, "; "))
		if len(s.rollout) == 0 || s.rollout[len(s.rollout)-1] != seen {
			s.rollout = append(s.rollout, seen)
		}
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// eventuallyWithin is eventually with its own bound.
func (e *env) eventuallyWithin(timeout time.Duration, what string, cond func() (bool, error)) {
	e.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		e.t.Fatalf("timed out after %s waiting for %s (last: %v)", timeout, what, last)
	}
}

// waitNamespacesGone waits until the namespaces are deleted, bounded.
func waitNamespacesGone(t *testing.T, e *env, namespaces []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ns := range namespaces {
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := e.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("namespace %s not gone within 2m of the test's end", ns)
		}
	}
}
