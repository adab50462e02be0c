package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

const (
	benchNS   = "bench"   // sessions, profiles and the controller's Deployments
	ceilingNS = "ceiling" // the same Deployments, unmanaged, for the write ceiling
	noiseNS   = "noise"   // unrelated, unlabelled ConfigMaps

	// The controller runs as the ServiceAccount of artifacts/, with its RBAC:
	// least privilege is exercised under load, its requests go through API
	// Priority and Fairness like in a cluster, and APF's per-flow-schema
	// counters tell its requests apart from the benchmark's (admin, exempt).
	saNamespace = "gamesession-system"
	saName      = "gamesession-controller"
	// The write-ceiling loop has a ServiceAccount of its own, allowed to
	// write Deployments in the ceiling namespace only: APF classifies it like
	// the controller, so both get the same treatment from the server.
	ceilingSAName = "bench-ceiling-writer"

	createWorkers = 32
)

// env is the control plane and everything the scenarios share.
type env struct {
	cfg           config
	root          string
	workDir       string
	controllerBin string
	// controllerEnv is added to the environment of the controllers started
	// (the -compare-env of the other binary).
	controllerEnv []string

	cp           *controlplane.ControlPlane
	adminCfg     *rest.Config
	admin        kubernetes.Interface
	games        clientset.Interface
	saCfg        *rest.Config
	saKubeconfig string
	ceilingCfg   *rest.Config
	tracker      *tracker
	stopTracker  func()
	pids         map[string]int

	running map[*ctlProc]struct{}
	// budgetFlags holds, by binary, the flags its version takes that the
	// benchmark sets: the cluster-wide budget's, the Secret digest key's.
	budgetFlags map[string][]string
	hot         []*hotProfile
	created     atomic.Int64 // sessions created so far
	nonce       atomic.Int64
}

// hotProfile is a profile shared by size sessions: the fan-out under test.
type hotProfile struct {
	size     int
	cm       *corev1.ConfigMap // as last written; edits reuse its resourceVersion, so no GET
	hash     string
	sessions []string // Deployment keys, namespace/name
}

func (e *env) totalSessions() int { return int(e.created.Load()) }

func (e *env) createSession(ctx context.Context, name, profile string) error {
	_, err := e.games.GamesV1().GameSessions(benchNS).Create(ctx, newSession(name, profile, e.cfg.template), metav1.CreateOptions{})
	if err == nil {
		e.created.Add(1)
	}
	return err
}

func (e *env) startControlPlane(ctx context.Context) error {
	cp, err := controlplane.Start(ctx, controlplane.Options{BinDir: e.cfg.controlplaneBin, Out: os.Stderr, APIServerFlags: e.cfg.apiServerFlags})
	if err != nil {
		return err
	}
	e.cp = cp
	e.pids = findComponentPIDs(cp.Dir())
	e.adminCfg = cp.RESTConfig()
	// The benchmark's own client is unthrottled: setting up 7,340 sessions at
	// 5 requests per second would take half an hour.
	e.adminCfg.QPS = -1
	if e.admin, err = kubernetes.NewForConfig(e.adminCfg); err != nil {
		return err
	}
	if e.games, err = clientset.NewForConfig(e.adminCfg); err != nil {
		return err
	}
	if err := manifests.InstallCRDs(ctx, e.adminCfg, manifests.CRDPaths(e.root)...); err != nil {
		return err
	}
	applier, err := manifests.NewApplier(e.adminCfg)
	if err != nil {
		return err
	}
	if err := applier.ApplyFiles(ctx, saNamespace,
		filepath.Join(e.root, "artifacts/namespace.yaml"),
		filepath.Join(e.root, "artifacts/manager/service-account.yaml"),
		filepath.Join(e.root, "artifacts/rbac/clusterrole.yaml"),
		filepath.Join(e.root, "artifacts/rbac/clusterrole-binding.yaml"),
		filepath.Join(e.root, "artifacts/rbac/leader-election-role.yaml"),
		filepath.Join(e.root, "artifacts/rbac/leader-election-role-binding.yaml"),
	); err != nil {
		return err
	}
	for _, ns := range []string{benchNS, ceilingNS, noiseNS} {
		if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if e.saCfg, err = cp.ServiceAccountConfig(ctx, saNamespace, saName); err != nil {
		return err
	}
	if err := e.createCeilingWriter(ctx); err != nil {
		return err
	}
	if e.ceilingCfg, err = cp.ServiceAccountConfig(ctx, saNamespace, ceilingSAName); err != nil {
		return err
	}
	e.ceilingCfg.QPS = -1 // the ceiling is what the server allows, not a client limit
	e.saKubeconfig = filepath.Join(e.workDir, "controller.kubeconfig")
	if err := writeKubeconfig(e.saKubeconfig, e.saCfg); err != nil {
		return err
	}
	trackerClient, err := kubernetes.NewForConfig(protobufConfig(e.adminCfg))
	if err != nil {
		return err
	}
	e.tracker = newTracker(trackerClient)
	ready, done := make(chan struct{}), make(chan struct{})
	trackerCtx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(done)
		e.tracker.run(trackerCtx, ready)
	}()
	// Stopped before the control plane, so that it does not retry against an
	// API server that is going away.
	e.stopTracker = func() {
		cancel()
		<-done
	}
	select {
	case <-ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (e *env) createCeilingWriter(ctx context.Context) error {
	if _, err := e.admin.CoreV1().ServiceAccounts(saNamespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ceilingSAName}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := e.admin.RbacV1().Roles(ceilingNS).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: ceilingSAName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"list", "update", "patch"}},
			{APIGroups: []string{twinGroup}, Resources: twinStatusResources(), Verbs: []string{"update"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := e.admin.RbacV1().RoleBindings(ceilingNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ceilingSAName},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: ceilingSAName},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: saNamespace, Name: ceilingSAName}},
	}, metav1.CreateOptions{})
	return err
}

func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["controller"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["controller"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "controller"}
	kc.CurrentContext = "controller"
	return clientcmd.WriteToFile(*kc, path)
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// profileData is a profile's content; revision makes every edit a new hash.
func (e *env) profileData() map[string]string {
	return map[string]string{
		"server.cfg": "max_players = 16\ntick_rate = 64\nmap_rotation = dust,harbor,citadel\n",
		"motd.txt":   "Welcome to the benchmark arena.\n",
		"revision":   fmt.Sprint(e.nonce.Add(1)),
	}
}

func (e *env) newProfile(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS,
			Labels: map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}},
		Data: e.profileData(),
	}
}

// newSession is a session of the bench's namespace on profile, whose pod is
// template's (see -template).
func newSession(name, profile, template string) *gamesv1.GameSession {
	if template == "realistic" {
		s := testutil.RealisticGameSession(name, profile)
		s.Namespace = benchNS
		// No pods: fan-out is the controller against the API server, and
		// no kube-controller-manager runs to act on the Deployments.
		s.Spec.Replicas = ptr.To[int32](0)
		return s
	}
	return &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNS},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: profile,
			Image:      "registry.example.com/arena-server:1.4.2",
			Replicas:   ptr.To[int32](0),
			Ports:      []gamesv1.GameServerPort{{Name: "game", ContainerPort: 7777, Protocol: corev1.ProtocolUDP}},
			Resources: gamesv1.GameServerResources{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("500m"),
				corev1.ResourceMemory: resource.MustParse("256Mi"),
			}},
		},
	}
}

// createProfiles creates the hot profiles, one per fan-out size, and the
// other profiles up to cfg.profiles in all.
func (e *env) createProfiles(ctx context.Context) error {
	for i, size := range e.cfg.sizes {
		cm, err := e.admin.CoreV1().ConfigMaps(benchNS).Create(ctx, e.newProfile(fmt.Sprintf("hot-%d-%d", i, size)), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		h := &hotProfile{size: size, cm: cm, hash: controller.ProfileHash(cm)}
		for j := range size {
			h.sessions = append(h.sessions, benchNS+"/"+hotSessionName(i, j))
		}
		e.hot = append(e.hot, h)
	}
	others := max(e.cfg.profiles-len(e.hot), 0)
	return parallel(ctx, others, createWorkers, func(ctx context.Context, i int) error {
		_, err := e.admin.CoreV1().ConfigMaps(benchNS).Create(ctx, e.newProfile(fmt.Sprintf("profile-%04d", i)), metav1.CreateOptions{})
		return err
	})
}

func hotSessionName(profile, i int) string { return fmt.Sprintf("hot-%d-%05d", profile, i) }

// createHotSessions creates sessions [from, to) of hot profile p.
func (e *env) createHotSessions(ctx context.Context, p, from, to int) error {
	h := e.hot[p]
	to = min(to, h.size)
	return parallel(ctx, max(to-from, 0), createWorkers, func(ctx context.Context, k int) error {
		return e.createSession(ctx, hotSessionName(p, from+k), h.cm.Name)
	})
}

// createOtherSessions gives every other profile cfg.otherPerProfile
// sessions, which a fan-out of a hot profile must leave alone.
func (e *env) createOtherSessions(ctx context.Context) error {
	others := max(e.cfg.profiles-len(e.hot), 0)
	n := others * e.cfg.otherPerProfile
	return parallel(ctx, n, createWorkers, func(ctx context.Context, i int) error {
		p := i % others
		return e.createSession(ctx, fmt.Sprintf("other-%04d-%d", p, i/others), fmt.Sprintf("profile-%04d", p))
	})
}

// copyToCeiling copies the controller's Deployments of the largest hot
// profile into the ceiling namespace without the managed-by label (so the
// controller never sees them) and without owner: the same objects, byte for
// byte in the fields that matter, for a plain client-go loop to update.
func (e *env) copyToCeiling(ctx context.Context) error {
	largest := e.hot[0]
	for _, h := range e.hot {
		if h.size > largest.size {
			largest = h
		}
	}
	list, err := e.admin.AppsV1().Deployments(benchNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var src []*appsv1.Deployment
	for i := range list.Items {
		d := &list.Items[i]
		if strings.HasPrefix(d.Name, fmt.Sprintf("hot-%d-", indexOf(e.hot, largest))) {
			src = append(src, d)
		}
	}
	if len(src) != largest.size {
		return fmt.Errorf("found %d Deployments of %s, want %d", len(src), largest.cm.Name, largest.size)
	}
	copied := map[string]bool{}
	for _, v := range e.cfg.variants {
		if k, ok := twinKindOf(v); ok && !copied[k.resource] {
			copied[k.resource] = true
			if err := e.copyTwins(ctx, fmt.Sprintf("hot-%d-", indexOf(e.hot, largest)), k); err != nil {
				return err
			}
		}
	}
	return parallel(ctx, len(src), createWorkers, func(ctx context.Context, i int) error {
		d := src[i]
		c := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: ceilingNS, Labels: map[string]string{}},
			Spec:       *d.Spec.DeepCopy(),
		}
		for k, v := range d.Labels {
			if k != controller.LabelManagedBy {
				c.Labels[k] = v
			}
		}
		_, err := e.admin.AppsV1().Deployments(ceilingNS).Create(ctx, c, metav1.CreateOptions{})
		return err
	})
}

func indexOf(hot []*hotProfile, h *hotProfile) int {
	for i := range hot {
		if hot[i] == h {
			return i
		}
	}
	return -1
}

// createNoise creates n unlabelled ConfigMaps and n unlabelled Secrets of
// about size bytes each: the controller watches both kinds, filtered by
// label, and must cache neither.
func (e *env) createNoise(ctx context.Context, n, size int) error {
	blob := strings.Repeat("0123456789abcdef", size/16+1)[:size]
	return parallel(ctx, n, createWorkers, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("unrelated-%05d", i)
		_, err := e.admin.CoreV1().ConfigMaps(noiseNS).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: noiseNS},
			Data:       map[string]string{"blob": blob},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		_, err = e.admin.CoreV1().Secrets(noiseNS).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: noiseNS},
			Data:       map[string][]byte{"blob": []byte(blob)},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// editProfile writes new data into a hot profile and returns the hash the
// controller must roll out and the moment just before the write. It updates
// from the object it last wrote, so the edit is one PUT and no GET.
func (e *env) editProfile(ctx context.Context, h *hotProfile) (string, time.Time, error) {
	cm := h.cm.DeepCopy()
	cm.Data = e.profileData()
	start := time.Now()
	updated, err := e.admin.CoreV1().ConfigMaps(benchNS).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		return "", start, err
	}
	h.cm = updated
	h.hash = controller.ProfileHash(updated)
	return h.hash, start, nil
}
