package tenancy

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/manifests"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
)

func dataOf(version string) map[string]string {
	return map[string]string{"game.cfg": "max_players=16\nversion=" + version}
}

func hashOf(data map[string]string) string {
	return controller.ProfileHash(&corev1.ConfigMap{Data: data})
}

// A platform namespace publishes one profile to its tenants; each tenant's
// sessions may use it only once the platform grants that tenant, and the
// grant is the only switch:
//   - without a grant, ProfileResolved=False says which grant is missing, and
//     nothing is created;
//   - a grant made later resolves the session by itself: the controller
//     copies the revision into the tenant's namespace, where its pods can
//     mount it, and edits of the profile roll the tenant's game servers;
//   - a grant of another tenant, or of another ConfigMap, permits nothing;
//   - a revoked grant starts no new rollout: the tenant's game servers keep
//     the revision they run, and it is kept for them;
//   - granted again, the session catches up.
//
// The controller runs as the artifacts' ClusterRole, so this is also the
// proof that it suffices: no request is refused.
func TestProfilesOfAnotherNamespaceOnlyByGrant(t *testing.T) {
	e := newEnv(t)
	platform, tenantA, tenantB := e.namespace(), e.namespace(), e.namespace()
	const profile = "arena-standard"
	ref := platform + "/" + profile
	v1 := dataOf("1")
	e.createProfile(platform, profile, v1)
	e.createSession(platform, "local", profile)
	e.createSession(tenantA, "a", ref)
	e.createSession(tenantB, "b", ref)
	// Tenant B is granted another ConfigMap only.
	e.grant(platform, tenantB, "other")
	ctl := e.startController(e.controllerIdentity())

	refusedFor := func(namespace, name string) func() (bool, error) {
		return func() (bool, error) {
			c, err := e.resolved(namespace, name)
			if err != nil || c == nil {
				return false, err
			}
			return c.Status == metav1.ConditionFalse && c.Reason == gamesv1.ReasonReferenceNotPermitted,
				fmt.Errorf("ProfileResolved %s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	mounts := func(namespace, name, revision string) func() (bool, error) {
		return func() (bool, error) {
			got, err := e.mounted(namespace, name)
			return got == revision, fmt.Errorf("mounts %q, want %q (%v)", got, revision, err)
		}
	}
	e.eventually("the local session to run the profile", mounts(platform, "local", controller.RevisionName(profile, hashOf(v1))))
	e.eventually("tenant A's session refused", refusedFor(tenantA, "a"))
	e.eventually("tenant B's session refused", refusedFor(tenantB, "b"))
	c, _ := e.resolved(tenantA, "a")
	for _, part := range []string{"no ReferenceGrant there permits it", "namespace: " + tenantA, "kind: ConfigMap"} {
		if !strings.Contains(c.Message, part) {
			t.Errorf("tenant A's ProfileResolved message %q does not say %q", c.Message, part)
		}
	}
	for _, s := range []struct{ namespace, name string }{{tenantA, "a"}, {tenantB, "b"}} {
		if _, err := e.kube.AppsV1().Deployments(s.namespace).Get(e.ctx, s.name, metav1.GetOptions{}); err == nil {
			t.Errorf("session %s/%s has a Deployment without a grant", s.namespace, s.name)
		}
	}

	// Granted later: the session resolves by itself.
	grantA := e.grant(platform, tenantA, profile)
	foreignRevision := func(data map[string]string) string {
		return controller.RevisionName(ref, hashOf(data))
	}
	e.eventually("tenant A's session to run the profile, by grant", mounts(tenantA, "a", foreignRevision(v1)))
	if want := platform + "." + profile + "-" + hashOf(v1); foreignRevision(v1) != want {
		t.Errorf("the revision in the tenant's namespace is named %q, want %q", foreignRevision(v1), want)
	}
	r, err := e.kube.CoreV1().ConfigMaps(tenantA).Get(e.ctx, foreignRevision(v1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(r.Data, v1) || !ptr.Deref(r.Immutable, false) || r.Annotations[controller.RevisionOfAnnotation] != ref {
		t.Errorf("revision %s/%s: data %v, immutable %v, revision-of %q; want the profile's data, immutable, of %q",
			tenantA, r.Name, r.Data, r.Immutable, r.Annotations[controller.RevisionOfAnnotation], ref)
	}
	e.eventually("tenant A's session resolved", func() (bool, error) {
		c, err := e.resolved(tenantA, "a")
		return err == nil && c != nil && c.Status == metav1.ConditionTrue, fmt.Errorf("%+v %v", c, err)
	})

	// An edit rolls the granted tenant's game servers with the profile's own.
	v2 := dataOf("2")
	e.editProfile(platform, profile, v2)
	e.eventually("tenant A's session to roll the edit", mounts(tenantA, "a", foreignRevision(v2)))
	e.eventually("the local session to roll the edit", mounts(platform, "local", controller.RevisionName(profile, hashOf(v2))))

	// Revoked: no new rollout reaches the tenant, which keeps its revision.
	e.revoke(platform, grantA)
	e.eventually("tenant A's session refused once the grant is revoked", refusedFor(tenantA, "a"))
	v3 := dataOf("3")
	e.editProfile(platform, profile, v3)
	e.eventually("the local session to roll the next edit", mounts(platform, "local", controller.RevisionName(profile, hashOf(v3))))
	e.eventually("the profile's rollout to complete without tenant A", func() (bool, error) {
		r, err := e.game.GamesV1().ProfileRollouts(platform).Get(e.ctx, profile, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.TargetHash == hashOf(v3) && r.Status.Phase == gamesv1.RolloutPhaseComplete && r.Status.TotalSessions == 1,
			fmt.Errorf("ProfileRollout: target %s, phase %s, %d sessions", r.Status.TargetHash, r.Status.Phase, r.Status.TotalSessions)
	})
	if got, err := e.mounted(tenantA, "a"); got != foreignRevision(v2) {
		t.Errorf("after the grant was revoked, tenant A's session mounts %q (%v), want %q, the revision it ran", got, err, foreignRevision(v2))
	}
	if _, err := e.kube.CoreV1().ConfigMaps(tenantA).Get(e.ctx, foreignRevision(v2), metav1.GetOptions{}); err != nil {
		t.Errorf("the revision tenant A's game servers mount: %v", err)
	}
	if _, err := e.kube.CoreV1().ConfigMaps(tenantA).Get(e.ctx, foreignRevision(v3), metav1.GetOptions{}); err == nil {
		t.Errorf("revision %s was copied into tenant A's namespace after the grant was revoked", foreignRevision(v3))
	}
	// The copies no pod mounts leave the namespace with the grant.
	e.eventually("the copy no pod mounts deleted from tenant A's namespace", func() (bool, error) {
		_, err := e.kube.CoreV1().ConfigMaps(tenantA).Get(e.ctx, foreignRevision(v1), metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("revision %s: %v", foreignRevision(v1), err)
	})

	// Granted again (every ConfigMap of the namespace): the session catches up.
	e.grant(platform, tenantA, "")
	e.eventually("tenant A's session to catch up once granted again", mounts(tenantA, "a", foreignRevision(v3)))

	// Tenant B was granted another ConfigMap all along: still refused, with
	// nothing of the profile's in its namespace.
	if ok, err := refusedFor(tenantB, "b")(); !ok {
		t.Errorf("tenant B's session: %v", err)
	}
	list, err := e.kube.CoreV1().ConfigMaps(tenantB).List(e.ctx, metav1.ListOptions{LabelSelector: controller.RevisionLabel})
	if err != nil || len(list.Items) > 0 {
		t.Errorf("tenant B's namespace holds %d revisions (%v), want none", len(list.Items), err)
	}
	if refused := ctl.refused(); len(refused) > 0 {
		t.Errorf("the API server refused requests of the artifacts' ClusterRole: %v", refused)
	}
}

// A controller of one namespace (--namespace, the namespaced install) sees
// no other namespace's profiles or grants: it refuses a profile of another
// namespace, and says why.
func TestNamespacedControllerRefusesOtherNamespacesProfiles(t *testing.T) {
	e := newEnv(t)
	platform, tenant := e.namespace(), e.namespace()
	e.createProfile(platform, "arena", dataOf("1"))
	e.grant(platform, tenant, "")
	e.createSession(tenant, "a", platform+"/arena")
	e.startController(adminConfig(), func(o *app.Options) { o.Namespace = tenant })
	e.eventually("the session refused", func() (bool, error) {
		c, err := e.resolved(tenant, "a")
		if err != nil || c == nil {
			return false, err
		}
		return c.Reason == gamesv1.ReasonReferenceNotPermitted && strings.Contains(c.Message, "manages namespace "+fmt.Sprintf("%q", tenant)+" only"),
			fmt.Errorf("ProfileResolved %s %s: %s", c.Status, c.Reason, c.Message)
	})
	// The status is written after the Deployment would have been created.
	if _, err := e.kube.AppsV1().Deployments(tenant).Get(e.ctx, "a", metav1.GetOptions{}); err == nil {
		t.Errorf("a namespaced controller created a Deployment for another namespace's profile")
	}
}

// A cluster that starts serving the ReferenceGrant API after the controller
// started (Gateway API installed later) needs no restart: the controller
// refuses cross-namespace profiles, saying the API is missing, until it
// finds the API on one of its rechecks; then a grant permits as always.
func TestGrantAPIInstalledLater(t *testing.T) {
	e := newEnv(t)
	crds := apiextensionsClient(t)
	const crdName = "referencegrants.gateway.networking.k8s.io"
	if err := crds.Delete(e.ctx, crdName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reinstall := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return manifests.InstallCRDs(ctx, adminConfig(), "testdata/referencegrants.yaml")
	}
	// The later tests need it, whatever happens here.
	t.Cleanup(func() {
		if err := reinstall(); err != nil {
			t.Errorf("installing the ReferenceGrant CRD again: %v", err)
		}
	})
	e.eventually("the ReferenceGrant API gone from discovery", func() (bool, error) {
		_, err := e.kube.Discovery().ServerResourcesForGroupVersion(referenceGrants.GroupVersion().String())
		return apierrors.IsNotFound(err), fmt.Errorf("discovery: %v", err)
	})

	platform, tenant := e.namespace(), e.namespace()
	e.createProfile(platform, "arena", dataOf("1"))
	e.createSession(tenant, "a", platform+"/arena")
	e.startController(adminConfig(), func(o *app.Options) { o.ReferenceGrantRecheck = 500 * time.Millisecond })
	e.eventually("the session refused: no ReferenceGrant API", func() (bool, error) {
		c, err := e.resolved(tenant, "a")
		if err != nil || c == nil {
			return false, err
		}
		return c.Reason == gamesv1.ReasonReferenceNotPermitted && strings.Contains(c.Message, "serves no ReferenceGrant API"),
			fmt.Errorf("ProfileResolved %s %s: %s", c.Status, c.Reason, c.Message)
	})

	if err := reinstall(); err != nil {
		t.Fatal(err)
	}
	e.grant(platform, tenant, "arena")
	e.eventually("the session to run the profile, by grant, with no restart", func() (bool, error) {
		got, err := e.mounted(tenant, "a")
		want := controller.RevisionName(platform+"/arena", hashOf(dataOf("1")))
		return got == want, fmt.Errorf("mounts %q, want %q (%v)", got, want, err)
	})
}
