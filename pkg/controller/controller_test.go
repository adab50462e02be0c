package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	gamesfake "github.com/example/gamesession-controller/pkg/generated/clientset/versioned/fake"
	gameinformers "github.com/example/gamesession-controller/pkg/generated/informers/externalversions"
	"github.com/example/gamesession-controller/pkg/metrics"
)

const (
	testNamespace       = "arena"
	testProfileSelector = "games.example.com/profile=true"
	testImage           = "registry.example.com/arena:1.4.2"
)

// lastTransition is the transition time of every condition in a settled
// status; an unchanged condition must keep it, or each sync would write.
var lastTransition = metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))

// fixture is sample-controller's: fake clientsets seeded with the objects,
// informer caches filled directly (the informers never run), a fake event
// recorder, and the API requests the next sync is expected to make.
type fixture struct {
	t testing.TB

	kubeClient *k8sfake.Clientset
	gameClient *gamesfake.Clientset
	c          *Controller
	recorder   *record.FakeRecorder

	sessionIndexer    cache.Indexer
	rolloutIndexer    cache.Indexer
	profileIndexer    cache.Indexer
	revisionIndexer   cache.Indexer
	deploymentIndexer cache.Indexer
	replicaSetIndexer cache.Indexer
	secretIndexer     cache.Indexer
	configIndexer     cache.Indexer // session-config ConfigMaps
	liveIndexer       cache.Indexer // live profiles
	podIndexer        cache.Indexer // pods of live sessions

	// Requests the next run must make, in order; list and watch excluded.
	kubeActions []wantAction
	gameActions []wantAction
}

// newFixture seeds both the fake clientsets and the informer caches with
// objects, as if the informers had synced them.
func newFixture(ctx context.Context, t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	return newFixtureWithOptions(ctx, t, Options{}, objects...)
}

// newFixtureWithOptions is newFixture with the controller's options; the
// profile selector is always the test one.
func newFixtureWithOptions(ctx context.Context, t testing.TB, opts Options, objects ...runtime.Object) *fixture {
	t.Helper()
	var kubeObjects, gameObjects []runtime.Object
	for _, obj := range objects {
		if _, ok := obj.(*gamesv1.GameSession); ok {
			gameObjects = append(gameObjects, obj)
		} else {
			kubeObjects = append(kubeObjects, obj)
		}
	}
	f := &fixture{
		t:          t,
		kubeClient: k8sfake.NewClientset(kubeObjects...),
		// NewClientset's field tracking needs the CRD's OpenAPI schema, which
		// the generated apply configurations lack (kubernetes#126850): creates
		// of GameSessions would fail.
		gameClient: gamesfake.NewSimpleClientset(gameObjects...),
		recorder:   record.NewFakeRecorder(100),
	}
	// One kube factory is enough here: the filters matter only to informers
	// that list, and these never run.
	// Revisions are ConfigMaps too, so they need a factory apart.
	informers := testInformers(f.kubeClient, f.gameClient)

	// NewController's event broadcaster lives until its context ends.
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	opts.ProfileSelector = testProfileSelector
	c, err := NewController(ctx, f.kubeClient, f.gameClient, informers, opts)
	if err != nil {
		t.Fatalf("NewController: %v", err)
	}
	c.setRecorder(f.recorder)
	f.c = c
	for _, verb := range []string{"create", "update", "patch"} {
		f.kubeClient.PrependReactor(verb, "deployments", f.deploymentGeneration)
	}
	f.sessionIndexer = informers.Sessions.Informer().GetIndexer()
	f.rolloutIndexer = informers.Rollouts.Informer().GetIndexer()
	f.profileIndexer = informers.Profiles.Informer().GetIndexer()
	f.revisionIndexer = informers.Revisions.Informer().GetIndexer()
	f.deploymentIndexer = informers.Deployments.Informer().GetIndexer()
	f.replicaSetIndexer = informers.ReplicaSets.Informer().GetIndexer()
	f.secretIndexer = informers.Secrets.Informer().GetIndexer()
	f.configIndexer = informers.SessionConfigs.Informer().GetIndexer()
	f.liveIndexer = informers.LiveProfiles.Informer().GetIndexer()
	f.podIndexer = informers.LivePods.Informer().GetIndexer()
	for _, obj := range objects {
		f.setCached(obj)
	}
	return f
}

// testInformers returns the controller's informers on fake clients. One kube
// factory serves profiles, Deployments and ReplicaSets: the filters matter
// only to informers that list, and these never run. Revisions are
// ConfigMaps too, so they need a factory apart, and so do session configs.
func testInformers(kubeClient kubernetes.Interface, gameClient clientset.Interface) Informers {
	kubeFactory := kubeinformers.NewSharedInformerFactory(kubeClient, 0)
	gameFactory := gameinformers.NewSharedInformerFactory(gameClient, 0)
	return Informers{
		Sessions:         gameFactory.Games().V1().GameSessions(),
		Rollouts:         gameFactory.Games().V1().ProfileRollouts(),
		Profiles:         kubeFactory.Core().V1().ConfigMaps(),
		Revisions:        kubeinformers.NewSharedInformerFactory(kubeClient, 0).Core().V1().ConfigMaps(),
		Deployments:      kubeFactory.Apps().V1().Deployments(),
		ReplicaSets:      kubeFactory.Apps().V1().ReplicaSets(),
		Secrets:          kubeFactory.Core().V1().Secrets(),
		SecretDigestKeys: SecretDigestKeys{Current: testDigestKey},
		SessionConfigs:   kubeinformers.NewSharedInformerFactory(kubeClient, 0).Core().V1().ConfigMaps(),
		LiveProfiles:     kubeinformers.NewSharedInformerFactory(kubeClient, 0).Core().V1().ConfigMaps(),
		LivePods:         kubeFactory.Core().V1().Pods(),
	}
}

// cacheRevisionOf puts the revision of a profile's content into the revision
// cache, as the profile sync would have: the session syncs under test mount
// it. Tests of what happens without it delete it again.
func (f *fixture) cacheRevisionOf(profile *corev1.ConfigMap) {
	f.t.Helper()
	revision := newRevision(profile, ProfileHash(profile), profile.Namespace)
	revision.CreationTimestamp = lastTransition
	if err := f.revisionIndexer.Update(revision); err != nil {
		f.t.Fatalf("adding revision %s to the cache: %v", revision.Name, err)
	}
}

// patchedResourceVersion is the resourceVersion a patch sets, "" if none: a
// JSON patch's replace operation of it, or metadata.resourceVersion of a
// merge patch.
func patchedResourceVersion(pt types.PatchType, data []byte) (string, error) {
	if pt == types.JSONPatchType {
		var ops []struct {
			Op, Path string
			Value    any
		}
		if err := json.Unmarshal(data, &ops); err != nil {
			return "", err
		}
		for _, op := range ops {
			if op.Op == "replace" && op.Path == "/metadata/resourceVersion" {
				rv, _ := op.Value.(string)
				return rv, nil
			}
		}
		return "", nil
	}
	var precondition struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	err := json.Unmarshal(data, &precondition)
	return precondition.Metadata.ResourceVersion, err
}

// deploymentGeneration does what the fake does not and the Ready condition
// depends on: like the API server, it sets metadata.generation to 1 on create
// and bumps it on every spec change, whether by update or by patch.
func (f *fixture) deploymentGeneration(action core.Action) (bool, runtime.Object, error) {
	tracker, gvr, ns, name := f.kubeClient.Tracker(), action.GetResource(), action.GetNamespace(), actionName(action)
	var before *appsv1.Deployment
	if obj, err := tracker.Get(gvr, ns, name); err == nil {
		before = obj.(*appsv1.Deployment)
	}
	// A patch that names a resourceVersion applies only to that version.
	if patch, ok := action.(core.PatchAction); ok && before != nil {
		rv, err := patchedResourceVersion(patch.GetPatchType(), patch.GetPatch())
		if err != nil {
			return true, nil, err
		}
		if rv != "" && rv != before.ResourceVersion {
			return true, nil, apierrors.NewConflict(appsv1.Resource("deployments"), name, errors.New("the object has been modified"))
		}
	}
	// So does an update (the fake's tracker would take any).
	if update, ok := action.(core.UpdateAction); ok && before != nil {
		if rv := update.GetObject().(metav1.Object).GetResourceVersion(); rv != "" && rv != before.ResourceVersion {
			return true, nil, apierrors.NewConflict(appsv1.Resource("deployments"), name, errors.New("the object has been modified"))
		}
	}
	// The fake's own reaction applies the request.
	if _, _, err := core.ObjectReaction(tracker)(action); err != nil {
		return true, nil, err
	}
	obj, err := tracker.Get(gvr, ns, name)
	if err != nil {
		return true, nil, err
	}
	after := obj.(*appsv1.Deployment)
	generation := int64(1)
	if before != nil {
		generation = before.Generation
		if !equality.Semantic.DeepEqual(before.Spec, after.Spec) {
			generation++
		}
		// A write that changes nothing keeps the resourceVersion; one that
		// changes something gets a new one.
		after.ResourceVersion = before.ResourceVersion
		if !equality.Semantic.DeepEqual(before.Spec, after.Spec) || !equality.Semantic.DeepEqual(before.ObjectMeta, after.ObjectMeta) {
			after.ResourceVersion = bumpVersion(before.ResourceVersion)
		}
	}
	after.Generation = generation
	if err := tracker.Update(gvr, after, ns); err != nil {
		return true, nil, err
	}
	obj, err = tracker.Get(gvr, ns, name)
	return true, obj, err
}

// storedDeployment is the Deployment as the fake API server now holds it,
// whichever request wrote it.
func (f *fixture) storedDeployment(namespace, name string) *appsv1.Deployment {
	f.t.Helper()
	obj, err := f.kubeClient.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("deployments"), namespace, name)
	if err != nil {
		f.t.Fatalf("reading Deployment %s/%s: %v", namespace, name, err)
	}
	return obj.(*appsv1.Deployment)
}

func (f *fixture) indexerFor(obj runtime.Object) cache.Indexer {
	switch obj.(type) {
	case *gamesv1.GameSession:
		return f.sessionIndexer
	case *corev1.ConfigMap:
		cm := obj.(*corev1.ConfigMap)
		if cm.Labels[RevisionLabel] == RevisionLabelValue {
			return f.revisionIndexer
		}
		if cm.Labels[LiveProfileLabel] == LiveProfileLabelValue {
			return f.liveIndexer
		}
		if _, standIn := cm.Annotations[dataDigestAnnotation]; standIn {
			// What SessionConfigDigester leaves: no label to tell by.
			return f.configIndexer
		}
		return f.profileIndexer
	case *appsv1.Deployment:
		return f.deploymentIndexer
	case *appsv1.ReplicaSet:
		return f.replicaSetIndexer
	case *gamesv1.ProfileRollout:
		return f.rolloutIndexer
	case *corev1.Secret:
		return f.secretIndexer
	case *corev1.Pod:
		return f.podIndexer
	}
	f.t.Fatalf("no informer cache for %T", obj)
	return nil
}

// setCached puts obj into its informer cache, as a watch event would. A
// profile comes with its revision (see cacheRevisionOf).
func (f *fixture) setCached(obj runtime.Object) {
	f.t.Helper()
	if err := f.indexerFor(obj).Update(obj); err != nil {
		f.t.Fatalf("updating the cache: %v", err)
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok && f.indexerFor(cm) == f.profileIndexer {
		f.cacheRevisionOf(cm)
	}
}

func (f *fixture) deleteCached(obj runtime.Object) {
	f.t.Helper()
	if err := f.indexerFor(obj).Delete(obj); err != nil {
		f.t.Fatalf("deleting from the cache: %v", err)
	}
}

// observe delivers what the given writes stored back into the caches, as the
// informers' watches would, so a following sync sees its own writes.
func (f *fixture) observe(actions ...core.Action) {
	f.t.Helper()
	for _, action := range actions {
		if v := action.GetVerb(); v != "create" && v != "update" && v != "patch" {
			continue
		}
		name := actionName(action)
		tracker := f.kubeClient.Tracker()
		if action.GetResource().Group == gamesv1.GroupName {
			tracker = f.gameClient.Tracker()
		}
		stored, err := tracker.Get(action.GetResource(), action.GetNamespace(), name)
		if err != nil {
			f.t.Fatalf("reading back %s %s/%s: %v", action.GetResource().Resource, action.GetNamespace(), name, err)
		}
		f.setCached(stored)
	}
}

func (f *fixture) expectKube(actions ...wantAction) {
	f.kubeActions = append(f.kubeActions, actions...)
}
func (f *fixture) expectGame(actions ...wantAction) {
	f.gameActions = append(f.gameActions, actions...)
}

// run syncs key, fails the test on an error or on requests other than the
// expected ones, and returns the requests for closer inspection.
func (f *fixture) run(ctx context.Context, key string) (kube, game []core.Action) {
	f.t.Helper()
	kube, game, err := f.runWithError(ctx, key)
	if err != nil {
		f.t.Fatalf("sync %s: %v", key, err)
	}
	return kube, game
}

// runWithError is run for syncs that are meant to fail.
func (f *fixture) runWithError(ctx context.Context, key string) (kube, game []core.Action, err error) {
	f.t.Helper()
	return f.runSync(ctx, key, f.c.sessions.syncHandler)
}

// runProfile is run for the profile sync of key ("namespace/name"). Its
// ProfileRollout writes reach the cache, as the informer would bring them.
func (f *fixture) runProfile(ctx context.Context, key string) (kube []core.Action) {
	f.t.Helper()
	kube, game, err := f.runSync(ctx, key, f.c.profiles.syncProfile)
	if err != nil {
		f.t.Fatalf("profile sync %s: %v", key, err)
	}
	f.observe(game...)
	return kube
}

// expectRolloutWrite expects the profile sync's write of the profile's
// ProfileRollout: a create and its status the first time, then its status.
func (f *fixture) expectRolloutWrite(namespace, profile string) {
	f.t.Helper()
	if _, err := f.c.caches.rolloutLister.ProfileRollouts(namespace).Get(profile); err != nil {
		f.expectGame(wantAction{verb: "create", resource: "profilerollouts", namespace: namespace, name: profile})
	}
	f.expectGame(wantAction{verb: "update", resource: "profilerollouts", subresource: "status", namespace: namespace, name: profile})
}

func (f *fixture) runSync(ctx context.Context, key string, sync func(context.Context, string) error) (kube, game []core.Action, err error) {
	f.t.Helper()
	f.kubeClient.ClearActions()
	f.gameClient.ClearActions()
	before := f.snapshotCaches()

	err = sync(ctx, key)

	kube = filterInformerActions(f.kubeClient.Actions())
	game = filterInformerActions(f.gameClient.Actions())
	checkActions(f.t, "Kubernetes", f.kubeActions, kube)
	checkActions(f.t, "GameSession", f.gameActions, game)
	f.kubeActions, f.gameActions = nil, nil
	// Cached objects are shared with every other reader of the informer; a
	// sync that modified one would corrupt the cache.
	if after := f.snapshotCaches(); !reflect.DeepEqual(before, after) {
		f.t.Errorf("sync %s modified objects in the informer cache", key)
	}
	return kube, game, err
}

func (f *fixture) snapshotCaches() map[string]runtime.Object {
	snap := map[string]runtime.Object{}
	for kind, indexer := range map[string]cache.Indexer{
		"session": f.sessionIndexer, "profile": f.profileIndexer, "revision": f.revisionIndexer, "deployment": f.deploymentIndexer,
	} {
		for _, obj := range indexer.List() {
			key, _ := cache.MetaNamespaceKeyFunc(obj)
			snap[kind+" "+key] = obj.(runtime.Object).DeepCopyObject()
		}
	}
	return snap
}

// events drains the fake recorder.
func (f *fixture) events() []string {
	var events []string
	for {
		select {
		case e := <-f.recorder.Events:
			events = append(events, e)
		default:
			return events
		}
	}
}

// expectEvents asserts the recorder holds exactly len(want) events, each
// starting with its want ("Type Reason" or "Type Reason message...").
func (f *fixture) expectEvents(want ...string) []string {
	f.t.Helper()
	got := f.events()
	if len(got) != len(want) {
		f.t.Errorf("events: got %d %q, want %d %q", len(got), got, len(want), want)
		return got
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			f.t.Errorf("event %d: got %q, want it to start with %q", i, got[i], want[i])
		}
	}
	return got
}

// wantAction identifies an expected API request. verb may list
// alternatives, "update|patch", where the way of a write is not the point.
type wantAction struct {
	verb, resource, subresource, namespace, name string
}

func (a wantAction) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	return fmt.Sprintf("%s %s %s/%s", a.verb, r, a.namespace, a.name)
}

func createDeployment(namespace, name string) wantAction {
	return wantAction{verb: "create", resource: "deployments", namespace: namespace, name: name}
}

// writeDeployment is the one write of an existing Deployment a sync makes.
// Whether it goes as an update or a patch, the tests check what it stores.
func getDeployment(namespace, name string) wantAction {
	return wantAction{verb: "get", resource: "deployments", namespace: namespace, name: name}
}

func writeDeployment(namespace, name string) wantAction {
	return wantAction{verb: "update|patch", resource: "deployments", namespace: namespace, name: name}
}

func updateSessionStatus(namespace, name string) wantAction {
	return wantAction{verb: "update", resource: "gamesessions", subresource: "status", namespace: namespace, name: name}
}

// filterInformerActions drops the informers' list and watch requests, which
// are not the sync's doing (the fixture's informers never run, but a test
// that starts them must not depend on their timing).
func filterInformerActions(actions []core.Action) []core.Action {
	var ret []core.Action
	for _, action := range actions {
		if action.GetVerb() == "list" || action.GetVerb() == "watch" {
			continue
		}
		ret = append(ret, action)
	}
	return ret
}

// objectAction is a create or an update: both carry the object they send.
type objectAction interface {
	core.Action
	GetObject() runtime.Object
}

func actionName(action core.Action) string {
	switch a := action.(type) {
	case objectAction:
		if m, err := meta.Accessor(a.GetObject()); err == nil {
			return m.GetName()
		}
	case interface{ GetName() string }: // get, delete, patch
		return a.GetName()
	}
	return ""
}

func describeActions(actions []core.Action) []string {
	var s []string
	for _, a := range actions {
		s = append(s, wantAction{
			verb: a.GetVerb(), resource: a.GetResource().Resource, subresource: a.GetSubresource(),
			namespace: a.GetNamespace(), name: actionName(a),
		}.String())
	}
	return s
}

func checkActions(t testing.TB, client string, want []wantAction, got []core.Action) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s client: got %d requests %q, want %d %q", client, len(got), describeActions(got), len(want), want)
		return
	}
	for i, w := range want {
		g := got[i]
		if !slices.Contains(strings.Split(w.verb, "|"), g.GetVerb()) || g.GetResource().Resource != w.resource || g.GetSubresource() != w.subresource ||
			g.GetNamespace() != w.namespace || actionName(g) != w.name {
			t.Errorf("%s client request %d: got %q, want %q", client, i, describeActions(got[i:i+1]), w)
		}
	}
}

// objectOf returns the object a create or update request sent.
func objectOf[T runtime.Object](t *testing.T, action core.Action) T {
	t.Helper()
	a, ok := action.(objectAction)
	if !ok {
		t.Fatalf("%s request carries no object", action.GetVerb())
	}
	typed, ok := a.GetObject().(T)
	if !ok {
		t.Fatalf("request object is %T", a.GetObject())
	}
	return typed
}

// expectCondition fails unless conditions hold conditionType with the given
// status and reason, and returns it.
func expectCondition(t *testing.T, conditions []metav1.Condition, conditionType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(conditions, conditionType)
	if c == nil {
		t.Fatalf("no %s condition in %+v", conditionType, conditions)
	}
	if c.Status != status || c.Reason != reason {
		t.Errorf("%s condition: got %s/%s (%q), want %s/%s", conditionType, c.Status, c.Reason, c.Message, status, reason)
	}
	return *c
}

// newSession returns a session as the API server stores it, CRD defaults
// applied.
func newSession(namespace, name, profileRef string) *gamesv1.GameSession {
	return &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       namespace,
			UID:             types.UID("session-" + namespace + "-" + name),
			ResourceVersion: "10",
			Generation:      2,
		},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: profileRef,
			Image:      testImage,
			Replicas:   ptr.To[int32](3),
			Ports: []gamesv1.GameServerPort{
				{Name: "game", ContainerPort: 7777, Protocol: corev1.ProtocolUDP},
				{Name: "query", ContainerPort: 27015, Protocol: corev1.ProtocolTCP},
			},
			Resources: gamesv1.GameServerResources{
				Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("500m"),
					corev1.ResourceMemory: resource.MustParse("256Mi"),
				},
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
			},
		},
	}
}

func newProfile(namespace, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       namespace,
			UID:             types.UID("profile-" + namespace + "-" + name),
			ResourceVersion: "100",
			Labels:          map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue},
		},
		Data: data,
	}
}

// withData returns a copy of profile with new data and a new resourceVersion,
// as an edit of the ConfigMap would.
func withData(profile *corev1.ConfigMap, data map[string]string) *corev1.ConfigMap {
	p := profile.DeepCopy()
	p.Data = data
	p.ResourceVersion = bumpVersion(p.ResourceVersion)
	return p
}

func bumpVersion(rv string) string {
	var n int
	fmt.Sscan(rv, &n)
	return fmt.Sprint(n + 1)
}

func sessionKey(s *gamesv1.GameSession) string { return s.Namespace + "/" + s.Name }

// apiServerDeployment is the session's Deployment as an API server returns it
// once the controller created it and the Deployment controller rolled it out:
// every field defaulting fills in, metadata the server sets, and a complete
// status. It is written out by hand, not derived from newDeployment, so that
// the no-op tests check newDeployment against the real shape.
func apiServerDeployment(session *gamesv1.GameSession, profileHash string) *appsv1.Deployment {
	replicas := ptr.Deref(session.Spec.Replicas, 1)
	selector := map[string]string{
		"app.kubernetes.io/name":     "gamesession",
		"app.kubernetes.io/instance": session.Name,
	}
	labels := map[string]string{
		"app.kubernetes.io/name":       "gamesession",
		"app.kubernetes.io/instance":   session.Name,
		"app.kubernetes.io/managed-by": "gamesession-controller",
	}
	var ports []corev1.ContainerPort
	for _, p := range session.Spec.Ports {
		protocol := p.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolUDP // the CRD's default
		}
		ports = append(ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: protocol})
	}
	quarter := intstr.FromString("25%")
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:              session.Name,
			Namespace:         session.Namespace,
			UID:               types.UID("deployment-" + session.Namespace + "-" + session.Name),
			ResourceVersion:   "2001",
			Generation:        1,
			CreationTimestamp: lastTransition,
			Labels:            labels,
			Annotations:       map[string]string{"deployment.kubernetes.io/revision": "1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "games.example.com/v1",
				Kind:               "GameSession",
				Name:               session.Name,
				UID:                session.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      maps.Clone(labels),
					Annotations: map[string]string{"games.example.com/profile-hash": profileHash},
				},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:  "game-server",
						Image: session.Spec.Image,
						Ports: ports,
						Resources: corev1.ResourceRequirements{
							Requests: session.Spec.Resources.Requests.DeepCopy(),
							Limits:   session.Spec.Resources.Limits.DeepCopy(),
						},
						VolumeMounts: []corev1.VolumeMount{{
							Name: "profile", MountPath: "/etc/gamesession/profile", ReadOnly: true,
						}},
						TerminationMessagePath:   "/dev/termination-log",
						TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						ImagePullPolicy:          corev1.PullIfNotPresent,
					}},
					Volumes: []corev1.Volume{{
						Name: "profile",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: RevisionName(session.Spec.ProfileRef, profileHash)},
							DefaultMode:          ptr.To[int32](0o644),
						}},
					}},
					RestartPolicy:                 corev1.RestartPolicyAlways,
					TerminationGracePeriodSeconds: ptr.To[int64](30),
					DNSPolicy:                     corev1.DNSClusterFirst,
					AutomountServiceAccountToken:  ptr.To(false),
					SecurityContext:               &corev1.PodSecurityContext{},
					SchedulerName:                 corev1.DefaultSchedulerName,
				},
			},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &quarter, MaxSurge: &quarter},
			},
			RevisionHistoryLimit:    ptr.To[int32](10),
			ProgressDeadlineSeconds: ptr.To[int32](600),
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 1,
			Replicas:           replicas,
			UpdatedReplicas:    replicas,
			ReadyReplicas:      replicas,
			AvailableReplicas:  replicas,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			},
		},
	}
}

// settled returns a copy of session whose status is what the controller
// writes once its Deployment, rolled out with profileHash, is ready.
func settled(session *gamesv1.GameSession, profileHash string) *gamesv1.GameSession {
	s := session.DeepCopy()
	replicas := ptr.Deref(s.Spec.Replicas, 1)
	s.Status = gamesv1.GameSessionStatus{
		ObservedGeneration: s.Generation,
		Replicas:           replicas,
		ReadyReplicas:      replicas,
		UpdatedReplicas:    replicas,
		// The scale subresource's selector: sorted "key=value" pairs.
		Selector:        "app.kubernetes.io/instance=" + s.Name + ",app.kubernetes.io/name=gamesession",
		ProfileHash:     profileHash,
		ProfileRevision: RevisionName(s.Spec.ProfileRef, profileHash),
		Conditions: []metav1.Condition{
			{
				Type: gamesv1.ConditionProfileResolved, Status: metav1.ConditionTrue,
				Reason:             gamesv1.ReasonProfileResolved,
				Message:            fmt.Sprintf(MessageProfileResolved, s.Spec.ProfileRef, profileHash),
				ObservedGeneration: s.Generation, LastTransitionTime: lastTransition,
			},
			{
				Type: gamesv1.ConditionReady, Status: metav1.ConditionTrue,
				Reason:             gamesv1.ReasonDeploymentReady,
				Message:            fmt.Sprintf(MessageDeploymentReady, replicas, replicas),
				ObservedGeneration: s.Generation, LastTransitionTime: lastTransition,
			},
			{
				Type: gamesv1.ConditionProfileUpToDate, Status: metav1.ConditionTrue,
				Reason:             gamesv1.ReasonRevisionCurrent,
				Message:            fmt.Sprintf(MessageRevisionCurrent, RevisionName(s.Spec.ProfileRef, profileHash), s.Spec.ProfileRef),
				ObservedGeneration: s.Generation, LastTransitionTime: lastTransition,
			},
		},
	}
	return s
}

// drainQueue empties the queue and returns its keys, sorted.
func drainQueue(q workqueue.TypedRateLimitingInterface[string]) []string {
	keys := []string{}
	for q.Len() > 0 {
		key, _ := q.Get()
		q.Done(key)
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}

func expectQueue(t *testing.T, c *Controller, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	slices.Sort(want)
	if got := drainQueue(c.sessions.queue); !slices.Equal(got, want) {
		t.Errorf("queue: got %q, want %q", got, want)
	}
}

// profileFixture caches sessions over several profiles in two namespaces,
// with profile names that share prefixes, so a handler that matched by name
// alone, or by prefix, would enqueue too much.
func profileFixture(ctx context.Context, t *testing.T) (*fixture, *corev1.ConfigMap) {
	classic := newProfile(testNamespace, "classic", map[string]string{"game.cfg": "mode=classic"})
	f := newFixture(ctx, t,
		newSession(testNamespace, "s1", "classic"),
		newSession(testNamespace, "s2", "classic"),
		newSession(testNamespace, "s3", "classic"),
		newSession(testNamespace, "s4", "hardcore"),
		newSession(testNamespace, "s5", "classic-v2"),
		newSession("tenant-b", "s1", "classic"),
		newSession("tenant-b", "t2", "hardcore"),
		classic,
	)
	return f, classic
}

func TestUpdateProfileEnqueuesExactlyItsSessions(t *testing.T) {
	classic := newProfile(testNamespace, "classic", map[string]string{"game.cfg": "mode=classic"})
	arenaClassic := []string{"arena/s1", "arena/s2", "arena/s3"}
	tests := []struct {
		name     string
		old, new *corev1.ConfigMap
		want     []string
	}{
		{
			name: "data value changed",
			old:  classic, new: withData(classic, map[string]string{"game.cfg": "mode=classic\nmaxPlayers=64"}),
			want: arenaClassic,
		},
		{
			name: "data key added",
			old:  classic, new: withData(classic, map[string]string{"game.cfg": "mode=classic", "motd.txt": "hi"}),
			want: arenaClassic,
		},
		{
			name: "binaryData changed",
			old:  classic,
			new: func() *corev1.ConfigMap {
				p := withData(classic, classic.Data)
				p.BinaryData = map[string][]byte{"map.bin": {0, 1, 2}}
				return p
			}(),
			want: arenaClassic,
		},
		{
			name: "same name in another namespace",
			old:  newProfile("tenant-b", "classic", map[string]string{"game.cfg": "a"}),
			new:  withData(newProfile("tenant-b", "classic", nil), map[string]string{"game.cfg": "b"}),
			want: []string{"tenant-b/s1"},
		},
		{
			name: "profile nobody uses",
			old:  newProfile(testNamespace, "unused", map[string]string{"a": "1"}),
			new:  withData(newProfile(testNamespace, "unused", nil), map[string]string{"a": "2"}),
		},
		{
			name: "labels only",
			old:  classic,
			new: func() *corev1.ConfigMap {
				p := withData(classic, classic.Data)
				p.Labels["team"] = "blue"
				return p
			}(),
		},
		{
			name: "annotations only",
			old:  classic,
			new: func() *corev1.ConfigMap {
				p := withData(classic, classic.Data)
				p.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
				return p
			}(),
		},
		{
			name: "resync",
			old:  classic, new: classic,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f, _ := profileFixture(ctx, t)
			// An informer updates its cache before it calls the handlers.
			f.setCached(tc.new)

			f.c.profiles.updateProfile(tc.old, tc.new)

			expectQueue(t, f.c, tc.want...)
			if len(tc.want) == 0 {
				f.expectEvents()
				return
			}
			// The fan-out event on the ConfigMap names the new hash and the count.
			f.expectEvents(fmt.Sprintf("Normal %s "+MessageProfileFanOut, EventReasonProfileFanOut,
				ProfileHash(tc.new), len(tc.want)))
		})
	}
}

func TestAddAndDeleteProfileEnqueueItsSessions(t *testing.T) {
	arenaClassic := []string{"arena/s1", "arena/s2", "arena/s3"}
	t.Run("add", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f, classic := profileFixture(ctx, t)
		f.c.profiles.addProfile(classic)
		expectQueue(t, f.c, arenaClassic...)
		f.expectEvents() // an add rolls nothing that ran; only edits announce a fan-out
	})
	t.Run("delete", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f, classic := profileFixture(ctx, t)
		f.c.caches.profileHashes.hash(classic)
		f.c.profiles.deleteProfile(classic)
		expectQueue(t, f.c, arenaClassic...)
		if _, ok := f.c.caches.profileHashes.entries[classic.UID]; ok {
			t.Error("deleteProfile kept the profile's memoized hash")
		}
	})
	t.Run("delete tombstone", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f, classic := profileFixture(ctx, t)
		f.c.caches.profileHashes.hash(classic)
		f.c.profiles.deleteProfile(cache.DeletedFinalStateUnknown{Key: "arena/classic", Obj: classic})
		expectQueue(t, f.c, arenaClassic...)
		if _, ok := f.c.caches.profileHashes.entries[classic.UID]; ok {
			t.Error("deleteProfile kept the profile's memoized hash")
		}
	})
	t.Run("tombstone of something else", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		f, _ := profileFixture(ctx, t)
		f.c.profiles.deleteProfile(cache.DeletedFinalStateUnknown{Key: "arena/classic", Obj: &corev1.Secret{}})
		f.c.profiles.deleteProfile("not an object")
		expectQueue(t, f.c)
	})
}

// A Deployment event enqueues the session of the Deployment's name, whether
// that session controls it or is blocked by it (DeploymentDeleting,
// DeploymentNotControlled) and must hear when it changes or goes.
func TestDeploymentEventsEnqueueTheSessionOfTheirName(t *testing.T) {
	session := newSession(testNamespace, "arena-1", "classic")
	owned := apiServerDeployment(session, "h")
	foreign := owned.DeepCopy()
	foreign.OwnerReferences = nil
	newer := owned.DeepCopy()
	newer.ResourceVersion = bumpVersion(owned.ResourceVersion)
	tests := []struct {
		name   string
		handle func(c *Controller)
		want   []string
	}{
		{name: "add", handle: func(c *Controller) { c.sessions.addDeployment(owned) }, want: []string{"arena/arena-1"}},
		{name: "add, not controlled", handle: func(c *Controller) { c.sessions.addDeployment(foreign) }, want: []string{"arena/arena-1"}},
		{name: "update", handle: func(c *Controller) { c.sessions.updateDeployment(owned, newer) }, want: []string{"arena/arena-1"}},
		// The session's own resync covers the Deployment's.
		{name: "resync", handle: func(c *Controller) { c.sessions.updateDeployment(owned, owned) }},
		{name: "delete", handle: func(c *Controller) { c.sessions.deleteDeployment(owned) }, want: []string{"arena/arena-1"}},
		{name: "delete, tombstone", handle: func(c *Controller) {
			c.sessions.deleteDeployment(cache.DeletedFinalStateUnknown{Key: "arena/arena-1", Obj: owned})
		}, want: []string{"arena/arena-1"}},
		{name: "tombstone of something else", handle: func(c *Controller) {
			c.sessions.deleteDeployment(cache.DeletedFinalStateUnknown{Key: "arena/arena-1", Obj: "junk"})
		}},
		{name: "not an object", handle: func(c *Controller) { c.sessions.deleteDeployment(42) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(ctx, t, session)
			tc.handle(f.c)
			expectQueue(t, f.c, tc.want...)
		})
	}
}

// A session deleted and re-created under the same name finds its
// predecessor's Deployment, still waiting for the garbage collector. That
// resolves by itself, so the session waits without a Warning (and looks again
// soon, in case the Deployment is outside the cache and no event comes). An
// orphaned Deployment (kubectl delete --cascade=orphan) does not go away by
// itself: only a user can remove it, and the session warns. Either way, when
// it is deleted the session is synced at once and gets its own Deployment.
func TestRecreatedSessionGetsDeploymentWhenPredecessorsIsDeleted(t *testing.T) {
	for _, tc := range []struct {
		name       string
		modify     func(d *appsv1.Deployment)
		wantReason string
		wantEvents []string
	}{
		{
			name:       "predecessor's Deployment",
			modify:     func(d *appsv1.Deployment) { d.OwnerReferences[0].UID = "previous-uid" },
			wantReason: gamesv1.ReasonDeploymentDeleting,
		},
		{
			name:       "Deployment being deleted",
			modify:     func(d *appsv1.Deployment) { d.DeletionTimestamp = &lastTransition },
			wantReason: gamesv1.ReasonDeploymentDeleting,
		},
		{
			name:       "orphaned Deployment",
			modify:     func(d *appsv1.Deployment) { d.OwnerReferences = nil },
			wantReason: gamesv1.ReasonDeploymentNotControlled,
			wantEvents: []string{"Warning " + gamesv1.ReasonDeploymentNotControlled},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			session := newSession(testNamespace, "arena-1", "classic")
			profile := newProfile(testNamespace, "classic", map[string]string{"game.cfg": "x"})
			stale := apiServerDeployment(session, ProfileHash(profile))
			tc.modify(stale)
			f := newFixture(ctx, t, session, profile, stale)

			f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
			_, game := f.run(ctx, sessionKey(session))
			expectCondition(t, objectOf[*gamesv1.GameSession](t, game[0]).Status.Conditions,
				gamesv1.ConditionReady, metav1.ConditionFalse, tc.wantReason)
			f.expectEvents(tc.wantEvents...)
			f.observe(game...)

			// The garbage collector (or the user) deletes it.
			f.deleteCached(stale)
			if err := f.kubeClient.Tracker().Delete(appsv1.SchemeGroupVersion.WithResource("deployments"), stale.Namespace, stale.Name); err != nil {
				t.Fatal(err)
			}
			drainQueue(f.c.sessions.queue)
			f.c.sessions.deleteDeployment(stale)
			expectQueue(t, f.c, sessionKey(session))

			f.expectKube(createDeployment(testNamespace, "arena-1"))
			f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
			kube, _ := f.run(ctx, sessionKey(session))
			if d := objectOf[*appsv1.Deployment](t, kube[0]); !metav1.IsControlledBy(d, session) {
				t.Errorf("new Deployment is not controlled by the session: %+v", d.OwnerReferences)
			}
		})
	}
}

func TestSessionTombstoneIsEnqueued(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	session := newSession(testNamespace, "arena-1", "classic")
	f := newFixture(ctx, t)

	f.c.sessions.enqueue(cache.DeletedFinalStateUnknown{Key: sessionKey(session), Obj: session})
	expectQueue(t, f.c, sessionKey(session))

	// The deleted session's sync finds nothing to do: the garbage collector
	// owns the cleanup.
	f.run(ctx, sessionKey(session))
	f.expectEvents()
}

// A session whose profileRef changes moves in the index: edits of its old
// profile no longer reach it, edits of its new one do, and its sync rolls the
// new profile in.
func TestProfileRefChangeMovesSessionInIndex(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	profileA := newProfile(testNamespace, "profile-a", map[string]string{"game.cfg": "a"})
	profileB := newProfile(testNamespace, "profile-b", map[string]string{"game.cfg": "b"})
	session := settled(newSession(testNamespace, "arena-1", "profile-a"), ProfileHash(profileA))
	other := settled(newSession(testNamespace, "arena-2", "profile-a"), ProfileHash(profileA))
	f := newFixture(ctx, t, session, other, profileA, profileB,
		apiServerDeployment(session, ProfileHash(profileA)), apiServerDeployment(other, ProfileHash(profileA)))

	moved := session.DeepCopy()
	moved.Spec.ProfileRef = "profile-b"
	moved.Generation++
	moved.ResourceVersion = bumpVersion(moved.ResourceVersion)
	if err := f.sessionIndexer.Update(moved); err != nil {
		t.Fatal(err)
	}
	if err := f.gameClient.Tracker().Update(gamesv1.SchemeGroupVersion.WithResource("gamesessions"), moved, moved.Namespace); err != nil {
		t.Fatal(err)
	}

	editedA, editedB := withData(profileA, map[string]string{"game.cfg": "a2"}), withData(profileB, map[string]string{"game.cfg": "b2"})
	f.setCached(editedA)
	f.c.profiles.updateProfile(profileA, editedA)
	expectQueue(t, f.c, sessionKey(other))
	f.setCached(editedB)
	f.c.profiles.updateProfile(profileB, editedB)
	expectQueue(t, f.c, sessionKey(moved))
	f.events()

	// Queued by profile-b's fan-out: the Deployment first, the status on the
	// next sync.
	f.expectKube(writeDeployment(testNamespace, "arena-1"))
	kube, _ := f.run(ctx, sessionKey(moved))
	f.observe(kube...)
	f.expectGame(updateSessionStatus(testNamespace, "arena-1"))
	_, game := f.run(ctx, sessionKey(moved))
	tmpl := f.storedDeployment(testNamespace, "arena-1").Spec.Template
	if got, want := tmpl.Annotations[gamesv1.ProfileHashAnnotation], ProfileHash(editedB); got != want {
		t.Errorf("profile hash annotation: got %q, want profile-b's %q", got, want)
	}
	if got, want := tmpl.Spec.Volumes[0].ConfigMap.Name, RevisionName("profile-b", ProfileHash(editedB)); got != want {
		t.Errorf("profile volume mounts ConfigMap %q, want %s", got, want)
	}
	if got, want := objectOf[*gamesv1.GameSession](t, game[0]).Status.ProfileHash, ProfileHash(editedB); got != want {
		t.Errorf("status.profileHash: got %q, want %q", got, want)
	}
}

// retryQueue has no backoff delay, so retries are back in the queue at once
// and a test can count them without waiting out the real backoff.
func retryQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](0, 0))
}

func TestHandleErr(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "arena-1", errors.New("stale"))
	tests := []struct {
		name string
		// errs are the sync results, in order; nil after the last.
		errs        []error
		wantSyncs   int
		wantDropped float64
	}{
		{name: "success", wantSyncs: 1},
		{name: "transient error", errs: []error{errors.New("boom"), errors.New("boom")}, wantSyncs: 3},
		{
			// Conflicts are normal under load and never count towards dropping.
			name:      "conflicts beyond maxRetries",
			errs:      slices.Repeat([]error{conflict}, 2*maxRetries),
			wantSyncs: 2*maxRetries + 1,
		},
		{
			// After maxRetries retries the key is dropped: the first sync
			// plus maxRetries retries, and no more.
			name:        "persistent error",
			errs:        slices.Repeat([]error{errors.New("boom")}, 100),
			wantSyncs:   maxRetries + 1,
			wantDropped: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			f := newFixture(ctx, t)
			f.c.sessions.queue = retryQueue()
			syncs := 0
			f.c.sessions.syncHandler = func(_ context.Context, key string) error {
				if key != "arena/arena-1" {
					t.Errorf("synced %q", key)
				}
				syncs++
				if syncs <= len(tc.errs) {
					return tc.errs[syncs-1]
				}
				return nil
			}

			f.c.sessions.queue.Add("arena/arena-1")
			for i := 0; f.c.sessions.queue.Len() > 0 && i < 1000; i++ {
				if !f.c.sessions.worker().processNext(ctx) {
					t.Fatal("processNextWorkItem reported shutdown")
				}
			}

			if syncs != tc.wantSyncs {
				t.Errorf("synced %d times, want %d", syncs, tc.wantSyncs)
			}
			if n := f.c.sessions.queue.Len(); n != 0 {
				t.Errorf("queue holds %d keys, want none", n)
			}
			// Forgotten either way: the next event starts a fresh backoff.
			if n := f.c.sessions.queue.NumRequeues("arena/arena-1"); n != 0 {
				t.Errorf("NumRequeues = %d after the last sync, want 0", n)
			}
			var dropped dto.Metric
			if err := f.c.sessions.metrics.Dropped.WithLabelValues(metrics.QueueSessions).Write(&dropped); err != nil {
				t.Fatal(err)
			}
			if got := dropped.GetCounter().GetValue(); got != tc.wantDropped {
				t.Errorf("dropped_keys_total{queue=%q} = %v, want %v", metrics.QueueSessions, got, tc.wantDropped)
			}
		})
	}
}

func TestProcessNextWorkItemStopsOnShutdown(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := newFixture(ctx, t)
	f.c.sessions.queue.ShutDown()
	if f.c.sessions.worker().processNext(ctx) {
		t.Error("processNextWorkItem = true on a shut-down queue, want false")
	}
}

// Run starts workers once the caches sync, and when its context ends it stops
// them, shuts the queue down and leaves no goroutine behind: neither its own
// nor those of its event broadcaster, queue or (stopped by the caller)
// informers.
func TestRunStartsAndStops(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	withGoroutineLabel(ctx, t, func(ctx context.Context) { runStartsAndStops(ctx, t) })
}

func runStartsAndStops(ctx context.Context, t *testing.T) {
	profile := newProfile(testNamespace, "classic", map[string]string{"game.cfg": "x"})
	kubeClient := k8sfake.NewClientset(profile)
	gameClient := gamesfake.NewSimpleClientset() // see newFixture

	// One factory per filter, as in the binary.
	sessionFactory := gameinformers.NewSharedInformerFactory(gameClient, 0)
	profileFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = testProfileSelector }))
	revisionFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = RevisionSelector() }))
	deploymentFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, 0,
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ManagedDeploymentSelector() }),
		kubeinformers.WithTransform(func(obj interface{}) (interface{}, error) {
			if _, ok := obj.(*appsv1.ReplicaSet); ok {
				return SlimReplicaSet(obj)
			}
			return obj, nil
		}))
	// Deferred first, so they run after cancel: Shutdown waits for the
	// informers, which stop only when the context ends.
	defer sessionFactory.Shutdown()
	defer profileFactory.Shutdown()
	defer revisionFactory.Shutdown()
	defer deploymentFactory.Shutdown()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	c, err := NewController(ctx, kubeClient, gameClient, Informers{
		Sessions:    sessionFactory.Games().V1().GameSessions(),
		Rollouts:    sessionFactory.Games().V1().ProfileRollouts(),
		Profiles:    profileFactory.Core().V1().ConfigMaps(),
		Revisions:   revisionFactory.Core().V1().ConfigMaps(),
		Deployments: deploymentFactory.Apps().V1().Deployments(),
		ReplicaSets: deploymentFactory.Apps().V1().ReplicaSets(),
	}, Options{ProfileSelector: testProfileSelector})
	if err != nil {
		t.Fatal(err)
	}
	sessionFactory.Start(ctx.Done())
	profileFactory.Start(ctx.Done())
	revisionFactory.Start(ctx.Done())
	deploymentFactory.Start(ctx.Done())

	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 2) }()

	session := newSession(testNamespace, "arena-1", "classic")
	if _, err := gameClient.GamesV1().GameSessions(testNamespace).Create(ctx, session, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var deployment *appsv1.Deployment
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := kubeClient.AppsV1().Deployments(testNamespace).Get(ctx, "arena-1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		deployment = d
		return err == nil && c.WorkersRunning() == 2, err
	})
	if err != nil {
		t.Fatalf("waiting for the Deployment and 2 workers (running: %d): %v", c.WorkersRunning(), err)
	}
	if got, want := deployment.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation], ProfileHash(profile); got != want {
		t.Errorf("profile hash annotation: got %q, want %q", got, want)
	}
	// The profile sync created the revision the Deployment mounts.
	revision := RevisionName(profile.Name, ProfileHash(profile))
	if _, err := kubeClient.CoreV1().ConfigMaps(testNamespace).Get(ctx, revision, metav1.GetOptions{}); err != nil {
		t.Errorf("revision %s: %v", revision, err)
	}
	if !c.HasSynced() {
		t.Error("HasSynced = false while workers run")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of cancellation")
	}
	if n := c.WorkersRunning(); n != 0 {
		t.Errorf("WorkersRunning = %d after Run returned, want 0", n)
	}
	if !c.sessions.queue.ShuttingDown() {
		t.Error("queue not shut down after Run returned")
	}
}

// setRecorder makes both controllers record their Events to r.
func (c *Controller) setRecorder(r record.EventRecorder) {
	c.sessions.recorder = r
	c.profiles.recorder = r
}

// setMoves gives both controllers the ledger of moves l.
func (c *Controller) setMoves(l *moveLedger) {
	c.state.moves, c.sessions.moves, c.profiles.moves = l, l, l
}
