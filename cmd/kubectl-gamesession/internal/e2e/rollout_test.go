package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/example/gamesession-controller/cmd/kubectl-gamesession/internal/plugin"
	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	"github.com/example/gamesession-controller/pkg/rollout"
)

const (
	// repoRoot is the controller's module, from this package's directory.
	repoRoot = "../../../.."

	// waitTimeout bounds every wait, the plugin's own (--timeout) included.
	// The slowest measured, the halt (a 5s progress deadline, then the
	// Deployment controller's and the controller's reactions), took 6.8s
	// with both cores of the machine kept busy by other processes, a
	// rollout of the 4 sessions one at a time 4.2s; the margin is for CI,
	// whose 2 cores the control plane, the controller and the test share.
	waitTimeout = 2 * time.Minute

	sessions = 4
)

// cp has nodes and kube-controller-manager: the rollouts here are real, the
// Deployments roll and kwok makes their pods Ready.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	controlplane.RunTestMain(m, controlplane.Options{Nodes: 2, ControllerManager: true},
		func(c *controlplane.ControlPlane) { cp = c })
}

func adminConfig() *rest.Config {
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

var installCRDs struct {
	once sync.Once
	err  error
}

// env is one test's: admin clients, its namespace and a kubeconfig file.
type env struct {
	kube       kubernetes.Interface
	game       versioned.Interface
	ns         string
	kubeconfig string
}

// newEnv installs the CRDs (once), and makes the test a namespace of its
// own, so that tests run in parallel without seeing each other's objects.
func newEnv(t *testing.T) env {
	t.Helper()
	t.Parallel()
	installCRDs.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		installCRDs.err = manifests.InstallCRDs(ctx, adminConfig(), manifests.CRDPaths(repoRoot)...)
	})
	if installCRDs.err != nil {
		t.Fatalf("installing the CRDs: %v", installCRDs.err)
	}
	e := env{kube: kubernetes.NewForConfigOrDie(adminConfig()), game: versioned.NewForConfigOrDie(adminConfig())}
	e.ns = controlplane.CreateNamespace(t, e.kube)
	e.kubeconfig = testutil.WriteKubeconfig(t, cp.RESTConfig())
	return e
}

// createProfile creates the profile arena with data and annotations.
func (e env) createProfile(t *testing.T, data, annotations map[string]string) {
	t.Helper()
	_, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "arena",
			Labels:      map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue},
			Annotations: annotations,
		},
		Data: data,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// createSessions creates n minimal sessions of the profile arena.
func (e env) createSessions(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		if _, err := e.game.GamesV1().GameSessions(e.ns).Create(t.Context(), testutil.GameSession(fmt.Sprintf("arena-%d", i), "arena"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// startController runs the controller binary on the test's namespace; it
// is killed when the test ends.
func (e env) startController(t *testing.T) {
	t.Helper()
	testutil.StartController(t, controllerBinary(t), "controller-"+e.ns, nil,
		"--kubeconfig="+e.kubeconfig, "--namespace="+e.ns, "--profile-change-delay=0", "--workers=4", "-v=2")
}

// TestRollout follows a profile through an edit, an undo under a pause, and
// the resume, with every command of the plugin.
func TestRollout(t *testing.T) {
	e := newEnv(t)
	ns, kube, game, kubeconfig := e.ns, e.kube, e.game, e.kubeconfig
	v1 := map[string]string{"game.yaml": "speed: 1\n"}
	v2 := map[string]string{"game.yaml": "speed: 2\n", "maps.yaml": "- dust\n"}
	h1, h2 := hash(v1), hash(v2)
	// One session at a time: the rollout takes steps to follow.
	e.createProfile(t, v1, map[string]string{rollout.AnnotationMaxRolling: "1"})
	e.createSessions(t, sessions)
	e.startController(t)
	status := []string{"rollout", "status", "arena", "-n", ns, "--timeout=" + waitTimeout.String()}

	// The sessions' first content.
	out := run(t, kubeconfig, status...)
	wantCompletion(t, out, h1)

	// An edit, followed from the moment it is made, while the
	// ProfileRollout may still say Complete, of v1: status must wait for
	// v2's, and the API server must agree when it returns.
	updateProfile(t, kube, ns, func(cm *corev1.ConfigMap) { cm.Data = v2 })
	out = run(t, kubeconfig, status...)
	wantCompletion(t, out, h2)
	if !regexp.MustCompile(`moved [0-3]/4  ready [0-3]  busy 0  failed 0  eta \S+\n`).MatchString(out) {
		t.Errorf("status showed no progress on the way:\n%s", out)
	}
	wantSessionsOn(t, game, ns, h2, true)

	// The namespace of the kubeconfig's context, without -n.
	out = run(t, withNamespace(t, kubeconfig, ns), "rollout", "history", "arena")
	wantHistory(t, out, []string{"1 arena-" + h1 + " " + h1, "2 arena-" + h2 + " " + h2 + " current,stable"})

	out = run(t, kubeconfig, "rollout", "pause", "arena", "-n", ns)
	if out != "profile arena paused\n" {
		t.Errorf("pause printed %q", out)
	}
	if cm := getProfile(t, kube, ns); cm.Annotations[rollout.AnnotationPaused] != "true" {
		t.Fatalf("annotations after pause: %v", cm.Annotations)
	}

	// Undo, paused: the profile gets v1 back, the controller targets it and
	// moves nothing.
	out = run(t, kubeconfig, "rollout", "undo", "arena", "-n", ns)
	if want := "profile arena rolled back to revision 1 (arena-" + h1 + ")\n"; out != want {
		t.Errorf("undo printed %q, want %q", out, want)
	}
	cm := getProfile(t, kube, ns)
	if !reflect.DeepEqual(cm.Data, v1) || cm.Annotations[rollout.AnnotationPaused] != "true" ||
		cm.Annotations[rollout.AnnotationMaxRolling] != "1" || cm.Labels[gamesv1.ProfileLabel] != gamesv1.ProfileLabelValue {
		t.Fatalf("profile after undo: data %v, labels %v, annotations %v", cm.Data, cm.Labels, cm.Annotations)
	}
	waitForRollout(t, game, ns, "Paused on "+h1, func(pr *gamesv1.ProfileRollout) bool {
		return pr.Status.TargetHash == h1 && pr.Status.Phase == gamesv1.RolloutPhasePaused
	})
	out = run(t, kubeconfig, "rollout", "status", "arena", "-n", ns, "--watch=false")
	if !strings.Contains(out, "Paused: ") || !strings.Contains(out, "moved 0/4  ready 0  busy 0  failed 0  eta ?") {
		t.Errorf("status of the paused rollout:\n%s", out)
	}
	out = run(t, kubeconfig, "rollout", "history", "arena", "-n", ns)
	wantHistory(t, out, []string{"1 arena-" + h1 + " " + h1 + " current", "2 arena-" + h2 + " " + h2 + " stable"})
	// Back at the first revision, there is none before it.
	if _, err := runErr(t, kubeconfig, "rollout", "undo", "arena", "-n", ns); err == nil ||
		err.Error() != "profile arena has no revision before the current one, 1 (arena-"+h1+")" {
		t.Errorf("undo past the first revision: %v", err)
	}

	out = run(t, kubeconfig, "rollout", "resume", "arena", "-n", ns)
	if out != "profile arena resumed\n" {
		t.Errorf("resume printed %q", out)
	}
	if cm := getProfile(t, kube, ns); cm.Annotations[rollout.AnnotationPaused] != "" {
		t.Fatalf("annotations after resume: %v", cm.Annotations)
	}
	out = run(t, kubeconfig, status...)
	wantCompletion(t, out, h1)
	wantSessionsOn(t, game, ns, h1, true)
	out = run(t, kubeconfig, "rollout", "history", "arena", "-n", ns)
	wantHistory(t, out, []string{"1 arena-" + h1 + " " + h1 + " current,stable", "2 arena-" + h2 + " " + h2})
}

// TestStatusHalted: with the brake at max-failed 0, a content whose pods
// never become Ready halts the rollout at the first session's progress
// deadline, and status exits with an error; undo is the way out, and the
// rollout back completes.
func TestStatusHalted(t *testing.T) {
	e := newEnv(t)
	good := map[string]string{"game.cfg": "v0"}
	e.createProfile(t, good, map[string]string{
		rollout.AnnotationMaxFailed:        "0",
		rollout.AnnotationProgressDeadline: "5s",
	})
	e.createSessions(t, 2)
	e.startController(t)
	status := []string{"rollout", "status", "arena", "-n", e.ns, "--timeout=" + waitTimeout.String()}
	out := run(t, e.kubeconfig, status...)
	if !strings.HasSuffix(out, "complete: 2 of 2 sessions ready, 0 failed\n") {
		t.Errorf("status of the first content:\n%s", out)
	}

	updateProfile(t, e.kube, e.ns, func(cm *corev1.ConfigMap) { cm.Data = brokenData })
	out, err := runErr(t, e.kubeconfig, status...)
	if !errors.Is(err, plugin.ErrHalted) {
		t.Fatalf("status of a rollout that halts: %v, want ErrHalted\n%s", err, out)
	}
	if !strings.Contains(out, "\nHalted: ") || !regexp.MustCompile(`failed [12]  eta \S+\n`).MatchString(out) {
		t.Errorf("status of the halted rollout:\n%s", out)
	}
	// The CLI's exit status: main exits 1 on any error of the command.
	if err == nil || !strings.HasPrefix(err.Error(), "rollout halted: profile arena, revision arena-"+hash(brokenData)+": ") {
		t.Errorf("error %q", err)
	}

	// The brake goes before the way back. A Deployment that exceeded its
	// progress deadline keeps reporting ProgressDeadlineExceeded after
	// its template changes until its new pods show progress, so with
	// max-failed 0 the controller can count the sessions moved back as
	// failed and halt the rollback too (seen once in 9 runs on a loaded
	// machine): a matter of the controller, not of the plugin.
	patch := []byte(`{"metadata":{"annotations":{"` + rollout.AnnotationMaxFailed + `":null}}}`)
	if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Patch(t.Context(), "arena", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	out = run(t, e.kubeconfig, "rollout", "undo", "arena", "-n", e.ns)
	if want := "profile arena rolled back to revision 1 (arena-" + hash(good) + ")\n"; out != want {
		t.Errorf("undo printed %q, want %q", out, want)
	}
	// Without a brake every failure is tolerated: the controller may call
	// the rollback Complete while a session still shows the failure of
	// the revision before, which status reports as it is.
	out = run(t, e.kubeconfig, status...)
	if !regexp.MustCompile(`rollout of profile arena to revision arena-` + hash(good) + ` complete: [0-2] of 2 sessions ready, [0-2] failed\n$`).MatchString(out) {
		t.Errorf("status of the rollback:\n%s", out)
	}
	wantSessionsOn(t, e.game, e.ns, hash(good), false)
}

// brokenData is the profile content whose pods never become Ready: the
// project's kwok stage hack/kwok/pod-never-ready.yaml names its hash (and
// test/integration checks that it still does).
var brokenData = map[string]string{"game.cfg": "crash-on-start"}

// hash is the content hash of a profile with data.
func hash(data map[string]string) string {
	return controller.ProfileHash(&corev1.ConfigMap{Data: data})
}

// run runs the plugin in-process with args, as kubectl would run the binary,
// and returns its output; an error fails the test.
func run(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := runErr(t, kubeconfig, args...)
	if err != nil {
		t.Fatalf("kubectl gamesession %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := plugin.NewRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs(append(args, "--kubeconfig="+kubeconfig))
	start := time.Now()
	err := root.ExecuteContext(t.Context())
	t.Logf("$ kubectl gamesession %s   [%s]\n%s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out.String(), errOut.String())
	if err != nil {
		t.Logf("error: %v", err)
	}
	return out.String(), err
}

// wantCompletion checks that status reported the rollout to hash complete,
// with every session Ready.
func wantCompletion(t *testing.T, out, hash string) {
	t.Helper()
	want := fmt.Sprintf("rollout of profile arena to revision arena-%s complete: %d of %d sessions ready, 0 failed\n", hash, sessions, sessions)
	if !strings.HasSuffix(out, want) {
		t.Errorf("status did not end with %q:\n%s", want, out)
	}
	if !strings.Contains(out, fmt.Sprintf("[####################] moved %d/%d  ready %d  busy 0  failed 0  eta 0s\n", sessions, sessions, sessions)) {
		t.Errorf("status showed no final progress line of all %d sessions:\n%s", sessions, out)
	}
}

// wantSessionsOn checks, after status returned, that the API server agrees:
// the ProfileRollout is Complete of hash, every session runs it and, if
// ready, is Ready.
func wantSessionsOn(t *testing.T, game versioned.Interface, ns, hash string, ready bool) {
	t.Helper()
	pr, err := game.GamesV1().ProfileRollouts(ns).Get(t.Context(), "arena", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Status.TargetHash != hash || !meta.IsStatusConditionTrue(pr.Status.Conditions, gamesv1.ConditionComplete) {
		t.Errorf("ProfileRollout: target %s, conditions %v; want Complete of %s", pr.Status.TargetHash, pr.Status.Conditions, hash)
	}
	list, err := game.GamesV1().GameSessions(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Status.ProfileHash != hash || ready && !meta.IsStatusConditionTrue(s.Status.Conditions, gamesv1.ConditionReady) {
			t.Errorf("session %s: on %s, conditions %v; want Ready on %s", s.Name, s.Status.ProfileHash, s.Status.Conditions, hash)
		}
	}
}

// wantHistory checks the rows of a history table, spacing aside, without
// their CREATED and AGE.
func wantHistory(t *testing.T, out string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) == 0 || strings.Join(strings.Fields(lines[0]), " ") != "REVISION NAME HASH CREATED AGE STATUS" {
		t.Fatalf("history has no header:\n%s", out)
	}
	var got []string
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < 5 {
			t.Fatalf("history row %q", line)
		}
		if _, err := time.Parse(time.RFC3339, f[3]); err != nil {
			t.Errorf("CREATED of %q: %v", line, err)
		}
		got = append(got, strings.Join(append(f[:3:3], f[5:]...), " "))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("history:\n%s\nwant rows %q", out, want)
	}
}

func getProfile(t *testing.T, kube kubernetes.Interface, ns string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), "arena", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func updateProfile(t *testing.T, kube kubernetes.Interface, ns string, mutate func(*corev1.ConfigMap)) {
	t.Helper()
	cm := getProfile(t, kube, ns)
	mutate(cm)
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForRollout watches the profile's ProfileRollout until done holds.
func waitForRollout(t *testing.T, game versioned.Interface, ns, what string, done func(*gamesv1.ProfileRollout) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	lw := cache.NewListWatchFromClient(game.GamesV1().RESTClient(), "profilerollouts", ns, fields.OneTermEqualSelector("metadata.name", "arena"))
	_, err := watchtools.UntilWithSync(ctx, lw, &gamesv1.ProfileRollout{}, nil, func(e watch.Event) (bool, error) {
		pr, ok := e.Object.(*gamesv1.ProfileRollout)
		return ok && e.Type != watch.Deleted && done(pr), nil
	})
	if err != nil {
		t.Fatalf("waiting for the ProfileRollout to be %s: %v", what, err)
	}
}

// withNamespace returns a copy of kubeconfig whose context has namespace ns.
func withNamespace(t *testing.T, kubeconfig, ns string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

var controllerBuild struct {
	once sync.Once
	path string
	err  error
}

// controllerBinary builds cmd/gamesession-controller once per test binary, in
// the controller's own module (testutil.ControllerBinary would build in this
// one), into the control plane's directory, which is removed with it.
func controllerBinary(t *testing.T) string {
	t.Helper()
	controllerBuild.once.Do(func() {
		root, err := filepath.Abs(repoRoot)
		if err != nil {
			controllerBuild.err = err
			return
		}
		controllerBuild.path = filepath.Join(cp.Dir(), "gamesession-controller")
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", controllerBuild.path, "./cmd/gamesession-controller")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			controllerBuild.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		t.Logf("built the controller in %s", time.Since(start).Round(time.Millisecond))
	})
	if controllerBuild.err != nil {
		t.Fatal(controllerBuild.err)
	}
	return controllerBuild.path
}
