package tenancy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/gamesession-controller/internal/testutil"
)

// blindFor is how long a grant must go unseen by a controller whose watch of
// grants is refused. Its informer then polls with LIST, backing off 0.8s*2^n
// between attempts: after its fourth list the next is at least 6.4s away,
// while a watching controller reacts within a second.
const blindFor = 2 * time.Second

// The ClusterRole's verbs on ReferenceGrants are each needed: without watch,
// a grant made later goes unseen until the informer's next list; without
// list (and with streaming lists off, as older API servers have them), the
// grant cache never fills and the controller never becomes ready. The other
// verbs of artifacts/rbac are shown needed by test/integration
// (TestRBACEachVerbIsNeeded), whose controllers manage one namespace each and
// so never read grants.
func TestGrantVerbsAreNeeded(t *testing.T) {
	t.Run("watch", func(t *testing.T) {
		e := newEnv(t)
		platform, tenant := e.namespace(), e.namespace()
		e.createProfile(platform, "arena", dataOf("1"))
		e.createSession(tenant, "a", platform+"/arena")
		ctl := e.startController(e.controllerIdentity(revokedVerb{"gateway.networking.k8s.io", "referencegrants", "watch"}))
		const grants = "/apis/gateway.networking.k8s.io/v1/referencegrants"
		e.eventually("the grant informer to poll: its watch refused, 4 lists", func() (bool, error) {
			refused, lists := ctl.count("GET "+grants+" watch 403"), ctl.count("GET "+grants+" 200")
			return refused > 0 && lists >= 4, fmt.Errorf("%d watches refused, %d lists", refused, lists)
		})
		e.grant(platform, tenant, "")
		deadline := time.Now().Add(blindFor)
		for time.Now().Before(deadline) {
			if c, _ := e.resolved(tenant, "a"); c != nil && c.Status == metav1.ConditionTrue {
				t.Fatalf("the session resolved by a grant without a watch of grants: the verb is not needed")
			}
			time.Sleep(100 * time.Millisecond)
		}
		c, _ := e.resolved(tenant, "a")
		t.Logf("without watch: the grant unseen for %s (%d lists, %d watches refused); ProfileResolved %+v",
			blindFor, ctl.count("GET "+grants+" 200"), ctl.count("GET "+grants+" watch 403"), c)
	})

	t.Run("list", func(t *testing.T) {
		e := newEnv(t)
		platform := e.namespace()
		e.createProfile(platform, "arena", dataOf("1"))
		e.createSession(platform, "local", "arena")
		cfg := e.controllerIdentity(revokedVerb{"gateway.networking.k8s.io", "referencegrants", "list"})
		p := testutil.StartController(t, testutil.ControllerBinary(t, cp.Dir()), "controller",
			[]string{"KUBE_FEATURE_WatchListClient=false"},
			"--kubeconfig="+testutil.WriteKubeconfig(t, cfg), "--profile-change-delay=0", "-v=2")
		// Only the list is revoked, so any refusal is the list's; the
		// second shows the informer retrying in vain.
		e.eventually("two refused requests", func() (bool, error) {
			n, _ := p.Metrics(e.ctx).Sum("rest_client_requests_total", map[string]string{"code": "403", "method": "GET"})
			return n >= 2, fmt.Errorf("%v refused", n)
		})
		code, body := p.Readyz(e.ctx)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "caches not synced") {
			t.Errorf("/readyz = %d %q, want 503: caches not synced", code, body)
		}
		if _, err := e.kube.AppsV1().Deployments(platform).Get(e.ctx, "local", metav1.GetOptions{}); err == nil {
			t.Errorf("a Deployment was created without the list of grants")
		}
		s, _ := e.game.GamesV1().GameSessions(platform).Get(e.ctx, "local", metav1.GetOptions{})
		if s != nil && len(s.Status.Conditions) > 0 {
			t.Errorf("a session was synced before the caches were: %+v", s.Status.Conditions)
		}
		t.Logf("without list: /readyz %d %q, nothing synced", code, strings.TrimSpace(body))
	})
}
