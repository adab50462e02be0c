package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// quietPeriod follows every measured window before the closing snapshot, so
// that requests still in flight (the event broadcaster posts asynchronously)
// land inside the window they belong to.
const quietPeriod = time.Second

// ---- cold start, watches, idle ----

type coldResult struct {
	sessions     int
	ready        time.Duration // process start -> informers synced (/readyz)
	drained      time.Duration // process start -> every session synced, queue empty
	syncs        float64
	req          requestDelta
	watches      map[string]float64 // resource -> WATCH requests the controller holds
	watchesTotal float64
}

// coldStart starts a controller with everything already in sync and measures
// how long until it is ready and idle, what it asked of the API server, and
// how many watches it holds once running.
func (e *env) coldStart(ctx context.Context, name string, args ...string) (*ctlProc, coldResult, error) {
	r := coldResult{sessions: e.totalSessions()}
	before, err := e.snapshot(ctx, nil)
	if err != nil {
		return nil, r, err
	}
	p, err := e.startController(name, args...)
	if err != nil {
		return nil, r, err
	}
	readyAt, err := p.waitReady(ctx)
	if err != nil {
		return p, r, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	drainedAt, st, err := p.waitDrained(wctx, func(s ctlState) bool { return s.syncs >= float64(r.sessions) })
	if err != nil {
		return p, r, err
	}
	time.Sleep(quietPeriod)
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return p, r, err
	}
	r.ready, r.drained, r.syncs = readyAt.Sub(p.started), drainedAt.Sub(p.started), st.syncs
	r.req = diffSnapshots(before, after)
	r.watches = delta(before.watches, after.watches)
	for _, v := range r.watches {
		r.watchesTotal += v
	}
	logf("%s: ready after %s, drained after %s (%g syncs); requests: %s; watches: %v",
		name, r.ready.Round(time.Millisecond), r.drained.Round(time.Millisecond), r.syncs, strings.Join(r.req.lines(), ", "), r.watches)
	return p, r, nil
}

type idleResult struct {
	period  time.Duration
	periods int
	syncs   float64 // syncs during the window: the resyncs did happen
	req     requestDelta
	client  map[string]float64 // the controller's own request counter
}

// idle lets a controller with a short resync period run through several
// resyncs with everything in order, and counts the writes.
func (e *env) idle(ctx context.Context, p *ctlProc) (idleResult, error) {
	r := idleResult{period: e.cfg.resync, periods: e.cfg.idlePeriods}
	before, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	ss0, err := p.scrape(ctx)
	if err != nil {
		return r, err
	}
	sleepCtx(ctx, time.Duration(r.periods)*r.period+r.period/2)
	ss1, err := p.scrape(ctx)
	if err != nil {
		return r, err
	}
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	st0, st1 := readState(ss0), readState(ss1)
	r.syncs = st1.syncs - st0.syncs
	r.req = diffSnapshots(before, after)
	r.client = delta(st0.requests, st1.requests)
	logf("idle: %d resync periods of %s: %g syncs, requests %s, controller's client %v",
		r.periods, r.period, r.syncs, strings.Join(r.req.lines(), ", "), r.client)
	return r, ctx.Err()
}

// ---- memory ----

type memSample struct {
	RSS, HWM, HeapInuse, LiveHeap, GCGoal uint64
	GCs                                   int
	ConfigMaps                            int // cached ConfigMaps (the no-filter baseline only)
}

// controllerMemory waits the settle period, then reads RSS from /proc and the
// heap from the controller's metrics. A process cannot be told to collect
// garbage from outside, and the heap read at a random moment holds a random
// amount of garbage; so the benchmark scrapes /metrics, as Prometheus would,
// until the scrapes' own allocations bring about a GC, and takes the heap
// allocated a second after it: the idle controller's live heap with its
// caches full, plus one scrape's worth of allocations. The GC's heap goal,
// which depends only on what that GC marked, is recorded as a cross-check.
func (e *env) controllerMemory(ctx context.Context, p *ctlProc) (memSample, error) {
	sleepCtx(ctx, e.cfg.settle)
	var m memSample
	ss, err := p.scrape(ctx)
	if err != nil {
		return m, err
	}
	gcs := ss.sum("go_gc_duration_seconds_count", nil)
	deadline := time.Now().Add(time.Minute)
	for {
		if ss, err = p.scrape(ctx); err != nil {
			return m, err
		}
		if n := ss.sum("go_gc_duration_seconds_count", nil); n > gcs {
			m.GCs = int(n)
			break
		}
		if time.Now().After(deadline) {
			logf("controller %s: no GC within a minute of scraping; heap read without one", p.name)
			break
		}
	}
	// Sweeping runs after the GC, in the background; until it has, freed
	// objects still count as allocated. An idle second lets it finish.
	sleepCtx(ctx, time.Second)
	if ss, err = p.scrape(ctx); err != nil {
		return m, err
	}
	m.LiveHeap = uint64(ss.sum("go_memstats_heap_alloc_bytes", nil))
	m.HeapInuse = uint64(ss.sum("go_memstats_heap_inuse_bytes", nil))
	m.GCGoal = uint64(ss.sum("go_memstats_next_gc_bytes", nil))
	ms, err := readMem(p.pid())
	if err != nil {
		return m, err
	}
	m.RSS, m.HWM = ms.RSS, ms.HWM
	logf("controller %s memory: RSS %s, peak %s, heap in use %s, heap after GC %d %s (goal %s)",
		p.name, mib(m.RSS), mib(m.HWM), mib(m.HeapInuse), m.GCs, mib(m.LiveHeap), mib(m.GCGoal))
	return m, nil
}

// noFilterMemory runs the baseline: this binary again, in a mode that starts
// the controller's informers, but one ConfigMap informer with no label
// selector in place of its two filtered ones.
func (e *env) noFilterMemory(ctx context.Context) (memSample, error) {
	self, err := os.Executable()
	if err != nil {
		return memSample{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-internal-nofilter-informer",
		"-internal-kubeconfig="+e.saKubeconfig, "-settle="+e.cfg.settle.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := startWithParent(cmd); err != nil {
		return memSample{}, fmt.Errorf("no-filter baseline: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		return memSample{}, fmt.Errorf("no-filter baseline: %w", err)
	}
	var m memSample
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		return m, fmt.Errorf("no-filter baseline output %q: %w", out.String(), err)
	}
	logf("no-filter informer memory: RSS %s, peak %s, heap in use %s, live heap %s, %d ConfigMaps cached",
		mib(m.RSS), mib(m.HWM), mib(m.HeapInuse), mib(m.LiveHeap), m.ConfigMaps)
	return m, nil
}

// ---- fan-out ----

type fanRound struct {
	rolled  time.Duration // edit -> the watch saw the last Deployment with the new hash
	drained time.Duration // edit -> every session synced and the queue empty
	req     requestDelta
	client  map[string]float64
	syncs   float64 // the controller's syncs in the window, both queues
	// perSession is edit -> each Deployment seen with the new hash: the
	// median, the 99th percentile and the longest, for the tail.
	perSession spreadOf
	// written is edit -> each of those Deployments written, by the API
	// server's managedFields time (whole seconds, so up to 1 s early):
	// where it trails perSession, the watch delivered late.
	written spreadOf
	// longWaits are the session queue's keys that waited over
	// longQueueWait, failed the syncs retried after a backoff, in the
	// window; reopened the benchmark's own watch reopened.
	longWaits, failed float64
	reopened          int
}

// spreadOf is a distribution's median, 99th percentile and maximum.
type spreadOf struct{ median, p99, max time.Duration }

func spreadOfTimes(start time.Time, at []time.Time) spreadOf {
	if len(at) == 0 {
		return spreadOf{}
	}
	ds := make([]time.Duration, len(at))
	for i, t := range at {
		ds[i] = t.Sub(start)
	}
	slices.Sort(ds)
	p99 := (len(ds)*99 + 99) / 100 // the smallest rank at or above 99%
	return spreadOf{median: ds[len(ds)/2], p99: ds[min(len(ds), p99)-1], max: ds[len(ds)-1]}
}

// perSecond counts the times in each whole second after start, as
// "second:count" pairs, for the shape of a fan-out's tail in the log.
func perSecond(start time.Time, at []time.Time) string {
	counts := map[int]int{}
	last := 0
	for _, t := range at {
		s := max(int(t.Sub(start.Truncate(time.Second))/time.Second), 0)
		counts[s]++
		last = max(last, s)
	}
	var b strings.Builder
	for s := 0; s <= last; s++ {
		if counts[s] > 0 {
			fmt.Fprintf(&b, "%d:%d ", s, counts[s])
		}
	}
	return strings.TrimSpace(b.String())
}

// fanOut edits a hot profile and measures until every one of its Deployments
// carries the new hash, then until the controller is idle again.
func (e *env) fanOut(ctx context.Context, p *ctlProc, h *hotProfile, timeout time.Duration) (fanRound, error) {
	var r fanRound
	before, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	ss0, err := p.scrape(ctx)
	if err != nil {
		return r, err
	}
	st0 := readState(ss0)
	reopened0 := e.tracker.watchesReopened()
	hash, start, err := e.editProfile(ctx, h)
	if err != nil {
		return r, err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rolledAt, err := e.tracker.await(wctx, benchNS, hash, h.size)
	if err != nil {
		return r, fmt.Errorf("fan-out of %s via %s: %w", h.cm.Name, p.name, err)
	}
	r.perSession = spreadOfTimes(start, e.tracker.arrivals(benchNS, hash))
	writes := e.tracker.writes(benchNS, hash)
	r.written = spreadOfTimes(start, writes)
	logf("fan-out %d via %s: Deployments written per second after the edit (the API server's clock): %s", h.size, p.name, perSecond(start, writes))
	r.reopened = e.tracker.watchesReopened() - reopened0
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
	r.rolled, r.drained = rolledAt.Sub(start), drainedAt.Sub(start)
	r.req = diffSnapshots(before, after)
	st2 := readState(ss2)
	r.client = delta(st0.requests, st2.requests)
	r.syncs = st2.syncs - st0.syncs
	r.longWaits, r.failed = st2.longWaits-st0.longWaits, st2.failed-st0.failed
	logf("fan-out %d via %s: rolled %s (per session: median %s, p99 %s; written: median %s, p99 %s, last %s), drained %s, %g syncs, %g queue waits over %gs, %g failed syncs, %d watches reopened; requests %s; cores %s", h.size, p.name,
		r.rolled.Round(time.Millisecond), r.perSession.median.Round(time.Millisecond), r.perSession.p99.Round(time.Millisecond),
		r.written.median.Round(time.Millisecond), r.written.p99.Round(time.Millisecond), r.written.max.Round(time.Millisecond),
		r.drained.Round(time.Millisecond), r.syncs, r.longWaits, longQueueWait, r.failed, r.reopened, strings.Join(r.req.lines(), ", "), r.req.coresUsed())
	return r, nil
}

type ceilingRound struct {
	rolled     time.Duration // first update sent -> the watch saw the last one
	clientDone time.Duration // first update sent -> last update returned
	req        requestDelta
}

// Ceiling variants. The baseline is a plain update (PUT); the patch
// variants attribute the controller's cost: "patch" sends a JSON merge patch of
// the shape the controller sends (labels, replicas, template metadata,
// containers and volumes), "patch-min" only the changed annotation.
//
// "status" writes only the status of each session's twin (see twin.go), and
// "patch+status" does both writes per session in turn, as one sync of the
// controller does: the controller's write pattern without the controller.
const (
	ceilingPut         = "put"
	ceilingPatch       = "patch"
	ceilingPatchMin    = "patch-min"
	ceilingStatus      = "status"
	ceilingPatchStatus = "patch+status"
	// The status update alone on twins of other shapes (twin.go): the pod
	// template without a schema, no CEL rule, both.
	ceilingStatusSchemaless = "status-schemaless"
	ceilingStatusNoCEL      = "status-nocel"
	ceilingStatusBare       = "status-bare"
	// Other encodings of the minimal change, for comparison.
	ceilingSMPMin       = "smp-min"
	ceilingJSONPatchMin = "jsonpatch-min"
)

// ceiling is the baseline of a fan-out: a plain client-go loop making the same
// number of Deployment writes of the same objects with the same parallelism,
// no client-side rate limit and client-go's default encoding, JSON (for the
// Deployments as for the CRD: the typed clients speak protobuf only when
// their config asks for it, as the controller's does), as a ServiceAccount
// like the controller. The baseline is this plain JSON update loop,
// and it stays JSON whatever the controller speaks.
func (e *env) ceiling(ctx context.Context, n int, variant string) (ceilingRound, error) {
	var r ceilingRound
	list, err := e.admin.AppsV1().Deployments(ceilingNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	if len(list.Items) < n {
		return r, fmt.Errorf("%d ceiling Deployments, want %d", len(list.Items), n)
	}
	items := list.Items[:n]
	for i := range items {
		items[i].ManagedFields = nil // as in the controller's cache
	}
	client, err := kubernetes.NewForConfig(e.ceilingCfg)
	if err != nil {
		return r, err
	}
	var twins []unstructured.Unstructured
	var twinClient dynamic.ResourceInterface
	kind, statusWrite := twinKindOf(variant)
	if statusWrite {
		if twins, err = e.listTwins(ctx, n, kind); err != nil {
			return r, err
		}
		dc, err := dynamic.NewForConfig(e.ceilingCfg)
		if err != nil {
			return r, err
		}
		twinClient = dc.Resource(kind.gvr()).Namespace(ceilingNS)
	}
	statusOnly := statusWrite && variant != ceilingPatchStatus
	value := fmt.Sprintf("ceiling-%d", e.nonce.Add(1))
	before, err := e.snapshot(ctx, nil)
	if err != nil {
		return r, err
	}
	start := time.Now()
	err = parallel(ctx, n, e.cfg.workers, func(ctx context.Context, i int) error {
		d := items[i].DeepCopy()
		d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] = value
		deployments := client.AppsV1().Deployments(ceilingNS)
		switch variant {
		case ceilingPut:
			_, err := deployments.Update(ctx, d, metav1.UpdateOptions{})
			return err
		}
		if statusOnly {
			_, err := twinClient.UpdateStatus(ctx, withProfileHash(&twins[i], value), metav1.UpdateOptions{})
			return err
		}
		patchType, patch, err := ceilingPatchBody(d, variant)
		if err != nil {
			return err
		}
		if _, err = deployments.Patch(ctx, d.Name, patchType, patch, metav1.PatchOptions{}); err != nil || variant != ceilingPatchStatus {
			return err
		}
		_, err = twinClient.UpdateStatus(ctx, withProfileHash(&twins[i], value), metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return r, err
	}
	r.clientDone = time.Since(start)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if statusOnly {
		r.rolled = r.clientDone // no Deployment to watch
	} else {
		rolledAt, err := e.tracker.await(wctx, ceilingNS, value, n)
		if err != nil {
			return r, err
		}
		r.rolled = rolledAt.Sub(start)
		// Beside the fan-out's: a shape both share is the API server's.
		logf("ceiling %s %d: Deployments written per second (the API server's clock): %s", variant, n,
			perSecond(start, e.tracker.writes(ceilingNS, value)))
	}
	time.Sleep(quietPeriod)
	after, err := e.snapshot(ctx, nil)
	if err != nil {
		return r, err
	}
	r.req = diffSnapshots(before, after)
	logf("ceiling %s %d: watched %s, client done %s (%.0f writes/s); cores %s", variant, n,
		r.rolled.Round(time.Millisecond), r.clientDone.Round(time.Millisecond), float64(n)/r.rolled.Seconds(), r.req.coresUsed())
	return r, nil
}

// ceilingPatchBody is the patch a variant sends to set d's template
// annotations: alone, or with every field a controller owning the
// Deployment's pod spec would send.
func ceilingPatchBody(d *appsv1.Deployment, variant string) (types.PatchType, []byte, error) {
	t := &d.Spec.Template
	switch variant {
	case ceilingPatchMin, ceilingSMPMin:
		patchType := types.MergePatchType
		if variant == ceilingSMPMin {
			patchType = types.StrategicMergePatchType
		}
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
			"metadata": map[string]any{"annotations": t.Annotations}}}})
		return patchType, b, err
	case ceilingJSONPatchMin:
		key := strings.ReplaceAll(strings.ReplaceAll(gamesv1.ProfileHashAnnotation, "~", "~0"), "/", "~1")
		b, err := json.Marshal([]map[string]any{{"op": "replace",
			"path": "/spec/template/metadata/annotations/" + key, "value": t.Annotations[gamesv1.ProfileHashAnnotation]}})
		return types.JSONPatchType, b, err
	}
	b, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": d.Labels},
		"spec": map[string]any{
			"replicas": d.Spec.Replicas,
			"template": map[string]any{
				"metadata": map[string]any{"labels": t.Labels, "annotations": t.Annotations},
				"spec": map[string]any{
					"automountServiceAccountToken": t.Spec.AutomountServiceAccountToken,
					"containers":                   t.Spec.Containers,
					"volumes":                      t.Spec.Volumes,
				},
			},
		},
	})
	return types.MergePatchType, b, err
}

// variantSeries measures the ceiling variants against each other, in
// rotating order, at size n.
type variantSeries struct {
	size       int
	rolled     map[string][]time.Duration
	clientDone map[string][]time.Duration
}

func (e *env) ceilingVariants(ctx context.Context, n int) (*variantSeries, error) {
	s := &variantSeries{size: n, rolled: map[string][]time.Duration{}, clientDone: map[string][]time.Duration{}}
	variants := e.cfg.variants
	for round := range e.cfg.variantRounds {
		for k := range variants {
			v := variants[(round+k)%len(variants)]
			r, err := e.ceiling(ctx, n, v)
			if err != nil {
				return s, err
			}
			s.rolled[v] = append(s.rolled[v], r.rolled)
			s.clientDone[v] = append(s.clientDone[v], r.clientDone)
		}
	}
	return s, nil
}

// fanOutSeries alternates ceiling and controller rounds for each size, so
// that drift in the machine's speed hits both alike.
type fanSeries struct {
	size     int
	ctl      []fanRound
	ceil     []ceilingRound
	ratios   []float64 // controller rolled / ceiling rolled, per round
	delay    time.Duration
	delayArg string
}

func (e *env) fanOutSeries(ctx context.Context, p *ctlProc, delay time.Duration) ([]*fanSeries, error) {
	var out []*fanSeries
	for _, h := range e.hot {
		s := &fanSeries{size: h.size, delay: delay}
		timeout := 2*time.Minute + time.Duration(h.size)*40*time.Millisecond
		for round := range e.cfg.rounds {
			var c fanRound
			var b ceilingRound
			var err error
			if round%2 == 0 {
				if b, err = e.ceiling(ctx, h.size, ceilingPut); err == nil {
					c, err = e.fanOut(ctx, p, h, timeout)
				}
			} else {
				if c, err = e.fanOut(ctx, p, h, timeout); err == nil {
					b, err = e.ceiling(ctx, h.size, ceilingPut)
				}
			}
			if err != nil {
				return out, err
			}
			s.ctl, s.ceil = append(s.ctl, c), append(s.ceil, b)
			s.ratios = append(s.ratios, c.rolled.Seconds()/b.rolled.Seconds())
		}
		out = append(out, s)
	}
	return out, nil
}

// ---- burst ----

type burstResult struct {
	size          int
	edits         int
	window        time.Duration
	delay         time.Duration
	deployWrites  float64 // Deployment PUTs per session, from the API server
	statusWrites  float64 // status PUTs per session
	changesPerDep float64 // hash changes per Deployment, from the watch
	rolled        time.Duration
	req           requestDelta
}

// burst makes cfg.burstEdits edits of one profile spread over
// cfg.burstWindow and counts the Deployment writes per session.
func (e *env) burst(ctx context.Context, p *ctlProc, h *hotProfile, delay time.Duration) (burstResult, error) {
	r := burstResult{size: h.size, edits: e.cfg.burstEdits, window: e.cfg.burstWindow, delay: delay}
	before, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	ss0, err := p.scrape(ctx)
	if err != nil {
		return r, err
	}
	st0 := readState(ss0)
	changes0 := e.tracker.changesOf(h.sessions)
	var start time.Time
	interval := r.window / time.Duration(max(r.edits, 1))
	for i := range r.edits {
		_, at, err := e.editProfile(ctx, h)
		if err != nil {
			return r, err
		}
		if i == 0 {
			start = at
		}
		if i < r.edits-1 {
			time.Sleep(time.Until(start.Add(time.Duration(i+1) * interval)))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	rolledAt, err := e.tracker.await(wctx, benchNS, h.hash, h.size)
	if err != nil {
		return r, err
	}
	if _, _, err := p.waitDrained(wctx, func(s ctlState) bool { return s.fanOuts > st0.fanOuts }); err != nil {
		return r, err
	}
	time.Sleep(quietPeriod)
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	r.rolled = rolledAt.Sub(start)
	r.req = diffSnapshots(before, after)
	n := float64(h.size)
	r.deployWrites = r.req.deploymentWrites() / n
	r.statusWrites = r.req.count("PUT", "gamesessions/status.games.example.com") / n
	r.changesPerDep = float64(e.tracker.changesOf(h.sessions)-changes0) / n
	logf("burst of %d edits in %s, delay %s: %.2f Deployment writes/session, %.2f status writes/session, %.2f hash changes/Deployment; requests %s",
		r.edits, r.window, delay, r.deployWrites, r.statusWrites, r.changesPerDep, strings.Join(r.req.lines(), ", "))
	return r, nil
}

// ---- client-go's default rate limit ----

type slowResult struct {
	size     int
	window   time.Duration
	rolled   int     // Deployments rolled within the window
	rate     float64 // sessions per second, in the second half of the window
	req      requestDelta
	estimate map[int]time.Duration // size -> extrapolated fan-out time
}

// slow runs the fan-out with client-go's default 5 QPS / burst 10 for a
// bounded window and extrapolates: at that pace a full run at 7,340 sessions
// would take most of an hour.
func (e *env) slow(ctx context.Context, p *ctlProc, h *hotProfile) (slowResult, error) {
	r := slowResult{size: h.size, window: e.cfg.slowWindow, estimate: map[int]time.Duration{}}
	before, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	hash, start, err := e.editProfile(ctx, h)
	if err != nil {
		return r, err
	}
	// The rate is taken over the second half of the window: the first
	// seconds spend the limiter's burst and would flatter the estimate.
	sleepCtx(ctx, time.Until(start.Add(r.window/2)))
	half := e.tracker.count(benchNS, hash)
	sleepCtx(ctx, time.Until(start.Add(r.window)))
	r.rolled = e.tracker.count(benchNS, hash)
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	r.req = diffSnapshots(before, after)
	r.rate = float64(r.rolled-half) / (r.window / 2).Seconds()
	for _, hp := range e.hot {
		if r.rate > 0 {
			r.estimate[hp.size] = time.Duration(float64(hp.size) / r.rate * float64(time.Second))
		}
	}
	logf("client-go defaults (5 QPS, burst 10): %d Deployments rolled in %s (%d in the first half), %.2f/s after; requests %s",
		r.rolled, r.window, half, r.rate, strings.Join(r.req.lines(), ", "))
	return r, ctx.Err()
}

// ---- initial rollout ----

type initialResult struct {
	sessions int
	rolled   time.Duration // start -> every Deployment created
	drained  time.Duration
	req      requestDelta
}

// initialRollout starts a controller over sessions that have no Deployment
// yet: one create per session. It is not a goal of the issue, but shows the
// create path at scale and leaves the cluster in sync.
func (e *env) initialRollout(ctx context.Context) (initialResult, error) {
	r := initialResult{sessions: e.totalSessions()}
	before, err := e.snapshot(ctx, nil)
	if err != nil {
		return r, err
	}
	p, err := e.startController("initial", "--profile-change-delay=0")
	if err != nil {
		return r, err
	}
	defer e.stopController(p) // on error; stopping twice is harmless
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var last time.Time
	for _, h := range e.hot {
		at, err := e.tracker.await(wctx, benchNS, h.hash, h.size)
		if err != nil {
			return r, err
		}
		if at.After(last) {
			last = at
		}
	}
	drainedAt, _, err := p.waitDrained(wctx, func(s ctlState) bool { return s.syncs >= float64(r.sessions) })
	if err != nil {
		return r, err
	}
	time.Sleep(quietPeriod)
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	r.rolled, r.drained = last.Sub(p.started), drainedAt.Sub(p.started)
	r.req = diffSnapshots(before, after)
	logf("initial rollout of %d sessions: Deployments after %s, drained after %s; requests %s",
		r.sessions, r.rolled.Round(time.Millisecond), r.drained.Round(time.Millisecond), strings.Join(r.req.lines(), ", "))
	return r, e.stopController(p)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
