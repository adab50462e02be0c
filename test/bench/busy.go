package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// ---- busy sessions ----
//
// The busy scenario edits the largest hot profile while a share of its
// sessions are busy (the games.example.com/busy label, as a matchmaker sets
// it), and turns those idle one by one over a span, as matches end. The
// profile has no policy: every idle session moves at once, and each busy
// one once it turns idle. It runs with the kube-controller-manager stand-in
// (as the paced rollout does), in a controller process of its own with
// --profile-change-delay=0 and no cluster-wide budget, so that the times
// are the busy signal's alone.
//
// A busy session is restarted if its Deployment took the new hash before
// its idle flip reached the API server: both resourceVersions come from the
// one etcd, whose revisions order every write, so the comparison is exact,
// whatever the watch's delay.
type busyRound struct {
	size, busy int
	idleOver   time.Duration
	// restarted counts busy sessions moved before their idle flip.
	restarted int
	// idleMoved is when the last idle session moved; lastIdle when the
	// last busy session turned idle; lastMoved when the last one moved;
	// complete when every Deployment was complete; all from the edit.
	idleMoved, lastIdle, lastMoved, complete time.Duration
	// flipToMove are, per busy session, from its idle flip's answer to its
	// move on the benchmark's watch.
	flipToMove []float64
	req, ctl   requestDelta
	standIn    map[string]float64
}

// busyRollout runs the busy scenario on the largest hot profile.
func (e *env) busyRollout(ctx context.Context, share float64, over time.Duration) (*busyRound, error) {
	h := e.hot[len(e.hot)-1]
	r := &busyRound{size: h.size, busy: int(share * float64(h.size)), idleOver: over}
	if r.busy < 1 {
		return nil, fmt.Errorf("-busy-share %g of %d sessions is no session", share, h.size)
	}
	// Every n-th session is busy, so that they spread over the name order.
	var busy, idle []string
	every := float64(h.size) / float64(r.busy)
	for i, key := range h.sessions {
		if len(busy) < r.busy && int(float64(len(busy))*every) == i {
			busy = append(busy, key)
		} else {
			idle = append(idle, key)
		}
	}
	s, err := e.startKCMStandIn(ctx, benchNS)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := s.waitSettled(wctx); err != nil {
		return nil, err
	}
	logf("busy rollout: labelling %d of %d sessions busy", len(busy), h.size)
	if _, err := e.setBusy(ctx, busy, true); err != nil {
		return nil, err
	}
	p, _, err := e.coldStart(ctx, "busy-rollout", "--profile-change-delay=0", "--max-moving-sessions=0", "--max-moves-per-minute=0")
	if err != nil {
		return nil, err
	}
	defer e.stopController(p)

	before, err := e.snapshot(ctx, p)
	if err != nil {
		return nil, err
	}
	own0, ownFailed0 := s.requests.snapshot()
	obs, _, start, err := e.editObserved(ctx, h)
	if err != nil {
		return nil, err
	}
	defer e.tracker.stopObserving(obs)

	rctx, cancelRollout := context.WithTimeout(ctx, 5*time.Minute+time.Duration(h.size)*20*time.Millisecond)
	defer cancelRollout()
	idleMovedAt, err := e.tracker.awaitMoved(rctx, obs, idle)
	if err != nil {
		return nil, fmt.Errorf("busy rollout, idle sessions: %w", err)
	}
	r.idleMoved = idleMovedAt.Sub(start)
	logf("busy rollout: %d idle sessions moved %s after the edit; turning the %d busy ones idle over %s",
		len(idle), secs(r.idleMoved), len(busy), over)

	flips, err := e.turnIdleOver(rctx, busy, over)
	if err != nil {
		return nil, err
	}
	completeAt, err := e.tracker.awaitComplete(rctx, obs)
	if err != nil {
		return nil, err
	}
	r.complete = completeAt.Sub(start)
	if _, _, err := p.waitDrained(rctx, func(ctlState) bool { return true }); err != nil {
		return nil, err
	}
	time.Sleep(quietPeriod)
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return nil, err
	}
	e.tracker.stopObserving(obs)

	for _, key := range busy {
		f := flips[key]
		movedAt, movedRV := obs.moved[key], obs.movedRV[key]
		if movedRV < f.rv {
			r.restarted++
			logf("busy rollout: %s moved (rv %d) before it turned idle (rv %d)", key, movedRV, f.rv)
		}
		r.lastIdle = max(r.lastIdle, f.at.Sub(start))
		r.lastMoved = max(r.lastMoved, movedAt.Sub(start))
		r.flipToMove = append(r.flipToMove, movedAt.Sub(f.at).Seconds())
	}
	r.req = diffSnapshots(before, after)
	own1, ownFailed1 := s.requests.snapshot()
	r.standIn = delta(own0, own1)
	r.ctl = subtractRequests(r.req, r.standIn, delta(ownFailed0, ownFailed1))
	// The benchmark's own: the edit and the idle flips.
	r.ctl = subtractRequests(r.ctl, map[string]float64{"PUT " + resConfigMaps: 1, "PATCH gamesessions.games.example.com": float64(len(busy))}, nil)
	_, med, hi := spread(r.flipToMove)
	logf("busy rollout %d (%d busy, idle over %s): idle moved %s, last idle %s, last moved %s, complete %s; flip → move median %.3f s, max %.3f s; %d busy sessions restarted; controller's requests %s",
		h.size, len(busy), over, secs(r.idleMoved), secs(r.lastIdle), secs(r.lastMoved), secs(r.complete), med, hi, r.restarted,
		strings.Join(r.ctl.lines(), ", "))
	if err := e.stopController(p); err != nil {
		return r, err
	}
	return r, nil
}

// idleFlip is a busy session's turn to idle: when its PATCH was answered,
// and the resourceVersion it gave the session.
type idleFlip struct {
	at time.Time
	rv int64
}

// turnIdleOver removes the busy label of the sessions one after another,
// evenly over the span, and returns each flip.
func (e *env) turnIdleOver(ctx context.Context, keys []string, over time.Duration) (map[string]idleFlip, error) {
	flips := make(map[string]idleFlip, len(keys))
	step := over / time.Duration(len(keys))
	start := time.Now()
	for i, key := range keys {
		if wait := time.Until(start.Add(time.Duration(i) * step)); wait > 0 {
			sleepCtx(ctx, wait)
		}
		rvs, err := e.setBusy(ctx, []string{key}, false)
		if err != nil {
			return nil, err
		}
		flips[key] = idleFlip{at: time.Now(), rv: rvs[key]}
	}
	return flips, nil
}

// setBusy sets or removes the busy label of the sessions (namespace/name
// keys), in parallel, and returns the resourceVersion each patch gave.
func (e *env) setBusy(ctx context.Context, keys []string, busy bool) (map[string]int64, error) {
	value := strconv.Quote(gamesv1.BusyLabelValue)
	if !busy {
		value = "null"
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, gamesv1.BusyLabel, value))
	var mu sync.Mutex
	rvs := make(map[string]int64, len(keys))
	var firstErr error
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(e.cfg.workers, len(keys)) {
		wg.Go(func() {
			for key := range work {
				name := key[strings.IndexByte(key, '/')+1:]
				s, err := e.games.GamesV1().GameSessions(benchNS).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("labelling %s busy=%t: %w", name, busy, err)
				}
				if err == nil {
					rvs[key], _ = strconv.ParseInt(s.ResourceVersion, 10, 64)
				}
				mu.Unlock()
			}
		})
	}
	for _, key := range keys {
		work <- key
	}
	close(work)
	wg.Wait()
	return rvs, firstErr
}

// awaitMoved waits until every one of keys carries the observer's target,
// and returns when the last did.
func (t *tracker) awaitMoved(ctx context.Context, o *rolloutObserver, keys []string) (time.Time, error) {
	for {
		t.mu.Lock()
		var last time.Time
		moved := 0
		for _, key := range keys {
			if at, ok := o.moved[key]; ok {
				moved++
				if at.After(last) {
					last = at
				}
			}
		}
		t.mu.Unlock()
		if moved == len(keys) {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d moved: %w", moved, len(keys), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ---- report ----

func (r *results) writeBusyRows(w func(string, ...any)) {
	b := r.busy
	if b == nil {
		return
	}
	_, med, hi := spread(b.flipToMove)
	w("| 1 | Busy sessions: %s of %s busy, turned idle one by one over %s; no policy, `--profile-change-delay=0`, no cluster-wide budget, kube-controller-manager stand-in, **one round**: busy sessions moved before they turned idle (by resourceVersion) | %s | **%d** restarted; idle ones all moved %s after the edit; last busy turned idle %s, moved %s; all complete %s | — | — | 0 | %s |\n",
		num(b.busy), num(b.size), b.idleOver, num(b.size), b.restarted, secs(b.idleMoved), secs(b.lastIdle), secs(b.lastMoved), secs(b.complete), yes(b.restarted == 0))
	last := b.lastMoved - b.lastIdle
	w("| 2 | Busy sessions: from the last idle flip (its PATCH answered) to the last move on the benchmark's watch; each flip to its move, for the record | %s | **%s** after the last flip; each flip: median %.3f s, max %.3f s (queued behind the other sessions' syncs while the rollout runs) | — | — | the rollout done within one sync (< 1 s) of the last session turning idle | %s |\n",
		num(b.busy), secs(last), med, hi, yes(last < time.Second))
	deployments, status := b.ctl.deploymentWrites()/float64(b.size), b.ctl.count("PUT", resStatus)/float64(b.size)
	baseline, ok := "—", readsOf(b.ctl) == 0 && deployments == 1
	for _, s := range r.fanZero {
		if s.size == b.size && len(s.ctl) > 0 {
			base := s.ctl[len(s.ctl)-1].req
			baseline = fmt.Sprintf("unpaced fan-out above: %.2f Deployment writes, %.2f status writes per session", base.deploymentWrites()/float64(b.size), base.count("PUT", resStatus)/float64(b.size))
		}
	}
	w("| 3 | Busy sessions: the controller's API requests (less the stand-in's and the benchmark's edit and %s idle flips) | %s | %s; %.2f Deployment writes, %.2f status writes per session | %s | — | 1 Deployment write per session, 0 GET, 0 LIST; a busy session's status written when it starts waiting, as a paced rollout's waiting sessions are, and not while it waits | %s |\n",
		num(b.busy), num(b.size), requestSummary(b.ctl, b.size), deployments, status, baseline, yes(ok))
}

func (r *results) writeBusyDetails(w func(string, ...any)) {
	b := r.busy
	if b == nil {
		return
	}
	w("\n### Busy sessions (one round)\n\n")
	w("Every %s. session of the %s-session profile carries `%s=%s` before the controller starts; the profile is edited, and once every idle session has moved the benchmark removes the label from the busy ones, one after another, as matches ending would: one PATCH at a time, no faster than %s for all (-busy-idle-over), so the span is the longer of that and the PATCHes' own time (here the first flip was %s after the edit, the last %s). ",
		ordinal(b.size, b.busy), num(b.size), gamesv1.BusyLabel, gamesv1.BusyLabelValue, b.idleOver, secs(b.idleMoved), secs(b.lastIdle))
	w("A busy session counts as *restarted* if its Deployment's first version with the new hash has a lower resourceVersion than the version its idle flip gave it: one etcd orders both. The controller learns of each flip by its GameSession watch; nothing polls.\n\n")
	w("- Server side, all clients: %s\n", strings.Join(b.req.lines(), ", "))
	w("- The stand-in's requests in the window (client side): %s\n", requestLines(b.standIn))
	w("- Cores: %s\n\n", b.req.coresUsed())
}

// ordinal describes one in every size/n.
func ordinal(size, n int) string {
	return fmt.Sprintf("%.1f", float64(size)/float64(n))
}
