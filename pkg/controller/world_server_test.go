package controller

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The API server of a sequence: one store for each resource the controller
// deals with, in one namespace (profiles, revisions, session configs and
// live profiles are all ConfigMaps, kept apart but sharing one name space, as
// they share one resource; pods only of live sessions, world_live_test.go),
// with the semantics the controller depends on and a fake clientset would
// not give it: one resourceVersion
// counter, writes that change nothing keep the resourceVersion, generation
// rises on spec changes only, status subresources, resourceVersion and UID
// preconditions, JSON merge and strategic merge patches, defaulting and
// validation (world_defaults_test.go), immutable ConfigMaps, UID and
// resourceVersion preconditions on delete, and deletion with finalizers for
// foreground and orphan propagation.
//
// Everyone in the world writes through it: the controller by way of the fake
// clientsets (world_clients_test.go), users, the garbage collector and the
// kube-controller-manager stand-in directly. Each write is reported to
// onChange, which feeds the informer caches.

const worldNamespace = "arena"

// In a sequence of tenancy (see tenancyOf), one profile lives in the
// platform namespace, and the world's sessions may use it as platform/pf-z
// while a ReferenceGrant there permits it. Its objects (the profile, its
// ProfileRollout, its own revisions "pf-z-<hash>", the grants) are stored
// under their names like every other: the world's names are unique across
// both namespaces, and worldNamespaceOf tells an object's namespace by its
// name. The revisions copied for the sessions ("platform.pf-z-<hash>") are in
// the sessions' namespace.
const (
	worldPlatformNamespace = "platform"
	worldPlatformProfile   = "pf-z"
	worldPlatformRef       = worldPlatformNamespace + "/" + worldPlatformProfile
)

// worldNamespaceOf is the namespace of the world's object of that name.
func worldNamespaceOf(name string) string {
	if name == worldPlatformProfile || strings.HasPrefix(name, worldPlatformProfile+"-") || strings.HasPrefix(name, worldGrantPrefix) ||
		strings.HasPrefix(name, worldPlatformSessionPrefix) {
		return worldPlatformNamespace
	}
	return worldNamespace
}

// worldKeyOf is the queue key of the world's session of that name.
func worldKeyOf(name string) string { return worldNamespaceOf(name) + "/" + name }

// worldNameOfKey is the name of the session a queue key names.
func worldNameOfKey(key string) string {
	_, name, _ := strings.Cut(key, "/")
	return name
}

// Finalizers the API server adds for foreground and orphan deletion, and the
// garbage collector removes when it has dealt with the dependents.
const (
	finalizerForeground = metav1.FinalizerDeleteDependents
	finalizerOrphan     = metav1.FinalizerOrphanDependents
)

type apiResource int

const (
	sessionsResource apiResource = iota
	profilesResource
	deploymentsResource
	// revisionsResource holds the ConfigMaps that carry the revision label:
	// the profile revisions the controller creates.
	revisionsResource
	// rolloutsResource holds the ProfileRollouts the controller creates,
	// one per profile; replicaSetsResource the ReplicaSets of Deployments.
	rolloutsResource
	replicaSetsResource
	// grantsResource holds the platform namespace's ReferenceGrants.
	grantsResource
	// secretsResource holds the Secrets sessions read, and
	// sessionConfigsResource their session-config ConfigMaps
	// (world_inputs_test.go): ConfigMaps, that share the one name space of
	// profiles and revisions, but that neither cache of those lists.
	secretsResource
	sessionConfigsResource
	// liveProfilesResource holds the sessions' live profiles, ConfigMaps
	// of the one name space too, and podsResource the pods of live
	// sessions, the only pods the world keeps as objects
	// (world_live_test.go).
	liveProfilesResource
	podsResource
	resourceCount
)

func (r apiResource) String() string {
	return [...]string{"gamesession", "configmap", "deployment", "revision", "profilerollout", "replicaset", "referencegrant", "secret", "sessionconfig", "liveprofile", "pod"}[r]
}

// configMapResources store ConfigMaps.
var configMapResources = []apiResource{profilesResource, revisionsResource, sessionConfigsResource, liveProfilesResource}

// isConfigMap reports whether r stores ConfigMaps.
func (r apiResource) isConfigMap() bool { return slices.Contains(configMapResources, r) }

func (r apiResource) groupKind() schema.GroupKind {
	return [...]schema.GroupKind{
		gamesv1.SchemeGroupVersion.WithKind("GameSession").GroupKind(), corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(),
		appsv1.SchemeGroupVersion.WithKind("Deployment").GroupKind(), corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(),
		gamesv1.SchemeGroupVersion.WithKind("ProfileRollout").GroupKind(), appsv1.SchemeGroupVersion.WithKind("ReplicaSet").GroupKind(),
		{Group: "gateway.networking.k8s.io", Kind: "ReferenceGrant"}, corev1.SchemeGroupVersion.WithKind("Secret").GroupKind(),
		corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(), corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(),
		corev1.SchemeGroupVersion.WithKind("Pod").GroupKind(),
	}[r]
}

func (r apiResource) groupResource() schema.GroupResource {
	return [...]schema.GroupResource{
		gamesv1.Resource("gamesessions"), corev1.Resource("configmaps"), appsv1.Resource("deployments"), corev1.Resource("configmaps"),
		gamesv1.Resource("profilerollouts"), appsv1.Resource("replicasets"),
		{Group: "gateway.networking.k8s.io", Resource: "referencegrants"}, corev1.Resource("secrets"), corev1.Resource("configmaps"),
		corev1.Resource("configmaps"), corev1.Resource("pods"),
	}[r]
}

// object is what every stored type is.
type object interface {
	metav1.Object
	runtime.Object
}

func copyOf[T object](obj T) T {
	return obj.DeepCopyObject().(T)
}

// author is who made a write: the event log names it, and write accounting
// tells the controller's writes from everyone else's.
type author string

const (
	byController author = "controller"
	byUser       author = "user"
	byGC         author = "gc"
	byKCM        author = "kcm"
	// byRelist marks what an informer's relist hands over: the sum of the
	// changes it missed, whoever made them.
	byRelist author = "relist"
	// byGameServer marks a game server's acknowledgment on its own pod
	// (world_live_test.go).
	byGameServer author = "gameserver"
)

// change is one write the server made, as a watch reports it before any label
// filter: old is nil for a create and new is nil for a delete.
type change struct {
	resource apiResource
	author   author
	old, new object
}

type apiServer struct {
	clock    clock.PassiveClock
	version  int64
	uids     int
	objects  [resourceCount]map[string]object
	onChange func(change)
}

func newAPIServer(clk clock.PassiveClock, onChange func(change)) *apiServer {
	s := &apiServer{clock: clk, onChange: onChange}
	for r := range s.objects {
		s.objects[r] = map[string]object{}
	}
	return s
}

// get returns a copy of the stored object, or nil.
func (s *apiServer) get(r apiResource, name string) object {
	if obj, ok := s.objects[r][name]; ok {
		return copyOf(obj)
	}
	return nil
}

func (s *apiServer) session(name string) *gamesv1.GameSession {
	obj, _ := s.get(sessionsResource, name).(*gamesv1.GameSession)
	return obj
}

func (s *apiServer) profile(name string) *corev1.ConfigMap {
	obj, _ := s.get(profilesResource, name).(*corev1.ConfigMap)
	return obj
}

func (s *apiServer) deployment(name string) *appsv1.Deployment {
	obj, _ := s.get(deploymentsResource, name).(*appsv1.Deployment)
	return obj
}

func (s *apiServer) revision(name string) *corev1.ConfigMap {
	obj, _ := s.get(revisionsResource, name).(*corev1.ConfigMap)
	return obj
}

func (s *apiServer) revisions() []*corev1.ConfigMap {
	return listAs[*corev1.ConfigMap](s.list(revisionsResource))
}

// list returns copies of the stored objects of r, by name.
func (s *apiServer) list(r apiResource) []object {
	names := make([]string, 0, len(s.objects[r]))
	for name := range s.objects[r] {
		names = append(names, name)
	}
	slices.Sort(names)
	objs := make([]object, 0, len(names))
	for _, name := range names {
		objs = append(objs, copyOf(s.objects[r][name]))
	}
	return objs
}

// view returns the stored objects of r themselves, by name, for a reader
// that only looks: they must not be modified.
func (s *apiServer) view(r apiResource) []object {
	names := make([]string, 0, len(s.objects[r]))
	for name := range s.objects[r] {
		names = append(names, name)
	}
	slices.Sort(names)
	objs := make([]object, 0, len(names))
	for _, name := range names {
		objs = append(objs, s.objects[r][name])
	}
	return objs
}

func (s *apiServer) sessions() []*gamesv1.GameSession {
	return listAs[*gamesv1.GameSession](s.list(sessionsResource))
}

func (s *apiServer) rollout(name string) *gamesv1.ProfileRollout {
	obj, _ := s.get(rolloutsResource, name).(*gamesv1.ProfileRollout)
	return obj
}

func (s *apiServer) replicaSets() []*appsv1.ReplicaSet {
	return listAs[*appsv1.ReplicaSet](s.list(replicaSetsResource))
}

func (s *apiServer) deployments() []*appsv1.Deployment {
	return listAs[*appsv1.Deployment](s.list(deploymentsResource))
}

func listAs[T object](objs []object) []T {
	typed := make([]T, 0, len(objs))
	for _, obj := range objs {
		typed = append(typed, obj.(T))
	}
	return typed
}

func (s *apiServer) create(by author, r apiResource, obj object) (object, error) {
	obj = copyOf(obj)
	name := obj.GetName()
	if _, exists := s.objects[r][name]; exists {
		return nil, apierrors.NewAlreadyExists(r.groupResource(), name)
	}
	if r.isConfigMap() {
		// Profiles, revisions, session configs and live profiles are one
		// resource: one name space.
		for _, other := range configMapResources {
			if _, exists := s.objects[other][name]; exists {
				return nil, apierrors.NewAlreadyExists(r.groupResource(), name)
			}
		}
	}
	s.uids++
	obj.SetUID(types.UID(fmt.Sprintf("uid-%d", s.uids)))
	obj.SetCreationTimestamp(metav1.NewTime(s.clock.Now()))
	obj.SetDeletionTimestamp(nil)
	obj.SetResourceVersion("")
	if hasGeneration(r) {
		obj.SetGeneration(1)
	}
	clearStatus(obj)
	applyDefaults(obj)
	if errs := validate(nil, obj); len(errs) > 0 {
		return nil, apierrors.NewInvalid(r.groupKind(), name, errs)
	}
	return s.commit(by, r, nil, obj), nil
}

// update replaces the object's metadata and spec, keeping its status, as an
// update of the main resource does. checkVersion makes it conditional on the
// resourceVersion obj carries.
func (s *apiServer) update(by author, r apiResource, obj object, checkVersion bool) (object, error) {
	cur, err := s.precondition(r, obj, checkVersion)
	if err != nil {
		return nil, err
	}
	next := copyOf(obj)
	keepServerFields(next, cur)
	copyStatus(next, cur)
	return s.write(by, r, cur, next)
}

// updateStatus replaces the object's status and nothing else, as an update of
// the status subresource does.
func (s *apiServer) updateStatus(by author, r apiResource, obj object, checkVersion bool) (object, error) {
	cur, err := s.precondition(r, obj, checkVersion)
	if err != nil {
		return nil, err
	}
	next := copyOf(cur)
	copyStatus(next, obj)
	return s.write(by, r, cur, next)
}

func (s *apiServer) precondition(r apiResource, obj object, checkVersion bool) (object, error) {
	cur, ok := s.objects[r][obj.GetName()]
	if !ok {
		return nil, apierrors.NewNotFound(r.groupResource(), obj.GetName())
	}
	if uid := obj.GetUID(); uid != "" && uid != cur.GetUID() {
		return nil, apierrors.NewConflict(r.groupResource(), obj.GetName(),
			fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", uid, cur.GetUID()))
	}
	if checkVersion && obj.GetResourceVersion() != cur.GetResourceVersion() {
		return nil, apierrors.NewConflict(r.groupResource(), obj.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	return cur, nil
}

// patch applies a JSON merge patch or a strategic merge patch to the main
// resource. A resourceVersion in the patch is a precondition; a metadata.uid
// that differs is refused, as the API server refuses to change an immutable
// field.
func (s *apiServer) patch(by author, r apiResource, name string, pt types.PatchType, data []byte) (object, error) {
	cur, ok := s.objects[r][name]
	if !ok {
		return nil, apierrors.NewNotFound(r.groupResource(), name)
	}
	original, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	var patched []byte
	switch pt {
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(original, data)
	case types.StrategicMergePatchType:
		patched, err = strategicpatch.StrategicMergePatch(original, data, newEmpty(r))
	case types.JSONPatchType:
		var ops jsonpatch.Patch
		if ops, err = jsonpatch.DecodePatch(data); err == nil {
			patched, err = ops.Apply(original)
		}
	default:
		return nil, apierrors.NewBadRequest("unsupported patch type " + string(pt))
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	next := newEmpty(r)
	if err := json.Unmarshal(patched, next); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if v := next.GetResourceVersion(); v != cur.GetResourceVersion() {
		return nil, apierrors.NewConflict(r.groupResource(), name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	if next.GetUID() != cur.GetUID() {
		return nil, apierrors.NewInvalid(r.groupKind(), name, field.ErrorList{
			field.Invalid(field.NewPath("metadata", "uid"), next.GetUID(), "field is immutable"),
		})
	}
	keepServerFields(next, cur)
	copyStatus(next, cur)
	return s.write(by, r, cur, next)
}

// delete deletes at once, or marks the object deleting while finalizers
// remain: the ones it has, and the one foreground or orphan propagation adds
// for the garbage collector.
func (s *apiServer) delete(by author, r apiResource, name string, propagation metav1.DeletionPropagation) error {
	cur, ok := s.objects[r][name]
	if !ok {
		return apierrors.NewNotFound(r.groupResource(), name)
	}
	if cur.GetDeletionTimestamp() != nil {
		return nil
	}
	next := copyOf(cur)
	switch propagation {
	case metav1.DeletePropagationForeground:
		next.SetFinalizers(append(next.GetFinalizers(), finalizerForeground))
	case metav1.DeletePropagationOrphan:
		next.SetFinalizers(append(next.GetFinalizers(), finalizerOrphan))
	}
	if len(next.GetFinalizers()) == 0 {
		s.commit(by, r, cur, nil)
		return nil
	}
	next.SetDeletionTimestamp(ptr.To(metav1.NewTime(s.clock.Now())))
	if hasGeneration(r) {
		// As the API server does when it marks an object deleting.
		next.SetGeneration(next.GetGeneration() + 1)
	}
	_, err := s.write(by, r, cur, next)
	return err
}

// deleteIf deletes an object without finalizers on the preconditions of a
// DeleteOptions: a UID or resourceVersion that differs is a Conflict, as the
// API server answers a failed precondition.
func (s *apiServer) deleteIf(by author, r apiResource, name string, uid *types.UID, resourceVersion *string) error {
	cur, ok := s.objects[r][name]
	if !ok {
		return apierrors.NewNotFound(r.groupResource(), name)
	}
	if uid != nil && *uid != cur.GetUID() {
		return apierrors.NewConflict(r.groupResource(), name,
			fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", *uid, cur.GetUID()))
	}
	if resourceVersion != nil && *resourceVersion != cur.GetResourceVersion() {
		return apierrors.NewConflict(r.groupResource(), name,
			fmt.Errorf("Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s",
				*resourceVersion, cur.GetResourceVersion()))
	}
	if len(cur.GetFinalizers()) > 0 || cur.GetDeletionTimestamp() != nil {
		panic("harness: deleteIf of an object with finalizers")
	}
	s.commit(by, r, cur, nil)
	return nil
}

// write stores next in place of cur unless it changes nothing, in which case
// cur is returned with its resourceVersion, and no watch event follows.
func (s *apiServer) write(by author, r apiResource, cur, next object) (object, error) {
	applyDefaults(next)
	if errs := validate(cur, next); len(errs) > 0 {
		return nil, apierrors.NewInvalid(r.groupKind(), next.GetName(), errs)
	}
	next.SetResourceVersion(cur.GetResourceVersion())
	if equality.Semantic.DeepEqual(cur, next) {
		return copyOf(cur), nil
	}
	if hasGeneration(r) && !equality.Semantic.DeepEqual(specOf(cur), specOf(next)) {
		next.SetGeneration(cur.GetGeneration() + 1)
	}
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		s.commit(by, r, next, nil)
		return copyOf(next), nil
	}
	return s.commit(by, r, cur, next), nil
}

// commit stores next under a new resourceVersion, or with next nil removes
// the object, whose last state cur is, and reports the change.
func (s *apiServer) commit(by author, r apiResource, cur, next object) object {
	s.version++
	version := fmt.Sprint(s.version)
	var old, stored object
	if cur != nil {
		old = copyOf(cur)
	}
	if next == nil {
		delete(s.objects[r], cur.GetName())
		// A delete event carries the object at the version of its deletion.
		old.SetResourceVersion(version)
	} else {
		next.SetResourceVersion(version)
		s.objects[r][next.GetName()] = next
		stored = copyOf(next)
	}
	if s.onChange != nil {
		s.onChange(change{resource: r, author: by, old: old, new: stored})
	}
	if next == nil {
		return nil
	}
	return copyOf(next)
}

// keepServerFields carries over the metadata only the API server sets.
func keepServerFields(next, cur object) {
	next.SetUID(cur.GetUID())
	next.SetCreationTimestamp(cur.GetCreationTimestamp())
	next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	next.SetGeneration(cur.GetGeneration())
	next.SetResourceVersion(cur.GetResourceVersion())
	if cur.GetDeletionTimestamp() != nil {
		// Finalizers may be removed from a deleting object, never added.
		next.SetFinalizers(slices.DeleteFunc(next.GetFinalizers(), func(f string) bool {
			return !slices.Contains(cur.GetFinalizers(), f)
		}))
	}
}

func hasGeneration(r apiResource) bool { return !r.isConfigMap() }

func newEmpty(r apiResource) object {
	return [...]func() object{
		func() object { return &gamesv1.GameSession{} },
		func() object { return &corev1.ConfigMap{} },
		func() object { return &appsv1.Deployment{} },
		func() object { return &corev1.ConfigMap{} },
		func() object { return &gamesv1.ProfileRollout{} },
		func() object { return &appsv1.ReplicaSet{} },
		func() object { return &unstructured.Unstructured{} },
		func() object { return &corev1.Secret{} },
		func() object { return &corev1.ConfigMap{} },
		func() object { return &corev1.ConfigMap{} },
		func() object { return &corev1.Pod{} },
	}[r]()
}

func specOf(obj object) any {
	switch o := obj.(type) {
	case *gamesv1.GameSession:
		return o.Spec
	case *appsv1.Deployment:
		return o.Spec
	case *appsv1.ReplicaSet:
		return o.Spec
	}
	return nil
}

func copyStatus(dst, src object) {
	switch d := dst.(type) {
	case *gamesv1.GameSession:
		d.Status = *src.(*gamesv1.GameSession).Status.DeepCopy()
	case *appsv1.Deployment:
		d.Status = *src.(*appsv1.Deployment).Status.DeepCopy()
	case *gamesv1.ProfileRollout:
		d.Status = *src.(*gamesv1.ProfileRollout).Status.DeepCopy()
	case *appsv1.ReplicaSet:
		d.Status = *src.(*appsv1.ReplicaSet).Status.DeepCopy()
	case *corev1.Pod:
		d.Status = *src.(*corev1.Pod).Status.DeepCopy()
	}
}

func clearStatus(obj object) {
	switch o := obj.(type) {
	case *gamesv1.GameSession:
		o.Status = gamesv1.GameSessionStatus{}
	case *appsv1.Deployment:
		o.Status = appsv1.DeploymentStatus{}
	case *gamesv1.ProfileRollout:
		o.Status = gamesv1.ProfileRolloutStatus{}
	case *appsv1.ReplicaSet:
		o.Status = appsv1.ReplicaSetStatus{}
	}
}
