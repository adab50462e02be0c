package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/profileack"
	"github.com/example/gamesession-controller/pkg/rollout"
)

func createLiveProfile(namespace, session string) wantAction {
	return wantAction{verb: "create", resource: "configmaps", namespace: namespace, name: liveProfileName(session)}
}

func updateLiveProfile(namespace, session string) wantAction {
	return wantAction{verb: "update", resource: "configmaps", namespace: namespace, name: liveProfileName(session)}
}

// liveProfile returns profile delivered live.
func liveProfile(profile *corev1.ConfigMap) *corev1.ConfigMap {
	p := profile.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[rollout.AnnotationDelivery] = string(rollout.DeliveryLive)
	return p
}

// livePod is a running pod of session that acknowledged ack ("" for
// nothing).
func livePod(session *gamesv1.GameSession, name, ack string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: session.Namespace, Name: name, UID: types.UID("pod-" + name),
			Labels: map[string]string{LabelInstance: session.Name, DeliveryLabel: DeliveryLiveValue},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ack != "" {
		pod.Annotations = map[string]string{profileack.Annotation: ack}
	}
	return pod
}

// startedLive is a fixture of session and its live profile after the
// session's first sync: its live profile and its Deployment created, its
// status written, and all of it in the caches.
func startedLive(ctx context.Context, t *testing.T, session *gamesv1.GameSession, profile *corev1.ConfigMap) *fixture {
	t.Helper()
	f := newFixture(ctx, t, session, profile)
	f.expectKube(createLiveProfile(testNamespace, session.Name), createDeployment(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, game := f.run(ctx, sessionKey(session))
	f.observe(kube...)
	f.observe(game...)
	return f
}

// oneServer is a session of one game server of the profile "classic".
func oneServer() *gamesv1.GameSession {
	session := newSession(testNamespace, "arena-1", "classic")
	session.Spec.Replicas = ptr.To[int32](1)
	return session
}

// startedOneServer is startedLive of oneServer and "classic" delivered
// live, with the session's Deployment as the caches show it, paused if
// asked.
func startedOneServer(t *testing.T, paused bool) (*fixture, *gamesv1.GameSession, *corev1.ConfigMap, *appsv1.Deployment) {
	t.Helper()
	session := oneServer()
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := startedLive(context.Background(), t, session, profile)
	d := f.storedDeployment(testNamespace, session.Name).DeepCopy()
	d.Spec.Paused = paused
	f.setCached(d)
	return f, session, profile, d
}

// sent is the first object of resource a create or update request sent.
func sent[T runtime.Object](t *testing.T, actions []core.Action, resource string) T {
	t.Helper()
	for _, a := range actions {
		if a.GetResource().Resource == resource && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			return objectOf[T](t, a)
		}
	}
	t.Fatalf("no %s were written: %q", resource, describeActions(actions))
	var none T
	return none
}

func sentLiveProfile(t *testing.T, actions []core.Action) *corev1.ConfigMap {
	t.Helper()
	return sent[*corev1.ConfigMap](t, actions, "configmaps")
}

// A live profile's edit reaches the session's live profile and nothing
// else: the Deployment keeps its pod template, so no pod is replaced. The
// session counts as up to date only once each of its pods has acknowledged
// the new revision.
func TestLiveEditRewritesTheLiveProfileOnly(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	session.Spec.Replicas = ptr.To[int32](2)
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := newFixture(ctx, t, session, profile)

	// A new session: its live profile first, then the Deployment mounting it.
	f.expectKube(createLiveProfile(testNamespace, session.Name), createDeployment(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, _ := f.run(ctx, sessionKey(session))
	first := sent[*appsv1.Deployment](t, kube, "deployments")
	if !deliversLive(first, session.Name) {
		t.Fatalf("the Deployment does not mount the live profile: volumes %+v", first.Spec.Template.Spec.Volumes)
	}
	if _, ok := first.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]; ok {
		t.Error("a live template carries the profile hash, so an edit would replace its pods")
	}
	oldHash := ProfileHash(profile)
	cm := sentLiveProfile(t, kube)
	if got, want := cm.Data[profileack.RevisionFile], RevisionName("classic", oldHash); got != want {
		t.Errorf("%s = %q, want %q", profileack.RevisionFile, got, want)
	}
	for k, v := range classicData {
		if cm.Data[k] != v {
			t.Errorf("live profile %s = %q, want %q", k, cm.Data[k], v)
		}
	}
	if !metav1.IsControlledBy(cm, session) {
		t.Error("the live profile is not owned by its session: it would outlive it")
	}
	f.observe(kube...)

	// The edit: one update of the live profile, no Deployment write.
	edited := withData(profile, map[string]string{"server.cfg": "max_players=64\n"})
	f.setCached(edited)
	newHash := ProfileHash(edited)
	f.expectKube(updateLiveProfile(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, game := f.run(ctx, sessionKey(session))
	cm = sentLiveProfile(t, kube)
	if got, want := cm.Data[profileack.RevisionFile], RevisionName("classic", newHash); got != want {
		t.Errorf("%s = %q, want %q", profileack.RevisionFile, got, want)
	}
	if cm.Data["server.cfg"] != "max_players=64\n" {
		t.Errorf("the live profile holds %q, not the edit", cm.Data["server.cfg"])
	}
	status := objectOf[*gamesv1.GameSession](t, game[0]).Status
	expectCondition(t, status.Conditions, gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryPending)
	if status.ProfileRevision != RevisionName("classic", newHash) {
		t.Errorf("status.profileRevision = %q, want the revision delivered", status.ProfileRevision)
	}
	f.observe(kube...)
	f.observe(game...)

	// Two pods: one acknowledged the new revision, one an old one.
	revision := RevisionName("classic", newHash)
	f.setCached(livePod(session, "arena-1-a", revision))
	f.setCached(livePod(session, "arena-1-b", RevisionName("classic", oldHash)))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	_, game = f.run(ctx, sessionKey(session))
	c := expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryPending)
	if !strings.Contains(c.Message, "1 of 2") {
		t.Errorf("message %q does not count the pods that applied it", c.Message)
	}
	f.observe(game...)

	// Both applied: up to date, and still no Deployment write.
	f.setCached(livePod(session, "arena-1-b", revision))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	_, game = f.run(ctx, sessionKey(session))
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionTrue, gamesv1.ReasonRevisionCurrent)
}

// A game server that says it could not apply the revision fails the
// session's delivery, and the status quotes it.
func TestLiveDeliveryRefusedByAGameServer(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := startedLive(ctx, t, session, profile)

	revision := RevisionName("classic", ProfileHash(profile))
	f.setCached(livePod(session, "arena-1-a", profileack.Value(revision, errors.New("unknown map de_nowhere"))))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	_, game := f.run(ctx, sessionKey(session))
	c := expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonDeliveryFailed)
	if !strings.Contains(c.Message, "unknown map de_nowhere") || !strings.Contains(c.Message, "arena-1-a") {
		t.Errorf("message %q does not quote the pod and its reason", c.Message)
	}
}

// Switching a running session from restart to live is one Deployment write
// (its one restart), after its live profile holds what it runs.
func TestSwitchFromRestartToLive(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	restart := newProfile(testNamespace, "classic", classicData)
	hash := ProfileHash(restart)
	f := newFixture(ctx, t, settled(session, hash), liveProfile(restart), apiServerDeployment(session, hash))
	f.expectKube(createLiveProfile(testNamespace, session.Name), writeDeployment(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, _ := f.run(ctx, sessionKey(session))
	if d := f.storedDeployment(testNamespace, session.Name); !deliversLive(d, session.Name) {
		t.Errorf("the switch did not mount the live profile: %+v", d.Spec.Template.Spec.Volumes)
	}
	if got := sentLiveProfile(t, kube).Data[profileack.RevisionFile]; got != RevisionName("classic", hash) {
		t.Errorf("the live profile holds %q, want the revision the session runs", got)
	}
}

// Back from live to restart: the Deployment mounts the revision again, and
// the live profile is not written.
func TestSwitchFromLiveToRestart(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := startedLive(ctx, t, session, profile)

	restart := profile.DeepCopy()
	delete(restart.Annotations, rollout.AnnotationDelivery)
	restart.ResourceVersion = bumpVersion(restart.ResourceVersion)
	f.setCached(restart)
	f.expectKube(writeDeployment(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	f.run(ctx, sessionKey(session))
	if d := f.storedDeployment(testNamespace, session.Name); deliversLive(d, session.Name) || rolledProfileHash(d, "classic") != ProfileHash(profile) {
		t.Errorf("the switch back does not mount the revision: %+v", d.Spec.Template.Spec.Volumes)
	}
}

// A live session whose profile is deleted keeps running what its live
// profile holds: nothing is written to its Deployment or live profile.
func TestLiveSessionWithoutItsProfileIsLeftRunning(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := startedLive(ctx, t, session, profile)

	f.deleteCached(profile)
	f.deleteCached(newRevision(profile, ProfileHash(profile), testNamespace))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, _ := f.run(ctx, sessionKey(session))
	for _, a := range kube {
		t.Errorf("a live session without its profile was written to: %q", describeActions([]core.Action{a}))
	}
}

// A ConfigMap of the live profile's name that another controls is never
// written: the session says so (an Event for a user to act on), and
// creates no Deployment, which would mount it. One left by an earlier
// session of that name awaits the garbage collector, without an Event.
func TestLiveProfileNameTaken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		owner  *metav1.OwnerReference
		reason string
		event  []string
	}{
		{"another's", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "tools", UID: "uid-tools", Controller: ptr.To(true)},
			gamesv1.ReasonLiveProfileNotControlled, []string{"Warning " + gamesv1.ReasonLiveProfileNotControlled}},
		{"a user's, unlabelled", nil, gamesv1.ReasonLiveProfileNotControlled, []string{"Warning " + gamesv1.ReasonLiveProfileNotControlled}},
		{"an earlier session's", &metav1.OwnerReference{APIVersion: gamesv1.SchemeGroupVersion.String(), Kind: "GameSession", Name: "arena-1",
			UID: "uid-earlier", Controller: ptr.To(true)}, gamesv1.ReasonLiveProfileDeleting, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			session := newSession(testNamespace, "arena-1", "classic")
			profile := liveProfile(newProfile(testNamespace, "classic", classicData))
			taken := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: liveProfileName(session.Name),
				ResourceVersion: "5"}}
			if tc.owner != nil {
				taken.Labels = map[string]string{LiveProfileLabel: LiveProfileLabelValue}
				taken.OwnerReferences = []metav1.OwnerReference{*tc.owner}
			}
			f := newFixture(ctx, t, session, profile, taken)
			if tc.owner == nil {
				// Out of the cache, which holds labelled live profiles
				// only: the create finds it, and a live read says whose.
				f.expectKube(createLiveProfile(testNamespace, session.Name),
					wantAction{verb: "get", resource: "configmaps", namespace: testNamespace, name: liveProfileName(session.Name)})
			}
			f.expectGame(updateSessionStatus(testNamespace, session.Name))
			_, game := f.run(ctx, sessionKey(session))
			status := objectOf[*gamesv1.GameSession](t, game[0]).Status
			c := expectCondition(t, status.Conditions, gamesv1.ConditionReady, metav1.ConditionFalse, tc.reason)
			if !strings.Contains(c.Message, liveProfileName(session.Name)) {
				t.Errorf("Ready says %q, not naming the ConfigMap in the way", c.Message)
			}
			expectCondition(t, status.Conditions, gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, tc.reason)
			f.expectEvents(tc.event...)
			if tc.owner == nil {
				return
			}
			cached, refusal, d, err := f.c.sessions.readInputs(session)
			if err != nil {
				t.Fatal(err)
			}
			if decision := decideSession(f.c.sessions.view(session, cached, refusal, d, nil)); decision.requeueAfter <= 0 {
				t.Error("no event announces the end of a ConfigMap out of the session's control: the session must look again")
			}
		})
	}
}

// A live profile that nothing controls (its session deleted with orphan
// propagation) is the new session's to take over, as a Deployment adopts
// its orphaned ReplicaSets, once its own Deployment is there: before, a
// Deployment of that name it does not control may still mount it.
func TestOrphanedLiveProfileIsTakenOver(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	orphan := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: liveProfileName(session.Name),
		ResourceVersion: "5", Labels: map[string]string{LiveProfileLabel: LiveProfileLabelValue, gamesv1.ProfileHashAnnotation: "1111"}},
		Data: map[string]string{"server.cfg": "old\n"}}
	f := newFixture(ctx, t, session, profile, orphan)
	f.expectKube(createDeployment(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, game := f.run(ctx, sessionKey(session))
	f.observe(kube...)
	f.observe(game...)

	f.expectKube(updateLiveProfile(testNamespace, session.Name))
	kube, _ = f.run(ctx, sessionKey(session))
	cm := sentLiveProfile(t, kube)
	if !metav1.IsControlledBy(cm, session) || cm.ResourceVersion != "5" {
		t.Errorf("the orphan was written as %+v at rv %q, want it controlled by the session, at the version read", cm.OwnerReferences, cm.ResourceVersion)
	}
	if cm.Data["server.cfg"] != classicData["server.cfg"] {
		t.Errorf("the live profile taken over holds %q, not the profile's content", cm.Data["server.cfg"])
	}
}

func TestJudgeLiveDelivery(t *testing.T) {
	const revision = "classic-2222"
	delivered := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	deadline := 2 * time.Minute
	session := newSession(testNamespace, "arena-1", "classic")
	pod := func(name, ack string) *corev1.Pod { return livePod(session, name, ack) }
	gone := pod("gone", "")
	gone.DeletionTimestamp = &metav1.Time{Time: delivered}
	// A pod created after the delivery (a scale-up) has its own deadline.
	late := pod("late", "")
	late.CreationTimestamp = metav1.Time{Time: delivered.Add(time.Minute)}
	done := pod("done", "")
	done.Status.Phase = corev1.PodSucceeded
	tests := []struct {
		name     string
		pods     []*corev1.Pod
		now      time.Time
		progress liveProgress
		acked    int
	}{
		{"every pod applied it", []*corev1.Pod{pod("a", revision), pod("b", revision)}, delivered, liveApplied, 2},
		{"one has not yet", []*corev1.Pod{pod("a", revision), pod("b", "")}, delivered.Add(time.Minute), livePending, 1},
		{"an old revision is not this one", []*corev1.Pod{pod("a", "classic-1111")}, delivered, livePending, 0},
		{"a malformed acknowledgment is none", []*corev1.Pod{pod("a", "not an ack at all")}, delivered, livePending, 0},
		{"the deadline passes", []*corev1.Pod{pod("a", revision), pod("b", "")}, delivered.Add(deadline), liveFailed, 1},
		{"a refusal fails at once", []*corev1.Pod{pod("a", revision), pod("b", profileack.Value(revision, errors.New("bad")))},
			delivered, liveFailed, 1},
		{"a refusal of an old revision is not this one's", []*corev1.Pod{pod("a", profileack.Value("classic-1111", errors.New("bad")))},
			delivered, livePending, 0},
		{"pods going away are not asked", []*corev1.Pod{pod("a", revision), gone, done}, delivered, liveApplied, 1},
		{"a pod created later fails at its own deadline", []*corev1.Pod{pod("a", revision), late},
			delivered.Add(time.Minute + deadline), liveFailed, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := judgeLiveDelivery(revision, tc.pods, 1, delivered, deadline, tc.now)
			if got.progress != tc.progress || got.acked != tc.acked {
				t.Errorf("got %v with %d acked, want %v with %d", got.progress, got.acked, tc.progress, tc.acked)
			}
			if got.progress == livePending && !got.deadline.Equal(delivered.Add(deadline)) {
				t.Errorf("a pending delivery fails at %v, want %v", got.deadline, delivered.Add(deadline))
			}
		})
	}
	// A pod created after the delivery (a scale-up, a replaced pod) is
	// given the deadline from its creation, not failed at once.
	got := judgeLiveDelivery(revision, []*corev1.Pod{pod("a", revision), late}, 2, delivered, deadline, delivered.Add(deadline))
	if got.progress != livePending || !got.deadline.Equal(late.CreationTimestamp.Add(deadline)) {
		t.Errorf("a pod created a minute after the delivery: %v until %v, want pending until %v",
			got.progress, got.deadline, late.CreationTimestamp.Add(deadline))
	}
	// Pods wanted and not seen (not created yet, or not cached yet) have not
	// applied it: "0 of 0" is no delivery applied.
	for _, tc := range []struct {
		pods     []*corev1.Pod
		want     int
		now      time.Time
		progress liveProgress
	}{
		{nil, 1, delivered, livePending},
		{[]*corev1.Pod{pod("a", revision)}, 3, delivered, livePending},
		{[]*corev1.Pod{pod("a", revision)}, 3, delivered.Add(deadline), liveFailed},
		{nil, 0, delivered, liveApplied},
	} {
		if got := judgeLiveDelivery(revision, tc.pods, tc.want, delivered, deadline, tc.now); got.progress != tc.progress {
			t.Errorf("%d pods seen of %d wanted, at %v: %v, want %v", len(tc.pods), tc.want, tc.now.Sub(delivered), got.progress, tc.progress)
		}
	}
}

// A live template does not depend on the content: two revisions give one
// template, so a content change replaces no pod.
func TestLiveTemplateIsTheSameForEveryContent(t *testing.T) {
	session := newSession(testNamespace, "arena-1", "classic")
	a := withLiveDelivery(NewDeployment(session, "1111"), session.Name)
	b := withLiveDelivery(NewDeployment(session, "2222"), session.Name)
	if !sameTemplate(&a.Spec.Template, &b.Spec.Template) {
		t.Error("the live templates of two contents differ")
	}
	if !deliversLive(a, session.Name) || deliversLive(NewDeployment(session, "1111"), session.Name) {
		t.Error("deliversLive does not tell a live template from a restart one")
	}
	for _, m := range a.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == profileVolumeName && m.SubPath != "" {
			t.Errorf("the profile is mounted by subPath %q: the kubelet would not update it", m.SubPath)
		}
	}
}

func TestLiveProfileName(t *testing.T) {
	long := strings.Repeat("a", 253)
	if got := liveProfileName(long); len(got) > maxNameLength || !strings.HasSuffix(got, liveProfileSuffix) {
		t.Errorf("liveProfileName of a %d-character name is %d characters: %q", len(long), len(got), got)
	}
	if got := liveProfileName("arena-1"); got != "arena-1-live-profile" {
		t.Errorf("liveProfileName(arena-1) = %q", got)
	}
}

// The caches keep of live profiles and pods what the controller reads, and
// never the data.
func TestSlimLiveObjects(t *testing.T) {
	session := newSession(testNamespace, "arena-1", "classic")
	cm := newLiveProfile(session, "classic", "2222", newProfile(testNamespace, "classic", classicData), time.Now(), "")
	slim, _ := SlimLiveProfile(cm)
	if s := slim.(*corev1.ConfigMap); len(s.Data) != 0 || s.Labels[gamesv1.ProfileHashAnnotation] != "2222" || !metav1.IsControlledBy(s, session) {
		t.Errorf("slimmed live profile %+v", s)
	}
	pod := livePod(session, "arena-1-a", "classic-2222")
	pod.Spec.Containers = []corev1.Container{{Name: "game-server", Image: testImage}}
	pod.Annotations["other"] = "x"
	slimPod, _ := SlimLivePod(pod)
	p := slimPod.(*corev1.Pod)
	if len(p.Spec.Containers) != 0 || len(p.Annotations) != 1 || p.Annotations[profileack.Annotation] != "classic-2222" {
		t.Errorf("slimmed pod %+v", p)
	}
	if keys, _ := sessionOfPodIndexFunc(p); len(keys) != 1 || keys[0] != sessionKey(session) {
		t.Errorf("the slimmed pod indexes as %v", keys)
	}
}

// A session that mounts the profile by subPath would read a file the
// kubelet never updates: it is delivered by restart, whatever the profile
// asks.
func TestSubPathMountIsDeliveredByRestart(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	session.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name:         "game-server",
		VolumeMounts: []corev1.VolumeMount{{Name: profileVolumeName, MountPath: "/srv/server.cfg", SubPath: "server.cfg"}},
	}}}}
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := newFixture(ctx, t, session, profile)
	f.expectKube(createDeployment(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	f.run(ctx, sessionKey(session))
	if d := f.storedDeployment(testNamespace, session.Name); deliversLive(d, session.Name) {
		t.Error("a session that mounts the profile by subPath is delivered live")
	}
}

// Without --live-delivery, a profile that asks for it is paused, not
// delivered by restart: its author meant no game server to restart.
func TestLiveDeliveryOffPausesTheProfile(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := newFixture(ctx, t, session, profile)
	f.c.caches.liveProfileLister, f.c.caches.livePodIndexer = nil, nil
	policy, err := f.c.profiles.policyOf(profile)
	if err == nil || !policy.Paused || !strings.Contains(err.Error(), "--live-delivery") {
		t.Fatalf("policy %v, error %v: want it paused, with an error naming --live-delivery", policy, err)
	}
}

// A restarted controller counts a live delivery its game servers have not
// all applied as a move under way, and the move ends once they have.
func TestSeedLedgerCountsLiveDeliveriesUnderWay(t *testing.T) {
	f, session, profile, d := startedOneServer(t, false)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	f.setCached(d)
	revision := RevisionName("classic", ProfileHash(profile))
	f.setCached(livePod(session, "arena-1-a", ""))

	f.c.sessions.seedLedger()
	if m, ok := f.c.sessions.moves.moveOf(sessionKey(session)); !ok || m.to != ProfileHash(profile) {
		t.Fatalf("the ledger holds %+v (%v) for a delivery not yet applied, want a move to %s", m, ok, ProfileHash(profile))
	}
	f.setCached(livePod(session, "arena-1-a", revision))
	f.c.sessions.settleMove(sessionKey(session), session, d)
	if m, ok := f.c.sessions.moves.moveOf(sessionKey(session)); ok {
		t.Errorf("the move %+v outlived its acknowledgment", m)
	}
	f.c.sessions.seedLedger()
	if m, ok := f.c.sessions.moves.moveOf(sessionKey(session)); ok {
		t.Errorf("a delivery every game server applied is seeded as a move: %+v", m)
	}
	// Applied or not, a delivery of the last minute is a move started in
	// it: a new leader's budget per minute counts it.
	if got := len(f.c.sessions.moves.starts); got != 2 {
		t.Errorf("the ledger counts %d moves started within the minute, want the delivery counted at each of the two seedings", got)
	}
}

// A move a restarted controller found under way ends when the live profile
// no longer holds its content (a user's edit or deletion): the sync that
// follows delivers anew, under the policy, and no place is held for good.
func TestSeededLiveMoveEndsWhenItsContentIsGone(t *testing.T) {
	f, session, _, d := startedOneServer(t, false)
	f.setCached(livePod(session, "arena-1-a", ""))
	f.c.sessions.seedLedger()
	if _, ok := f.c.sessions.moves.moveOf(sessionKey(session)); !ok {
		t.Fatal("no move seeded for a delivery under way")
	}
	edited := f.c.sessions.cachedLiveProfile(session).DeepCopy()
	edited.ResourceVersion = "99"
	edited.Labels[gamesv1.ProfileHashAnnotation] = "1111"
	f.setCached(edited)
	f.c.sessions.settleMove(sessionKey(session), session, d)
	if m, ok := f.c.sessions.moves.moveOf(sessionKey(session)); ok {
		t.Errorf("the move %+v holds its place after its content left the live profile", m)
	}
}

// A session that moves to another profile of the same content is delivered
// that profile's revision: its game servers acknowledge the revision's
// name, which is the other profile's.
func TestProfileRefChangeToTheSameContentRedelivers(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := startedLive(ctx, t, session, profile)
	other := liveProfile(newProfile(testNamespace, "other", classicData))
	f.setCached(other)
	moved := session.DeepCopy()
	moved.Spec.ProfileRef = "other"
	moved.Generation++
	f.setCached(moved)
	f.expectKube(updateLiveProfile(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, _ := f.run(ctx, sessionKey(session))
	cm := sentLiveProfile(t, kube)
	if got, want := cm.Data[profileack.RevisionFile], RevisionName("other", ProfileHash(other)); got != want {
		t.Errorf("%s = %q, want %q", profileack.RevisionFile, got, want)
	}
	if got := cm.Annotations[liveRevisionAnnotation]; got != RevisionName("other", ProfileHash(other)) {
		t.Errorf("the live profile's revision annotation is %q, not the revision it holds", got)
	}
}

// Until the cache shows the session's own write of its live profile, its
// syncs wait: the live profile from before the write would pass for what
// the session runs.
func TestSyncWaitsForItsLiveProfileWrite(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := newFixture(ctx, t, session, profile)
	f.expectKube(createLiveProfile(testNamespace, session.Name), createDeployment(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, game := f.run(ctx, sessionKey(session))
	f.observe(game...)
	f.observe(kube[1:]...) // the Deployment, not the live profile

	f.run(ctx, sessionKey(session)) // no request at all
	f.observe(kube[0])
	// Caught up: the Deployment is in order; the status counts its game
	// servers now.
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	f.run(ctx, sessionKey(session))
}

// A live Deployment whose profile volume a hand edit took away has it put
// back, with the content its live profile holds, while the profile's
// current revision cannot be had (yet; under a paced policy, which moves
// nothing at once, the session's own spec does not wait for it).
func TestLiveVolumeIsPutBackWhileTheRevisionIsUnavailable(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	profile := liveProfile(newProfile(testNamespace, "classic", classicData))
	f := startedLive(ctx, t, session, profile)
	edited := f.storedDeployment(testNamespace, session.Name).DeepCopy()
	volume := &edited.Spec.Template.Spec.Volumes[profileVolumeIndex(&edited.Spec.Template)]
	volume.ConfigMap.Name = "classic"
	f.setCached(edited)
	if err := f.kubeClient.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), edited, testNamespace); err != nil {
		t.Fatal(err)
	}
	next := withData(profile, map[string]string{"server.cfg": "max_players=64\n"})
	next.Annotations[rollout.AnnotationMaxRolling] = "1"
	f.setCached(next)
	f.deleteCached(newRevision(next, ProfileHash(next), testNamespace))

	f.expectKube(writeDeployment(testNamespace, session.Name))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	kube, _ := f.run(ctx, sessionKey(session))
	if d := sent[*appsv1.Deployment](t, kube, "deployments"); !deliversLive(d, session.Name) {
		t.Errorf("the profile volume was not put back: %+v", d.Spec.Template.Spec.Volumes)
	}
}

// A switch to live is a move under the policy: without its turn the session
// keeps its restart template, and says it waits rather than up to date.
func TestSwitchToLiveWaitsForItsTurn(t *testing.T) {
	ctx := context.Background()
	session := newSession(testNamespace, "arena-1", "classic")
	restart := newProfile(testNamespace, "classic", classicData)
	hash := ProfileHash(restart)
	paced := liveProfile(restart)
	paced.Annotations[rollout.AnnotationMaxRolling] = "1"
	f := newFixture(ctx, t, settled(session, hash), paced, apiServerDeployment(session, hash))
	f.expectGame(updateSessionStatus(testNamespace, session.Name))
	_, game := f.run(ctx, sessionKey(session))
	expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
		gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonWaitingForTurn)
	if d := f.storedDeployment(testNamespace, session.Name); deliversLive(d, session.Name) {
		t.Error("the switch to live was made without a plan admitting it")
	}
}

// A busy session takes a live change, as nothing restarts; with
// live-defers-busy it waits as for a restart.
func TestLiveChangeOfABusySession(t *testing.T) {
	for _, defers := range []bool{false, true} {
		t.Run(fmt.Sprintf("live-defers-busy %v", defers), func(t *testing.T) {
			ctx := context.Background()
			session := newSession(testNamespace, "arena-1", "classic")
			session.Labels = map[string]string{gamesv1.BusyLabel: gamesv1.BusyLabelValue}
			profile := liveProfile(newProfile(testNamespace, "classic", classicData))
			if defers {
				profile.Annotations[rollout.AnnotationLiveDefersBusy] = "true"
			}
			f := startedLive(ctx, t, session, profile)

			f.setCached(withData(profile, map[string]string{"server.cfg": "max_players=64\n"}))
			if defers {
				f.expectGame(updateSessionStatus(testNamespace, session.Name))
				_, game := f.run(ctx, sessionKey(session))
				expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
					gamesv1.ConditionProfileUpToDate, metav1.ConditionFalse, gamesv1.ReasonSessionBusy)
				return
			}
			f.expectKube(updateLiveProfile(testNamespace, session.Name))
			f.expectGame(updateSessionStatus(testNamespace, session.Name))
			f.run(ctx, sessionKey(session))
		})
	}
}

// A pending live delivery is looked at again at its deadline, with its
// profile or without it: no event marks the deadline, and its move holds a
// place until then.
func TestPendingLiveDeliveryIsRecheckedAtItsDeadline(t *testing.T) {
	for _, profile := range []bool{true, false} {
		v := decisionView("1111", "1111")
		v.delivery.runsLive, v.delivery.wantsLive = true, true
		v.delivery.acks = liveDelivery{progress: livePending, deadline: v.now.Add(30 * time.Second)}
		if !profile {
			v.profile, v.target = nil, ""
		}
		if d := decideSession(v); d.requeueAfter <= 0 || d.requeueAfter > 30*time.Second {
			t.Errorf("profile %v: requeue after %v, want within the 30s to the deadline", profile, d.requeueAfter)
		}
	}
}

// Pausing a Deployment stops its rollout, not the kubelet: a live move of a
// paused Deployment holds its place while its running game servers take the
// content, and ends as their acknowledgments say. With none running the
// live profile, the content reached no game server: the move ends, as a
// paused restart's does (seed 70585).
func TestPausedLiveMoveSettlesByItsRunningPods(t *testing.T) {
	session := oneServer()
	hash := ProfileHash(newProfile(testNamespace, "classic", classicData))
	revision, key := RevisionName("classic", hash), sessionKey(session)
	for _, tc := range []struct {
		name  string
		pods  []*corev1.Pod
		holds bool
	}{
		{name: "no live pod", holds: false},
		{name: "a live pod yet to acknowledge", pods: []*corev1.Pod{livePod(session, "arena-1-a", "")}, holds: true},
		{name: "a live pod that applied it", pods: []*corev1.Pod{livePod(session, "arena-1-a", profileack.Value(revision, nil))}},
		{name: "a live pod that refused it",
			pods: []*corev1.Pod{livePod(session, "arena-1-a", profileack.Value(revision, errors.New("bad max_players")))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, session, _, d := startedOneServer(t, true)
			for _, pod := range tc.pods {
				f.setCached(pod)
			}
			m := move{kind: profileMove, to: hash, live: true, profile: profileKey(testNamespace, "classic")}
			if granted, _ := f.c.sessions.moves.admit(key, m, 1); !granted {
				t.Fatal("the ledger refused the only move")
			}
			f.c.sessions.settleMove(key, session, d)
			if _, holds := f.c.sessions.moves.moveOf(key); holds != tc.holds {
				t.Errorf("the move holds its place: %v, want %v", holds, tc.holds)
			}
		})
	}
}

// A live move the ledger granted counts in its profile's plan before the
// caches show the write that made it: a plan that missed it would let
// another session take its place, once the ledger frees it (seed 70585).
func TestPlanCountsALiveMoveTheCacheDoesNotShowYet(t *testing.T) {
	f, session, profile, _ := startedOneServer(t, false)
	edited := profile.DeepCopy()
	edited.Data = map[string]string{"game.cfg": "max_players=64\n"}
	target := ProfileHash(edited)
	policy, err := f.c.profiles.policyOf(edited)
	if err != nil {
		t.Fatal(err)
	}
	members, _ := f.c.profiles.rolloutMembers(edited, []string{sessionKey(session)}, target, policy, nil)
	if len(members) != 1 || members[0].OnTarget {
		t.Fatalf("before any move, members %+v, want the session off target", members)
	}
	m := move{kind: profileMove, to: target, live: true, profile: profileKey(testNamespace, "classic")}
	if granted, _ := f.c.sessions.moves.admit(sessionKey(session), m, 1); !granted {
		t.Fatal("the ledger refused the only move")
	}
	members, _ = f.c.profiles.rolloutMembers(edited, []string{sessionKey(session)}, target, policy, nil)
	if len(members) != 1 || !members[0].OnTarget || members[0].Ready || members[0].Hash != target {
		t.Errorf("with its live move granted and out of sight, members %+v, want the session moving on target, not Ready", members)
	}
}

// A restarted controller counts a paused Deployment's live delivery under
// way as a move, as long as a running game server mounts its live profile:
// pausing stopped its rollout, not the kubelet.
func TestSeedLedgerCountsAPausedLiveDeliveryUnderWay(t *testing.T) {
	for _, running := range []bool{true, false} {
		f, session, _, _ := startedOneServer(t, true)
		if running {
			f.setCached(livePod(session, "arena-1-a", ""))
		}
		f.c.sessions.seedLedger()
		if m, ok := f.c.sessions.moves.moveOf(sessionKey(session)); ok != running {
			t.Errorf("with a live pod running %v, the ledger holds %+v (%v), want a move: %v", running, m, ok, running)
		}
	}
}
