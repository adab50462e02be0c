package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/profileack"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// Live delivery (rollout.DeliveryLive). A restart delivers a new content in
// a new pod template, which replaces every pod. A live delivery leaves the
// pod template alone: the session's pods mount a ConfigMap of the session's
// own, its live profile, without subPath, and the controller rewrites that
// ConfigMap with the revision's data. The kubelet then rewrites the mounted
// files in place (all together, through its ..data symlink), and each game
// server says through its pod which revision it applied
// (pkg/profileack). Nothing restarts; a session counts as applied only once
// every pod of it has said so.
//
// The live profile is one object per session, not per revision: the
// rollout moves sessions one by one, and only an object of the session's
// own can hold a revision for one session while its neighbours hold
// another. It is owned by the session (the garbage collector deletes it
// with it), named liveProfileName, labelled LiveProfileLabel so that a
// filtered informer caches only these, and that informer drops their data:
// the controller reads which revision each holds, never its files.
const (
	// LiveProfileLabel marks the live profiles, the per-session
	// ConfigMaps that carry live content.
	LiveProfileLabel      = "games.example.com/live-profile"
	LiveProfileLabelValue = "true"
	// DeliveryLabel marks the pods of a session whose content is delivered
	// live. The controller caches those pods only, for their
	// acknowledgments.
	DeliveryLabel     = "games.example.com/delivery"
	DeliveryLiveValue = "live"
	// deliveredAtAnnotation is when the live profile received the revision
	// it holds: its game servers' progress deadline counts from there, and
	// a new leader's budget per minute (seedLedger).
	deliveredAtAnnotation = "games.example.com/delivered-at"
	// liveRevisionAnnotation names the revision the live profile holds, as
	// its .revision file does for the game servers: the hash label alone
	// cannot tell two profiles of the same content apart.
	liveRevisionAnnotation = "games.example.com/profile-revision"
	// liveProfileSuffix ends the name of a session's live profile.
	liveProfileSuffix = "-live-profile"
)

// LiveProfileSelector selects the live profiles of every session.
func LiveProfileSelector() string {
	return labels.SelectorFromSet(labels.Set{LiveProfileLabel: LiveProfileLabelValue}).String()
}

// LivePodSelector selects the pods of sessions whose content is delivered
// live, and of no other workload.
func LivePodSelector() string {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, DeliveryLabel: DeliveryLiveValue}).String()
}

// liveProfileName is the name of a session's live profile. A session's name
// may be as long as a ConfigMap's: a long one is shortened as a revision's
// prefix is, which keeps it a valid name, and a live profile that is not the
// session's own (liveProfileOf) is never written.
func liveProfileName(session string) string {
	if limit := maxNameLength - len(liveProfileSuffix); len(session) > limit {
		session = strings.TrimRight(session[:limit], "-.")
	}
	return session + liveProfileSuffix
}

// newLiveProfile is the live profile of session holding the revision of
// hash of the profile ref: its data, the revision's name under
// profileack.RevisionFile, and when it is delivered. resourceVersion is the
// cached one's, for a replace; "" for a create.
func newLiveProfile(session *gamesv1.GameSession, ref, hash string, revision *corev1.ConfigMap, now time.Time,
	resourceVersion string) *corev1.ConfigMap {
	data := make(map[string]string, len(revision.Data)+1)
	for k, v := range revision.Data {
		data[k] = v
	}
	data[profileack.RevisionFile] = RevisionName(ref, hash)
	var binary map[string][]byte
	if len(revision.BinaryData) > 0 {
		binary = revision.BinaryData
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:            liveProfileName(session.Name),
			Namespace:       session.Namespace,
			ResourceVersion: resourceVersion,
			Labels: map[string]string{
				LiveProfileLabel:              LiveProfileLabelValue,
				LabelManagedBy:                ManagedByValue,
				gamesv1.ProfileHashAnnotation: hash,
			},
			Annotations: map[string]string{
				deliveredAtAnnotation:  now.UTC().Format(time.RFC3339Nano),
				liveRevisionAnnotation: data[profileack.RevisionFile],
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(session, gameSessionKind)},
		},
		Data:       data,
		BinaryData: binary,
	}
}

// liveProfileOf returns the content a cached live profile holds of the
// session's profile and when it was delivered, if the object is the
// session's own: a ConfigMap of that name that the session does not
// control is never read as its. A revision of another profile (the
// session's profileRef changed) is none of its profile's, whatever its
// hash: its game servers acknowledge that revision's name. A live profile
// without the revision annotation holds the hash's revision of the
// session's profile.
func liveProfileOf(cm *corev1.ConfigMap, session *gamesv1.GameSession) (hash string, delivered time.Time, ours bool) {
	if cm == nil || !metav1.IsControlledBy(cm, session) {
		return "", time.Time{}, false
	}
	delivered, _ = time.Parse(time.RFC3339Nano, cm.Annotations[deliveredAtAnnotation])
	hash = cm.Labels[gamesv1.ProfileHashAnnotation]
	if revision, ok := cm.Annotations[liveRevisionAnnotation]; ok && revision != RevisionName(refOf(session), hash) {
		hash = ""
	}
	return hash, delivered, true
}

// liveProfileTaken reports whether cm, a ConfigMap of the name of the
// session's live profile (nil for none), is controlled by something else,
// or is a user's ConfigMap of that name: the session may not write it. A
// live profile that nothing controls (its session deleted with orphan
// propagation) the session takes over with its next delivery, as a
// Deployment adopts its orphaned ReplicaSets.
func liveProfileTaken(cm *corev1.ConfigMap, session *gamesv1.GameSession) bool {
	if cm == nil {
		return false
	}
	if ref := metav1.GetControllerOfNoCopy(cm); ref != nil {
		return ref.UID != session.UID
	}
	// Nothing controls it: a live profile, left by a session deleted with
	// orphan propagation, is taken over; any other ConfigMap of that name
	// is a user's.
	return cm.Labels[LiveProfileLabel] != LiveProfileLabelValue
}

// SlimLiveProfile keeps of a live profile what the controller reads: its
// identity, owner, labels and annotations. Its data are the revision's,
// which the revision and the profile hold already.
func SlimLiveProfile(obj interface{}) (interface{}, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:              cm.Name,
		Namespace:         cm.Namespace,
		UID:               cm.UID,
		ResourceVersion:   cm.ResourceVersion,
		DeletionTimestamp: cm.DeletionTimestamp,
		Labels:            cm.Labels,
		Annotations:       cm.Annotations,
		OwnerReferences:   cm.OwnerReferences,
	}}, nil
}

// SlimLivePod keeps of a live session's pod what its acknowledgment needs:
// its identity, the session it belongs to, when it was created, whether it
// is going away, and its acknowledgment.
func SlimLivePod(obj interface{}) (interface{}, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			CreationTimestamp: pod.CreationTimestamp,
			DeletionTimestamp: pod.DeletionTimestamp,
			Labels:            map[string]string{LabelInstance: pod.Labels[LabelInstance]},
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	if ack, ok := pod.Annotations[profileack.Annotation]; ok {
		slim.Annotations = map[string]string{profileack.Annotation: ack}
	}
	return slim, nil
}

// sessionOfPodIndex maps a live pod to the key of its session.
const sessionOfPodIndex = "sessionOfPod"

func sessionOfPodIndexFunc(obj interface{}) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Labels[LabelInstance] == "" {
		return nil, nil
	}
	return []string{pod.Namespace + "/" + pod.Labels[LabelInstance]}, nil
}

// withLiveDelivery is d with its pod template mounting the session's live
// profile: no revision, no hash annotation, and the delivery label on its
// pods. Whatever the content, the template stays the same.
func withLiveDelivery(d *appsv1.Deployment, session string) *appsv1.Deployment {
	out := *d
	t := &out.Spec.Template
	t.Annotations = cloneWithout(d.Spec.Template.Annotations, gamesv1.ProfileHashAnnotation)
	t.Labels = cloneWithout(d.Spec.Template.Labels, "")
	t.Labels[DeliveryLabel] = DeliveryLiveValue
	t.Spec.Volumes = append([]corev1.Volume(nil), d.Spec.Template.Spec.Volumes...)
	if i := profileVolumeIndex(t); i >= 0 {
		volume := t.Spec.Volumes[i].DeepCopy()
		volume.ConfigMap.Name = liveProfileName(session)
		t.Spec.Volumes[i] = *volume
	}
	return &out
}

// labelledLive reports whether the Deployment's pod template is labelled as
// delivering its session's content live: its pods mount the session's live
// profile, but for a hand edit of the profile volume, which the next write
// puts back. The label, which the controller alone sets, says how the
// content is delivered.
func labelledLive(d *appsv1.Deployment) bool {
	return d != nil && d.Spec.Template.Labels[DeliveryLabel] == DeliveryLiveValue
}

// deliversLive reports whether the Deployment's pods run what the session's
// live profile holds: its template is labelled live and mounts it.
func deliversLive(d *appsv1.Deployment, session string) bool {
	return labelledLive(d) && mountsLiveProfile(d, session)
}

// mountsLiveProfile reports whether the Deployment's profile volume is the
// session's live profile.
func mountsLiveProfile(d *appsv1.Deployment, session string) bool {
	v := findByName(d.Spec.Template.Spec.Volumes, profileVolumeName)
	return v != nil && v.ConfigMap != nil && v.ConfigMap.Name == liveProfileName(session)
}

func cloneWithout(m map[string]string, key string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// liveProgress is where a live delivery stands on a session.
type liveProgress int

const (
	// livePending: delivered, and not every pod has applied it yet.
	livePending liveProgress = iota
	// liveApplied: every pod of the session says it applied the revision.
	liveApplied
	// liveFailed: a pod says it could not apply the revision, or the
	// progress deadline passed without every pod applying it.
	liveFailed
)

func (p liveProgress) String() string {
	return [...]string{"pending", "applied", "failed"}[p]
}

// liveDelivery is what the acknowledgments of a session's pods say of the
// revision its live profile holds.
type liveDelivery struct {
	progress liveProgress
	// pods counts the session's running pods, acked those that applied
	// the revision; failure is a refusal's message, "" for none.
	pods, acked int
	failure     string
	// deadline is when a pending delivery fails; zero if it is not pending.
	deadline time.Time
}

// judgeLiveDelivery says where the delivery of revision (a revision name)
// stands from the acknowledgments of the session's pods, of which it wants
// want running, delivered at delivered, with the progress deadline
// deadline, at now. Fewer pods than wanted is no delivery applied: the
// missing ones are not created yet, or not in the cache yet, and will have
// to acknowledge too. A pod going away
// is not asked; a pod that acknowledges an older revision, or nothing, has
// not applied this one. Each pod has the deadline from the delivery, or
// from its own creation if it came later (a scale-up, a replaced pod): a
// pod starts with the files as they are, and needs the time to load them
// as any other. A pure function: the caller reads the pods and the clock.
func judgeLiveDelivery(revision string, pods []*corev1.Pod, want int, delivered time.Time, deadline time.Duration, now time.Time) liveDelivery {
	var d liveDelivery
	var timedOut bool
	for _, pod := range pods {
		if !podRuns(pod) {
			continue
		}
		d.pods++
		ack, ok := profileack.Parse(pod.Annotations[profileack.Annotation])
		switch {
		case ok && ack.Revision == revision && ack.Failed:
			if d.failure == "" {
				d.failure = pod.Name + ": " + ack.Message
			}
		case ok && ack.Revision == revision:
			d.acked++
		case !delivered.IsZero():
			due := later(delivered, pod.CreationTimestamp.Time).Add(deadline)
			if !now.Before(due) {
				timedOut = true
			} else if d.deadline.IsZero() || due.Before(d.deadline) {
				d.deadline = due
			}
		}
	}
	if missing := want - d.pods; missing > 0 && !delivered.IsZero() {
		d.pods += missing
		if due := delivered.Add(deadline); !now.Before(due) {
			timedOut = true
		} else if d.deadline.IsZero() || due.Before(d.deadline) {
			d.deadline = due
		}
	}
	switch {
	case d.failure != "" || timedOut:
		d.progress, d.deadline = liveFailed, time.Time{}
	case d.acked == d.pods:
		d.progress, d.deadline = liveApplied, time.Time{}
	default:
		d.progress = livePending
	}
	return d
}

// podRuns reports whether pod counts among a session's running game
// servers: neither being deleted nor finished.
func podRuns(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// liveDeliveryOf is where the delivery of hash, delivered at delivered,
// stands with the pods of the session of key, whose Deployment is d, as
// the caches show them at now.
func (c *caches) liveDeliveryOf(key string, session *gamesv1.GameSession, d *appsv1.Deployment, hash string,
	delivered, now time.Time) liveDelivery {
	return judgeLiveDelivery(RevisionName(refOf(session), hash), livePodsOf(c.livePodIndexer, key),
		int(ptr.Deref(d.Spec.Replicas, 1)), delivered, liveDeadline(d), now)
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// livePodsOf returns the cached live pods of the session of key, by name:
// the index's order is a set's, and a status that names a pod must name
// the same one at every sync.
func livePodsOf(indexer cache.Indexer, key string) []*corev1.Pod {
	if indexer == nil {
		return nil
	}
	objs, err := indexer.ByIndex(sessionOfPodIndex, key)
	if err != nil {
		return nil
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		pods = append(pods, obj.(*corev1.Pod))
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods
}

// enqueueSessionOfLiveProfile queues the session that controls a live
// profile, for an event of it: the cache has moved past the version the
// session's last write of it was made on, if it was.
func (c *sessionController) enqueueSessionOfLiveProfile(obj interface{}, deleted bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	if ref := metav1.GetControllerOfNoCopy(cm); ref != nil && ref.Kind == gameSessionKind.Kind {
		key := cm.Namespace + "/" + ref.Name
		c.expectations.liveObserved(key, cm, deleted)
		c.queue.Add(key)
	}
}

// enqueueSessionOfPod queues the session a live pod belongs to.
func (c *sessionController) enqueueSessionOfPod(obj interface{}) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if keys, _ := sessionOfPodIndexFunc(obj); len(keys) == 1 {
		c.queue.Add(keys[0])
	}
}

// ackChanged reports whether a pod update may change where its session's
// live delivery stands: its acknowledgment, or whether it runs.
func ackChanged(oldObj, newObj interface{}) bool {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	return o.Annotations[profileack.Annotation] != n.Annotations[profileack.Annotation] ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) || o.Status.Phase != n.Status.Phase
}

// cachedLiveProfile returns the session's live profile from the cache, nil
// for none (or with live delivery off).
func (c *caches) cachedLiveProfile(session *gamesv1.GameSession) *corev1.ConfigMap {
	if c.liveProfileLister == nil {
		return nil
	}
	cm, err := c.liveProfileLister.ConfigMaps(session.Namespace).Get(liveProfileName(session.Name))
	if err != nil {
		return nil
	}
	return cm
}

// liveOn reports whether live delivery is on (the informers are given).
func (c *caches) liveOn() bool { return c.liveProfileLister != nil }

// readLive reads into v what live delivery needs: the session's live
// profile and, when its Deployment delivers live, the revision the live
// profile holds (what the session runs) and where its delivery stands.
// written is the live profile as this sync wrote it, nil if it did not:
// the cache does not show it yet.
func (c *sessionController) readLive(v *sessionView, written *corev1.ConfigMap) {
	if !c.liveOn() {
		return
	}
	lv := &v.delivery
	lv.liveProfile, lv.written = c.cachedLiveProfile(v.session), written
	if written != nil {
		lv.liveProfile = written
	}
	lv.taken = liveProfileTaken(lv.liveProfile, v.session)
	if !labelledLive(v.deployment) {
		return
	}
	hash, delivered, _ := liveProfileOf(lv.liveProfile, v.session)
	lv.runsLive, lv.held = true, hash
	if hash == "" || !mountsLiveProfile(v.deployment, v.session.Name) {
		// Nothing of the profile, or a hand edit took the profile volume
		// away from the live profile: the pods run what it mounts now.
		return
	}
	v.rolled, v.mounted = hash, hash
	lv.acks = c.liveDeliveryOf(v.key, v.session, v.deployment, hash, delivered, v.now)
}

// readUncachedLiveProfile reads the session's live profile from the API
// server, after a create found its name taken by a ConfigMap the cache does
// not show: one without the live-profile label, the session's own stripped
// of it or another's. Only a live read can tell.
func (c *sessionController) readUncachedLiveProfile(ctx context.Context, v *sessionView) error {
	live, err := c.kubeClient.CoreV1().ConfigMaps(v.session.Namespace).Get(ctx, liveProfileName(v.session.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Deleted since the create: the retry creates it.
		return apierrors.NewConflict(corev1.Resource("configmaps"), liveProfileName(v.session.Name), err)
	}
	if err != nil {
		return err
	}
	v.delivery.liveProfile, v.delivery.taken, v.delivery.uncached = live, liveProfileTaken(live, v.session), true
	return nil
}

// confirmUnansweredLiveWrite settles the session's last live profile write
// when its answer did not say whether it applied and the cache still shows
// what it would have replaced: a live read tells.
func (c *sessionController) confirmUnansweredLiveWrite(ctx context.Context, key string, session *gamesv1.GameSession,
	cached *corev1.ConfigMap) error {
	if !c.expectations.unansweredLive(key, cached) {
		return nil
	}
	live, err := c.kubeClient.CoreV1().ConfigMaps(session.Namespace).Get(ctx, liveProfileName(session.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		live, err = nil, nil
	}
	if err != nil {
		return err
	}
	c.expectations.confirmLive(key, live)
	return nil
}

// liveDeadline is how long a live session's game servers have to apply a
// delivery: the progress deadline its Deployment has, which the session or
// its profile's policy set.
func liveDeadline(d *appsv1.Deployment) time.Duration {
	seconds := int32(defaultProgressDeadlineSeconds)
	if d != nil && d.Spec.ProgressDeadlineSeconds != nil {
		seconds = *d.Spec.ProgressDeadlineSeconds
	}
	return time.Duration(seconds) * time.Second
}

// deliverLive writes the session's live profile to hold choice's content,
// when choice is delivered live and the live profile holds another, or is
// out of the cache (its label removed), delivered at now. It comes before
// the Deployment write: a pod the write creates mounts the live profile, and must find it,
// and find it current. A live profile that nothing controls is taken over
// (liveProfileTaken); the decision never delivers to one another controls.
//
// The write replaces the object at the resourceVersion the cache shows, and
// syncs wait for the cache to show it (writeExpectations.liveAwaited). A
// conflict means the cache is behind: the worker retries quietly, as for a
// stale Deployment. A create answered AlreadyExists found a ConfigMap the
// cache does not show, which the caller reads live.
func (c *sessionController) deliverLive(ctx context.Context, v *sessionView, choice revisionChoice, now time.Time) error {
	if !choice.live {
		return nil
	}
	if held, _, ours := liveProfileOf(v.delivery.liveProfile, v.session); ours && held == choice.hash && !v.delivery.uncached {
		return nil
	}
	content, err := c.liveContent(ctx, v, choice.hash)
	if err != nil {
		return err
	}
	create, from := v.delivery.liveProfile == nil, ""
	if !create {
		from = v.delivery.liveProfile.ResourceVersion
	}
	desired := newLiveProfile(v.session, v.ref, choice.hash, content, now, from)
	client := c.kubeClient.CoreV1().ConfigMaps(v.session.Namespace)
	c.expectations.expectLive(v.key, from)
	var written *corev1.ConfigMap
	if create {
		written, err = client.Create(ctx, desired, metav1.CreateOptions{})
	} else {
		written, err = client.Update(ctx, desired, metav1.UpdateOptions{})
	}
	c.expectations.answeredLive(v.key, from, written, err)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Delivered a revision live", "revision", RevisionName(v.ref, choice.hash))
	// Until the cache shows it, the sync goes on with what it wrote: a
	// decision made again (a Deployment a create found) must not deliver
	// it twice.
	v.delivery.written = written
	return nil
}

// deliverLiveOrRead delivers choice (deliverLive). A create that finds the
// name taken reads what took it into v, and asks to decide again.
func (c *sessionController) deliverLiveOrRead(ctx context.Context, v *sessionView, choice revisionChoice, now time.Time) (decideAgain bool, err error) {
	err = c.deliverLive(ctx, v, choice, now)
	if !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	return true, c.readUncachedLiveProfile(ctx, v)
}

// liveContent is the content of the revision of hash: the profile's own
// when that is its current content, which the profile cache holds; else
// the revision, read live. The revision cache keeps no data, and only a
// session that starts or stays behind a rollout (the stable revision of a
// paused one, say) needs an earlier revision's.
func (c *sessionController) liveContent(ctx context.Context, v *sessionView, hash string) (*corev1.ConfigMap, error) {
	if v.profile != nil && hash == v.target {
		return v.profile, nil
	}
	return c.kubeClient.CoreV1().ConfigMaps(v.session.Namespace).Get(ctx, RevisionName(v.ref, hash), metav1.GetOptions{})
}

// liveMember is a session delivered live as its profile's rollout counts
// it: on target when its live profile holds the target and the profile
// asks for live delivery (wantsLive); Ready when every pod of it applied
// what it holds, failed when one could not or the deadline passed.
//
// A busy session takes a live change at once, as nothing restarts, unless
// the policy defers busy sessions for live changes too.
func (c *profileController) liveMember(profile *corev1.ConfigMap, key string, session *gamesv1.GameSession,
	d *appsv1.Deployment, target string, wantsLive bool, policy rollout.Policy) rollout.Member {
	hash, delivered, _ := liveProfileOf(c.cachedLiveProfile(session), session)
	if !mountsLiveProfile(d, session.Name) {
		// A hand edit took the profile volume away: its pods run what it
		// mounts now, none of the profile's content, until the next write.
		hash = ""
	}
	m := rollout.Member{
		Name:     memberName(profile.Namespace, key),
		Hash:     hash,
		OnTarget: hash == target && wantsLive,
		Blocked:  memberBlocked(session, d),
		Busy:     isBusy(session) && (!wantsLive || policy.LiveDefersBusy),
	}
	if hash == "" {
		return m
	}
	delivery := c.liveDeliveryOf(key, session, d, hash, delivered, c.clock.Now())
	m.Ready = deploymentComplete(d) && delivery.progress == liveApplied
	m.Failed = m.OnTarget && (delivery.progress == liveFailed || c.progressDeadlineExceeded(d))
	return m
}

// settleLiveMove settles a move delivered live: its place is held until
// every pod of the session applied the content, or the delivery failed.
// While the cache does not show the session's last write of its live
// profile, the place is held: that write's event queues the session. Once
// it does, a live profile that holds another content, or none, ends the
// move: a newer delivery, a user's edit or deletion overtook it (which the
// next sync delivers anew, under the policy). A move a restarted controller
// found under way (seedLiveMove) is settled the same way.
//
// Unlike a restart's, the move of a paused Deployment does not end at once:
// pausing stops the Deployment's rollout, not the kubelet, which updates
// the files its running pods mount (seed 70585; see liveMovePending).
func (c *sessionController) settleLiveMove(key string, session *gamesv1.GameSession, d *appsv1.Deployment, m move) {
	if blocks(d, session) {
		c.endMove(key, m)
		return
	}
	cm := c.cachedLiveProfile(session)
	if c.expectations.liveAwaited(key, cm) {
		return
	}
	hash, delivered, ours := liveProfileOf(cm, session)
	if !ours || hash != m.to {
		c.endMove(key, m)
		return
	}
	if !c.liveMovePending(key, session, d, hash, delivered) {
		c.endMove(key, m)
	}
}

// liveMovePending reports whether a live move of the session of key to
// hash, delivered at delivered, still holds its place: while its
// Deployment d rolls (a switch to live restarts the game servers; a change
// of the session's own too), unless d timed out; then while its pods have
// neither all applied the content nor one refused it, within the delivery
// deadline.
//
// A paused Deployment neither rolls nor times out, so its running pods
// alone say, while one of them mounts the live profile. With none running
// (paused before a switch to live reached a pod), the content reached no
// game server: nothing is pending, as for a paused restart.
func (c *sessionController) liveMovePending(key string, session *gamesv1.GameSession, d *appsv1.Deployment, hash string, delivered time.Time) bool {
	switch {
	case d.Spec.Paused && !runsLivePod(livePodsOf(c.livePodIndexer, key)):
		return false
	case d.Spec.Paused:
	case c.progressDeadlineExceeded(d):
		return false
	case !deploymentComplete(d):
		return true
	}
	return c.liveDeliveryOf(key, session, d, hash, delivered, c.clock.Now()).progress == livePending
}

// runsLivePod reports whether one of pods, the live pods of a session, is
// still running: the kubelet updates the files of its live profile mount.
func runsLivePod(pods []*corev1.Pod) bool {
	return slices.ContainsFunc(pods, podRuns)
}

// deliveredLive reports a session whose content, hash, is delivered live:
// the revision its live profile holds, and, for the profile's current one,
// whether its game servers applied it. A delivery the sync just wrote is
// pending: no game server has seen it yet.
func (s *sessionStatus) deliveredLive(v *sessionView, choice revisionChoice) {
	hash, ref := choice.hash, refOf(s.session)
	revision := RevisionName(ref, hash)
	s.status.ProfileHash, s.status.ProfileRevision = hash, revision
	delivery := v.delivery.acks
	if hash != v.rolled {
		delivery = liveDelivery{progress: livePending}
	}
	switch {
	case hash != v.target || !v.delivery.wantsLive:
		// Behind the rollout, or waiting for its switch back to restart.
		s.waiting(choice.reason, choice.message)
	case delivery.progress == liveApplied:
		s.upToDate(hash)
	case delivery.progress == liveFailed && delivery.failure != "":
		s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryFailed,
			fmt.Sprintf(MessageDeliveryRefused, revision, delivery.failure))
	case delivery.progress == liveFailed:
		s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryFailed,
			fmt.Sprintf(MessageDeliveryTimedOut, revision, delivery.acked, delivery.pods))
	default:
		s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryPending,
			fmt.Sprintf(MessageDeliveryPending, revision, delivery.acked, delivery.pods))
	}
}

// liveProfileBlocked reports a session whose content is to be delivered
// live through a ConfigMap of the live profile's name that another
// controls: its Deployment, d (nil if none), is left as it is.
func (s *sessionStatus) liveProfileBlocked(d *appsv1.Deployment, cm *corev1.ConfigMap) {
	reason, message := gamesv1.ReasonLiveProfileNotControlled, fmt.Sprintf(MessageLiveProfileNotControlled, cm.Name)
	if liveProfileGoing(cm, s.session) {
		reason, message = gamesv1.ReasonLiveProfileDeleting, fmt.Sprintf(MessageLiveProfileDeleting, cm.Name)
	}
	s.setCondition(gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, reason, message)
	if d == nil {
		s.noDeployment()
		s.notReady(reason, message)
		return
	}
	s.deployment(d)
}

// liveProfileGoing reports a ConfigMap of the name of the session's live
// profile that the garbage collector is about to remove: being deleted, or
// the live profile of an earlier session of that name.
func liveProfileGoing(cm *corev1.ConfigMap, session *gamesv1.GameSession) bool {
	ref := metav1.GetControllerOfNoCopy(cm)
	return cm.DeletionTimestamp != nil || ref != nil && ref.Kind == gameSessionKind.Kind && ref.Name == session.Name
}

// liveTakenRecheck is when to look again at a ConfigMap in the way of the
// session's live profile: no event may announce its end (the cache holds
// only labelled live profiles).
func liveTakenRecheck(cm *corev1.ConfigMap, session *gamesv1.GameSession) time.Duration {
	if liveProfileGoing(cm, session) {
		return deletionRecheckInterval
	}
	return uncachedRecheckInterval
}

// Messages of a live delivery. They name counts, so a session's status is
// written as its game servers acknowledge: a few writes per session per
// delivery, as a restart's Deployment status brings.
const (
	MessageDeliveryPending  = "Revision %s is delivered live; %d of %d game servers have applied it"
	MessageDeliveryRefused  = "Revision %s is delivered live, and a game server could not apply it: %s"
	MessageDeliveryTimedOut = "Revision %s is delivered live, and only %d of %d game servers applied it within the progress deadline"
	// A ConfigMap in the way of the session's live profile.
	MessageLiveProfileNotControlled = "ConfigMap %q already exists and is not controlled by this GameSession, whose profile is delivered live through a ConfigMap of that name: delete or rename it, and the controller will create its own"
	MessageLiveProfileDeleting      = "Waiting for ConfigMap %q, which is being deleted or belongs to an earlier GameSession of this name, to be removed by the garbage collector before the profile is delivered live"
)

// mountsProfileBySubPath reports whether the session's pod template mounts
// the profile volume by subPath: the kubelet never updates such a mount, so
// a live delivery would leave the game server reading the old file while
// .revision says the new one. Such a session is delivered by restart; the
// admission policy gamesession-live-subpath refuses new ones.
func mountsProfileBySubPath(session *gamesv1.GameSession) bool {
	t := session.Spec.Template
	if t == nil {
		return false
	}
	for _, containers := range [][]corev1.Container{t.Spec.InitContainers, t.Spec.Containers} {
		for _, c := range containers {
			for _, m := range c.VolumeMounts {
				if m.Name == profileVolumeName && (m.SubPath != "" || m.SubPathExpr != "") {
					return true
				}
			}
		}
	}
	return false
}

// seedLiveMove is the move a restarted controller finds under way on a
// session delivered live: its live profile holds a revision that its game
// servers have neither all applied nor failed to. delivered is when the
// live profile last received a revision, moving or not (zero if unknown):
// a new leader's budget per minute counts it.
func (c *sessionController) seedLiveMove(d *appsv1.Deployment, ref *metav1.OwnerReference) (m move, delivered time.Time, moving bool) {
	session, err := c.sessionLister.GameSessions(d.Namespace).Get(ref.Name)
	if err != nil || session.UID != ref.UID {
		return move{}, time.Time{}, false
	}
	hash, delivered, ours := liveProfileOf(c.cachedLiveProfile(session), session)
	if !ours || hash == "" {
		return move{}, delivered, false
	}
	if !c.liveMovePending(d.Namespace+"/"+ref.Name, session, d, hash, delivered) {
		return move{}, delivered, false
	}
	return move{kind: seededMove, to: hash, live: true, profile: profileKey(profileOf(session))}, delivered, true
}
