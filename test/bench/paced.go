package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/metrics"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// ---- paced rollout ----
//
// The paced scenario edits a hot profile annotated with a max-rolling budget
// and follows the rollout on the benchmark's Deployment watch, with the
// kube-controller-manager stand-in (kcmstandin.go) reporting each moved
// Deployment complete, as a real one would once its pods are Ready. It runs
// once per size, after the unpaced fan-outs (which it must not disturb: the
// stand-in runs only around it), in a controller process of its own with
// --profile-change-delay=0.
//
// Definitions, all from the watch (the benchmark's, not the controller's):
//   - a Deployment is moved once it carries the new hash in its pod template;
//   - it is complete as the controller's deploymentComplete says:
//     status.observedGeneration >= metadata.generation and
//     replicas = updatedReplicas = readyReplicas = spec.replicas;
//   - moved-and-not-complete counts the Deployments moved but not complete,
//     after each watch event; the watch delivers the events in
//     resourceVersion order, so its maximum is the most sessions rolling at
//     once in the API server's own history, which the budget bounds;
//   - a wave is a maximal run of moves (each Deployment's first event with
//     the new hash, in time order) in which each follows the one before by at
//     most waveGap. The controller admits sessions at most once per 250 ms
//     per profile (planInterval), so waves are the plans that admitted
//     sessions; two plans whose moves overlap or follow within waveGap count
//     as one.
const waveGap = 100 * time.Millisecond

// rolloutObserver follows one paced rollout: its fields change under the
// tracker's lock, from the tracker's watch.
type rolloutObserver struct {
	target     string
	members    map[string]bool      // namespace/name of the profile's Deployments
	moved      map[string]time.Time // first event with the new hash
	movedRV    map[string]int64     // its resourceVersion
	completed  map[string]time.Time // first event with the new hash and complete
	rolling    map[string]bool      // moved and not complete now
	maxRolling int
	maxAt      time.Time
	done       chan struct{} // closed once every member is moved and complete
	doneAt     time.Time
}

// observeRollout starts following the rollout of target to the Deployments
// keys. Register it before the edit: it sees only what the watch delivers
// from then on.
func (t *tracker) observeRollout(keys []string, target string) *rolloutObserver {
	o := &rolloutObserver{target: target, members: map[string]bool{}, moved: map[string]time.Time{}, movedRV: map[string]int64{},
		completed: map[string]time.Time{}, rolling: map[string]bool{}, done: make(chan struct{})}
	for _, k := range keys {
		o.members[k] = true
	}
	t.mu.Lock()
	t.observers = append(t.observers, o)
	t.mu.Unlock()
	return o
}

// stopObserving stops o's updates; its fields may be read from then on.
func (t *tracker) stopObserving(o *rolloutObserver) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.observers[:0]
	for _, x := range t.observers {
		if x != o {
			kept = append(kept, x)
		}
	}
	t.observers = kept
}

func (t *tracker) observeLocked(d *appsv1.Deployment, at time.Time) {
	for _, o := range t.observers {
		o.observe(d, at)
	}
}

func (o *rolloutObserver) observe(d *appsv1.Deployment, at time.Time) {
	key := d.Namespace + "/" + d.Name
	if !o.members[key] {
		return
	}
	onTarget := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == o.target
	complete := deploymentComplete(d)
	if _, seen := o.moved[key]; onTarget && !seen {
		o.moved[key] = at
		o.movedRV[key], _ = strconv.ParseInt(d.ResourceVersion, 10, 64)
	}
	if onTarget && !complete {
		o.rolling[key] = true
	} else {
		delete(o.rolling, key)
	}
	if len(o.rolling) > o.maxRolling {
		o.maxRolling, o.maxAt = len(o.rolling), at
	}
	if _, seen := o.completed[key]; onTarget && complete && !seen {
		o.completed[key] = at
		if len(o.completed) == len(o.members) {
			o.doneAt = at
			close(o.done)
		}
	}
}

func (t *tracker) awaitComplete(ctx context.Context, o *rolloutObserver) (time.Time, error) {
	select {
	case <-o.done:
		t.mu.Lock()
		defer t.mu.Unlock()
		return o.doneAt, nil
	case <-ctx.Done():
		t.mu.Lock()
		defer t.mu.Unlock()
		return time.Time{}, fmt.Errorf("paced rollout: %d of %d Deployments moved, %d complete: %w",
			len(o.moved), len(o.members), len(o.completed), ctx.Err())
	}
}

// wave is one group of moves, as offsets from the edit.
type wave struct {
	start, end time.Duration
	size       int
}

// wavesOf groups move times into waves (see waveGap).
func wavesOf(moves []time.Time, start time.Time) []wave {
	sorted := append([]time.Time(nil), moves...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Before(sorted[j]) })
	var out []wave
	for i, at := range sorted {
		if i == 0 || at.Sub(sorted[i-1]) > waveGap {
			out = append(out, wave{start: at.Sub(start)})
		}
		w := &out[len(out)-1]
		w.end, w.size = at.Sub(start), w.size+1
	}
	return out
}

type pacedRound struct {
	size           int
	policy         string // the max-rolling annotation's value
	budget         int    // what it allows at this size
	firstMove      time.Duration
	rolled         time.Duration // edit -> the watch saw the last Deployment with the new hash
	complete       time.Duration // edit -> ... and the last one complete
	drained        time.Duration // edit -> the controller's rollout done and its queue idle
	waves          []wave
	maxInFlight    int                // most moved-and-not-complete at once, from the watch
	maxAt          time.Duration      // when
	req            requestDelta       // server side, all clients
	ctl            requestDelta       // req without the stand-in's and the benchmark's edit
	standIn        map[string]float64 // the stand-in's requests in the window, client side
	standInFailed  map[string]float64
	standInOps     int64 // status writes
	conflicts      int64 // stand-in writes that lost to a newer version
	client         map[string]float64
	events         map[string]float64 // rollout Events on the profile, by reason
	eventsWait     time.Duration      // after the window, until RolloutCompleted was listed (or gave up)
	lateEventPosts float64            // the controller's POSTs in that time: Events still queued at the window's end
}

// pacedSeries runs the paced rollout once per hot profile.
//
// Each paced round is measured against an unpaced round of the same
// profile, run first with the same controller and the same stand-in: only
// the policy differs. (The unpaced fan-outs above run without the stand-in,
// whose Deployment status writes cost the API server as much again.)
func (e *env) pacedSeries(ctx context.Context, maxRolling string) (baseline, out []pacedRound, err error) {
	if _, err := rollout.ParseIntOrPercent(maxRolling); err != nil {
		return nil, nil, fmt.Errorf("-paced-max-rolling: %w", err)
	}
	s, err := e.startKCMStandIn(ctx, benchNS)
	if err != nil {
		return nil, nil, err
	}
	defer s.stop() // on error; stopping twice is harmless
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := s.waitSettled(wctx); err != nil {
		return nil, nil, err
	}
	logf("kube-controller-manager stand-in: every Deployment of %s complete (%d status writes)", benchNS, s.writes.Load())
	// Started after the stand-in settled, so that its cold start takes in
	// the sessions' new Ready conditions, outside the measured windows.
	p, _, err := e.coldStart(ctx, "paced-rollout", "--profile-change-delay=0")
	if err != nil {
		return nil, nil, err
	}
	defer e.stopController(p)
	for _, h := range e.hot {
		r, err := e.pacedRound(ctx, p, s, h, "")
		if err != nil {
			return baseline, out, err
		}
		baseline = append(baseline, r)
	}
	// The policy goes on before the paced edits, and the controller's
	// plan of it (nothing to move) ends before them, so that each window
	// holds only its edit.
	for _, h := range e.hot {
		if err := e.setRolloutAnnotation(ctx, h, maxRolling); err != nil {
			return baseline, out, err
		}
	}
	time.Sleep(quietPeriod)
	// A deadline of its own: the one above has been running since before
	// the baseline rounds, which at 7,340 sessions outlast it.
	dctx, cancelDrain := context.WithTimeout(ctx, 5*time.Minute)
	defer cancelDrain()
	if _, _, err := p.waitDrained(dctx, func(ctlState) bool { return true }); err != nil {
		return baseline, out, err
	}
	for _, h := range e.hot {
		r, err := e.pacedRound(ctx, p, s, h, maxRolling)
		if err != nil {
			return baseline, out, err
		}
		out = append(out, r)
	}
	if err := e.stopController(p); err != nil {
		return baseline, out, err
	}
	s.stop()
	for _, h := range e.hot {
		if err := e.setRolloutAnnotation(ctx, h, ""); err != nil {
			return baseline, out, err
		}
	}
	return baseline, out, nil
}

// setRolloutAnnotation sets (or, with "", removes) a profile's max-rolling
// annotation. The profile's data, and so its hash, stay as they are.
func (e *env) setRolloutAnnotation(ctx context.Context, h *hotProfile, value string) error {
	cm := h.cm.DeepCopy()
	if value == "" {
		delete(cm.Annotations, rollout.AnnotationMaxRolling)
	} else {
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[rollout.AnnotationMaxRolling] = value
	}
	updated, err := e.admin.CoreV1().ConfigMaps(benchNS).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	h.cm = updated
	return nil
}

// budgetOf is how many sessions of size the max-rolling value lets roll at
// once: rounded down, at least 1 (pkg/rollout's rounding).
func budgetOf(maxRolling string, size int) int {
	v, err := rollout.ParseIntOrPercent(maxRolling)
	if err != nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, size, false)
	if err != nil {
		return 0
	}
	return min(max(n, 1), size)
}

func (e *env) pacedRound(ctx context.Context, p *ctlProc, s *kcmStandIn, h *hotProfile, maxRolling string) (pacedRound, error) {
	r := pacedRound{size: h.size, policy: maxRolling, budget: budgetOf(maxRolling, h.size)}
	before, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	ss0, err := p.scrape(ctx)
	if err != nil {
		return r, err
	}
	st0 := readState(ss0)
	own0, ownFailed0 := s.requests.snapshot()
	writes0, conflicts0 := s.writes.Load(), s.conflicts.Load()

	obs, target, start, err := e.editObserved(ctx, h)
	if err != nil {
		return r, err
	}
	defer e.tracker.stopObserving(obs)

	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute+time.Duration(h.size)*20*time.Millisecond)
	defer cancel()
	rolledAt, err := e.tracker.await(wctx, benchNS, target, h.size)
	if err != nil {
		return r, fmt.Errorf("paced rollout of %s: %w", h.cm.Name, err)
	}
	completeAt, err := e.tracker.awaitComplete(wctx, obs)
	if err != nil {
		return r, err
	}
	// The rollout ends with the controller's last plan, which finds it
	// complete and drops its progress series (and emits RolloutCompleted).
	if err := waitRolloutForgotten(wctx, p, h.cm.Name); err != nil {
		logf("paced rollout of %s: %v", h.cm.Name, err)
	}
	drainedAt, _, err := p.waitDrained(wctx, func(s ctlState) bool { return s.fanOuts > st0.fanOuts })
	if err != nil {
		return r, err
	}
	time.Sleep(quietPeriod)
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	ss2, err := p.scrape(ctx)
	if err != nil {
		return r, err
	}
	e.tracker.stopObserving(obs)

	r.rolled, r.complete, r.drained = rolledAt.Sub(start), completeAt.Sub(start), drainedAt.Sub(start)
	var moves []time.Time
	for _, at := range obs.moved {
		moves = append(moves, at)
	}
	r.waves = wavesOf(moves, start)
	if len(r.waves) > 0 {
		r.firstMove = r.waves[0].start
	}
	r.maxInFlight, r.maxAt = obs.maxRolling, obs.maxAt.Sub(start)
	r.req = diffSnapshots(before, after)
	own1, ownFailed1 := s.requests.snapshot()
	r.standIn, r.standInFailed = delta(own0, own1), delta(ownFailed0, ownFailed1)
	r.standInOps, r.conflicts = s.writes.Load()-writes0, s.conflicts.Load()-conflicts0
	// The controller's: the server's counts without the stand-in's own
	// (counted client side) and without the benchmark's one edit.
	r.ctl = subtractRequests(r.req, r.standIn, r.standInFailed)
	r.ctl = subtractRequests(r.ctl, map[string]float64{"PUT " + resConfigMaps: 1}, nil)
	r.client = delta(st0.requests, readState(ss2).requests)
	// The controller posts its Events one at a time, in the background,
	// behind one ProfileRolled Event per session: the last of the rollout's
	// may come well after the window. Waited for here, outside it.
	windowEnd := time.Now()
	for {
		if r.events, err = e.rolloutEvents(ctx, h.cm.Name, controller.RevisionName(h.cm.Name, target)); err != nil {
			return r, err
		}
		if r.events[controller.EventReasonRolloutCompleted] > 0 || time.Since(windowEnd) > 30*time.Second {
			break
		}
		sleepCtx(ctx, time.Second)
	}
	r.eventsWait = time.Since(windowEnd)
	if ss3, err := p.scrape(ctx); err == nil {
		r.lateEventPosts = readState(ss3).requests["POST 201"] - readState(ss2).requests["POST 201"]
	}
	var sizes []string
	for _, w := range r.waves {
		sizes = append(sizes, fmt.Sprint(w.size))
	}
	logf("paced rollout %d (max-rolling %s = %d): first move %s, rolled %s, complete %s, drained %s; %d waves (%s); max %d moved and not complete; controller's requests %s; stand-in's %s; events %s; cores %s",
		h.size, maxRolling, r.budget, r.firstMove.Round(time.Millisecond), r.rolled.Round(time.Millisecond), r.complete.Round(time.Millisecond),
		r.drained.Round(time.Millisecond), len(r.waves), strings.Join(sizes, " "), r.maxInFlight, strings.Join(r.ctl.lines(), ", "),
		requestLines(r.standIn), flowList(r.events), r.req.coresUsed())
	return r, nil
}

// editObserved edits the profile's data and returns the observer of its
// rollout, the new content hash and when the edit was sent. The hash is known
// before the edit, so the observer is in place before anything can move.
func (e *env) editObserved(ctx context.Context, h *hotProfile) (*rolloutObserver, string, time.Time, error) {
	cm := h.cm.DeepCopy()
	cm.Data = e.profileData()
	target := controller.ProfileHash(cm)
	obs := e.tracker.observeRollout(h.sessions, target)
	start := time.Now()
	updated, err := e.admin.CoreV1().ConfigMaps(benchNS).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		e.tracker.stopObserving(obs)
		return nil, "", start, err
	}
	h.cm, h.hash = updated, target
	return obs, target, start, nil
}

// waitRolloutForgotten waits until the controller no longer reports a
// rollout in progress for profile.
func waitRolloutForgotten(ctx context.Context, p *ctlProc, profile string) error {
	name := metrics.Namespace + "_rollout_sessions"
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ss, err := p.scrape(ctx)
		if err == nil {
			found := false
			for _, x := range ss {
				if x.name == name && x.labels["namespace"] == benchNS && x.labels["profile"] == profile {
					found = true
					break
				}
			}
			if !found {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the controller still reports the rollout in progress: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rolloutEvents counts the controller's rollout Events on a profile that
// name revision, by reason (an Event's count included). Read after the
// window's closing snapshot, so the LIST is not counted in it.
func (e *env) rolloutEvents(ctx context.Context, profile, revision string) (map[string]float64, error) {
	list, err := e.admin.CoreV1().Events(benchNS).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=ConfigMap,involvedObject.name=" + profile})
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, ev := range list.Items {
		if !strings.HasPrefix(ev.Reason, "Rollout") || !strings.Contains(ev.Message, revision) {
			continue
		}
		out[ev.Reason] += float64(max(ev.Count, 1))
	}
	return out, nil
}

// ---- report ----

// cpuShares returns, over the controller rounds of s, the controller's CPU
// time as a share of the kube-apiserver's in the same window (lowest, median,
// highest), and the kube-apiserver's median cores in those windows.
func (s *fanSeries) cpuShares() (lo, med, hi, apiCores float64) {
	var cores []float64
	for _, c := range s.ctl {
		if api := c.req.cpu["kube-apiserver"]; api > 0 && c.req.wall > 0 {
			cores = append(cores, api/c.req.wall.Seconds())
		}
	}
	lo, med, hi = spread(cpuShares(s.ctl))
	_, apiCores, _ = spread(cores)
	return lo, med, hi, apiCores
}

// unpacedBaseline returns the unpaced round of that size run with the
// stand-in, before the paced one.
func (r *results) unpacedBaseline(size int) (pacedRound, bool) {
	for _, b := range r.pacedBaseline {
		if b.size == size && b.rolled > 0 {
			return b, true
		}
	}
	return pacedRound{}, false
}

func (r *results) unpacedRolled(size int) (time.Duration, bool) {
	for _, s := range r.fanZero {
		if s.size == size {
			ctl, _ := s.medians()
			return ctl, true
		}
	}
	return 0, false
}

func (r *results) writePacedRow(w func(string, ...any)) {
	for _, p := range r.paced {
		baseline, ratio := "—", "—"
		if u, ok := r.unpacedRolled(p.size); ok && u > 0 {
			baseline = "unpaced fan-out above (median) " + secs(u)
			ratio = fmt.Sprintf("%.2fx", p.rolled.Seconds()/u.Seconds())
		}
		lo, med, hi := waveSizes(p.waves)
		w("| 1 | Paced rollout, `%s: %s` (%s sessions at once), `--profile-change-delay=0`, kube-controller-manager stand-in, **one round**: edit → last Deployment with the new hash / every one complete | %s | %s / %s; %d waves of %d–%d sessions (median %d); at most **%s** moved and not complete | %s | %s | ≤ %s moved and not complete at once | %s |\n",
			rollout.AnnotationMaxRolling, p.policy, num(p.budget), num(p.size), secs(p.rolled), secs(p.complete),
			len(p.waves), lo, hi, med, num(p.maxInFlight), baseline, ratio, num(p.budget), yes(p.maxInFlight <= p.budget && p.maxInFlight > 0))
	}
	for _, p := range r.paced {
		b, ok := r.unpacedBaseline(p.size)
		if !ok {
			continue
		}
		without := ""
		if u, ok := r.unpacedRolled(p.size); ok && u > 0 {
			without = fmt.Sprintf(" (%.2fx the unpaced fan-out above without the stand-in, %s)", p.rolled.Seconds()/u.Seconds(), secs(u))
		}
		statuses := p.ctl.count("PUT", resStatus) / float64(p.size)
		x := p.rolled.Seconds() / b.rolled.Seconds()
		w("| 1 | Paced rollout whose budget never binds (pods ready at once): edit → last Deployment moved, against the same edit unpaced, same controller and stand-in, just before; status writes per session | %s | %s; %.2f status writes/session (unpaced: %.2f) | unpaced, with the stand-in, %s | **%.2fx**%s | ≤ 1.5x, ≤ 2 status writes/session (a waiting session writes once as it starts waiting, once as it moves) | %s |\n",
			num(p.size), secs(p.rolled), statuses, b.ctl.count("PUT", resStatus)/float64(b.size), secs(b.rolled), x, without, yes(x <= 1.5 && statuses <= 2))
	}
}

func (r *results) writePacedRequestsRow(w func(string, ...any)) {
	for _, p := range r.paced {
		ok := p.ctl.deploymentWrites() == float64(p.size) && readsOf(p.ctl) == 0 && p.ctl.count("PUT", "deployments/status.apps") == 0
		w("| 2 | API requests of the paced rollout, the controller's alone (`apiserver_request_total` less the stand-in's %s status writes, counted client side, and the edit) | %s | %s | — | %.2f Deployment writes/session | 1 Deployment write per session, 0 GET, 0 LIST | %s |\n",
			num(int(p.standIn["PUT deployments/status.apps"])), num(p.size), requestSummary(p.ctl, p.size), p.ctl.deploymentWrites()/float64(p.size), yes(ok))
	}
}

// waveSizes returns the smallest, median and largest wave.
func waveSizes(ws []wave) (lo, med, hi int) {
	var xs []float64
	for _, w := range ws {
		xs = append(xs, float64(w.size))
	}
	l, m, h := spread(xs)
	return int(l), int(m), int(h)
}

func (r *results) writePacedDetails(w func(string, ...any)) {
	if len(r.paced) == 0 {
		return
	}
	w("\n### Paced rollout (one round per size)\n\n")
	w("The profile carries `%s: %s`; the controller (a process of its own, `--profile-change-delay=0`, started after the unpaced fan-outs) moves at most that many sessions that are on the new revision and not Ready at once, and plans at most every 250 ms per profile. ", rollout.AnnotationMaxRolling, r.paced[0].policy)
	w("No kube-controller-manager runs, so a **stand-in** in the benchmark process (`test/bench/kcmstandin.go`, for this scenario only: started after the unpaced rounds, stopped before the next scenario) watches the Deployments of the bench namespace and, for each whose `status.observedGeneration` is behind `metadata.generation`, writes its status (UpdateStatus) with `observedGeneration` = `generation` and replicas/updated/ready/available = `spec.replicas` (0 here), as kube-controller-manager's Deployment controller reports for such a Deployment. It does nothing else (no ReplicaSets, no conditions), has no rate limit and no pods to wait for, so these times are the controller's pacing, not a real rollout's. ")
	w("It runs as the admin (APF flow schema `exempt`) and counts its own requests client side; they are taken out of the server's counts to give the controller's. Before the round, every Deployment of the namespace was made complete (outside the window). Before the paced round, the same controller and stand-in ran the same edit unpaced (the profile without the annotation; rows \"unpaced\" below): the baseline of the 1.5x goal, as only the policy differs.\n\n")
	w("From the benchmark's watch: a Deployment is *moved* once it carries the new hash, *complete* when `status.observedGeneration >= metadata.generation` and replicas = updated = ready = `spec.replicas` (the controller's Ready); *moved and not complete* is counted after every watch event (delivered in resourceVersion order, so it is the API server's own history); a *wave* is a run of moves each within %s of the one before (plans admitting sessions less than %s after the last move of the previous wave merge into one).\n\n", waveGap, waveGap)
	w("| Sessions | Budget | First move | Last moved | All complete | Controller idle | Waves | Max moved and not complete (at) | Status writes/session | Rollout Events | Cores |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	for _, p := range append(slices.Clone(r.pacedBaseline), r.paced...) {
		policy := p.policy
		if policy == "" {
			policy = "unpaced"
		}
		w("| %s | %s (%s) | %s | %s | %s | %s | %d | %s (%s) | %.2f | %s | %s |\n", num(p.size), num(p.budget), policy,
			secs(p.firstMove), secs(p.rolled), secs(p.complete), secs(p.drained), len(p.waves), num(p.maxInFlight), secs(p.maxAt),
			p.ctl.count("PUT", resStatus)/float64(p.size), flowList(p.events), p.req.coresUsed())
	}
	for _, p := range r.paced {
		w("\n%s sessions:\n\n", num(p.size))
		var parts []string
		for i, wv := range p.waves {
			if i == 40 {
				parts = append(parts, fmt.Sprintf("… %d more", len(p.waves)-i))
				break
			}
			parts = append(parts, fmt.Sprintf("%.2f–%.2f s: %d", wv.start.Seconds(), wv.end.Seconds(), wv.size))
		}
		w("- Waves (from the edit, first and last move: sessions): %s\n", strings.Join(parts, "; "))
		w("- Server side, all clients: %s\n", strings.Join(p.req.lines(), ", "))
		w("- The stand-in's requests in the window (client side): %s; %s status writes, %s lost to a newer version and redone\n", requestLines(p.standIn), num(int(p.standInOps)), num(int(p.conflicts)))
		var ctl []string
		for _, l := range p.ctl.lines() {
			if contains(controllerResources, strings.Fields(l)[1]) {
				ctl = append(ctl, l)
			}
		}
		w("- The controller's, server side (the above on the controller's resources, less the stand-in's and the benchmark's `PUT configmaps`): %s\n", strings.Join(ctl, ", "))
		completed := "listed"
		if p.events[controller.EventReasonRolloutCompleted] == 0 {
			completed = "**not** listed"
		}
		w("- Rollout Events on the profile naming the new revision: %s; RolloutCompleted %s %s after the window, in which time the controller POSTed %g more requests (Events still in its queue at the window's end)\n",
			flowList(p.events), completed, secs(p.eventsWait), p.lateEventPosts)
		if len(p.ctl.failed) > 0 {
			w("- The controller's failed requests: %s (a 409 is a conflict, which the controller retries)\n", requestLines(p.ctl.failed))
		}
		w("- Requests APF dispatched per flow schema: %s\n", flowList(p.req.flows))
		w("- Client side, the controller's `rest_client_requests_total` by method and code: %s\n", flowList(p.client))
	}
	w("\n")
}
