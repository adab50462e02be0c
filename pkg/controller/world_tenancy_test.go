package controller

import (
	"math/rand/v2"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Tenancy in the sequences: in half of them (tenancyOf), a profile of the
// platform namespace, pf-z, is among the profiles the world's sessions
// reference, as platform/pf-z, and users make and revoke ReferenceGrants
// there. The grants the world makes are of four kinds, each under a name of
// its own, so that the world knows what each permits without reading it:
// two permit the world's sessions pf-z (by name, and every ConfigMap), two
// do not (another ConfigMap, another namespace's sessions).
//
// What the invariants then hold the controller to:
//   - it copies a revision of pf-z into the sessions' namespace only while
//     its grant cache permits them (revision-without-grant);
//   - a session without a grant is as one whose profile is missing: no
//     Deployment created, none moved to another revision (write-without-
//     profile), and at rest ProfileResolved=False with reason
//     ReferenceNotPermitted;
//   - with a grant, it is as one of a profile of its own namespace: at rest
//     it runs the revision of pf-z's current content, copied into its
//     namespace, and pf-z's rollout counts it;
//   - without one, at rest, no copy of pf-z stays in the sessions'
//     namespace that nothing may mount (revision-left-ungranted).

const worldGrantPrefix = "grant-"

// worldGrants are the grants users make, by name, and whether each permits
// the world's sessions pf-z.
var worldGrants = []worldGrant{
	{worldGrantPrefix + "pf-z", worldNamespace, worldPlatformProfile, true, "pf-z to the world's sessions"},
	{worldGrantPrefix + "all", worldNamespace, "", true, "every ConfigMap to the world's sessions"},
	{worldGrantPrefix + "other", worldNamespace, "pf-w", false, "another ConfigMap to the world's sessions"},
	{worldGrantPrefix + "elsewhere", "elsewhere", "", false, "every ConfigMap to another namespace's sessions"},
}

// worldGrant is a grant users make, by name, and whether it permits the
// world's sessions pf-z.
type worldGrant struct {
	name        string
	from, to    string // the namespace granted; the ConfigMap granted ("" for all)
	permitsPfZ  bool
	description string
}

// tenancyOf decides whether a sequence has the platform's profile and its
// grants, from a stream of its own: the sequences without it take exactly
// the steps they took before it existed, so the seeds of earlier failures
// replay as they did.
func tenancyOf(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x7e4a)).IntN(2) == 0
}

// Fair shares in the sequences: in half of those of tenancy
// (platformSessionsOf), the platform runs sessions of its own on pf-z,
// "pgs-*" in its namespace. The cluster-wide budget is then shared by two
// namespaces, and pf-z's sessions, granted to the world's, are a flow in
// each: the fair queue chooses between namespaces, and fairShareChecker
// holds it to that choice. The platform's sessions read no inputs.
const worldPlatformSessionPrefix = "pgs-"

var worldPlatformSessionNames = []string{"pgs-a", "pgs-b", "pgs-c"}

// platformSessionsOf decides, from a stream of its own, whether a sequence
// of tenancy has the platform's sessions.
func platformSessionsOf(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0xfa125)).IntN(2) == 0
}

// fairShareBudgets are the cluster-wide budgets of the sequences of the
// platform's sessions: sessions moving at once, and moves per minute.
var fairShareBudgets = []struct{ moving, perMinute int }{{2, 0}, {3, 0}, {0, 2}, {0, 3}, {1, 3}, {2, 4}}

// fairShareBudgetOf picks a sequence's budget from a stream of its own.
func fairShareBudgetOf(seed uint64) (moving, perMinute int) {
	b := fairShareBudgets[rand.New(rand.NewPCG(seed, 0xfa126)).IntN(len(fairShareBudgets))]
	return b.moving, b.perMinute
}

// sessionNames are the names users create sessions (and foreign
// Deployments) under.
func (w *world) sessionNames() []string {
	if w.platformSessions {
		return append(slices.Clone(worldSessionNames), worldPlatformSessionNames...)
	}
	return worldSessionNames
}

// populatePlatform starts a sequence of the platform's sessions with
// sessions of both namespaces on pf-z, granted, for its edits to move
// (populateRunning then runs them): both namespaces wait for the
// cluster-wide budget at once.
func (w *world) populatePlatform() {
	if w.server.profile(worldPlatformProfile) == nil {
		p := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: worldPlatformProfile, Namespace: worldPlatformNamespace,
				Labels: map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}},
			Data: pick(w, worldProfileData),
		}
		if w.paced {
			p.Annotations = w.randomPolicy()
		}
		w.withDelivery(p)
		_, err := w.server.create(byUser, profilesResource, p)
		must(err)
	}
	if w.server.get(grantsResource, worldGrants[0].name) == nil {
		w.createGrantOf(worldGrants[0])
	}
	for _, name := range w.sessionNames() {
		if w.server.session(name) != nil {
			continue
		}
		s := &gamesv1.GameSession{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNamespaceOf(name)},
			Spec: gamesv1.GameSessionSpec{ProfileRef: pick(w, w.refsFor(name)), Image: pick(w, worldImages),
				Replicas: ptr.To(1 + w.rng.Int32N(3)), Ports: pick(w, worldPortSets)},
		}
		_, err := w.server.create(byUser, sessionsResource, s)
		must(err)
	}
	w.logf("user: pf-z, its grant, and sessions of both namespaces")
}

// editPlatformProfile edits pf-z's data.
func (w *world) editPlatformProfile() bool {
	return w.editProfileData(w.server.profile(worldPlatformProfile))
}

// platformSession reports whether the session is one of the platform's.
func platformSession(s *gamesv1.GameSession) bool { return s.Namespace == worldPlatformNamespace }

// refsFor are the references the session of that name is created or edited
// with: the platform's sessions use pf-z, of their own namespace.
func (w *world) refsFor(name string) []string {
	if worldNamespaceOf(name) == worldPlatformNamespace {
		return []string{worldPlatformProfile}
	}
	return w.profileRefs()
}

// profileRefs are the references the world's sessions are created or
// edited with.
func (w *world) profileRefs() []string {
	if w.tenancy {
		return []string{"pf-x", "pf-y", worldPlatformRef}
	}
	return worldProfileNames
}

// profileNames are the profiles users create.
func (w *world) profileNames() []string {
	if w.tenancy {
		return []string{"pf-x", "pf-y", worldPlatformProfile}
	}
	return worldProfileNames
}

// profileNameOf is the name of the profile a reference names.
func profileNameOf(ref string) string {
	if _, name, ok := strings.Cut(ref, "/"); ok {
		return name
	}
	return ref
}

// worldRefOf is how the world's sessions refer to the profile of that name.
func worldRefOf(name string) string {
	if name == worldPlatformProfile {
		return worldPlatformRef
	}
	return name
}

// crossNamespace reports whether the session references the platform's
// profile from another namespace.
func crossNamespace(s *gamesv1.GameSession) bool { return strings.Contains(s.Spec.ProfileRef, "/") }

// permitted reports whether grants (the server's, or a cache's) let the
// world's sessions use pf-z.
func permitted(grants []object) bool {
	for _, obj := range grants {
		for _, g := range worldGrants {
			if obj.GetName() == g.name && g.permitsPfZ {
				return true
			}
		}
	}
	return false
}

func (w *world) grantedOnServer() bool { return permitted(w.server.view(grantsResource)) }

func (w *world) grantedInCache() bool {
	var grants []object
	for _, obj := range w.caches[grantsResource].indexer.List() {
		grants = append(grants, obj.(object))
	}
	return permitted(grants)
}

// cachedProfileOf is the session's profile as the controller's caches let
// it use it: nil if missing, or of the platform and not granted.
func (w *world) cachedProfileOf(s *gamesv1.GameSession) *corev1.ConfigMap {
	if crossNamespace(s) && !w.grantedInCache() {
		return nil
	}
	return w.caches[profilesResource].profile(profileNameOf(s.Spec.ProfileRef))
}

// serverProfileOf is the session's profile as the server's state lets it
// use it.
func (w *world) serverProfileOf(s *gamesv1.GameSession) *corev1.ConfigMap {
	if crossNamespace(s) && !w.grantedOnServer() {
		return nil
	}
	return w.server.profile(profileNameOf(s.Spec.ProfileRef))
}

// uses reports whether the session references the profile of that name.
func uses(s *gamesv1.GameSession, profile string) bool {
	return profileNameOf(s.Spec.ProfileRef) == profile
}

// pickableCaches are the caches a relist or a resync may hit: the grant
// cache only in a sequence of tenancy, the cache of a kind of input only in
// a sequence of that kind. (The Secret cache, empty without Secrets, stays
// in those of tenancy, where it always was: they replay as they did.)
func (w *world) pickableCaches() []*informerCache {
	caches := slices.Clone(w.caches[:grantsResource])
	if w.tenancy {
		caches = append(caches, w.caches[grantsResource])
	}
	for _, in := range worldInputs {
		if w.plays(in.resource) || w.tenancy && in.resource == secretsResource {
			caches = append(caches, w.caches[in.resource])
		}
	}
	if w.live.on {
		caches = append(caches, w.caches[liveProfilesResource], w.caches[podsResource])
	}
	return caches
}

// ---- Users: grants ----

func (w *world) createGrant() bool {
	g := pick(w, worldGrants)
	if w.server.get(grantsResource, g.name) != nil {
		return false
	}
	w.createGrantOf(g)
	return true
}

func (w *world) createGrantOf(g worldGrant) {
	to := map[string]interface{}{"group": "", "kind": "ConfigMap"}
	if g.to != "" {
		to["name"] = g.to
	}
	grant := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "gateway.networking.k8s.io/v1",
		"kind":       "ReferenceGrant",
		"metadata":   map[string]interface{}{"name": g.name, "namespace": worldPlatformNamespace},
		"spec": map[string]interface{}{
			"from": []interface{}{map[string]interface{}{"group": gamesv1.SchemeGroupVersion.Group, "kind": "GameSession", "namespace": g.from}},
			"to":   []interface{}{to},
		},
	}}
	created, err := w.server.create(byUser, grantsResource, grant)
	must(err)
	w.logf("user: create referencegrant %s (%s): %s", g.name, created.GetUID(), g.description)
}

func (w *world) deleteGrant() bool {
	grants := w.server.list(grantsResource)
	if len(grants) == 0 {
		return false
	}
	g := pick(w, grants)
	must(w.server.delete(byUser, grantsResource, g.GetName(), metav1.DeletePropagationBackground))
	w.logf("user: delete referencegrant %s (%s)", g.GetName(), g.GetUID())
	return true
}

// checkRevisionGranted checks a revision the controller creates in the
// sessions' namespace for the platform's profile: its grant cache must
// permit them.
func (w *world) checkRevisionGranted(cm *corev1.ConfigMap) {
	if !strings.Contains(cm.Annotations[worldRevisionOfAnnotation], "/") {
		return
	}
	w.covered["revision copied by grant"]++
	if !w.grantedInCache() {
		w.violate("revision-without-grant", "Create of revision %s/%s of %s, which no grant in the controller's cache permits the namespace",
			cm.Namespace, cm.Name, cm.Annotations[worldRevisionOfAnnotation])
	}
}

// noteTenancyAtRest counts what the sequences exercised of a session of the
// platform's profile at rest.
func (w *world) noteTenancyAtRest(s *gamesv1.GameSession, d *appsv1.Deployment) {
	switch {
	case !crossNamespace(s):
	case w.grantedOnServer():
		w.covered["at rest by grant"]++
	case d != nil:
		w.covered["at rest, grant revoked, Deployment kept"]++
	default:
		w.covered["at rest, not granted"]++
	}
}

// grantInformer is the controller's grant informer in a sequence: it never
// runs, its cache is fed as the others are.
func grantInformer() cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}
