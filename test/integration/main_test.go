// Package integration runs the controller against a real kube-apiserver,
// etcd, kube-controller-manager (garbage collection, Deployments), kube-scheduler
// and kwok (fake nodes that run pods), all started once for this test binary.
//
// Each test gets its own namespace and its own controller, scoped to that
// namespace, so tests run in parallel without seeing each other's objects.
package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

// waitTimeout bounds every wait on the cluster; kwok runs pods in about a
// second, so this only matters when something is broken.
const waitTimeout = 90 * time.Second

var (
	cp         *controlplane.ControlPlane
	installCRD sync.Once
	crdErr     error
)

func TestMain(m *testing.M) {
	controlplane.RunTestMain(m, controlplane.Options{Nodes: 3, ControllerManager: true},
		func(c *controlplane.ControlPlane) { cp = c })
}

// env is one test's view of the cluster: admin clients and its namespace.
type env struct {
	t    *testing.T
	ctx  context.Context
	ns   string
	kube kubernetes.Interface
	game clientset.Interface
}

func newEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	installCRD.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		crdErr = manifests.InstallCRDs(ctx, adminConfig(), manifests.CRDPaths("../..")...)
	})
	if crdErr != nil {
		t.Fatalf("installing the GameSession CRD: %v", crdErr)
	}
	e := &env{
		t:    t,
		ctx:  t.Context(),
		kube: kubernetes.NewForConfigOrDie(adminConfig()),
		game: clientset.NewForConfigOrDie(adminConfig()),
	}
	e.ns = controlplane.CreateNamespace(t, e.kube)
	return e
}

func adminConfig() *rest.Config {
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0 // tests are bounded; let them go as fast as the server
	return cfg
}

// runningController is a controller started in-process by a test.
type runningController struct {
	requests *requestCounter
	cancel   context.CancelFunc
	done     chan error
}

// startController runs the real controller (app.Run, as the binary does),
// scoped to the test's namespace and counting every request it sends. It is
// stopped when the test ends, or earlier with stop.
func (e *env) startController(configure ...func(*app.Options)) *runningController {
	e.t.Helper()
	return e.startControllerAs(adminConfig(), configure...)
}

func (e *env) startControllerAs(cfg *rest.Config, configure ...func(*app.Options)) *runningController {
	e.t.Helper()
	rc := &runningController{requests: newRequestCounter(), done: make(chan error, 1)}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(rc.requests.wrap)
	o := app.NewOptions()
	o.RESTConfig = cfg
	o.Namespace = e.ns
	o.Workers = 4
	o.ProfileChangeDelay = 0
	o.MetricsBindAddress = "0"
	o.HealthProbeBindAddress = "0"
	for _, f := range configure {
		f(o)
	}
	// Verbosity 2 logs every write the controller makes, and no more.
	logger := ktesting.NewLogger(e.t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(context.Background())
	rc.cancel = cancel
	go func() { rc.done <- app.Run(klog.NewContext(ctx, logger), o) }()
	e.t.Cleanup(func() { rc.stop(e.t) })
	return rc
}

// stop cancels the controller and waits for app.Run to return.
func (rc *runningController) stop(t *testing.T) {
	t.Helper()
	rc.cancel()
	select {
	case err, ok := <-rc.done:
		if ok && err != nil {
			t.Errorf("controller returned an error: %v", err)
		}
		if ok {
			close(rc.done)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("controller did not stop within 30s of cancellation")
	}
}

// requestCounter counts the requests a controller sends, by verb, resource
// and object name, from the client side: exactly what the controller asked
// of the API server, not what other components did.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	// answers counts responses by "verb resource code", e.g.
	// "create deployments 403": what the API server allowed or refused.
	answers map[string]int
	urls    []string
	// lists counts, by resource and then by label selector, the lists the
	// API server answered with 200: per informer, as the controller's
	// informers of one resource (profiles and revisions, both ConfigMaps)
	// differ by their selector. An informer appears, at 0, with its first
	// list or watch.
	lists map[string]map[string]int
	// heldLists, by resource, is closed when the lists of that resource
	// that holdLists made wait may go on.
	heldLists map[string]chan struct{}
}

func newRequestCounter() *requestCounter {
	return &requestCounter{counts: make(map[string]int), answers: make(map[string]int), lists: make(map[string]map[string]int)}
}

func (rc *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		verb, resource, name := describeRequest(req)
		selector := req.URL.Query().Get("labelSelector")
		rc.mu.Lock()
		rc.counts[verb+" "+resource]++
		if name != "" {
			rc.counts[verb+" "+resource+" "+name]++
		}
		rc.urls = append(rc.urls, req.Method+" "+req.URL.RequestURI())
		held := rc.heldLists[resource]
		if verb == "list" || verb == "watch" {
			if rc.lists[resource] == nil {
				rc.lists[resource] = make(map[string]int)
			}
			if _, seen := rc.lists[resource][selector]; !seen {
				rc.lists[resource][selector] = 0
			}
		}
		rc.mu.Unlock()
		if verb == "list" && held != nil {
			select {
			case <-held:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			rc.mu.Lock()
			rc.answers[fmt.Sprintf("%s %s %d", verb, resource, resp.StatusCode)]++
			if verb == "list" && resp.StatusCode == http.StatusOK {
				rc.lists[resource][selector]++
			}
			rc.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// describeRequest names a request the way the API server's audit log does:
// verb (get, list, watch, create, update, patch, delete), resource (with
// subresource, e.g. "gamesessions/status") and object name.
func describeRequest(req *http.Request) (verb, resource, name string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// /api/v1/... or /apis/group/version/...
	if len(parts) > 0 && parts[0] == "api" {
		parts = parts[2:]
	} else if len(parts) > 2 {
		parts = parts[3:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			verb = "watch"
		case name == "":
			verb = "list"
		default:
			verb = "get"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	return verb, resource, name
}

// count returns the number of requests with that key: "verb resource" or
// "verb resource name".
func (rc *requestCounter) count(key string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.counts[key]
}

// answered returns how many requests with that "verb resource" key the API
// server answered with that status code.
func (rc *requestCounter) answered(key string, code int) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.answers[fmt.Sprintf("%s %d", key, code)]
}

// holdLists makes every list of the resource the controller sends from now
// on wait, unsent, until release is called: an informer whose watch is
// refused then cannot learn of a change by polling either. Its backoff is
// untouched, so the window does not depend on when its next list is due.
func (rc *requestCounter) holdLists(resource string) (release func()) {
	gate := make(chan struct{})
	rc.mu.Lock()
	if rc.heldLists == nil {
		rc.heldLists = make(map[string]chan struct{})
	}
	rc.heldLists[resource] = gate
	rc.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			rc.mu.Lock()
			delete(rc.heldLists, resource)
			rc.mu.Unlock()
			close(gate)
		})
	}
}

// listsPerInformer returns how many informers of the resource sent a list
// or watch, told apart by their label selectors, and the fewest lists the
// API server answered with 200 for any one of them.
func (rc *requestCounter) listsPerInformer(resource string) (informers, fewest int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, n := range rc.lists[resource] {
		if informers == 0 || n < fewest {
			fewest = n
		}
		informers++
	}
	return informers, fewest
}

// writes returns every counted write (create, update, patch, delete), by key.
func (rc *requestCounter) writes() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	w := map[string]int{}
	for k, n := range rc.counts {
		verb, rest, _ := strings.Cut(k, " ")
		if verb == "create" || verb == "update" || verb == "patch" || verb == "delete" {
			if !strings.Contains(rest, " ") {
				w[k] = n
			}
		}
	}
	return w
}

func (rc *requestCounter) requestURIs() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.urls...)
}

// eventually polls cond until it returns true, failing the test with the
// last error or description after waitTimeout.
func (e *env) eventually(what string, cond func() (bool, error)) {
	e.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		e.t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
	}
}

func (e *env) createProfile(name string, data map[string]string, labelled bool) *corev1.ConfigMap {
	e.t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Data:       data,
	}
	if labelled {
		cm.Labels = map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}
	}
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(e.ctx, cm, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create profile %s: %v", name, err)
	}
	return cm
}

func (e *env) updateProfile(name string, mutate func(*corev1.ConfigMap)) *corev1.ConfigMap {
	e.t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get profile %s: %v", name, err)
	}
	mutate(cm)
	cm, err = e.kube.CoreV1().ConfigMaps(e.ns).Update(e.ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		e.t.Fatalf("update profile %s: %v", name, err)
	}
	return cm
}

func newSession(name, profile string, replicas int32) *gamesv1.GameSession {
	return &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: profile,
			Image:      "registry.example.com/arena-server:1.0.0",
			Replicas:   ptr.To(replicas),
			Ports:      []gamesv1.GameServerPort{{Name: "game", ContainerPort: 7777}},
		},
	}
}

// withSecretEnv makes the session's game server read the Secret's "token"
// into an env var.
func withSecretEnv(s *gamesv1.GameSession, secret string) *gamesv1.GameSession {
	s.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "game-server",
		Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "token"}}}},
	}}}}
	return s
}

// createSecret creates a Secret, labelled for the controller if labelled.
func (e *env) createSecret(name string, data map[string][]byte, labelled bool) *corev1.Secret {
	e.t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
	if labelled {
		secret.Labels = map[string]string{gamesv1.SecretLabel: gamesv1.SecretLabelValue}
	}
	secret, err := e.kube.CoreV1().Secrets(e.ns).Create(e.ctx, secret, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create Secret %s: %v", name, err)
	}
	return secret
}

func (e *env) createSession(s *gamesv1.GameSession) *gamesv1.GameSession {
	e.t.Helper()
	s, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create GameSession: %v", err)
	}
	return s
}

func (e *env) session(name string) *gamesv1.GameSession {
	e.t.Helper()
	s, err := e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get GameSession %s: %v", name, err)
	}
	return s
}

// updateSession applies mutate to the current session and retries on a
// conflict: the controller writes the session's status while a test edits
// its spec, and either write may come first.
func (e *env) updateSession(name string, mutate func(*gamesv1.GameSession)) *gamesv1.GameSession {
	e.t.Helper()
	var updated *gamesv1.GameSession
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		s, err := e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(s)
		updated, err = e.game.GamesV1().GameSessions(e.ns).Update(e.ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("update GameSession %s: %v", name, err)
	}
	return updated
}

func (e *env) deployment(name string) (*appsv1.Deployment, error) {
	return e.kube.AppsV1().Deployments(e.ns).Get(e.ctx, name, metav1.GetOptions{})
}

// waitForCondition waits until the session's condition has that status and reason.
func (e *env) waitForCondition(name, condType string, status metav1.ConditionStatus, reason string) *gamesv1.GameSession {
	e.t.Helper()
	var s *gamesv1.GameSession
	e.eventually(fmt.Sprintf("GameSession %s condition %s=%s (%s)", name, condType, status, reason), func() (bool, error) {
		var err error
		s, err = e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, condType)
		if c == nil {
			return false, fmt.Errorf("no %s condition yet; conditions: %v", condType, s.Status.Conditions)
		}
		return c.Status == status && c.Reason == reason, fmt.Errorf("condition is %s/%s: %s", c.Status, c.Reason, c.Message)
	})
	return s
}

// waitForDeploymentHash waits until the session's Deployment carries the hash.
func (e *env) waitForDeploymentHash(name, hash string) *appsv1.Deployment {
	e.t.Helper()
	var d *appsv1.Deployment
	e.eventually(fmt.Sprintf("Deployment %s with profile hash %s", name, hash), func() (bool, error) {
		var err error
		d, err = e.deployment(name)
		if err != nil {
			return false, err
		}
		got := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
		return got == hash, fmt.Errorf("hash is %q", got)
	})
	return d
}

// waitForReady waits until the session reports Ready for its current spec
// (observedGeneration), with all replicas ready. A status read right after a
// spec change may still describe the previous spec, Ready with its replicas.
func (e *env) waitForReady(name string) *gamesv1.GameSession {
	e.t.Helper()
	var s *gamesv1.GameSession
	e.eventually(fmt.Sprintf("GameSession %s Ready for its spec", name), func() (bool, error) {
		var err error
		s, err = e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
		want := ptr.Deref(s.Spec.Replicas, 1)
		ready := c != nil && c.Status == metav1.ConditionTrue && c.Reason == gamesv1.ReasonDeploymentReady &&
			s.Status.ObservedGeneration == s.Generation && s.Status.ReadyReplicas == want
		return ready, fmt.Errorf("generation %d, observed %d, %d of %d ready, Ready condition %v",
			s.Generation, s.Status.ObservedGeneration, s.Status.ReadyReplicas, want, c)
	})
	return s
}

// warningEvents returns the reasons of Warning events about the named object.
// waitForWarning waits for a Warning Event with the reason on the named
// object. Events are posted asynchronously, after the status that reports the
// same problem, so a test must wait for them, not look once.
func (e *env) waitForWarning(name, reason string) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("a Warning %s Event on %s", reason, name), func() (bool, error) {
		events, err := e.kube.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(ev corev1.Event) bool {
			return ev.Type == corev1.EventTypeWarning && ev.Reason == reason
		}), nil
	})
}
