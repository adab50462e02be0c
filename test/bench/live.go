package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gamesinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions"
	"github.com/example/gamesession-controller/pkg/profileack"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// ---- live delivery ----
//
// The live scenario measures one edit of a profile delivered live
// (rollout.games.example.com/delivery: live) against the restart delivery
// of the same edit, on the same profile and sessions, with the same
// controller process, once per size, after the paced rollout.
//
// A live session counts as applied once each running pod of it
// acknowledges the revision, and the benchmark's world has no pods (no
// kube-controller-manager, no nodes, replicas: 0). So, outside the measured
// windows, the benchmark creates one pod object per session, labelled as the
// controller's pod informer selects them and set Running (nothing runs
// them), and acts as their game servers: the acknowledger below watches the
// live profiles and, as soon as a session's holds a new revision, patches
// the annotation on each of its pods, as pkg/profileack does in a game
// server, with no kubelet propagation delay. The kube-controller-manager
// stand-in (kcmstandin.go) reports the Deployments complete, as in the paced
// rollout, so that sessions and rollouts can be Ready at all.
//
// Per size, in one controller process with --profile-change-delay=0:
//  1. set-up: the pods; then a restart round: edit, until the rollout is
//     Complete and the controller idle;
//  2. the switch to live (the annotation), which writes each Deployment
//     once, to mount the session's live profile, and creates the live
//     profiles: timed, not counted in the rounds;
//  3. a live round: the same edit, until the rollout is Complete again;
//  4. the live profiles measured (the carrier's cost), the switch back to
//     restart, and the pods and live profiles deleted, so that the later
//     scenarios find the sessions as they were.

const (
	liveAckerUserAgent    = "bench-live-acker"
	liveObserverUserAgent = "bench-live-observer"
	// liveAckWorkers is how many acknowledgments are in flight at once: a
	// cluster's game servers all answer at once, but on two shared cores more
	// would only queue at the API server.
	liveAckWorkers = 16
	// livePodSuffix names a session's one pod.
	livePodSuffix = "-gs-0"
)

// liveResources are the resources the controller reads or writes with live
// delivery on: controllerResources and the pods of live sessions, which it
// only watches.
var liveResources = append(slices.Clone(controllerResources), "pods")

// deliveryRound is one edit, delivered by restart or live, measured from
// the edit (the PUT of the profile sent) to each milestone, all on the
// benchmark's watches.
type deliveryRound struct {
	live bool
	// delivered: the last session's new content seen on the watch (restart:
	// its Deployment with the new hash; live: its live profile with the new
	// revision); deliveries, each session's.
	delivered  time.Duration
	deliveries spreadOf
	// acked (live only): the last pod's acknowledgment answered.
	acked time.Duration
	// upToDate: the last session's status saying ProfileUpToDate True on
	// the new content; complete: the ProfileRollout Complete on it.
	upToDate, complete time.Duration
	drained            time.Duration // the controller idle
	req                requestDelta  // server side, all clients
	// ctl is req less the stand-in's, the acknowledger's, the observers'
	// (counted client side) and the benchmark's edit: the controller's.
	ctl                       requestDelta
	standIn, acker, observers map[string]float64
	client                    map[string]float64 // the controller's rest_client_requests_total
}

// liveSwitch is a change of delivery (restart to live, or back), set-up
// outside the rounds.
type liveSwitch struct {
	took time.Duration // annotation written → rollout Complete, stand-in settled, controller idle
	ctl  requestDelta  // the controller's requests
}

// liveCarrier is what the live profiles of one profile's sessions hold.
type liveCarrier struct {
	objects int
	// protobufBytes and jsonBytes sum the objects' sizes as a LIST returns
	// them, metadata (managedFields included) and all: protobuf is what
	// etcd stores of a ConfigMap, less its few bytes of envelope.
	protobufBytes, jsonBytes int
	dataBytes                int // keys and values of the data, .revision included
}

// liveResult is the live scenario at one size.
type liveResult struct {
	size         int
	profile      string
	profileBytes int // keys and values of the profile's data
	pods         int
	podsTook     time.Duration // creating the pods and setting them Running
	restart      deliveryRound
	live         deliveryRound
	toLive       liveSwitch
	toRestart    liveSwitch
	carrier      liveCarrier
}

// liveSeries runs the live scenario once per hot profile.
func (e *env) liveSeries(ctx context.Context) ([]liveResult, error) {
	if out, _ := exec.Command(e.controllerBin, "--help").CombinedOutput(); !strings.Contains(string(out), "-live-delivery") {
		logf("live delivery: %s has no --live-delivery flag; skipped", e.controllerBin)
		return nil, nil
	}
	s, err := e.startKCMStandIn(ctx, benchNS)
	if err != nil {
		return nil, err
	}
	defer s.stop() // on error; stopping twice is harmless
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := s.waitSettled(wctx); err != nil {
		return nil, err
	}
	acker, err := e.startLiveAcknowledger(ctx)
	if err != nil {
		return nil, err
	}
	defer acker.stop()
	obs, err := e.startStatusObserver(ctx)
	if err != nil {
		return nil, err
	}
	defer obs.stop()
	p, _, err := e.coldStart(ctx, "live-delivery", "--profile-change-delay=0", "--live-delivery=true")
	if err != nil {
		return nil, err
	}
	defer e.stopController(p)
	var out []liveResult
	for _, h := range e.hot {
		r, err := e.liveScenario(ctx, p, s, acker, obs, h)
		if err != nil {
			return out, fmt.Errorf("live delivery of %s: %w", h.cm.Name, err)
		}
		out = append(out, r)
	}
	if err := e.stopController(p); err != nil {
		return out, err
	}
	if n := acker.failures.Load(); n > 0 {
		logf("live delivery: %d acknowledgments failed and were retried", n)
	}
	return out, nil
}

// liveScenario sets up, measures and undoes the live scenario on h.
func (e *env) liveScenario(ctx context.Context, p *ctlProc, s *kcmStandIn, acker *liveAcknowledger, obs *statusObserver,
	h *hotProfile) (liveResult, error) {
	r := liveResult{size: h.size, profile: h.cm.Name, pods: h.size}
	// Each wait has a deadline of its own: at 7,340 sessions the scenario
	// as a whole runs for many minutes.
	settle := func() error {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		_, _, err := p.waitDrained(wctx, nil)
		return err
	}

	t := time.Now()
	if err := e.createLivePods(ctx, h, acker); err != nil {
		return r, err
	}
	r.podsTook = time.Since(t)
	// The controller takes the new pods in (their sessions deliver by
	// restart, so it writes nothing) before the first window.
	if err := settle(); err != nil {
		return r, err
	}
	logf("live delivery %d: %d pods created and Running in %s", h.size, h.size, secs(r.podsTook))

	var err error
	if r.restart, err = e.deliveryRound(ctx, p, s, acker, obs, h, false); err != nil {
		return r, err
	}
	if r.toLive, err = e.switchDelivery(ctx, p, s, acker, obs, h, true); err != nil {
		return r, err
	}
	if err := e.checkLiveMounts(ctx, h); err != nil {
		return r, err
	}
	r.profileBytes = dataBytes(h.cm.Data)
	if r.live, err = e.deliveryRound(ctx, p, s, acker, obs, h, true); err != nil {
		return r, err
	}
	if r.carrier, err = e.measureCarrier(ctx, h); err != nil {
		return r, err
	}
	if r.toRestart, err = e.switchDelivery(ctx, p, s, acker, obs, h, false); err != nil {
		return r, err
	}
	// The controller leaves a live profile in place after a switch back,
	// and no garbage collector runs here: the benchmark deletes them with
	// the pods. No session delivers live any more, so the controller writes
	// nothing for either.
	if err := e.admin.CoreV1().Pods(benchNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: controller.LivePodSelector()}); err != nil {
		return r, err
	}
	if err := e.admin.CoreV1().ConfigMaps(benchNS).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: controller.LiveProfileSelector()}); err != nil {
		return r, err
	}
	// Pods bound to no node go at once, with no kubelet to wait for.
	if left, err := e.admin.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{LabelSelector: controller.LivePodSelector()}); err != nil {
		return r, err
	} else if len(left.Items) > 0 {
		return r, fmt.Errorf("%d live pods left after their deletion", len(left.Items))
	}
	acker.forgetPods(h.sessions)
	logf("live edit at %s: delivered %s (restart %s, %.2fx), applied %s (rollout Complete %s); controller requests per session: %s; API server CPU: live %.2f s vs restart %.2f s; live profiles: %s objects, %s",
		num(r.size), secs(r.live.delivered), secs(r.restart.delivered), r.live.delivered.Seconds()/r.restart.delivered.Seconds(),
		secs(r.live.upToDate), secs(r.live.complete), r.live.perSession(r.size), r.live.req.cpu["kube-apiserver"], r.restart.req.cpu["kube-apiserver"],
		num(r.carrier.objects), mib(uint64(r.carrier.protobufBytes)))
	return r, settle()
}

// createLivePods creates one pod per session of h, as the Deployment of a
// live session would have it run (the labels the controller selects its
// pods by), and reports it Running, as a kubelet would; no node, no
// container runs. The acknowledger learns which pods are each session's.
func (e *env) createLivePods(ctx context.Context, h *hotProfile, acker *liveAcknowledger) error {
	client, err := kubernetes.NewForConfig(protobufConfig(e.adminCfg))
	if err != nil {
		return err
	}
	pods := client.CoreV1().Pods(benchNS)
	err = parallel(ctx, len(h.sessions), createWorkers, func(ctx context.Context, i int) error {
		session := h.sessions[i][strings.IndexByte(h.sessions[i], '/')+1:]
		created, err := pods.Create(ctx, newLivePod(session), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status.Phase = corev1.PodRunning
		created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.Now()}}
		_, err = pods.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating the live pods: %w", err)
	}
	for _, key := range h.sessions {
		acker.setPods(key, []string{key[strings.IndexByte(key, '/')+1:] + livePodSuffix})
	}
	return nil
}

// newLivePod is the one pod of a live session.
func newLivePod(session string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      session + livePodSuffix,
			Namespace: benchNS,
			Labels: map[string]string{
				controller.LabelManagedBy: controller.ManagedByValue,
				controller.DeliveryLabel:  controller.DeliveryLiveValue,
				controller.LabelInstance:  session,
			},
		},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "game-server", Image: "registry.example.com/arena-server:1.4.2"}},
		},
	}
}

// deliveryRound edits h's profile once and follows the edit until the
// rollout is Complete and the controller idle.
func (e *env) deliveryRound(ctx context.Context, p *ctlProc, s *kcmStandIn, acker *liveAcknowledger, obs *statusObserver,
	h *hotProfile, live bool) (deliveryRound, error) {
	r := deliveryRound{live: live}
	mode := "restart"
	if live {
		mode = "live"
	}
	before, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	ss0, err := p.scrape(ctx)
	if err != nil {
		return r, err
	}
	st0 := readState(ss0)
	stand0, standFailed0 := s.requests.snapshot()
	ack0, ackFailed0 := acker.requests.snapshot()
	obs0, obsFailed0 := obs.requests.snapshot()

	cm := h.cm.DeepCopy()
	cm.Data = e.profileData()
	hash := controller.ProfileHash(cm)
	revision := controller.RevisionName(h.cm.Name, hash)
	start := time.Now()
	updated, err := e.admin.CoreV1().ConfigMaps(benchNS).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		return r, err
	}
	h.cm, h.hash = updated, hash

	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute+time.Duration(h.size)*40*time.Millisecond)
	defer cancel()
	var deliveredAt time.Time
	var deliveries []time.Time
	if live {
		if deliveredAt, err = acker.milestones.await(wctx, deliveredGroup(revision), h.size, "live profiles holding "+revision); err != nil {
			return r, err
		}
		deliveries = acker.milestones.times(deliveredGroup(revision))
		ackedAt, err := acker.milestones.await(wctx, ackedGroup(revision), h.size, "sessions whose pods acknowledged "+revision)
		if err != nil {
			return r, err
		}
		r.acked = ackedAt.Sub(start)
	} else {
		if deliveredAt, err = e.tracker.await(wctx, benchNS, hash, h.size); err != nil {
			return r, err
		}
		deliveries = e.tracker.arrivals(benchNS, hash)
	}
	upToDateAt, err := obs.milestones.await(wctx, appliedGroup(hash), h.size, "sessions up to date on "+hash)
	if err != nil {
		return r, err
	}
	completeAt, err := obs.milestones.await(wctx, completeGroup(h.cm.Name, hash, live), 1, "the ProfileRollout Complete on "+hash)
	if err != nil {
		return r, err
	}
	drainedAt, _, err := p.waitDrained(wctx, nil)
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
	r.delivered, r.deliveries = deliveredAt.Sub(start), spreadOfTimes(start, deliveries)
	r.upToDate, r.complete, r.drained = upToDateAt.Sub(start), completeAt.Sub(start), drainedAt.Sub(start)
	r.req = diffSnapshots(before, after)
	r.ctl, r.standIn, r.acker, r.observers = e.controllerShare(r.req, s, acker, obs, stand0, standFailed0, ack0, ackFailed0, obs0, obsFailed0)
	r.ctl = subtractRequests(r.ctl, map[string]float64{"PUT " + resConfigMaps: 1}, nil)
	r.client = delta(st0.requests, readState(ss2).requests)
	acked := "—"
	if live {
		acked = secs(r.acked)
	}
	logf("live delivery %d, %s round: delivered %s (per session median %s, p99 %s), acked %s, up to date %s, rollout Complete %s, idle %s; controller's requests %s; acknowledger's %s; cores %s",
		h.size, mode, secs(r.delivered), secs(r.deliveries.median), secs(r.deliveries.p99), acked, secs(r.upToDate),
		secs(r.complete), secs(r.drained), strings.Join(onResources(r.ctl, liveResources), ", "), requestLines(r.acker), r.req.coresUsed())
	return r, nil
}

// controllerShare takes the stand-in's, the acknowledger's and the
// observers' own requests (client side, since the snapshots given) out of
// the server's counts, and returns what is left with the three.
func (e *env) controllerShare(req requestDelta, s *kcmStandIn, acker *liveAcknowledger, obs *statusObserver,
	stand0, standFailed0, ack0, ackFailed0, obs0, obsFailed0 map[string]float64) (ctl requestDelta, standIn, acks, observers map[string]float64) {
	stand1, standFailed1 := s.requests.snapshot()
	ack1, ackFailed1 := acker.requests.snapshot()
	obs1, obsFailed1 := obs.requests.snapshot()
	standIn, acks, observers = delta(stand0, stand1), delta(ack0, ack1), delta(obs0, obs1)
	ctl = subtractRequests(req, standIn, delta(standFailed0, standFailed1))
	ctl = subtractRequests(ctl, acks, delta(ackFailed0, ackFailed1))
	ctl = subtractRequests(ctl, observers, delta(obsFailed0, obsFailed1))
	return ctl, standIn, acks, observers
}

// switchDelivery turns h's profile to live delivery (or back to restart)
// and waits until every session runs it: live, every live profile holding
// the current revision and acknowledged; restart, every Deployment carrying
// the current hash again; then the rollout Complete, every Deployment
// complete and the controller idle.
func (e *env) switchDelivery(ctx context.Context, p *ctlProc, s *kcmStandIn, acker *liveAcknowledger, obs *statusObserver,
	h *hotProfile, live bool) (liveSwitch, error) {
	var r liveSwitch
	before, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	stand0, standFailed0 := s.requests.snapshot()
	ack0, ackFailed0 := acker.requests.snapshot()
	obs0, obsFailed0 := obs.requests.snapshot()
	start := time.Now()
	if err := e.setDeliveryAnnotation(ctx, h, live); err != nil {
		return r, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute+time.Duration(h.size)*40*time.Millisecond)
	defer cancel()
	revision := controller.RevisionName(h.cm.Name, h.hash)
	if live {
		if _, err := acker.milestones.await(wctx, ackedGroup(revision), h.size, "sessions whose pods acknowledged "+revision); err != nil {
			return r, err
		}
	} else if _, err := e.tracker.await(wctx, benchNS, h.hash, h.size); err != nil {
		return r, err
	}
	if _, err := obs.milestones.await(wctx, completeGroup(h.cm.Name, h.hash, live), 1, "the ProfileRollout Complete on "+h.hash); err != nil {
		return r, err
	}
	if err := s.waitSettled(wctx); err != nil {
		return r, err
	}
	if _, _, err := p.waitDrained(wctx, nil); err != nil {
		return r, err
	}
	r.took = time.Since(start)
	time.Sleep(quietPeriod)
	after, err := e.snapshot(ctx, p)
	if err != nil {
		return r, err
	}
	r.ctl, _, _, _ = e.controllerShare(diffSnapshots(before, after), s, acker, obs, stand0, standFailed0, ack0, ackFailed0, obs0, obsFailed0)
	r.ctl = subtractRequests(r.ctl, map[string]float64{"PUT " + resConfigMaps: 1}, nil)
	to := "restart"
	if live {
		to = "live"
	}
	logf("live delivery %d: switched to %s in %s; controller's requests %s", h.size, to, secs(r.took), strings.Join(onResources(r.ctl, liveResources), ", "))
	return r, nil
}

// setDeliveryAnnotation sets h's profile's delivery to live, or removes
// the annotation (restart, the default). Its data, and hash, stay.
func (e *env) setDeliveryAnnotation(ctx context.Context, h *hotProfile, live bool) error {
	cm := h.cm.DeepCopy()
	if live {
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[rollout.AnnotationDelivery] = string(rollout.DeliveryLive)
	} else {
		delete(cm.Annotations, rollout.AnnotationDelivery)
	}
	updated, err := e.admin.CoreV1().ConfigMaps(benchNS).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	h.cm = updated
	return nil
}

// checkLiveMounts verifies that every Deployment of h's sessions mounts its
// session's live profile and labels its pods for live delivery, as the
// switch must have left them. Read after the switch's window.
func (e *env) checkLiveMounts(ctx context.Context, h *hotProfile) error {
	list, err := e.admin.AppsV1().Deployments(benchNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	members := map[string]bool{}
	for _, key := range h.sessions {
		members[key] = true
	}
	mounting := 0
	for i := range list.Items {
		d := &list.Items[i]
		if !members[benchNS+"/"+d.Name] || d.Spec.Template.Labels[controller.DeliveryLabel] != controller.DeliveryLiveValue {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == d.Name+"-live-profile" {
				mounting++
				break
			}
		}
	}
	if mounting != h.size {
		return fmt.Errorf("after the switch to live, %d of %d Deployments mount their live profile", mounting, h.size)
	}
	return nil
}

// measureCarrier lists h's sessions' live profiles, in protobuf, and sums
// their sizes as the API returns them, in protobuf and in JSON.
func (e *env) measureCarrier(ctx context.Context, h *hotProfile) (liveCarrier, error) {
	var c liveCarrier
	client, err := kubernetes.NewForConfig(protobufConfig(e.adminCfg))
	if err != nil {
		return c, err
	}
	list, err := client.CoreV1().ConfigMaps(benchNS).List(ctx, metav1.ListOptions{LabelSelector: controller.LiveProfileSelector()})
	if err != nil {
		return c, err
	}
	members := map[string]bool{}
	for _, key := range h.sessions {
		members[key] = true
	}
	for i := range list.Items {
		cm := &list.Items[i]
		if ref := metav1.GetControllerOf(cm); ref == nil || !members[cm.Namespace+"/"+ref.Name] {
			continue
		}
		b, err := json.Marshal(cm)
		if err != nil {
			return c, err
		}
		c.objects++
		c.protobufBytes += cm.Size()
		c.jsonBytes += len(b)
		c.dataBytes += dataBytes(cm.Data)
	}
	return c, nil
}

// dataBytes sums the lengths of a ConfigMap's data keys and values.
func dataBytes(data map[string]string) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

// ---- milestones ----

// milestones records when each member of a group (a session) first reached
// something (its live profile holding a revision, its pods acknowledging
// it, its status saying it applied it), and wakes who waits for a number of
// members: counted as events arrive, never by scanning.
type milestones struct {
	mu      sync.Mutex
	reached map[string]map[string]time.Time // group → member → first time
	waiters []*milestoneWaiter
}

type milestoneWaiter struct {
	group string
	n     int
	at    time.Time
	done  chan struct{}
}

func newMilestones() *milestones { return &milestones{reached: map[string]map[string]time.Time{}} }

// mark records that member reached group at at, unless it had already.
func (m *milestones) mark(group, member string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.reached[group]
	if g == nil {
		g = map[string]time.Time{}
		m.reached[group] = g
	}
	if _, seen := g[member]; seen {
		return
	}
	g[member] = at
	kept := m.waiters[:0]
	for _, w := range m.waiters {
		if w.group == group && len(g) >= w.n {
			w.at = at
			close(w.done)
			continue
		}
		kept = append(kept, w)
	}
	m.waiters = kept
}

// await returns when n members have reached group, with the time the last
// of them did.
func (m *milestones) await(ctx context.Context, group string, n int, what string) (time.Time, error) {
	m.mu.Lock()
	if g := m.reached[group]; len(g) >= n {
		var last time.Time
		for _, at := range g {
			if at.After(last) {
				last = at
			}
		}
		m.mu.Unlock()
		return last, nil
	}
	w := &milestoneWaiter{group: group, n: n, done: make(chan struct{})}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()
	select {
	case <-w.done:
		return w.at, nil
	case <-ctx.Done():
		m.mu.Lock()
		defer m.mu.Unlock()
		m.waiters = slices.DeleteFunc(m.waiters, func(x *milestoneWaiter) bool { return x == w })
		return time.Time{}, fmt.Errorf("%s: %d of %d: %w", what, len(m.reached[group]), n, ctx.Err())
	}
}

// times returns when each member reached group.
func (m *milestones) times(group string) []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]time.Time, 0, len(m.reached[group]))
	for _, at := range m.reached[group] {
		out = append(out, at)
	}
	return out
}

func deliveredGroup(revision string) string { return "delivered " + revision }
func ackedGroup(revision string) string     { return "acked " + revision }
func appliedGroup(hash string) string       { return "applied " + hash }

func completeGroup(profile, hash string, live bool) string {
	delivery := rollout.DeliveryRestart
	if live {
		delivery = rollout.DeliveryLive
	}
	return fmt.Sprintf("complete %s %s %s", profile, hash, delivery)
}

// ---- the game servers' stand-in ----

// liveAcknowledger acts as the game servers of the live sessions. It
// watches the live profiles of the bench namespace (an informer, filtered
// by their label, that keeps of each only its owner and .revision) and, for
// each session whose live profile holds a revision it has not seen there,
// acknowledges it on each of the session's pods with profileack.Acknowledge
// (a merge patch of the annotation alone): what a game server following
// pkg/profileack does once the kubelet has rewritten its files, here with
// no such delay. internal/livestandin does the same by LISTing every 100ms,
// which at thousands of sessions would cost the API server more than the
// delivery measured.
//
// It runs as the admin with a user agent of its own, and counts its
// requests client side, to take them out of the server's counts: the
// pods' patches are the game servers' cost, not the controller's.
type liveAcknowledger struct {
	client     kubernetes.Interface
	factory    kubeinformers.SharedInformerFactory
	queue      workqueue.TypedRateLimitingInterface[string] // sessions, namespace/name
	requests   *requestCounter
	milestones *milestones // deliveredGroup and ackedGroup, by session
	failures   atomic.Int64

	mu     sync.Mutex
	pods   map[string][]string // session → its pods' names
	holds  map[string]string   // session → the revision its live profile holds
	ackOf  map[string]string   // pod, namespace/name → the revision acknowledged on it
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (e *env) startLiveAcknowledger(ctx context.Context) (*liveAcknowledger, error) {
	a := &liveAcknowledger{requests: newRequestCounter(), milestones: newMilestones(),
		pods: map[string][]string{}, holds: map[string]string{}, ackOf: map[string]string{}}
	client, err := kubernetes.NewForConfig(countedConfig(protobufConfig(e.adminCfg), liveAckerUserAgent, a.requests))
	if err != nil {
		return nil, err
	}
	a.client = client
	a.factory = kubeinformers.NewSharedInformerFactoryWithOptions(client, 0, kubeinformers.WithNamespace(benchNS),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = controller.LiveProfileSelector() }))
	informer := a.factory.Core().V1().ConfigMaps().Informer()
	// A game server reads its .revision file, not the rest: the cache keeps
	// only that, whatever the profile's size.
	if err := informer.SetTransform(func(obj any) (any, error) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return obj, nil
		}
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: cm.Name, Namespace: cm.Namespace, ResourceVersion: cm.ResourceVersion, OwnerReferences: cm.OwnerReferences},
			Data:       map[string]string{profileack.RevisionFile: cm.Data[profileack.RevisionFile]},
		}, nil
	}); err != nil {
		return nil, err
	}
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: liveAckerUserAgent})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.liveProfileChanged,
		UpdateFunc: func(_, obj any) { a.liveProfileChanged(obj) },
	}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.factory.Start(runCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		a.stop()
		return nil, fmt.Errorf("live acknowledger: cache did not sync")
	}
	for range liveAckWorkers {
		a.done.Add(1)
		go func() {
			defer a.done.Done()
			for a.processNext(runCtx) {
			}
		}()
	}
	logf("live acknowledger started on namespace %s (%d workers, protobuf, user agent %s)", benchNS, liveAckWorkers, liveAckerUserAgent)
	return a, nil
}

func (a *liveAcknowledger) liveProfileChanged(obj any) {
	now := time.Now()
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(cm)
	revision := cm.Data[profileack.RevisionFile]
	if ref == nil || revision == "" {
		return
	}
	session := cm.Namespace + "/" + ref.Name
	a.mu.Lock()
	changed := a.holds[session] != revision
	a.holds[session] = revision
	a.mu.Unlock()
	if changed {
		a.milestones.mark(deliveredGroup(revision), session, now)
		a.queue.Add(session)
	}
}

func (a *liveAcknowledger) processNext(ctx context.Context) bool {
	session, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer a.queue.Done(session)
	switch err := a.acknowledge(ctx, session); {
	case err == nil:
		a.queue.Forget(session)
	case ctx.Err() != nil:
	default:
		a.failures.Add(1)
		logf("live acknowledger: %s: %v", session, err)
		a.queue.AddRateLimited(session)
	}
	return true
}

// acknowledge acknowledges, on each pod of session that has not yet, the
// revision its live profile holds, and marks the session acknowledged once
// every pod is.
func (a *liveAcknowledger) acknowledge(ctx context.Context, session string) error {
	namespace := session[:strings.IndexByte(session, '/')]
	a.mu.Lock()
	revision, pods := a.holds[session], slices.Clone(a.pods[session])
	a.mu.Unlock()
	if revision == "" || len(pods) == 0 {
		return nil
	}
	for _, pod := range pods {
		key := namespace + "/" + pod
		a.mu.Lock()
		done := a.ackOf[key] == revision
		a.mu.Unlock()
		if done {
			continue
		}
		if err := profileack.Acknowledge(ctx, a.client, namespace, pod, revision, nil); err != nil {
			return err
		}
		a.mu.Lock()
		a.ackOf[key] = revision
		a.mu.Unlock()
	}
	a.milestones.mark(ackedGroup(revision), session, time.Now())
	return nil
}

// setPods says which pods are session's; forgetPods forgets them.
func (a *liveAcknowledger) setPods(session string, pods []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[session] = pods
}

func (a *liveAcknowledger) forgetPods(sessions []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, session := range sessions {
		namespace := session[:strings.IndexByte(session, '/')]
		for _, pod := range a.pods[session] {
			delete(a.ackOf, namespace+"/"+pod)
		}
		delete(a.pods, session)
		delete(a.holds, session)
	}
}

// stop stops the workers and the informer. Only the first call does
// anything.
func (a *liveAcknowledger) stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	a.queue.ShutDown()
	a.done.Wait()
	a.factory.Shutdown()
}

// ---- status observer ----

// statusObserver follows, by watch, the GameSessions and ProfileRollouts of
// the bench namespace, and marks when each session says ProfileUpToDate
// True on a content (appliedGroup) and when a ProfileRollout is Complete on
// one (completeGroup): what the controller itself reports, as a user with
// kubectl would see it. Its cache keeps the sessions' status only.
type statusObserver struct {
	factory    gamesinformers.SharedInformerFactory
	requests   *requestCounter
	milestones *milestones
	cancel     context.CancelFunc
}

func (e *env) startStatusObserver(ctx context.Context) (*statusObserver, error) {
	o := &statusObserver{requests: newRequestCounter(), milestones: newMilestones()}
	games, err := clientset.NewForConfig(countedConfig(e.adminCfg, liveObserverUserAgent, o.requests))
	if err != nil {
		return nil, err
	}
	o.factory = gamesinformers.NewSharedInformerFactoryWithOptions(games, 0, gamesinformers.WithNamespace(benchNS))
	sessions := o.factory.Games().V1().GameSessions().Informer()
	if err := sessions.SetTransform(func(obj any) (any, error) {
		if s, ok := obj.(*gamesv1.GameSession); ok {
			return &gamesv1.GameSession{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, ResourceVersion: s.ResourceVersion},
				Status: s.Status}, nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	rollouts := o.factory.Games().V1().ProfileRollouts().Informer()
	if _, err := sessions.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    o.sessionChanged,
		UpdateFunc: func(_, obj any) { o.sessionChanged(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := rollouts.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    o.rolloutChanged,
		UpdateFunc: func(_, obj any) { o.rolloutChanged(obj) },
	}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	o.cancel = cancel
	o.factory.Start(runCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), sessions.HasSynced, rollouts.HasSynced) {
		o.stop()
		return nil, fmt.Errorf("status observer: cache did not sync")
	}
	return o, nil
}

func (o *statusObserver) sessionChanged(obj any) {
	now := time.Now()
	s, ok := obj.(*gamesv1.GameSession)
	if !ok || s.Status.ProfileHash == "" || !meta.IsStatusConditionTrue(s.Status.Conditions, gamesv1.ConditionProfileUpToDate) {
		return
	}
	o.milestones.mark(appliedGroup(s.Status.ProfileHash), s.Namespace+"/"+s.Name, now)
}

func (o *statusObserver) rolloutChanged(obj any) {
	now := time.Now()
	r, ok := obj.(*gamesv1.ProfileRollout)
	if !ok || r.Status.Phase != gamesv1.RolloutPhaseComplete || r.Status.ReadySessions != r.Status.TotalSessions ||
		!meta.IsStatusConditionTrue(r.Status.Conditions, gamesv1.ConditionComplete) {
		return
	}
	o.milestones.mark(completeGroup(r.Name, r.Status.TargetHash, r.Status.Delivery == string(rollout.DeliveryLive)), "rollout", now)
}

func (o *statusObserver) stop() {
	if o.cancel == nil {
		return
	}
	o.cancel()
	o.cancel = nil
	o.factory.Shutdown()
}

// countedConfig is a copy of cfg with a user agent of its own whose
// requests counter counts.
func countedConfig(cfg *rest.Config, userAgent string, counter *requestCounter) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.UserAgent = userAgent
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counter.wrap(rt) })
	return c
}

// ---- report ----

// unpacedFanOut returns the median edit → last Deployment and the median
// kube-apiserver CPU seconds of the unpaced fan-out rounds of size, if run.
func (r *results) unpacedFanOut(size int) (rolled time.Duration, apiCPU float64, ok bool) {
	for _, s := range r.fanZero {
		if s.size == size {
			var cpu []float64
			for _, c := range s.ctl {
				cpu = append(cpu, c.req.cpu["kube-apiserver"])
			}
			_, med, _ := spread(cpu)
			rolled, _ = s.medians()
			return rolled, med, true
		}
	}
	return 0, 0, false
}

// perSession renders the controller's requests of a round per session, the
// verbs and resources of a delivery first.
func (d deliveryRound) perSession(size int) string {
	n := float64(size)
	ctl := d.ctl
	parts := []string{
		fmt.Sprintf("PUT configmaps %.2f", ctl.count("PUT", resConfigMaps)/n),
		fmt.Sprintf("POST configmaps %.2f", ctl.count("POST", resConfigMaps)/n),
		fmt.Sprintf("PUT gamesessions/status %.2f", ctl.count("PUT", resStatus)/n),
		fmt.Sprintf("PUT+PATCH deployments %.2f", ctl.deploymentWrites()/n),
		fmt.Sprintf("events %.2f", (ctl.count("POST", resEvents)+ctl.count("PATCH", resEvents))/n),
		fmt.Sprintf("GET+LIST %g", ctl.countOn("GET", liveResources)+ctl.countOn("LIST", liveResources)),
		fmt.Sprintf("PUT profilerollouts/status %g in all", ctl.count("PUT", resRolloutStatus)),
	}
	var failed float64
	for k, v := range ctl.failed {
		if contains(liveResources, strings.Fields(k)[1]) {
			failed += v
		}
	}
	if failed > 0 {
		parts = append(parts, fmt.Sprintf("failed %g in all", failed))
	}
	return strings.Join(parts, ", ")
}

// onResources is d's lines on the given resources only: the API server's
// own requests (its leases) are not the controller's.
func onResources(d requestDelta, resources []string) []string {
	var out []string
	for _, l := range d.lines() {
		if contains(resources, strings.Fields(l)[1]) {
			out = append(out, l)
		}
	}
	return out
}

// liveFanOutClean reports whether the live round made the writes a live
// delivery should: one live-profile write per session, no Deployment write,
// no read.
func (l liveResult) liveFanOutClean() bool {
	c := l.live.ctl
	return c.count("PUT", resConfigMaps) == float64(l.size) && c.count("POST", resConfigMaps) <= 1 && c.deploymentWrites() == 0 &&
		c.countOn("GET", liveResources)+c.countOn("LIST", liveResources) == 0
}

func (r *results) writeLiveRows(w func(string, ...any)) {
	for _, l := range r.live {
		ratio := l.live.delivered.Seconds() / l.restart.delivered.Seconds()
		fan := ""
		if rolled, _, ok := r.unpacedFanOut(l.size); ok {
			fan = fmt.Sprintf("; unpaced fan-out above, without stand-in or pods: %s", secs(rolled))
		}
		w("| L | Live edit (`%s: %s`) against the restart of the same edit (same profile, sessions, controller, kube-controller-manager stand-in and acknowledger, just before), `--profile-change-delay=0`, **one round each**: edit → last session delivered (live: its live profile, restart: its Deployment, with the new content on the benchmark's watch); live: → every pod acknowledged → every session `ProfileUpToDate` / the ProfileRollout Complete (applied) | %s | delivered **%s** (per session median %s, p99 %s); acked %s; applied %s / Complete %s | restart: delivered %s (median %s); up to date %s / Complete %s (Deployments complete by the stand-in; no pod replaced)%s | **%.2fx** delivered | — | — |\n",
			rollout.AnnotationDelivery, rollout.DeliveryLive, num(l.size),
			secs(l.live.delivered), secs(l.live.deliveries.median), secs(l.live.deliveries.p99), secs(l.live.acked), secs(l.live.upToDate), secs(l.live.complete),
			secs(l.restart.delivered), secs(l.restart.deliveries.median), secs(l.restart.upToDate), secs(l.restart.complete), fan, ratio)
	}
	for _, l := range r.live {
		w("| L | Live edit: the controller's requests per session (`apiserver_request_total` less the stand-in's, the acknowledger's and the observers', counted client side, and the edit); the acknowledger's (the game servers' cost) apart | %s | %s; acknowledger: PATCH pods %.2f/session | restart: %s | — | 1 live-profile write per session, 0 Deployment writes, 0 GET, 0 LIST | %s |\n",
			num(l.size), l.live.perSession(l.size), l.live.acker["PATCH pods"]/float64(l.size), l.restart.perSession(l.size), yes(l.liveFanOutClean()))
	}
	for _, l := range r.live {
		liveCPU, restartCPU := l.live.req.cpu["kube-apiserver"], l.restart.req.cpu["kube-apiserver"]
		fan := ""
		if _, cpu, ok := r.unpacedFanOut(l.size); ok {
			fan = fmt.Sprintf("; unpaced fan-out above: %.2f CPU-s", cpu)
		}
		w("| L | Live edit: kube-apiserver CPU over the round (edit → controller idle, + %s), all clients: the controller, the stand-in, the acknowledger's pod patches, the watches | %s | live **%.2f CPU-s** (%.2f cores; etcd %.2f CPU-s) | restart %.2f CPU-s (%.2f cores; etcd %.2f CPU-s)%s | %.2fx | — | — |\n",
			quietPeriod, num(l.size), liveCPU, liveCPU/l.live.req.wall.Seconds(), l.live.req.cpu["etcd"],
			restartCPU, restartCPU/l.restart.req.wall.Seconds(), l.restart.req.cpu["etcd"], fan, liveCPU/restartCPU)
	}
	for _, l := range r.live {
		c := l.carrier
		per := 0
		if c.objects > 0 {
			per = c.protobufBytes / c.objects
		}
		w("| L | Live edit: the carrier, one live profile (ConfigMap) per session, as a LIST returns them (protobuf, what etcd stores less a few bytes of envelope; JSON for reference), for a profile of %s bytes of data | %s | **%s** objects, **%s** protobuf (%s JSON); %s B each, of which %s B data; %.2f writes per session per edit | — | — | — | — |\n",
			num(l.profileBytes), num(l.size), num(c.objects), mib(uint64(c.protobufBytes)), mib(uint64(c.jsonBytes)), num(per),
			num(c.dataBytes/max(c.objects, 1)), l.live.ctl.count("PUT", resConfigMaps)/float64(l.size))
	}
}

func (r *results) writeLiveDetails(w func(string, ...any)) {
	if len(r.live) == 0 {
		return
	}
	w("\n### Live delivery (one round of each delivery per size)\n\n")
	w("A profile of N sessions, delivered by restart and then live, in one controller process (`--profile-change-delay=0 --live-delivery=true`, no cluster-wide budget) started after the paced rollout. Set-up, outside the windows: one pod object per session (labels `%s`, `%s=<session>`; one container; `status.phase` Running by UpdateStatus; no node runs it), the kube-controller-manager stand-in of the paced rollout (Deployments complete at once), and two watchers of the benchmark's own: ",
		controller.LivePodSelector(), controller.LabelInstance)
	w("an **acknowledger** standing in for the game servers (an informer on the live profiles, label `%s`; as soon as a session's holds a revision it had not, it patches `%s: <revision>` on the session's pods with `profileack.Acknowledge`, %d at a time, with no kubelet delay: in a cluster the kubelet takes up to its sync period, about a minute, to rewrite the files), and a **status observer** (informers on the GameSessions and ProfileRollouts). Both run as the admin with user agents of their own and count their requests client side; they are taken out of the server's counts to give the controller's. ",
		controller.LiveProfileSelector(), profileack.Annotation, liveAckWorkers)
	w("The restart round comes first; then the profile is annotated `%s: %s` (the switch: each Deployment written once to mount its live profile, each live profile created and acknowledged), then the live round of the same edit; then the switch back, and the pods and live profiles are deleted.\n\n", rollout.AnnotationDelivery, rollout.DeliveryLive)
	w("*Delivered*: the benchmark's watch saw the session's new content (restart: the Deployment with the new hash; live: the live profile with the new `.revision`). *Acked*: the acknowledger's patch of the session's last pod answered. *Up to date*: the status observer saw the session's `ProfileUpToDate=True` on the new content (restart: written with the Deployment; live: once every pod acknowledged). *Complete*: the ProfileRollout `Complete` on it, every session Ready. *Idle*: the controller's queue empty.\n\n")
	w("| Sessions | Delivery | Delivered (median / p99 / last) | Acked | Up to date | Complete | Controller idle | kube-apiserver CPU-s | Cores |\n|---:|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, l := range r.live {
		for _, d := range []deliveryRound{l.restart, l.live} {
			mode, acked := "restart", "—"
			if d.live {
				mode, acked = "live", secs(d.acked)
			}
			w("| %s | %s | %s / %s / %s | %s | %s | %s | %s | %.2f | %s |\n", num(l.size), mode, secs(d.deliveries.median), secs(d.deliveries.p99), secs(d.delivered),
				acked, secs(d.upToDate), secs(d.complete), secs(d.drained), d.req.cpu["kube-apiserver"], d.req.coresUsed())
		}
	}
	for _, l := range r.live {
		w("\n%s sessions (profile `%s`, %s bytes of data):\n\n", num(l.size), l.profile, num(l.profileBytes))
		w("- Set-up: %s pods created and set Running in %s; the switch to live took %s (the controller's requests: %s); the switch back %s (%s)\n",
			num(l.pods), secs(l.podsTook), secs(l.toLive.took), orNone(strings.Join(onResources(l.toLive.ctl, liveResources), ", ")),
			secs(l.toRestart.took), orNone(strings.Join(onResources(l.toRestart.ctl, liveResources), ", ")))
		for _, d := range []deliveryRound{l.restart, l.live} {
			mode := "Restart"
			if d.live {
				mode = "Live"
			}
			w("- %s round, the controller's requests (server side, on its resources, less the others'): %s\n", mode, orNone(strings.Join(onResources(d.ctl, liveResources), ", ")))
			if len(d.ctl.failed) > 0 {
				w("  - failed: %s (a 409 is a conflict, which the controller retries)\n", requestLines(d.ctl.failed))
			}
			w("  - the acknowledger's: %s; the stand-in's: %s; the observers': %s\n", requestLines(d.acker), requestLines(d.standIn), requestLines(d.observers))
			w("  - client side, the controller's `rest_client_requests_total` by method and code: %s\n", flowList(d.client))
			w("  - server side, all clients: %s\n", strings.Join(d.req.lines(), ", "))
		}
		c := l.carrier
		w("- Live profiles after the live round: %s objects, %s bytes in protobuf, %s in JSON, %s bytes of data (the profile's and `.revision`)\n",
			num(c.objects), num(c.protobufBytes), num(c.jsonBytes), num(c.dataBytes))
	}
	w("\n")
}
