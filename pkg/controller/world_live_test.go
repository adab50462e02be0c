package controller

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/profileack"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// Live delivery in the sequences (live.go, docs/rollouts.md "Live
// delivery"). Half the sequences play it, chosen from a stream of their own
// (liveOf), so that the others take exactly the steps they took before it
// existed. In those:
//   - profiles are created live (rollout.games.example.com/delivery: live)
//     more often than not, paced or unpaced; users switch a profile's
//     delivery, now and then with a content edit in the same write, set
//     live-defers-busy, and write a delivery that does not parse;
//   - the world's API server keeps the sessions' live profiles, ConfigMaps
//     of the one name space, which the controller creates and replaces
//     (createLiveProfile, updateLiveProfile), and reads the revisions
//     whose content it delivers when it is not the profile's own
//     (getConfigMap); the garbage collector deletes a live profile with its
//     session, or orphans it; a user deletes one now and then;
//   - the kube-controller-manager stand-in keeps pods as objects for the
//     ReplicaSets of live templates (label games.example.com/delivery=live):
//     created with fresh UIDs, Running, deleted (terminating, then gone)
//     when their ReplicaSet scales down or goes; the controller's pod cache
//     holds them;
//   - game servers acknowledge on their own pods (pkg/profileack) what the
//     live profile they mount holds: at once, late (what they read a few
//     steps before, stale by then), twice, an older revision, or a refusal;
//     content the world declares broken is refused; the game servers of a
//     share of the sessions never acknowledge anything. When the world
//     settles, every game server that acknowledges does so for what its
//     live profile holds.
//
// What must hold, as requests are made:
//   - live-profile-malformed: a live profile written is the session's own
//     (named after it, controlled by the cached session), labelled, holding
//     the data of the revision it names in .revision, which is the revision
//     of the session's profile reference and of the hash it is labelled
//     with, delivered now;
//   - live-without-profile: no live profile is written, and no live
//     session's delivery is switched, while the controller's cache does not
//     show the session's profile (a profile deleted leaves them untouched);
//   - live-duplicate-write: a live profile is written only for a change the
//     controller's caches showed (the live profile's share of the write
//     ledger: a content change of a live session owes a live-profile write,
//     not a Deployment write), and never rewritten with what it holds;
//   - live-restarted: a controller write of a Deployment whose old and new
//     templates both deliver live changes the template only for a change of
//     the session's own (its spec, its inputs, someone else's edit): no pod
//     is replaced by a live change;
//   - live-applied-unacked: a session status written with ProfileUpToDate
//     True for a session whose Deployment delivers live names the revision
//     that every running pod of it, as the controller's pod cache shows
//     them, acknowledged (the controller acts on that cache; the server's
//     pods may be ahead of it);
//   - live-ready-unacked: a live ProfileRollout's readySessions never
//     exceeds the live sessions of the profile whose live profile holds the
//     target and whose every cached pod acknowledged it, their Deployment
//     complete, as the caches show them when the status is written;
//   - budget, profile-budget, cluster-budget, halt-moved, moved-twice,
//     paused-moved, busy-moved, window-moved: as for restarts
//     (world_rollout_test.go, world_matchsafe_test.go), a move being a
//     change of what a session runs, its content or its delivery: a live
//     profile written with other content while its Deployment delivers
//     live, or a Deployment written to deliver otherwise. A live move holds
//     its place until the server or the caches show its every pod
//     acknowledged the content and its Deployment complete, or the delivery
//     failed (a refusal, the deadline past): what either showed once, the
//     controller may have acted on. A busy session takes a live change at
//     once unless the policy says live-defers-busy; a switch restarts its
//     game servers, and waits as a restart does;
//   - halt-moved: after a halt of a target, no live profile is written with
//     that target until the content changes (but as a new session's start,
//     when the stable revision cannot be had, as for restarts).
//
// And at rest (checkLiveSessionAtRest, checkRolloutsAtRest), a session
// acknowledging a revision when as many of its pods run as its Deployment
// wants and each acknowledged it, and failing it when one refused it or one
// did not within the progress deadline from the delivery, or from its own
// creation if later:
//   - live-mode: a Deployment labelled live mounts its session's live
//     profile (live-volume-left: someone edited it away, and the session
//     waits for its current revision with its live profile to put back);
//   - live-profile-stale: a session that nothing holds is delivered the way
//     its profile asks, and a live one has a live profile of its own holding
//     the current content, its data and its .revision (live-revision-stale:
//     the content, under the revision of the profile the session named
//     before, which its game servers acknowledge);
//   - condition-lie: its ProfileUpToDate says RevisionCurrent exactly when
//     its pods acknowledged that revision, DeliveryFailed when one refused
//     it or a deadline passed, DeliveryPending otherwise; Ready as for any
//     session; a running live session is never held for being busy unless
//     the policy says live-defers-busy;
//   - rollout-lie: the ProfileRollout counts as moved the live sessions
//     whose live profile holds the target, as ready those whose every pod
//     acknowledged it, Deployment complete, and as failed those refused or
//     past the deadline;
//   - a session whose profile is missing keeps its live profile and its
//     Deployment's delivery.

// The live delivery contract, written out from docs/rollouts.md.
const (
	worldLiveProfileLabel = "games.example.com/live-profile"
	worldDeliveryLabel    = "games.example.com/delivery"
	worldDeliveredAt      = "games.example.com/delivered-at"
	worldRevisionFile     = ".revision"
	worldLiveSuffix       = "-live-profile"
	// worldPodFinalizer holds a deleted pod while the world's kubelet stops
	// it: the controller's pod cache sees it terminating first.
	worldPodFinalizer = "world.example.com/kubelet"
	// worldHeartbeat is an annotation a game server writes beside its
	// acknowledgment, so that a duplicate acknowledgment is a write too.
	worldHeartbeat = "world.example.com/heartbeat"
)

// liveOf decides, from a stream of its own, whether a sequence plays live
// delivery.
func liveOf(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x11fe)).IntN(2) == 0
}

// liveWorld is what live delivery adds to a world.
type liveWorld struct {
	on bool
	// neverAcks names the sessions whose game servers never acknowledge.
	neverAcks map[string]bool
	// late are acknowledgments read, not yet written; steps counts the
	// steps taken, for when they are due.
	late  []lateAck
	steps int
	// podSerial names the pods the world's ReplicaSets create.
	podSerial int
	// owed is the live profiles' share of the write ledger, by session:
	// the writes of its live profile the changes the controller saw owe.
	owed map[string]int
	// deliveryEpoch counts, by profile, the switches of its delivery the
	// controller's cache showed: a switch sets sessions back, as an edit.
	deliveryEpoch map[string]int
	// syncMoved names the session the current sync moved by a write of its
	// live profile: a write of its Deployment for new inputs in the same
	// sync is the same move.
	syncMoved string
	// liveMoves are the moves of sessions onto content delivered live
	// ("profile/hash/session"): they end with acknowledgments, not with
	// their Deployment's rollout.
	liveMoves map[string]bool
	// mayRead names the live profiles the controller may read live: right
	// after a create of one answered AlreadyExists, or a write of one whose
	// answer did not say whether it applied.
	mayRead map[string]bool
}

// lateAck is an acknowledgment a game server read and writes later.
type lateAck struct {
	pod   string
	uid   types.UID
	value string
	due   int
}

func newLiveWorld(on bool, w *world) liveWorld {
	l := liveWorld{on: on, neverAcks: map[string]bool{}, owed: map[string]int{},
		deliveryEpoch: map[string]int{}, liveMoves: map[string]bool{}, mayRead: map[string]bool{}}
	if on {
		for _, name := range w.sessionNames() {
			if w.rng.IntN(6) == 0 {
				l.neverAcks[name] = true
			}
		}
	}
	return l
}

// worldDataByHash maps each content of the world's profiles to its data.
var worldDataByHash = func() map[string]map[string]string {
	m := map[string]map[string]string{}
	for _, data := range worldProfileData {
		m[ProfileHash(&corev1.ConfigMap{Data: data})] = data
	}
	return m
}()

// worldLiveProfileName is the name of a session's live profile: the
// world's session names are short.
func worldLiveProfileName(session string) string { return session + worldLiveSuffix }

// worldDeliversLive reports whether a Deployment's pod template delivers
// live: labelled so, mounting the session's live profile.
func worldDeliversLive(d *appsv1.Deployment, session string) bool {
	return d != nil && d.Spec.Template.Labels[worldDeliveryLabel] == "live" && mountedConfigMap(d) == worldLiveProfileName(session)
}

// worldLabelledLive reports whether a Deployment's pod template carries the
// delivery label, whatever it mounts.
func worldLabelledLive(d *appsv1.Deployment) bool {
	return d != nil && d.Spec.Template.Labels[worldDeliveryLabel] == "live"
}

func isLiveTemplate(t *corev1.PodTemplateSpec) bool { return t.Labels[worldDeliveryLabel] == "live" }

func liveHash(lp *corev1.ConfigMap) string {
	if lp == nil {
		return ""
	}
	return lp.Labels[worldRevisionHashLabel]
}

func liveRevision(lp *corev1.ConfigMap) string {
	if lp == nil {
		return ""
	}
	return lp.Data[worldRevisionFile]
}

func controlledByUID(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == uid && ref.Kind == "GameSession"
}

// worldPolicyLive is how a profile asks its content to be delivered:
// "live", "restart", or "invalid" for a policy that does not parse (which
// changes no session's delivery).
func worldPolicyLive(p *corev1.ConfigMap) string {
	if p == nil {
		return ""
	}
	policy, err := rollout.PolicyFor(p.Annotations, rollout.DefaultPolicy())
	switch {
	case err != nil:
		return "invalid"
	case policy.Live():
		return "live"
	}
	return "restart"
}

// wantsLive reports whether a session of profile p, whose Deployment is d,
// is to be delivered live: as the profile asks, or as it runs when the
// policy does not parse.
func wantsLive(p *corev1.ConfigMap, d *appsv1.Deployment, session string) bool {
	switch worldPolicyLive(p) {
	case "live":
		return true
	case "invalid":
		return worldDeliversLive(d, session)
	}
	return false
}

// liveProfileOf is the session's live profile on the server, nil if none.
func (w *world) liveProfileOf(session string) *corev1.ConfigMap {
	obj, _ := w.server.get(liveProfilesResource, worldLiveProfileName(session)).(*corev1.ConfigMap)
	return obj
}

// cachedLiveProfileOf is the session's live profile in the controller's
// cache, nil if none.
func (w *world) cachedLiveProfileOf(session string) *corev1.ConfigMap {
	obj, _ := w.caches[liveProfilesResource].cached(worldNamespaceOf(session) + "/" + worldLiveProfileName(session)).(*corev1.ConfigMap)
	return obj
}

// contentOf is what a session runs with Deployment d and live profile lp
// (the server's or the cache's): the hash of its profile's content, and
// whether delivered live. A live Deployment runs what its live profile
// holds if that is the session's own and its .revision names the session's
// profile; a restart Deployment, the revision it mounts that its
// annotation names. "" for none.
func contentOf(s *gamesv1.GameSession, d *appsv1.Deployment, lp *corev1.ConfigMap) (string, bool) {
	if d == nil || s == nil {
		return "", false
	}
	if worldDeliversLive(d, s.Name) {
		// The cache's copy has no data (SlimLiveProfile): its hash and
		// revision annotation say.
		hash, revision := liveHash(lp), ""
		if lp != nil {
			revision = lp.Annotations[liveRevisionAnnotation]
		}
		if lp != nil && lp.Data != nil {
			revision = liveRevision(lp)
		}
		if hash == "" || !controlledByUID(lp, s.UID) || revision != worldRevisionName(d.Namespace, s.Spec.ProfileRef, hash) {
			return "", true
		}
		return hash, true
	}
	hash := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	if mountsRevision(d, profileNameOf(s.Spec.ProfileRef), hash) {
		return hash, false
	}
	return "", false
}

// ---- Acknowledgments ----

// livePods returns a session's pods on the server, by name.
func (w *world) livePods(s *gamesv1.GameSession) []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range w.server.objects[podsResource] {
		if p := obj.(*corev1.Pod); p.Namespace == s.Namespace && p.Labels[LabelInstance] == s.Name {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// cachedLivePods returns a session's pods as the controller's pod cache
// shows them, by name.
func (w *world) cachedLivePods(namespace, name string) []*corev1.Pod {
	objs, err := w.caches[podsResource].indexer.ByIndex(sessionOfPodIndex, namespace+"/"+name)
	must(err)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*corev1.Pod))
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func worldPodRuns(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// acks is where the acknowledgments of a session's pods stand for a
// revision delivered at delivered, each pod having the progress deadline
// from then, or from its own creation if it came later (a scale-up, a
// replaced pod): how many are wanted (the Deployment's replicas; a pod
// missing has not applied it), how many applied it, whether one refused
// it, whether one's deadline passed without it, and the next deadline to
// pass.
type acks struct {
	pods, applied     int
	refused, timedOut bool
	next              time.Time
}

func (a acks) all() bool { return a.applied == a.pods && !a.refused }

func (w *world) acksOf(pods []*corev1.Pod, want int32, revision string, delivered time.Time, deadline time.Duration) acks {
	var a acks
	now := w.clock.Now()
	due := func(at time.Time) {
		switch at = at.Add(deadline); {
		case delivered.IsZero():
		case !now.Before(at):
			a.timedOut = true
		case a.next.IsZero() || at.Before(a.next):
			a.next = at
		}
	}
	for _, p := range pods {
		if !worldPodRuns(p) {
			continue
		}
		a.pods++
		ack, ok := profileack.Parse(p.Annotations[profileack.Annotation])
		switch {
		case ok && ack.Revision == revision && ack.Failed:
			a.refused = true
		case ok && ack.Revision == revision:
			a.applied++
		case p.CreationTimestamp.After(delivered):
			due(p.CreationTimestamp.Time)
		default:
			due(delivered)
		}
	}
	if missing := int(want) - a.pods; missing > 0 {
		a.pods += missing
		due(delivered)
	}
	return a
}

// liveDeliveryOf is when a live profile received what it holds, and the
// deadline its Deployment gives the game servers.
func liveDeliveryOf(d *appsv1.Deployment, lp *corev1.ConfigMap) (time.Time, time.Duration) {
	at, _ := time.Parse(time.RFC3339Nano, lp.Annotations[worldDeliveredAt])
	return at, time.Duration(ptr.Deref(d.Spec.ProgressDeadlineSeconds, 600)) * time.Second
}

// liveState is where a live session stands, in one view (the server's or
// the caches'): the content it runs, and whether every running pod applied
// it with its Deployment complete (ready), or its delivery failed.
type liveState struct {
	hash          string
	ready, failed bool
	acks          acks
}

func (w *world) liveStateOf(s *gamesv1.GameSession, d *appsv1.Deployment, lp *corev1.ConfigMap, pods []*corev1.Pod) liveState {
	hash, live := contentOf(s, d, lp)
	if !live || hash == "" {
		return liveState{}
	}
	delivered, deadline := liveDeliveryOf(d, lp)
	st := liveState{hash: hash, acks: w.acksOf(pods, ptr.Deref(d.Spec.Replicas, 1), worldRevisionName(d.Namespace, s.Spec.ProfileRef, hash),
		delivered, deadline)}
	st.ready = deploymentComplete(d) && st.acks.all()
	st.failed = st.acks.refused || st.acks.timedOut || timedOutCondition(d) != nil
	return st
}

// serverLive is where a session stands live on the server.
func (w *world) serverLive(name string) (liveState, *appsv1.Deployment) {
	s, d := w.server.session(name), w.server.deployment(name)
	if s == nil || d == nil {
		return liveState{}, d
	}
	return w.liveStateOf(s, d, w.liveProfileOf(name), w.livePods(s)), d
}

// cachedLive is where a session stands live as the controller's caches show
// it.
func (w *world) cachedLive(name string) liveState {
	s, d := w.caches[sessionsResource].session(name), w.caches[deploymentsResource].deployment(name)
	if s == nil || d == nil {
		return liveState{}
	}
	return w.liveStateOf(s, d, w.cachedLiveProfileOf(name), w.cachedLivePods(s.Namespace, s.Name))
}

// ---- Game servers ----

// gameServerPods are the running pods of live sessions whose game servers
// acknowledge, with the live profile each mounts, by name.
func (w *world) gameServerPods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range w.server.view(podsResource) {
		p := obj.(*corev1.Pod)
		if worldPodRuns(p) && !w.live.neverAcks[p.Labels[LabelInstance]] && w.mountedLiveProfile(p) != nil {
			out = append(out, p)
		}
	}
	return out
}

// mountedLiveProfile is the ConfigMap a pod's profile volume mounts, as the
// kubelet would find it: whoever's it is.
func (w *world) mountedLiveProfile(p *corev1.Pod) *corev1.ConfigMap {
	for _, v := range p.Spec.Volumes {
		if v.Name == worldProfileVolume && v.ConfigMap != nil {
			obj, _ := w.server.objects[liveProfilesResource][v.ConfigMap.Name].(*corev1.ConfigMap)
			if obj != nil && obj.Data[worldRevisionFile] != "" {
				return obj
			}
		}
	}
	return nil
}

// applyValue is the acknowledgment a game server writes for a revision it
// read: a refusal of content the world declares broken.
func (w *world) applyValue(revision string) string {
	for hash := range w.broken {
		if strings.HasSuffix(revision, "-"+hash) {
			return profileack.Value(revision, errors.New("server.cfg: cannot parse max_players"))
		}
	}
	return profileack.Value(revision, nil)
}

// ackLive is a game server's step: it acknowledges what its live profile
// holds, at once or a few steps later (what it read now), twice, an older
// revision, or refuses it.
func (w *world) ackLive() bool {
	pods := w.gameServerPods()
	if len(pods) == 0 {
		return false
	}
	p := pick(w, pods)
	revision := w.mountedLiveProfile(p).Data[worldRevisionFile]
	value := w.applyValue(revision)
	what := "acknowledges"
	switch n := w.rng.IntN(20); {
	case n < 4:
		due := w.live.steps + 2 + w.rng.IntN(8)
		w.live.late = append(w.live.late, lateAck{pod: p.Name, uid: p.UID, value: value, due: due})
		w.covered["live ack late"]++
		w.logf("game server of pod %s reads %s, acknowledges it in a few steps", p.Name, revision)
		return true
	case n < 6:
		// An older revision: another content of the same profile.
		var others []string
		for _, hash := range slices.Sorted(maps.Keys(worldDataByHash)) {
			if !strings.HasSuffix(revision, "-"+hash) {
				others = append(others, strings.TrimSuffix(revision, revision[strings.LastIndexByte(revision, '-'):])+"-"+hash)
			}
		}
		value, what = profileack.Value(pick(w, others), nil), "acknowledges a stale revision"
		w.covered["live ack stale"]++
	case n < 8:
		if old := p.Annotations[profileack.Annotation]; old != "" {
			value, what = old, "acknowledges again"
			w.covered["live ack duplicate"]++
		}
	case n < 9:
		value, what = profileack.Value(revision, errors.New("reload: out of memory")), "refuses"
		w.covered["live ack refused"]++
	}
	w.writeAck(p, value, what)
	return true
}

// writeAck is a game server's write of its own pod's acknowledgment, with
// a heartbeat beside it, so that one written twice is a write too.
func (w *world) writeAck(p *corev1.Pod, value, what string) {
	p = copyOf(p)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[profileack.Annotation] = value
	p.Annotations[worldHeartbeat] = fmt.Sprint(w.step)
	updated, err := w.server.update(byGameServer, podsResource, p, true)
	must(err)
	if ack, ok := profileack.Parse(value); ok && ack.Failed {
		w.covered["live ack refused"]++
	} else {
		w.covered["live ack applied"]++
	}
	w.logf("game server of pod %s %s: %q (rv %s)", p.Name, what, value, updated.GetResourceVersion())
}

// lateAckDue writes the first acknowledgment due, if its pod is still there.
func (w *world) lateAckDue() bool {
	i := slices.IndexFunc(w.live.late, func(a lateAck) bool { return a.due <= w.live.steps })
	if i < 0 {
		return false
	}
	a := w.live.late[i]
	w.live.late = slices.Delete(w.live.late, i, i+1)
	w.writeLateAck(a)
	return true
}

func (w *world) writeLateAck(a lateAck) {
	p, _ := w.server.get(podsResource, a.pod).(*corev1.Pod)
	if p == nil || p.UID != a.uid || !worldPodRuns(p) {
		w.logf("game server of pod %s is gone before it acknowledges %q", a.pod, a.value)
		return
	}
	w.writeAck(p, a.value, "acknowledges late")
}

// gameServerWork is what the game servers do once the world settles: the
// late acknowledgments, and one of what each live profile holds, by each
// pod that has not acknowledged it (or refused it) yet.
func (w *world) gameServerWork() []work {
	var items []work
	for _, a := range w.live.late {
		items = append(items, work{what: fmt.Sprintf("game server of pod %s acknowledges late %q", a.pod, a.value), do: func() {
			w.live.late = slices.DeleteFunc(w.live.late, func(b lateAck) bool { return b == a })
			w.writeLateAck(a)
		}})
	}
	for _, p := range w.gameServerPods() {
		revision := w.mountedLiveProfile(p).Data[worldRevisionFile]
		if ack, ok := profileack.Parse(p.Annotations[profileack.Annotation]); ok && ack.Revision == revision {
			continue
		}
		items = append(items, work{what: fmt.Sprintf("game server of pod %s applies %s", p.Name, revision), do: func() {
			w.writeAck(p, w.applyValue(revision), "applies what its live profile holds")
		}})
	}
	return items
}

// ---- The kube-controller-manager: pods of live templates ----

// podsOf returns the server's pods that the ReplicaSet of uid controls.
func (w *world) podsOf(uid types.UID) []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range w.server.objects[podsResource] {
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.UID == uid {
			out = append(out, obj.(*corev1.Pod))
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// kcmLivePods is the ReplicaSet controller and the kubelet for a
// ReplicaSet of a live template: its pods are objects, created and deleted
// one at a time to match spec.replicas, its status counts those not
// terminating, which then become Ready.
func (w *world) kcmLivePods(rs *appsv1.ReplicaSet) []work {
	want := ptr.Deref(rs.Spec.Replicas, 1)
	var active []*corev1.Pod
	for _, p := range w.podsOf(rs.UID) {
		if p.DeletionTimestamp == nil {
			active = append(active, p)
		}
	}
	var items []work
	switch n := int32(len(active)); {
	case n < want:
		items = append(items, work{what: fmt.Sprintf("kcm: replicaset %s creates a pod (%d of %d)", rs.Name, n+1, want), do: func() {
			w.createLivePod(rs.Name, rs.UID)
		}})
	case n > want:
		victim := active[len(active)-1]
		items = append(items, work{what: fmt.Sprintf("kcm: replicaset %s deletes pod %s (%d of %d)", rs.Name, victim.Name, n, want), do: func() {
			must(ignoreNotFound(w.server.delete(byKCM, podsResource, victim.Name, metav1.DeletePropagationBackground)))
		}})
	}
	n := int32(len(active))
	next := rs.Status
	next.ObservedGeneration = rs.Generation
	switch {
	case rs.Status.Replicas != n:
		next.Replicas = n
		next.ReadyReplicas = min(rs.Status.ReadyReplicas, n)
	case rs.Status.ReadyReplicas < n:
		next.ReadyReplicas = n
	}
	next.AvailableReplicas = next.ReadyReplicas
	next.FullyLabeledReplicas = next.Replicas
	if !equality.Semantic.DeepEqual(next, rs.Status) {
		items = append(items, work{
			what: fmt.Sprintf("kcm: replicaset %s has %d pod(s), %d ready", rs.Name, next.Replicas, next.ReadyReplicas),
			do: func() {
				cur, _ := w.server.get(replicaSetsResource, rs.Name).(*appsv1.ReplicaSet)
				if cur == nil || cur.UID != rs.UID {
					return
				}
				cur.Status = next
				_, err := w.server.updateStatus(byKCM, replicaSetsResource, cur, true)
				must(err)
			},
		})
	}
	return items
}

// createLivePod creates a pod of the ReplicaSet, as it is now.
func (w *world) createLivePod(name string, uid types.UID) {
	rs, _ := w.server.get(replicaSetsResource, name).(*appsv1.ReplicaSet)
	if rs == nil || rs.UID != uid {
		return
	}
	w.live.podSerial++
	t := rs.Spec.Template
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("%s-%d", rs.Name, w.live.podSerial),
			Namespace:   rs.Namespace,
			Labels:      maps.Clone(t.Labels),
			Annotations: maps.Clone(t.Annotations),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			Finalizers: []string{worldPodFinalizer},
		},
		// What the game server reads its profile from.
		Spec:   corev1.PodSpec{Volumes: slices.Clone(t.Spec.Volumes)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	created, err := w.server.create(byKCM, podsResource, p)
	must(err)
	w.covered["live pod created"]++
	w.logf("  pod %s (%s) runs, mounting %q", created.GetName(), created.GetUID(), mountedRevision(&t))
}

// kubeletWork stops the pods being deleted: they go once their game server
// is stopped.
func (w *world) kubeletWork() []work {
	var items []work
	for _, obj := range w.server.view(podsResource) {
		p := obj.(*corev1.Pod)
		if p.DeletionTimestamp == nil {
			continue
		}
		items = append(items, work{what: fmt.Sprintf("kubelet: pod %s stopped", p.Name), do: func() {
			cur, _ := w.server.get(podsResource, p.Name).(*corev1.Pod)
			if cur == nil || cur.UID != p.UID {
				return
			}
			cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == worldPodFinalizer })
			_, err := w.server.update(byKCM, podsResource, cur, true)
			must(err)
		}})
	}
	return items
}

// ---- The garbage collector ----

// liveProfilesOwnedBy returns the server's live profiles a session of uid
// owns.
func (w *world) liveProfilesOwnedBy(uid types.UID) []*corev1.ConfigMap {
	var out []*corev1.ConfigMap
	for _, obj := range w.server.view(liveProfilesResource) {
		if slices.ContainsFunc(obj.GetOwnerReferences(), func(ref metav1.OwnerReference) bool { return ref.UID == uid }) {
			out = append(out, obj.(*corev1.ConfigMap))
		}
	}
	return out
}

// gcLiveWork is the garbage collector's work on live profiles whose owner
// is gone, and on pods whose ReplicaSet is.
func (w *world) gcLiveWork() []work {
	var items []work
	for _, obj := range w.server.view(liveProfilesResource) {
		refs := obj.GetOwnerReferences()
		if len(refs) == 0 || slices.ContainsFunc(refs, func(ref metav1.OwnerReference) bool {
			s, ok := w.server.objects[sessionsResource][ref.Name]
			return ok && s.GetUID() == ref.UID
		}) {
			continue
		}
		items = append(items, work{what: fmt.Sprintf("gc: delete live profile %s (%s), its session is gone", obj.GetName(), obj.GetUID()), do: func() {
			w.gcDeleteLiveProfile(obj.GetName(), obj.GetUID())
		}})
	}
	for _, obj := range w.server.view(podsResource) {
		ref := metav1.GetControllerOf(obj)
		if obj.GetDeletionTimestamp() != nil || ref != nil && w.server.objects[replicaSetsResource][ref.Name] != nil &&
			w.server.objects[replicaSetsResource][ref.Name].GetUID() == ref.UID {
			continue
		}
		items = append(items, work{what: fmt.Sprintf("gc: delete pod %s, its replicaset is gone", obj.GetName()), do: func() {
			must(ignoreNotFound(w.server.delete(byGC, podsResource, obj.GetName(), metav1.DeletePropagationBackground)))
		}})
	}
	return items
}

func (w *world) gcDeleteLiveProfile(name string, uid types.UID) {
	if cur := w.server.get(liveProfilesResource, name); cur != nil && cur.GetUID() == uid {
		must(w.server.delete(byGC, liveProfilesResource, name, metav1.DeletePropagationBackground))
	}
}

// gcOrphanLiveProfile removes a deleted session's reference from its live
// profile, as orphan propagation does to every dependent.
func (w *world) gcOrphanLiveProfile(lp *corev1.ConfigMap, owner types.UID) work {
	return work{
		what: fmt.Sprintf("gc: orphan live profile %s, removing its reference to %s", lp.Name, owner),
		do: func() {
			lp := copyOf(lp)
			lp.OwnerReferences = slices.DeleteFunc(lp.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == owner })
			_, err := w.server.update(byGC, liveProfilesResource, lp, true)
			must(err)
			w.covered["live profile orphaned"]++
		},
	}
}

// ---- Users ----

// withDelivery gives a new profile's annotations a delivery, in a live
// sequence: live more often than not.
func (w *world) withDelivery(p *corev1.ConfigMap) {
	if !w.live.on {
		return
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	switch w.rng.IntN(6) {
	case 0:
	case 1:
		p.Annotations[rollout.AnnotationDelivery] = string(rollout.DeliveryRestart)
	case 2:
		p.Annotations[rollout.AnnotationDelivery] = string(rollout.DeliveryLive)
		p.Annotations[rollout.AnnotationLiveDefersBusy] = "true"
	default:
		p.Annotations[rollout.AnnotationDelivery] = string(rollout.DeliveryLive)
	}
	if len(p.Annotations) == 0 {
		p.Annotations = nil
	}
}

// editProfileDelivery switches a profile's delivery, now and then with new
// content in the same write, or sets live-defers-busy, or writes a delivery
// that does not parse.
func (w *world) editProfileDelivery() bool {
	p := w.someProfile()
	if p == nil {
		return false
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	var what string
	switch n := w.rng.IntN(12); {
	case n < 7:
		if worldPolicyLive(p) == "live" {
			setOrDelete(p.Annotations, rollout.AnnotationDelivery, pick(w, []string{"", string(rollout.DeliveryRestart)}))
			what = "delivery restart"
		} else {
			p.Annotations[rollout.AnnotationDelivery] = string(rollout.DeliveryLive)
			what = "delivery live"
		}
		if n == 0 {
			p.Data = pick(w, worldProfileData)
			what += fmt.Sprintf(" and data, hash %s", ProfileHash(p))
		}
	case n < 10:
		if p.Annotations[rollout.AnnotationLiveDefersBusy] == "true" {
			delete(p.Annotations, rollout.AnnotationLiveDefersBusy)
			what = "live-defers-busy removed"
		} else {
			p.Annotations[rollout.AnnotationLiveDefersBusy] = "true"
			what = "live-defers-busy"
		}
	default:
		p.Annotations[rollout.AnnotationDelivery] = pick(w, []string{"Live", "hot"})
		what = "delivery " + p.Annotations[rollout.AnnotationDelivery] + " (does not parse)"
	}
	updated, err := w.server.update(byUser, profilesResource, p, true)
	must(err)
	w.logf("user: configmap %s %s (rv %s)", p.Name, what, updated.GetResourceVersion())
	return true
}

// deleteLiveProfile deletes a session's live profile, as a user tidying
// ConfigMaps might: its pods keep the files they had, and the controller
// delivers anew what the session is to run.
func (w *world) deleteLiveProfile() bool {
	profiles := w.server.view(liveProfilesResource)
	if len(profiles) == 0 {
		return false
	}
	lp := pick(w, profiles)
	must(w.server.delete(byUser, liveProfilesResource, lp.GetName(), metav1.DeletePropagationBackground))
	w.covered["live profile deleted by a user"]++
	w.logf("user: delete live profile %s (%s)", lp.GetName(), lp.GetUID())
	return true
}

// populateLive gives a session of a live profile what an earlier
// controller would have left it: its live profile holding the content, and
// a Deployment that mounts it (populateRunning).
func (w *world) populateLive(s *gamesv1.GameSession, p *corev1.ConfigMap, hash string) *appsv1.Deployment {
	rev := w.server.revision(worldRevisionName(s.Namespace, s.Spec.ProfileRef, hash))
	_, err := w.server.create(byController, liveProfilesResource, newLiveProfile(s, s.Spec.ProfileRef, hash, rev, w.clock.Now(), ""))
	must(err)
	return withLiveDelivery(NewDeployment(s, hash), s.Name)
}

// ackAll lets every game server that acknowledges apply what its live
// profile holds: the world as an earlier controller left it.
func (w *world) ackAll() {
	for range 100 {
		items := w.gameServerWork()
		if len(items) == 0 {
			return
		}
		for _, item := range items {
			item.do()
		}
	}
}

// ---- The controller's requests ----

func (w *world) createLiveProfile(a core.CreateAction) (bool, runtime.Object, error) {
	cm := a.GetObject().(*corev1.ConfigMap)
	s := w.checkLiveProfileWrite("Create", cm)
	// A Create acts on whether the name is free now: a live read of sorts.
	w.noteLiveProfileRead(cm.Name)
	f, faulty := w.takeFault("create")
	if faulty && f != faultLostResponse {
		w.logf("  → CREATE live profile %s: injected %s", cm.Name, f)
		w.live.mayRead[cm.Name] = true
		return true, nil, injectedError(f, liveProfilesResource, cm.Name)
	}
	created, err := w.server.create(byController, liveProfilesResource, cm)
	if err != nil {
		w.logf("  → CREATE live profile %s: %v", cm.Name, err)
		w.live.mayRead[cm.Name] = apierrors.IsAlreadyExists(err)
		return true, nil, err
	}
	w.logf("  → CREATE live profile %s: %s, rv %s, holds %s", cm.Name, created.GetUID(), created.GetResourceVersion(), liveRevision(cm))
	w.noteLiveWrite(s, nil, created.(*corev1.ConfigMap))
	if faulty {
		w.logf("    (answered: injected %s)", f)
		w.live.mayRead[cm.Name] = true
		return true, nil, injectedError(f, liveProfilesResource, cm.Name)
	}
	return true, created, nil
}

func (w *world) updateLiveProfile(a core.UpdateAction) (bool, runtime.Object, error) {
	cm := a.GetObject().(*corev1.ConfigMap)
	if cm.Labels[worldLiveProfileLabel] != "true" {
		return w.unexpected(a)
	}
	s := w.checkLiveProfileWrite("Update", cm)
	if cm.ResourceVersion == "" {
		w.violate("live-profile-malformed", "Update of live profile %s without a resourceVersion: it could replace what it did not read", cm.Name)
	}
	f, faulty := w.takeFault("patch")
	if faulty && f != faultLostResponse {
		w.logf("  → UPDATE live profile %s (rv %s): injected %s", cm.Name, cm.ResourceVersion, f)
		w.live.mayRead[cm.Name] = true
		return true, nil, injectedError(f, liveProfilesResource, cm.Name)
	}
	before, _ := w.server.get(liveProfilesResource, cm.Name).(*corev1.ConfigMap)
	updated, err := w.server.update(byController, liveProfilesResource, cm, true)
	if err != nil {
		w.logf("  → UPDATE live profile %s (rv %s): %v", cm.Name, cm.ResourceVersion, err)
		return true, nil, err
	}
	if updated.GetResourceVersion() == before.ResourceVersion {
		w.logf("  → UPDATE live profile %s (rv %s): no change", cm.Name, cm.ResourceVersion)
	} else {
		w.logf("  → UPDATE live profile %s (rv %s): rv %s, holds %s (held %s)", cm.Name, cm.ResourceVersion, updated.GetResourceVersion(),
			liveRevision(cm), liveRevision(before))
		w.noteLiveWrite(s, before, updated.(*corev1.ConfigMap))
	}
	if faulty {
		w.logf("    (answered: injected %s)", f)
		w.live.mayRead[cm.Name] = true
		return true, nil, injectedError(f, liveProfilesResource, cm.Name)
	}
	return true, updated, nil
}

// noteLiveProfileRead is told of the controller's Create of a live profile:
// it learns at once what its cache has yet to receive of others' changes
// (a user deleted it), which owes the live profile a write, as noteLiveRead
// does for a Deployment.
func (w *world) noteLiveProfileRead(name string) {
	pending := w.caches[liveProfilesResource].pending
	for i := range pending {
		if ev := &pending[i]; ev.obj.GetName() == name && !ev.known && ev.change.author != byController {
			ev.known = true
			if session, ok := strings.CutSuffix(name, worldLiveSuffix); ok {
				w.live.owed[session]++
			}
		}
	}
}

// liveContentRead reports whether a GET of ConfigMap name is the session
// sync's read of the revision whose content it delivers live: one of the
// session's profile, other than the current content its cache holds.
func (w *world) liveContentRead(name string) bool {
	if w.syncKey == "" {
		return false
	}
	s := w.caches[sessionsResource].session(worldNameOfKey(w.syncKey))
	if s == nil || !strings.HasPrefix(name, worldRevisionName(s.Namespace, s.Spec.ProfileRef, "")) {
		return false
	}
	if p := w.cachedProfileOf(s); p != nil && name == worldRevisionName(s.Namespace, s.Spec.ProfileRef, ProfileHash(p)) {
		w.violate("unexpected-request", "GET of revision %s, the current content of profile %s, which the controller's profile cache holds",
			name, p.Name)
	}
	w.covered["live content read from a revision"]++
	return true
}

// checkLiveProfileWrite checks a live profile the controller writes, and
// returns its session as the cache shows it (nil if none).
func (w *world) checkLiveProfileWrite(verb string, cm *corev1.ConfigMap) *gamesv1.GameSession {
	name, ok := strings.CutSuffix(cm.Name, worldLiveSuffix)
	s := w.caches[sessionsResource].session(name)
	if !ok || s == nil {
		w.violate("live-profile-malformed", "%s of live profile %s, of no GameSession the controller's cache holds", verb, cm.Name)
		return nil
	}
	if !w.live.on {
		w.violate("live-without-profile", "%s of live profile %s in a sequence whose profiles never ask for live delivery", verb, cm.Name)
	}
	var wrong []string
	if cm.Namespace != s.Namespace {
		wrong = append(wrong, "namespace "+cm.Namespace)
	}
	if !controlledByUID(cm, s.UID) {
		wrong = append(wrong, fmt.Sprintf("owners %s, not the cached session %s", describeLiveProfile(cm), s.UID))
	}
	if cm.Labels[worldLiveProfileLabel] != "true" || cm.Labels[worldManagedByLabel] != worldManagedByValue {
		wrong = append(wrong, fmt.Sprintf("labels %v", cm.Labels))
	}
	hash := liveHash(cm)
	if want := worldRevisionName(s.Namespace, s.Spec.ProfileRef, hash); hash == "" || liveRevision(cm) != want {
		wrong = append(wrong, fmt.Sprintf("%s %q for hash %q, want %q", worldRevisionFile, liveRevision(cm), hash, want))
	}
	data := maps.Clone(cm.Data)
	delete(data, worldRevisionFile)
	if want, known := worldDataByHash[hash]; !known || !equality.Semantic.DeepEqual(data, want) || len(cm.BinaryData) > 0 {
		wrong = append(wrong, fmt.Sprintf("data %v, not those of content %s (%v)", data, hash, want))
	}
	if at := cm.Annotations[worldDeliveredAt]; at != w.clock.Now().UTC().Format(time.RFC3339Nano) {
		wrong = append(wrong, fmt.Sprintf("delivered at %q, now is %s", at, w.clock.Now().UTC().Format(time.RFC3339Nano)))
	}
	if len(wrong) > 0 {
		w.violate("live-profile-malformed", "%s of live profile %s: %s", verb, cm.Name, strings.Join(wrong, "; "))
	}
	if s.DeletionTimestamp != nil {
		w.violate("live-while-deleting", "%s of live profile %s of GameSession %s, whose deletion the controller's cache shows", verb, cm.Name, s.Name)
	}
	profile := profileNameOf(s.Spec.ProfileRef)
	if w.cachedProfileOf(s) == nil {
		w.violate("live-without-profile", "%s of live profile %s while GameSession %s's profile %s is missing from the controller's cache, or not granted",
			verb, cm.Name, s.Name, s.Spec.ProfileRef)
	}
	// A halt holds until the content changes: no live profile receives the
	// halted content, but a new session's, when the stable revision cannot
	// be had (as checkMove allows a start).
	held := w.liveProfileOf(s.Name)
	unchanged := held != nil && controlledByUID(held, s.UID) && liveHash(held) == hash && liveRevision(held) == liveRevision(cm)
	if h, ok := w.halts[profile]; ok && h.hash == hash && h.epoch == w.profileEpoch[profile] && !unchanged {
		running, _ := contentOf(s, w.server.deployment(s.Name), held)
		stable := ""
		if r := w.server.rollout(profile); r != nil {
			stable = r.Status.StableHash
		}
		start := running == ""
		if !start || stable != "" && stable != hash && w.caches[revisionsResource].revision(worldRevisionName(s.Namespace, profile, stable)) != nil {
			w.violate("halt-moved", "%s of live profile %s with content %s, whose rollout of profile %s halted (stable %q), the content unchanged since",
				verb, cm.Name, hash, profile, stable)
		}
	}
	return s
}

// noteLiveWrite is told of each controller write that changed a live
// profile (before is nil for a create).
func (w *world) noteLiveWrite(s *gamesv1.GameSession, before, after *corev1.ConfigMap) {
	if s == nil {
		return
	}
	w.matureBursts()
	name := s.Name
	w.covered["live delivery"]++
	if w.live.neverAcks[name] {
		w.covered["live delivery never acknowledged"]++
	}
	if before != nil && liveHash(before) == liveHash(after) && liveRevision(before) == liveRevision(after) &&
		controlledByUID(before, s.UID) {
		w.violate("live-duplicate-write", "live profile %s rewritten with the revision %s it holds: its delivery time, and the deadline of its game servers, start again",
			after.Name, liveRevision(after))
	}
	// A write of the session's spec or inputs still owed takes the current
	// content along, live as in a new template (a write of it whose
	// Deployment write failed is made again with what the controller
	// knows by then).
	if w.live.owed[name] == 0 && w.credits[name] == 0 && w.inputMoves[name] == 0 {
		w.violate("live-duplicate-write", "live profile %s written (%s) with no change delivered to the controller that owes it, since its last write or since a sync found it in order",
			after.Name, liveRevision(after))
	}
	w.live.owed[name] = 0
	if w.pacedInCache(name) && !w.onTargetInCache(name) {
		// Written elsewhere than the current content by a paced rollout:
		// its turn owes it another.
		w.live.owed[name] = 1
	}
	// A move, if its Deployment delivers live on the server: its content
	// changes with this write. A Deployment about to switch to live moves
	// with its own write.
	d := w.server.deployment(name)
	if d == nil || !controlledBy(d, s.UID) || !worldDeliversLive(d, name) {
		return
	}
	from, fromLive := contentOf(s, d, before)
	to, live := contentOf(s, d, after)
	if to == "" || from == to && fromLive == live {
		return
	}
	w.checkContentMove(s, d, from, fromLive, to, live, fmt.Sprintf("live profile %s", after.Name), d)
	if from != "" {
		w.live.syncMoved = name
	}
}

// onTargetInCache reports whether the session runs its profile's current
// content, delivered as the profile asks, as the controller's caches show
// them.
func (w *world) onTargetInCache(name string) bool {
	s := w.caches[sessionsResource].session(name)
	d := w.caches[deploymentsResource].deployment(name)
	if s == nil || d == nil {
		return false
	}
	p := w.cachedProfileOf(s)
	if p == nil {
		return true
	}
	hash, live := contentOf(s, d, w.cachedLiveProfileOf(name))
	return hash == ProfileHash(p) && live == wantsLive(p, d, name)
}

// ---- The write ledger's share of live profiles ----

// creditContent owes the sessions the delivery of their profile's new
// content: a live profile's write for a live session that stays live,
// else a Deployment's move (which a live session switching takes along).
func (w *world) creditContent(sessions map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(sessions)) {
		if w.staysLiveInCache(name) {
			w.live.owed[name]++
			continue
		}
		w.creditMove(name)
	}
}

// staysLiveInCache reports whether the session's Deployment delivers live
// and its profile keeps it so, as the controller's caches show them.
func (w *world) staysLiveInCache(name string) bool {
	if !w.live.on {
		return false
	}
	s := w.caches[sessionsResource].session(name)
	d := w.caches[deploymentsResource].deployment(name)
	if s == nil || !worldDeliversLive(d, name) {
		return false
	}
	p := w.cachedProfileOf(s)
	return p != nil && wantsLive(p, d, name)
}

// noteLiveDelivered is told of each event the controller's caches receive,
// in a live sequence.
func (w *world) noteLiveDelivered(r apiResource, ev watchEvent, prev object) {
	switch r {
	case profilesResource:
		name := ev.obj.GetName()
		if ev.kind != watch.Deleted && prev != nil && prev.GetUID() == ev.obj.GetUID() &&
			worldPolicyLive(prev.(*corev1.ConfigMap)) != worldPolicyLive(ev.obj.(*corev1.ConfigMap)) {
			// A switch of delivery: a move of every session of the profile,
			// one Deployment write each, with a live profile's write.
			w.live.deliveryEpoch[name]++
			for session := range w.cachedSessionsOf(name) {
				w.creditMove(session)
			}
			w.covered["delivery switch seen"]++
		}
	case liveProfilesResource:
		// A live profile someone else deleted or changed is delivered anew.
		if ev.change.author != byController && ev.change.author != byRelist && !ev.known {
			if session, ok := strings.CutSuffix(ev.obj.GetName(), worldLiveSuffix); ok {
				w.live.owed[session]++
			}
		}
		// One that stood in a session's way (another's), changed or gone,
		// lets the session's Deployment on.
		if session, ok := strings.CutSuffix(ev.obj.GetName(), worldLiveSuffix); ok {
			if s := w.caches[sessionsResource].session(session); s != nil && prev != nil && !controlledByUID(prev, s.UID) {
				w.credit(session)
			}
		}
	}
	w.pruneLiveMoves()
}

// lapseLive is told of each sync that found the session in order.
func (w *world) lapseLive(name string) {
	for _, ev := range w.caches[liveProfilesResource].pending {
		if ev.change.author == byController && ev.obj.GetName() == worldLiveProfileName(name) {
			return
		}
	}
	if !w.pacedInCache(name) || w.onTargetInCache(name) {
		w.live.owed[name] = 0
	}
}

// checkLiveRestart is told of each controller write that changed a
// Deployment: one whose templates before and after both deliver live
// changes the template only for a change the ledger credits of the
// session's own.
func (w *world) checkLiveRestart(before, after *appsv1.Deployment) {
	if before == nil || !worldDeliversLive(before, before.Name) || !worldDeliversLive(after, after.Name) ||
		equality.Semantic.DeepEqual(before.Spec.Template, after.Spec.Template) {
		return
	}
	w.covered["live template rewritten"]++
	if w.credits[after.Name] == 0 {
		w.violate("live-restarted", "Deployment %s, delivering live, written with another pod template (its pods are replaced) with no change of the session's own spec, inputs or template delivered since its last write: a live change replaced its game servers",
			after.Name)
	}
}

// ---- Moves and their places ----

// checkSwitch is told of each controller write of a Deployment that changes
// how a session's content is delivered while the controller's cache does
// not show its profile: a profile gone changes no delivery.
func (w *world) checkSwitch(before, after *appsv1.Deployment) {
	if before == nil || worldDeliversLive(before, before.Name) == worldDeliversLive(after, after.Name) {
		return
	}
	if worldDeliversLive(after, after.Name) {
		w.covered["delivery switched to live"]++
	} else {
		w.covered["delivery switched to restart"]++
	}
	if s := w.caches[sessionsResource].session(after.Name); s != nil && w.cachedProfileOf(s) == nil {
		w.violate("live-without-profile", "Deployment %s switched its delivery (live %t) while its profile %s is missing from the controller's cache",
			after.Name, worldDeliversLive(after, after.Name), s.Spec.ProfileRef)
	}
}

// liveSettled reports whether a session's live move onto hash has ended
// as the controller may have seen it end: its every pod applied it with
// the Deployment complete, on the server or in the caches.
func (w *world) liveSettled(name, hash string, failedToo bool) bool {
	for _, st := range []liveState{w.cachedLive(name), func() liveState { st, _ := w.serverLive(name); return st }()} {
		if st.hash == hash && (st.ready || failedToo && st.failed) {
			return true
		}
	}
	return false
}

// pruneLiveMoves ends, for the budget checks, the live moves the server or
// the caches show ended: once either shows it, the controller may have let
// its place go. A move that failed keeps its place among max-rolling, as a
// restart's does, until its session is ready or moves on; it gives back
// those of the ledger (every kind of move of the profile, the cluster).
func (w *world) pruneLiveMoves() {
	for _, key := range slices.Sorted(maps.Keys(w.live.liveMoves)) {
		parts := strings.SplitN(key, "/", 3)
		profile, hash, name := parts[0], parts[1], parts[2]
		ready := w.liveSettled(name, hash, false)
		if ready || w.liveSettled(name, hash, true) {
			if m, ok := w.profileMoving[profile][name]; ok && m.live && m.hash == hash {
				delete(w.profileMoving[profile], name)
			}
			if m, ok := w.matchSafe.clusterMoving[name]; ok && m.live && m.hash == hash {
				delete(w.matchSafe.clusterMoving, name)
			}
		}
		if ready {
			if set := w.moving[profile+"/"+hash]; set != nil {
				delete(set, name)
			}
			delete(w.live.liveMoves, key)
		}
	}
}

// noteLiveChange is told of each server change of a live profile or a pod.
func (w *world) noteLiveChange(ch change) {
	if ch.resource == liveProfilesResource {
		name, _ := strings.CutSuffix(nameOf(ch), worldLiveSuffix)
		if ch.author != byController {
			w.disturbed[name]++
		}
		if m, ok := w.matchSafe.clusterMoving[name]; ok && m.live && (ch.new == nil || liveHash(ch.new.(*corev1.ConfigMap)) != m.hash) {
			delete(w.matchSafe.clusterMoving, name)
		}
	}
	w.pruneLiveMoves()
}

// ---- Checked as the controller writes a status ----

// checkLiveStatusClaim is told of each session status the controller
// writes: ProfileUpToDate True of a session whose Deployment delivers live
// names the revision every running pod of it acknowledged, as its pod
// cache shows them.
func (w *world) checkLiveStatusClaim(s *gamesv1.GameSession) {
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	cached := w.caches[deploymentsResource].deployment(s.Name)
	live := w.server.deployment(s.Name)
	if !conditionIs(upToDate, metav1.ConditionTrue, "") || !worldDeliversLive(live, s.Name) || !worldDeliversLive(cached, s.Name) ||
		live.DeletionTimestamp != nil || cached.DeletionTimestamp != nil {
		// A Deployment going away is not judged: it blocks the session.
		return
	}
	pods := w.cachedLivePods(s.Namespace, s.Name)
	a := w.acksOf(pods, ptr.Deref(cached.Spec.Replicas, 1), s.Status.ProfileRevision, time.Time{}, 0)
	if a.pods == 0 {
		w.covered["live applied with no pod"]++
	} else {
		w.covered["live applied claimed"]++
	}
	if !a.all() {
		var seen []string
		for _, p := range pods {
			seen = append(seen, fmt.Sprintf("%s=%q", p.Name, p.Annotations[profileack.Annotation]))
		}
		w.violate("live-applied-unacked", "GameSession %s written ProfileUpToDate=%s (revision %s), but its pods, as the controller's cache shows them, acknowledged %v",
			s.Name, describeCondition(upToDate), s.Status.ProfileRevision, seen)
	}
}

// checkLiveReadyCount is told of each ProfileRollout status the controller
// writes: a live rollout counts Ready no more sessions than its caches show
// delivered the target, every pod acknowledging it, their Deployments
// complete.
func (w *world) checkLiveReadyCount(r *gamesv1.ProfileRollout) {
	if r.Status.Delivery != string(rollout.DeliveryLive) {
		return
	}
	w.covered["live rollout recorded"]++
	acked := 0
	for name := range w.cachedSessionsOf(r.Name) {
		if st := w.cachedLive(name); st.hash == r.Status.TargetHash && st.ready {
			acked++
		}
	}
	if int(r.Status.ReadySessions) > acked {
		w.violate("live-ready-unacked", "ProfileRollout %s written with %d ready sessions, but the controller's caches show %d of its live sessions with the target %s acknowledged by every pod",
			r.Name, r.Status.ReadySessions, acked, r.Status.TargetHash)
	}
	if r.Status.HaltedHash != "" && r.Status.HaltedHash == r.Status.TargetHash {
		w.covered["live halt recorded"]++
	}
}

// ---- Settling ----

// liveNextDeadline returns when the next deadline of a live delivery on the
// server passes that no game server may meet, plus the second the
// controller's requeue may take: a settling world waits for it, as for a
// Deployment's progress deadline.
func (w *world) liveNextDeadline() (time.Time, bool) {
	if !w.live.on {
		return time.Time{}, false
	}
	var next time.Time
	now := w.clock.Now()
	for _, obj := range w.server.objects[sessionsResource] {
		s := obj.(*gamesv1.GameSession)
		d, _ := w.server.objects[deploymentsResource][s.Name].(*appsv1.Deployment)
		lp, _ := w.server.objects[liveProfilesResource][worldLiveProfileName(s.Name)].(*corev1.ConfigMap)
		if !worldDeliversLive(d, s.Name) || lp == nil {
			continue
		}
		// A paused Deployment's too: pausing stops its rollout, not the
		// kubelet, and its running pods meet the deadline or not.
		delivered, deadline := liveDeliveryOf(d, lp)
		a := w.acksOf(w.livePods(s), ptr.Deref(d.Spec.Replicas, 1), liveRevision(lp), delivered, deadline)
		if a.all() || a.refused || a.timedOut || a.next.IsZero() {
			continue
		}
		if at := a.next.Add(time.Second); at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next, !next.IsZero()
}

// ---- Checked at rest ----

// liveAtRest reports whether a session at rest is one of live delivery,
// which checkLiveSessionAtRest checks instead of checkSessionAtRest: its
// Deployment, its own, delivers live, or its profile asks for it.
func (w *world) liveAtRest(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment) bool {
	if !w.live.on || d == nil || !controlledBy(d, s.UID) {
		return false
	}
	if worldLabelledLive(d) {
		return true
	}
	// By restart, a session its profile's rollout holds is one of restart.
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	held := upToDate != nil && upToDate.Status == metav1.ConditionFalse && slices.Contains(heldReasons, upToDate.Reason)
	return profile != nil && worldPolicyLive(profile) == "live" && !held
}

// runsCurrent reports whether a session runs its profile's current content
// on the server, delivered as the profile asks.
func (w *world) runsCurrent(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment) bool {
	hash, live := contentOf(s, d, w.liveProfileOf(s.Name))
	return hash == ProfileHash(profile) && live == wantsLive(profile, d, s.Name)
}

func (w *world) checkLiveSessionAtRest(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment) {
	ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
	resolved := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileResolved)
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	lp := w.liveProfileOf(s.Name)
	if s.Status.ObservedGeneration != s.Generation {
		w.violate("condition-lie", "GameSession %s: status.observedGeneration is %d, metadata.generation %d", s.Name, s.Status.ObservedGeneration, s.Generation)
	}
	mismatches := deploymentMismatches(s, "", d)
	w.covered["live at rest"]++
	if profile == nil {
		// Nothing to hold it to: it keeps its live profile, and its
		// Deployment its delivery (checkSwitch, checkLiveProfileWrite).
		w.covered["live at rest without profile"]++
		if conditionIs(ready, metav1.ConditionTrue, "") && (len(mismatches) > 0 || !rolledOutAndReady(d)) {
			w.violate("condition-lie", "GameSession %s: Ready=True, but its Deployment %s", s.Name, describeDeployment(d, mismatches))
		}
		return
	}
	if displacingContainer(s, d) != "" || d.Labels[worldManagedByLabel] != worldManagedByValue ||
		conditionIs(ready, metav1.ConditionFalse, gamesv1.ReasonDeploymentInvalid) {
		// As for restarts: the controller leaves it as it is, and says so
		// (checkSessionAtRest), or cannot see it.
		w.covered["live at rest left alone"]++
		return
	}
	if !conditionIs(resolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved) {
		w.violate("condition-lie", "GameSession %s: profile %s exists and nothing blocks the session, but ProfileResolved is %s",
			s.Name, profile.Name, describeCondition(resolved))
	}
	if w.nothingToDeliver(s, profile, d, lp) {
		// As noRevisionToMount for a restart: its live profile is gone, and
		// the current content's revision cannot be had, so the controller
		// has nothing to write its Deployment with, and leaves it.
		w.covered["live at rest with nothing to deliver"]++
		if conditionIs(ready, metav1.ConditionTrue, "") && (len(mismatches) > 0 || !rolledOutAndReady(d)) {
			w.violate("condition-lie", "GameSession %s: Ready is %s, but its Deployment, waiting for content to deliver, %s",
				s.Name, describeCondition(ready), describeDeployment(d, mismatches))
		}
		w.heldAtRest(s, profile, d)
		return
	}
	if worldLabelledLive(d) && !worldDeliversLive(d, s.Name) {
		// A restart session whose volume someone edited gets the revision
		// its annotation names put back while it waits for the current
		// one; a live session has its live profile to put back.
		invariant := "live-mode"
		if lp != nil && controlledByUID(lp, s.UID) && w.heldAtRestQuiet(s, profile, d) {
			invariant = "live-volume-left"
		}
		w.violate(invariant, "GameSession %s: Deployment %s is labelled live but mounts %q, not the session's live profile %s; ProfileUpToDate is %s",
			s.Name, d.Name, mountedConfigMap(d), describeLiveProfile(lp), describeCondition(upToDate))
		return
	}
	if len(mismatches) > 0 {
		w.violate("deployment-mismatch", "GameSession %s (%s, generation %d), delivered live: Deployment %s", s.Name, s.UID, s.Generation,
			describeDeployment(d, mismatches))
	}
	if s.Status.Replicas != d.Status.Replicas || s.Status.ReadyReplicas != d.Status.ReadyReplicas {
		w.violate("condition-lie", "GameSession %s: status says %d replicas, %d ready; the Deployment has %d, %d ready",
			s.Name, s.Status.Replicas, s.Status.ReadyReplicas, d.Status.Replicas, d.Status.ReadyReplicas)
	}
	// Ready says whether the Deployment is rolled out, but for a session
	// with nothing to deliver (its live profile gone, and the current
	// content's revision not to be had), which says so.
	complete := len(mismatches) == 0 && rolledOutAndReady(d)
	if isTrue := conditionIs(ready, metav1.ConditionTrue, ""); isTrue != complete && (isTrue || !w.heldAtRestQuiet(s, profile, d)) {
		w.violate("condition-lie", "GameSession %s: Ready is %s, but the Deployment %s (status %s)",
			s.Name, describeCondition(ready), describeDeployment(d, mismatches), replicaCounts(d))
	}
	policy := worldPolicy(profile)
	if upToDate != nil && upToDate.Reason == gamesv1.ReasonSessionBusy && worldDeliversLive(d, s.Name) && wantsLive(profile, d, s.Name) &&
		!policy.LiveDefersBusy {
		w.violate("condition-lie", "GameSession %s: ProfileUpToDate is %s, but it runs live and its profile's policy %s takes live changes on busy sessions",
			s.Name, describeCondition(upToDate), describePolicy(profile.Annotations))
	}
	target := ProfileHash(profile)
	if w.revisionStale(s, d, lp, target) {
		w.violate("live-revision-stale", "GameSession %s: its live profile holds content %s as revision %q, but the session's profile is %s: its game servers acknowledge a revision the controller does not wait for (ProfileUpToDate is %s)",
			s.Name, target, liveRevision(lp), s.Spec.ProfileRef, describeCondition(upToDate))
		return
	}
	if !w.runsCurrent(s, profile, d) {
		// Not on the current content: its rollout must say why
		// (heldAtRest, which checks the ProfileRollout agrees).
		if !w.heldAtRest(s, profile, d) {
			hash, live := contentOf(s, d, lp)
			w.violate("live-profile-stale", "GameSession %s at rest runs content %q (live %t, live profile %s), but its profile %s has %s to deliver %s, and ProfileUpToDate is %s; the ledger's moves: %s",
				s.Name, hash, live, describeLiveProfile(lp), profile.Name, target, worldPolicyLive(profile), describeCondition(upToDate),
				w.describeLedgerMoves())
		}
		w.covered["live at rest held"]++
		return
	}
	if !wantsLive(profile, d, s.Name) {
		// On the current content by restart, as the profile asks.
		w.checkStatusDescribes(s, d, resolved)
		w.checkSessionRevision(s, profile)
		return
	}
	revision := worldRevisionName(s.Namespace, s.Spec.ProfileRef, target)
	data := maps.Clone(lp.Data)
	delete(data, worldRevisionFile)
	if !equality.Semantic.DeepEqual(data, profile.Data) {
		w.violate("live-profile-stale", "live profile %s holds data %v, but profile %s holds %v", lp.Name, data, profile.Name, profile.Data)
	}
	if s.Status.ProfileHash != target || s.Status.ProfileRevision != revision {
		w.violate("condition-lie", "GameSession %s: status names content %q, revision %q; its live profile holds %s", s.Name,
			s.Status.ProfileHash, s.Status.ProfileRevision, revision)
	}
	delivered, deadline := liveDeliveryOf(d, lp)
	a := w.acksOf(w.livePods(s), ptr.Deref(d.Spec.Replicas, 1), revision, delivered, deadline)
	want := gamesv1.ReasonDeliveryPending
	switch {
	case a.refused:
		want = gamesv1.ReasonDeliveryFailed
		w.covered["live at rest refused"]++
	case a.timedOut:
		want = gamesv1.ReasonDeliveryFailed
		w.covered["live at rest timed out"]++
	case a.all():
		want = gamesv1.ReasonRevisionCurrent
		w.covered["live at rest applied"]++
	default:
		w.covered["live at rest pending"]++
	}
	if upToDate == nil || upToDate.Reason != want {
		w.violate("condition-lie", "GameSession %s: ProfileUpToDate is %s at rest, but %d of its %d pods applied %s (refused %t, timed out %t, delivered at %s, deadline %v, now %s), which is %s",
			s.Name, describeCondition(upToDate), a.applied, a.pods, revision, a.refused, a.timedOut, lp.Annotations[worldDeliveredAt],
			deadline, w.clock.Since(w.start), want)
	}
}

// describeLedgerMoves lists the moves the controller's ledger holds.
func (w *world) describeLedgerMoves() string {
	l := w.ctrl.sessions.moves
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for _, key := range slices.Sorted(maps.Keys(l.moves)) {
		m := l.moves[key]
		parts = append(parts, fmt.Sprintf("%s: %v to %.20q of %s", key, m.kind, m.to, m.profile))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func describeLiveProfile(lp *corev1.ConfigMap) string {
	if lp == nil {
		return "none"
	}
	var owners []string
	for _, ref := range lp.OwnerReferences {
		owners = append(owners, fmt.Sprintf("%s %s (%s)", ref.Kind, ref.Name, ref.UID))
	}
	return fmt.Sprintf("%s (%s, holds %q, owners %v)", lp.Name, lp.UID, liveRevision(lp), owners)
}

// revisionStale reports whether a live session's live profile holds the
// content hash, but under the revision of another profile than the
// session's (its profileRef changed to a profile of the same content).
//
// A session that says the revision of its profile's current content cannot
// be had (yet) keeps what it runs, another profile's revision included, as
// a restart session keeps mounting it.
func (w *world) revisionStale(s *gamesv1.GameSession, d *appsv1.Deployment, lp *corev1.ConfigMap, hash string) bool {
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	if conditionIs(upToDate, metav1.ConditionFalse, gamesv1.ReasonRevisionUnavailable) ||
		conditionIs(upToDate, metav1.ConditionFalse, gamesv1.ReasonRevisionPending) {
		return false
	}
	return worldDeliversLive(d, s.Name) && lp != nil && controlledByUID(lp, s.UID) && liveHash(lp) == hash &&
		liveRevision(lp) != worldRevisionName(s.Namespace, s.Spec.ProfileRef, hash)
}

// nothingToDeliver reports whether a live session at rest waits for its
// profile's current revision with nothing else to deliver: no live profile
// of its own, one holding another profile's revision, or its Deployment no
// longer mounting it, while that revision cannot be had.
func (w *world) nothingToDeliver(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment, lp *corev1.ConfigMap) bool {
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	if !conditionIs(upToDate, metav1.ConditionFalse, gamesv1.ReasonRevisionUnavailable) &&
		!conditionIs(upToDate, metav1.ConditionFalse, gamesv1.ReasonRevisionPending) {
		return false
	}
	if lp != nil && liveRevision(lp) != worldRevisionName(s.Namespace, s.Spec.ProfileRef, liveHash(lp)) {
		// Another profile's revision (its profileRef changed): nothing of
		// its profile, as a restart session mounting another profile's
		// revision has none.
		return true
	}
	return lp == nil || !controlledByUID(lp, s.UID) || !worldLabelledLive(d) && !worldDeliversLive(d, s.Name)
}

// heldAtRestQuiet reports whether a session at rest says its rollout holds
// it off the current content, without checking the rollout agrees
// (heldAtRest does).
func (w *world) heldAtRestQuiet(s *gamesv1.GameSession, profile *corev1.ConfigMap, d *appsv1.Deployment) bool {
	upToDate := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate)
	return upToDate != nil && upToDate.Status == metav1.ConditionFalse && slices.Contains(heldReasons, upToDate.Reason) &&
		!w.runsCurrent(s, profile, d)
}

// liveMemberAtRest is how a live profile's ProfileRollout is to count a
// member at rest whose Deployment delivers live: moved (on the target),
// ready and failed.
func (w *world) liveMemberAtRest(m member, p *corev1.ConfigMap) (moved, ready, failed bool) {
	lp := w.liveProfileOf(m.session.Name)
	if w.revisionStale(m.session, m.deployment, lp, ProfileHash(p)) {
		// Reported by checkLiveSessionAtRest: counted as the controller
		// counts it, by its hash.
		lp = lp.DeepCopy()
		lp.Data = nil
	}
	st := w.liveStateOf(m.session, m.deployment, lp, w.livePods(m.session))
	moved = st.hash == ProfileHash(p) && worldPolicyLive(p) != "restart"
	ready = moved && st.ready
	failed = moved && (st.failed || w.failedOnTarget(m.deployment))
	return moved, ready, failed
}

// liveRolloutAtRest is told of each ProfileRollout at rest: a live one's
// counts are of acknowledgments (checkRolloutsAtRest counts them).
func (w *world) liveRolloutAtRest(r *gamesv1.ProfileRollout, p *corev1.ConfigMap) {
	if !w.live.on {
		return
	}
	mode := worldPolicyLive(p)
	if want := map[string]string{"live": "live", "restart": "restart", "invalid": "restart"}[mode]; r.Status.Delivery != want {
		w.violate("rollout-lie", "ProfileRollout %s says delivery %q, but the profile's policy asks for %s", r.Name, r.Status.Delivery, mode)
	}
	if mode == "live" {
		w.covered["live rollout at rest "+string(r.Status.Phase)]++
	}
}

// liveMemberOf is whether checkRolloutsAtRest counts a member as a live
// delivery.
func (w *world) liveMemberOf(m member) bool {
	return w.live.on && worldDeliversLive(m.deployment, m.session.Name)
}
