// Package tenancy tests what one tenant can make the controller do with
// another namespace's objects: a profile of another namespace is used only
// by grant (Gateway API's ReferenceGrant), and its revision is made where the
// tenant's pods can mount it.
//
// Its controllers run cluster-wide, as the artifacts install it, which is why
// the package has a control plane of its own: test/integration runs one
// controller per namespace, in parallel, and a cluster-wide one would
// reconcile their sessions too. For the same reason the tests here run one
// at a time, each with its own controller. The control plane serves a
// stand-in of the ReferenceGrant CRD (testdata/referencegrants.yaml).
package tenancy

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	controlplane.RunTestMain(m, controlplane.Options{
		// TestFairSharesUnderASmallBudget runs 301 game servers, and a
		// kwok node takes 110 pods.
		Nodes:             4,
		ControllerManager: true,
		ControllerManagerFlags: []string{
			// Each Deployment costs it a few requests (its ReplicaSet,
			// a pod, statuses): at its default 20 QPS and 5 Deployments
			// at a time, 300 of them would take well over a minute.
			"--kube-api-qps=500", "--kube-api-burst=1000",
			"--concurrent-deployment-syncs=25", "--concurrent-replicaset-syncs=25",
		},
	}, func(c *controlplane.ControlPlane) { cp = c })
}

// waitTimeout bounds each wait for the controller to react. Its reactions
// take about a second here; twice the slowest seen on 2 busy cores, and then
// some.
const waitTimeout = 60 * time.Second

var (
	installCRDs sync.Once
	crdErr      error
)

// referenceGrants is the version of the stand-in CRD the tests write; the
// controller reads the preferred one the API server serves (v1).
var referenceGrants = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1beta1", Resource: "referencegrants"}

// env is one test's view of the cluster: admin clients.
type env struct {
	t    *testing.T
	ctx  context.Context
	kube kubernetes.Interface
	game clientset.Interface
	dyn  dynamic.Interface
	// ownNamespace is the controller's own namespace, where its Secret
	// digest key lives; "" for the default one's ("default").
	ownNamespace string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	installCRDs.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		crdErr = manifests.InstallCRDs(ctx, adminConfig(),
			append(manifests.CRDPaths("../.."), "testdata/referencegrants.yaml")...)
	})
	if crdErr != nil {
		t.Fatalf("installing the CRDs: %v", crdErr)
	}
	return &env{
		t:    t,
		ctx:  t.Context(),
		kube: kubernetes.NewForConfigOrDie(adminConfig()),
		game: clientset.NewForConfigOrDie(adminConfig()),
		dyn:  dynamic.NewForConfigOrDie(adminConfig()),
	}
}

func adminConfig() *rest.Config {
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// namespace creates a namespace of the test's, deleted when it ends.
func (e *env) namespace() string { return controlplane.CreateNamespace(e.t, e.kube) }

// runningController is a cluster-wide controller run in-process.
type runningController struct {
	cancel context.CancelFunc
	done   chan error

	mu        sync.Mutex
	forbidden map[string]int // "METHOD path" of each request the API server refused
	answered  map[string]int // "METHOD path[ watch] code" of each request answered
}

// startController runs the real controller (app.Run, as the binary does)
// with cfg's identity, cluster-wide unless configure says otherwise. It is
// stopped when the test ends.
func (e *env) startController(cfg *rest.Config, configure ...func(*app.Options)) *runningController {
	e.t.Helper()
	rc := &runningController{done: make(chan error, 1), forbidden: map[string]int{}, answered: map[string]int{}}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return resp, err
			}
			what := req.Method + " " + req.URL.Path
			if req.URL.Query().Get("watch") == "true" {
				what += " watch"
			}
			rc.mu.Lock()
			rc.answered[fmt.Sprintf("%s %d", what, resp.StatusCode)]++
			if resp.StatusCode == http.StatusForbidden {
				rc.forbidden[req.Method+" "+req.URL.Path]++
			}
			rc.mu.Unlock()
			return resp, err
		})
	})
	o := app.NewOptions()
	o.RESTConfig = cfg
	o.Workers = 4
	o.ProfileChangeDelay = 0
	o.MetricsBindAddress = "0"
	o.HealthProbeBindAddress = "0"
	if e.ownNamespace != "" {
		o.SecretDigestKey = e.ownNamespace + "/" + o.SecretDigestKey
	}
	for _, f := range configure {
		f(o)
	}
	logger := ktesting.NewLogger(e.t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(context.Background())
	rc.cancel = cancel
	go func() { rc.done <- app.Run(klog.NewContext(ctx, logger), o) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-rc.done:
			if err != nil {
				e.t.Errorf("controller returned an error: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Errorf("controller did not stop within 30s of cancellation")
		}
	})
	return rc
}

// refused returns the requests the API server refused, by method and path.
func (rc *runningController) refused() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string]int{}
	for k, v := range rc.forbidden {
		out[k] = v
	}
	return out
}

// count returns how many requests were answered as what says ("METHOD
// path[ watch] code").
func (rc *runningController) count(what string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.answered[what]
}

// answers returns how many requests were answered as each "METHOD path[
// watch] code".
func (rc *runningController) answers() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return maps.Clone(rc.answered)
}

// apiextensionsClient is the CRD client, for the test that removes the
// ReferenceGrant CRD for a while.
func apiextensionsClient(t *testing.T) dynamic.ResourceInterface {
	t.Helper()
	return dynamic.NewForConfigOrDie(adminConfig()).Resource(schema.GroupVersionResource{
		Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// eventually polls cond until it holds, failing the test after waitTimeout.
func (e *env) eventually(what string, cond func() (bool, error)) {
	e.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		e.t.Fatalf("timed out after %s waiting for %s (last: %v)", waitTimeout, what, last)
	}
}

func (e *env) createProfile(namespace, name string, data map[string]string) {
	e.t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}},
		Data: data,
	}
	if _, err := e.kube.CoreV1().ConfigMaps(namespace).Create(e.ctx, cm, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create profile %s/%s: %v", namespace, name, err)
	}
}

func (e *env) editProfile(namespace, name string, data map[string]string) {
	e.t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(namespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cm.Data = data
	if _, err := e.kube.CoreV1().ConfigMaps(namespace).Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("edit profile %s/%s: %v", namespace, name, err)
	}
}

func (e *env) createSession(namespace, name, profileRef string) {
	e.t.Helper()
	e.createSessionWith(namespace, name, profileRef, nil)
}

// createSessionWith is createSession with a pod template (nil: none).
func (e *env) createSessionWith(namespace, name, profileRef string, template *corev1.PodTemplateSpec) {
	e.t.Helper()
	s := &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: profileRef,
			Image:      "registry.example.com/arena-server:1.0.0",
			Replicas:   ptr.To[int32](1),
			Ports:      []gamesv1.GameServerPort{{Name: "game", ContainerPort: 7777}},
			Template:   template,
		},
	}
	if _, err := e.game.GamesV1().GameSessions(namespace).Create(e.ctx, s, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create session %s/%s: %v", namespace, name, err)
	}
}

// grant creates a ReferenceGrant in namespace that lets GameSessions of
// from use its ConfigMap name ("" for all), and returns its name.
func (e *env) grant(namespace, from, name string) string {
	e.t.Helper()
	to := map[string]interface{}{"group": "", "kind": "ConfigMap"}
	if name != "" {
		to["name"] = name
	}
	grantName := fmt.Sprintf("sessions-of-%s-%s", from, name)
	if name == "" {
		grantName = "sessions-of-" + from
	}
	obj := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": referenceGrants.GroupVersion().String(),
		"kind":       "ReferenceGrant",
		"metadata":   map[string]interface{}{"name": grantName, "namespace": namespace},
		"spec": map[string]interface{}{
			"from": []interface{}{map[string]interface{}{"group": gamesv1.SchemeGroupVersion.Group, "kind": "GameSession", "namespace": from}},
			"to":   []interface{}{to},
		},
	}}
	if _, err := e.dyn.Resource(referenceGrants).Namespace(namespace).Create(e.ctx, obj, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create ReferenceGrant %s/%s: %v", namespace, grantName, err)
	}
	return grantName
}

func (e *env) revoke(namespace, grant string) {
	e.t.Helper()
	if err := e.dyn.Resource(referenceGrants).Namespace(namespace).Delete(e.ctx, grant, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete ReferenceGrant %s/%s: %v", namespace, grant, err)
	}
}

// resolved returns the session's ProfileResolved condition, nil if none.
func (e *env) resolved(namespace, name string) (*metav1.Condition, error) {
	s, err := e.game.GamesV1().GameSessions(namespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileResolved), nil
}

// mounted returns the revision the session's Deployment mounts, "" if it
// has no Deployment.
func (e *env) mounted(namespace, name string) (string, error) {
	d, err := e.kube.AppsV1().Deployments(namespace).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "profile" && v.ConfigMap != nil {
			return v.ConfigMap.Name, nil
		}
	}
	return "", fmt.Errorf("deployment %s/%s mounts no profile", namespace, name)
}
