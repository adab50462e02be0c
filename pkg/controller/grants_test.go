package controller

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

func referenceGrant(namespace string, from []interface{}, to []interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ReferenceGrant",
		"metadata": map[string]interface{}{"namespace": namespace, "name": "g"},
		"spec":     map[string]interface{}{"from": from, "to": to},
	}}
}

func sessionsOf(namespace string) map[string]interface{} {
	return map[string]interface{}{"group": "games.example.com", "kind": "GameSession", "namespace": namespace}
}

func configMaps(name string) map[string]interface{} {
	to := map[string]interface{}{"group": "", "kind": "ConfigMap"}
	if name != "" {
		to["name"] = name
	}
	return to
}

// A grant permits exactly what Gateway API says it does: from entries are
// matched on group, kind and namespace, to entries on group, kind and name
// (none for all), and entries are ORed.
func TestGrantPermits(t *testing.T) {
	tests := []struct {
		name  string
		grant *unstructured.Unstructured
		want  bool
	}{
		{"the session's namespace, the profile by name", referenceGrant("platform", []interface{}{sessionsOf("tenant")}, []interface{}{configMaps("arena")}), true},
		{"the session's namespace, every ConfigMap", referenceGrant("platform", []interface{}{sessionsOf("tenant")}, []interface{}{configMaps("")}), true},
		{"one of several from entries", referenceGrant("platform", []interface{}{sessionsOf("other"), sessionsOf("tenant")}, []interface{}{configMaps("arena")}), true},
		{"one of several to entries", referenceGrant("platform", []interface{}{sessionsOf("tenant")}, []interface{}{configMaps("other"), configMaps("arena")}), true},
		{"group core spelt out", referenceGrant("platform", []interface{}{sessionsOf("tenant")},
			[]interface{}{map[string]interface{}{"group": "core", "kind": "ConfigMap"}}), true},
		{"another namespace's sessions", referenceGrant("platform", []interface{}{sessionsOf("other")}, []interface{}{configMaps("")}), false},
		{"another ConfigMap", referenceGrant("platform", []interface{}{sessionsOf("tenant")}, []interface{}{configMaps("other")}), false},
		{"another kind granted from", referenceGrant("platform", []interface{}{
			map[string]interface{}{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "tenant"}}, []interface{}{configMaps("")}), false},
		{"another kind granted to", referenceGrant("platform", []interface{}{sessionsOf("tenant")},
			[]interface{}{map[string]interface{}{"group": "", "kind": "Secret"}}), false},
		{"another group granted to", referenceGrant("platform", []interface{}{sessionsOf("tenant")},
			[]interface{}{map[string]interface{}{"group": "example.com", "kind": "ConfigMap"}}), false},
		{"no to", referenceGrant("platform", []interface{}{sessionsOf("tenant")}, nil), false},
		{"entries that do not parse", referenceGrant("platform", []interface{}{"tenant"}, []interface{}{"arena"}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := grantPermits(tt.grant, "tenant", "arena"); got != tt.want {
				t.Errorf("grantPermits = %v, want %v", got, tt.want)
			}
		})
	}
}

// Only grants of the profile's namespace count, and the slimmed object the
// cache holds permits what the grant did.
func TestGrantCheckerReadsTheProfilesNamespace(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	full := referenceGrant("platform", []interface{}{sessionsOf("tenant")}, []interface{}{configMaps("arena")})
	full.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000)})
	slim, err := SlimReferenceGrant(full)
	if err != nil {
		t.Fatal(err)
	}
	if len(slim.(*unstructured.Unstructured).GetAnnotations()) != 0 {
		t.Errorf("the slimmed grant keeps its annotations")
	}
	if err := indexer.Add(slim); err != nil {
		t.Fatal(err)
	}
	g := &grantChecker{indexer: indexer}
	if !g.permits("tenant", "platform", "arena") {
		t.Errorf("the grant of platform does not permit tenant's sessions platform/arena")
	}
	if g.permits("tenant", "elsewhere", "arena") {
		t.Errorf("a grant of platform permits a profile of another namespace")
	}
	var none *grantChecker
	if none.permits("tenant", "platform", "arena") {
		t.Errorf("no grant API permits a reference")
	}
}

// A session's own namespace needs no grant; another's is refused, with a
// message that says what to change, without the grant API, by a controller
// of one namespace, or with no grant.
func TestReferencePermitted(t *testing.T) {
	session := func(ref string) *gamesv1.GameSession {
		return &gamesv1.GameSession{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "a"}, Spec: gamesv1.GameSessionSpec{ProfileRef: ref}}
	}
	empty := &grantChecker{indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
	withGrants := func(c *caches) *caches {
		c.grants.Store(empty)
		return c
	}
	tests := []struct {
		name    string
		c       *caches
		ref     string
		want    bool
		message string
	}{
		{"own namespace", &caches{}, "arena", true, ""},
		{"own namespace, spelt out", &caches{}, "tenant/arena", true, ""},
		{"no grant API", &caches{}, "platform/arena", false, "serves no ReferenceGrant API"},
		{"a controller of one namespace", withGrants(&caches{namespace: "tenant"}), "platform/arena", false, `manages namespace "tenant" only`},
		{"no grant", withGrants(&caches{}), "platform/arena", false, "no ReferenceGrant there permits it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, message := tt.c.referencePermitted(session(tt.ref))
			if ok != tt.want || !strings.Contains(message, tt.message) {
				t.Errorf("referencePermitted = %v, %q; want %v, a message with %q", ok, message, tt.want, tt.message)
			}
		})
	}
}

// A profile of another namespace is copied into the session's namespace
// under a name that carries the profile's namespace, and the copy says
// whose it is.
func TestRevisionOfAnotherNamespacesProfile(t *testing.T) {
	profile := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "arena"}, Data: map[string]string{"k": "v"}}
	hash := ProfileHash(profile)
	r := newRevision(profile, hash, "tenant")
	if r.Namespace != "tenant" || r.Name != "platform.arena-"+hash {
		t.Errorf("revision %s/%s, want tenant/platform.arena-%s", r.Namespace, r.Name, hash)
	}
	if !isRevision(r) || revisionOf(r) != "platform/arena" {
		t.Errorf("isRevision %v, revisionOf %q; want a revision of platform/arena", isRevision(r), revisionOf(r))
	}
	local := newRevision(profile, hash, "platform")
	if local.Name != "arena-"+hash || revisionOf(local) != "platform/arena" {
		t.Errorf("the profile's own revision is %s, of %q", local.Name, revisionOf(local))
	}
	s := &gamesv1.GameSession{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant"}, Spec: gamesv1.GameSessionSpec{ProfileRef: "platform/arena"}}
	if d := NewDeployment(s, hash); mountedRevision(&d.Spec.Template) != r.Name {
		t.Errorf("the session's Deployment mounts %q, want %q", mountedRevision(&d.Spec.Template), r.Name)
	}
	if keys, _ := profileRefIndexFunc(s); len(keys) != 1 || keys[0] != "platform/arena" {
		t.Errorf("profileRef index keys %v, want [platform/arena]", keys)
	}
	if keys, _ := grantingNamespaceIndexFunc(s); len(keys) != 1 || keys[0] != "platform" {
		t.Errorf("grantingNamespace index keys %v, want [platform]", keys)
	}
}

// withGrants makes the fixture's controller read grants from a cache that
// holds these.
func withGrants(t *testing.T, f *fixture, grants ...*unstructured.Unstructured) {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, g := range grants {
		if err := indexer.Add(g); err != nil {
			t.Fatal(err)
		}
	}
	f.c.caches.grants.Store(&grantChecker{indexer: indexer})
}

// The RollingSessions Event of an edit counts the sessions the edit rolls:
// the profile's namespace's and those of a namespace it grants the profile
// to, not those of a namespace that names it without a grant.
func TestRollingSessionsCountsThePermittedSessions(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f, classic := profileFixture(ctx, t)
	for _, s := range []*gamesv1.GameSession{
		newSession("tenant-c", "granted", "arena/classic"),
		newSession("tenant-d", "refused-1", "arena/classic"),
		newSession("tenant-d", "refused-2", "arena/classic"),
	} {
		f.setCached(s)
	}
	withGrants(t, f, referenceGrant(testNamespace, []interface{}{sessionsOf("tenant-c")}, []interface{}{configMaps("classic")}))
	edited := withData(classic, map[string]string{"game.cfg": "mode=classic\nmaxPlayers=64"})
	f.setCached(edited)

	f.c.profiles.updateProfile(classic, edited)

	// arena/s1, s2, s3 and tenant-c/granted.
	f.expectEvents(fmt.Sprintf("Normal %s "+MessageProfileFanOut, EventReasonProfileFanOut, ProfileHash(edited), 4))
}
