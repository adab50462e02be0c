// Package faults injects faults in the middle of a profile fan-out: the
// controller SIGKILLed, the API server gone for a while, etcd restarted,
// another writer editing the controller's Deployments, the leader killed
// again and again. Every time, every session must converge to the profile's
// last hash, and no Deployment may roll more often than the edits it
// received.
//
// The controller runs as a real process (the binary), as in production. The
// package has a control plane of its own: stopping the API server or etcd
// would break the tests running in parallel in test/integration. For the same
// reason the two tests that do so run alone: they are not parallel, and go
// test starts a package's parallel tests only once all of its other tests
// have finished. The others, each in its own namespace with its own
// controllers, run in parallel.
//
// `go test` runs reduced sizes (150 sessions, a 10s outage, 3 failovers);
// -faults.full runs 1,000 sessions, a 30s outage and 5 failovers
// (`make test-faults`), best with -parallel 1: three tests of a thousand
// sessions at once swamp kube-controller-manager on 2 cores.
package faults

import (
	"context"
	"flag"
	"fmt"
	"maps"
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
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

var full = flag.Bool("faults.full", false,
	"run the full sizes: 1,000 sessions, a 30s API server outage, 5 leader failovers")

// size is how big the faults are.
type size struct {
	sessions  int
	outage    time.Duration // how long the API server stays down
	failovers int           // leaders killed in TestFaultLeaderFailoverRepeated
	// fanOutQPS is the client rate limit of the controllers under test. At
	// the default (1000) a fan-out is over in about a second; limited, it
	// lasts long enough (5-10s) to inject a fault when a third of the
	// Deployments carry the new hash.
	fanOutQPS int
	// converge bounds each wait for every session to converge. The slowest
	// measured on 2 busy cores: 2m2s at full size (after the 30s outage),
	// 53s at 300 sessions (seeding).
	converge time.Duration
}

func sizes() size {
	if *full {
		return size{sessions: 1000, outage: 30 * time.Second, failovers: 5, fanOutQPS: 100, converge: 6 * time.Minute}
	}
	return size{sessions: 150, outage: 10 * time.Second, failovers: 3, fanOutQPS: 25, converge: 3 * time.Minute}
}

const (
	profile = "arena"
	// podEvery: one session in podEvery has a replica, whose pod kwok runs;
	// the others have none. A fan-out is the controller against the API
	// server, so pods would add only load, but some sessions must show that
	// Ready still means running pods.
	podEvery = 50
	// leaseWait bounds the wait for a new leader after a SIGKILL: the lease
	// duration of the tests (4s), a retry period and the cache sync.
	leaseWait = 60 * time.Second
)

var (
	cp         *controlplane.ControlPlane
	installCRD sync.Once
	crdErr     error
)

func TestMain(m *testing.M) {
	controlplane.RunTestMain(m, controlplane.Options{
		Nodes:             3,
		ControllerManager: true,
		ControllerManagerFlags: []string{
			// Each rollout costs it a few requests, one after the other: at
			// its default 20 QPS and 5 Deployments at a time, a thousand
			// sessions take minutes to be Ready.
			"--kube-api-qps=500", "--kube-api-burst=1000",
			"--concurrent-deployment-syncs=25", "--concurrent-replicaset-syncs=25",
			// kwok's fake nodes cannot heartbeat (every 20-45s) while the API
			// server is down. Past this grace period the node lifecycle
			// controller marks them NotReady and their pods not Ready, and
			// kwok, unlike a kubelet, never marks those pods Ready again:
			// sessions with pods would stay unready after an outage for a
			// reason of the simulator's, not the controller's.
			"--node-monitor-grace-period=5m",
		},
	}, func(c *controlplane.ControlPlane) { cp = c })
}

// env is one test's namespace, seeded with sessions that are all Ready.
type env struct {
	t     *testing.T
	ctx   context.Context
	size  size
	ns    string
	kube  kubernetes.Interface
	game  clientset.Interface
	names []string
	// replicas is each session's spec.replicas, which its Deployment must
	// end up with whatever anyone else writes there.
	replicas map[string]int32
	// hashes are the profile's hashes, one per edit; hashes[0] is the one
	// the sessions were seeded with.
	hashes []string
}

func adminConfig() *rest.Config {
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0 // the tests' own requests are bounded; let them go as fast as the server
	return cfg
}

// newEnv creates a namespace with one profile and size.sessions sessions of
// it, runs a controller at full speed until every session is Ready, and stops
// it: each test then starts the controllers it puts under fault.
func newEnv(t *testing.T) *env {
	t.Helper()
	installCRD.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		crdErr = manifests.InstallCRDs(ctx, adminConfig(), manifests.CRDPaths("../..")...)
	})
	if crdErr != nil {
		t.Fatalf("installing the GameSession CRD: %v", crdErr)
	}
	kubeCfg := adminConfig()
	// Listing a thousand Deployments every few seconds: protobuf decodes
	// several times faster than JSON, which matters with -race on 2 cores.
	kubeCfg.ContentType = "application/vnd.kubernetes.protobuf"
	e := &env{
		t:        t,
		ctx:      t.Context(),
		size:     sizes(),
		kube:     kubernetes.NewForConfigOrDie(kubeCfg),
		game:     clientset.NewForConfigOrDie(adminConfig()),
		replicas: map[string]int32{},
	}
	// Not deleted afterwards: deleting thousands of objects would only load
	// the next test, and the control plane goes away with the package.
	ns, err := e.kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.ToLower(strings.TrimPrefix(t.Name(), "TestFault")) + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	e.ns = ns.Name

	begin := time.Now()
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(e.ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: profile, Labels: map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}},
		Data:       map[string]string{"server.cfg": "revision=0"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create profile: %v", err)
	}
	e.hashes = []string{controller.ProfileHash(cm)}
	for i := range e.size.sessions {
		name := fmt.Sprintf("s-%04d", i)
		e.names = append(e.names, name)
		e.replicas[name] = 0
		if i%podEvery == 0 {
			e.replicas[name] = 1
		}
	}
	e.parallel(e.names, func(name string) error {
		_, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, &gamesv1.GameSession{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: gamesv1.GameSessionSpec{
				ProfileRef: profile,
				Image:      "registry.example.com/arena-server:1.0.0",
				Replicas:   ptr.To(e.replicas[name]),
				Ports:      []gamesv1.GameServerPort{{Name: "game", ContainerPort: 7777}},
			},
		}, metav1.CreateOptions{})
		return err
	})
	seeder := e.startController("seeder")
	e.waitConverged("seeding", e.hashes[0])
	seeder.Stop(30 * time.Second)
	t.Logf("seeded %d sessions, all Ready, in %s", e.size.sessions, time.Since(begin).Round(100*time.Millisecond))
	return e
}

// parallel runs f for every name, 16 at a time, and fails the test on the
// first error.
func (e *env) parallel(names []string, f func(name string) error) {
	e.t.Helper()
	work := make(chan string)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for name := range work {
				if err := f(name); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		e.t.Fatal(err)
	}
}

// startController runs the controller binary on the test's namespace as
// admin, logging every write (-v=2). extra flags come last and win.
func (e *env) startController(name string, extra ...string) *testutil.ControllerProcess {
	e.t.Helper()
	args := append([]string{
		"--kubeconfig=" + cp.KubeconfigPath(),
		"--namespace=" + e.ns,
		"-v=2",
	}, extra...)
	return testutil.StartController(e.t, testutil.ControllerBinary(e.t, cp.Dir()), name, nil, args...)
}

// slowFlags limit the controller's client so that a fan-out lasts long
// enough to inject a fault in its middle.
func (e *env) slowFlags() []string {
	return []string{fmt.Sprintf("--kube-api-qps=%d", e.size.fanOutQPS), "--kube-api-burst=10"}
}

// waitReadyz waits until the process answers /readyz with 200: its caches
// are synced and its workers run.
func (e *env) waitReadyz(p *testutil.ControllerProcess) {
	e.t.Helper()
	var code int
	var body string
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body = p.Readyz(ctx)
		return code == 200, nil
	})
	if err != nil {
		e.t.Fatalf("%s /readyz = %d %q: %v", p.Name, code, strings.TrimSpace(body), err)
	}
}

// editProfile changes the profile's data and returns the new hash, which it
// also appends to e.hashes.
func (e *env) editProfile() string {
	e.t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, profile, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cm.Data["server.cfg"] = fmt.Sprintf("revision=%d", len(e.hashes))
	if cm, err = e.kube.CoreV1().ConfigMaps(e.ns).Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("edit profile: %v", err)
	}
	hash := controller.ProfileHash(cm)
	e.hashes = append(e.hashes, hash)
	return hash
}

// deployments lists the controller's Deployments in the namespace, by name.
func (e *env) deployments() map[string]*appsv1.Deployment {
	e.t.Helper()
	list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: controller.ManagedDeploymentSelector()})
	if err != nil {
		e.t.Fatalf("list Deployments: %v", err)
	}
	m := make(map[string]*appsv1.Deployment, len(list.Items))
	for i := range list.Items {
		m[list.Items[i].Name] = &list.Items[i]
	}
	return m
}

// generations maps each Deployment to its metadata.generation.
func (e *env) generations() map[string]int64 {
	e.t.Helper()
	g := map[string]int64{}
	for name, d := range e.deployments() {
		g[name] = d.Generation
	}
	return g
}

// carrying counts the Deployments whose pod template carries hash.
func (e *env) carrying(hash string) int {
	e.t.Helper()
	n := 0
	for _, d := range e.deployments() {
		if templateHash(d) == hash {
			n++
		}
	}
	return n
}

func templateHash(d *appsv1.Deployment) string {
	return d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
}

// waitConverged waits until every session is done with hash: its Deployment
// carries it with the session's replicas, kube-controller-manager has seen
// that spec, and the session reports the hash and Ready.
func (e *env) waitConverged(what, hash string) {
	e.t.Helper()
	begin := time.Now()
	lastLog := begin
	var state string
	// Every 2s: each poll lists every Deployment and session.
	err := wait.PollUntilContextTimeout(e.ctx, 2*time.Second, e.size.converge, true, func(ctx context.Context) (bool, error) {
		var done bool
		done, state = e.converged(hash)
		if !done && time.Since(lastLog) >= 10*time.Second {
			e.t.Logf("%s: after %s: %s", what, time.Since(begin).Round(time.Second), state)
			lastLog = time.Now()
		}
		return done, nil
	})
	if err != nil {
		e.t.Fatalf("%s: not converged to hash %s after %s: %s\n%s", what, hash, e.size.converge, state, e.describe(hash))
	}
	e.t.Logf("%s: converged in %s", what, time.Since(begin).Round(100*time.Millisecond))
}

// converged reports whether every session is done with hash, and if not, a
// summary of what is missing.
func (e *env) converged(hash string) (bool, string) {
	deployments := e.deployments()
	sessions, err := e.game.GamesV1().GameSessions(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	problems := map[string][]string{} // what -> sessions
	for _, s := range sessions.Items {
		d := deployments[s.Name]
		switch {
		case d == nil:
			problems["no Deployment"] = append(problems["no Deployment"], s.Name)
		case templateHash(d) != hash:
			problems["Deployment with another hash"] = append(problems["Deployment with another hash"], s.Name)
		case ptr.Deref(d.Spec.Replicas, 1) != e.replicas[s.Name]:
			problems["Deployment with wrong replicas"] = append(problems["Deployment with wrong replicas"], s.Name)
		case d.Status.ObservedGeneration != d.Generation:
			problems["Deployment not observed yet"] = append(problems["Deployment not observed yet"], s.Name)
		}
		switch {
		case s.Status.ProfileHash != hash:
			problems["status with another hash"] = append(problems["status with another hash"], s.Name)
		case s.Status.ObservedGeneration != s.Generation:
			problems["status of an older generation"] = append(problems["status of an older generation"], s.Name)
		case !meta.IsStatusConditionTrue(s.Status.Conditions, gamesv1.ConditionReady):
			problems["not Ready"] = append(problems["not Ready"], s.Name)
		}
	}
	if len(sessions.Items) != len(e.names) {
		problems[fmt.Sprintf("%d sessions listed", len(sessions.Items))] = nil
	}
	if len(problems) == 0 {
		return true, ""
	}
	var b strings.Builder
	for _, what := range slices.Sorted(maps.Keys(problems)) {
		names := problems[what]
		fmt.Fprintf(&b, "%s: %d (e.g. %s); ", what, len(names), strings.Join(names[:min(3, len(names))], ", "))
	}
	return false, b.String()
}

// describe says, for the first few sessions that have not converged, what
// their status, Deployment and pods look like: enough to tell a controller
// that missed an event from a rollout that is really stuck.
func (e *env) describe(hash string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sessions, err := e.game.GamesV1().GameSessions(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	described := 0
	for _, s := range sessions.Items {
		ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
		if s.Status.ProfileHash == hash && ready != nil && ready.Status == metav1.ConditionTrue {
			continue
		}
		if described++; described > 3 {
			break
		}
		fmt.Fprintf(&b, "session %s: generation %d, status %+v\n", s.Name, s.Generation, s.Status)
		d, err := e.kube.AppsV1().Deployments(e.ns).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(&b, "  Deployment: %v\n", err)
			continue
		}
		fmt.Fprintf(&b, "  Deployment: generation %d, replicas %d, hash %s, status %+v\n",
			d.Generation, ptr.Deref(d.Spec.Replicas, 1), templateHash(d), d.Status)
		pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=" + s.Name})
		if err != nil {
			fmt.Fprintf(&b, "  pods: %v\n", err)
			continue
		}
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "  pod %s: node %q, phase %s, conditions %+v, deleting %v\n",
				p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions, p.DeletionTimestamp != nil)
		}
	}
	return b.String()
}

// replicaSets returns the profile hash of each ReplicaSet, by the Deployment
// that controls it.
func (e *env) replicaSets() map[string][]string {
	e.t.Helper()
	list, err := e.kube.AppsV1().ReplicaSets(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: controller.ManagedDeploymentSelector()})
	if err != nil {
		e.t.Fatalf("list ReplicaSets: %v", err)
	}
	m := map[string][]string{}
	for _, rs := range list.Items {
		if owner := metav1.GetControllerOf(&rs); owner != nil && owner.Kind == "Deployment" {
			m[owner.Name] = append(m[owner.Name], rs.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation])
		}
	}
	return m
}

// checkRolledOnce checks, after one edit from hashes[0] to hashes[1], that
// every Deployment rolled exactly once: its generation rose by exactly one
// (a revert and a second roll would add two more) and it has the ReplicaSets
// of the two hashes only. Call it once converged.
func (e *env) checkRolledOnce(before map[string]int64) {
	e.t.Helper()
	var offenders []string
	deployments := e.deployments()
	for _, name := range e.names {
		if d := deployments[name]; d != nil && d.Generation != before[name]+1 {
			offenders = append(offenders, fmt.Sprintf("%s: %d -> %d", name, before[name], d.Generation))
		}
	}
	report(e.t, offenders, "Deployments whose generation did not rise by exactly one for one edit (rolled twice, or not at all)")
	e.checkReplicaSets()
}

// checkReplicaSets checks, after one edit from hashes[0] to hashes[1], that
// every Deployment has exactly two ReplicaSets, the old template's and the
// new one's: kube-controller-manager makes one per distinct template it
// sees, so a Deployment rolled through another template has a third.
func (e *env) checkReplicaSets() {
	e.t.Helper()
	want := slices.Sorted(slices.Values(e.hashes[:2]))
	var offenders []string
	rss := e.replicaSets()
	for _, name := range e.names {
		if got := slices.Sorted(slices.Values(rss[name])); !slices.Equal(got, want) {
			offenders = append(offenders, fmt.Sprintf("%s: %v", name, got))
		}
	}
	report(e.t, offenders, fmt.Sprintf("Deployments without exactly the ReplicaSets of the old and the new hash %v", want))
}

// report fails the test with the first few offenders and their number.
func report(t *testing.T, offenders []string, what string) {
	t.Helper()
	if len(offenders) == 0 {
		return
	}
	t.Errorf("%d %s, e.g.:\n  %s", len(offenders), what, strings.Join(offenders[:min(10, len(offenders))], "\n  "))
}

// patchedAround splits the Deployments by when the controller last changed
// them, from its managedFields entry: before the fault began, or after it
// ended. The entry's time has a resolution of one second, so only whole
// seconds outside the fault count. Both numbers being positive shows that the
// fault landed in the middle of the fan-out.
func (e *env) patchedAround(faultBegin, faultEnd time.Time) (before, after int) {
	e.t.Helper()
	first, last := faultBegin.Truncate(time.Second), faultEnd.Truncate(time.Second)
	for _, d := range e.deployments() {
		for _, f := range d.ManagedFields {
			if f.Manager != controller.Name || f.Subresource != "" || f.Time == nil {
				continue
			}
			switch at := f.Time.Time; {
			case at.Before(first):
				before++
			case at.After(last):
				after++
			}
		}
	}
	return before, after
}
