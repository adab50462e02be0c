package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// movesWatch follows the Deployments of the namespace in the API server's
// order and counts those that roll for new Secret data at once: moved (their
// digest is not the one they started with) and not complete.
type movesWatch struct {
	mu      sync.Mutex
	started map[string]string // Deployment → the Secret digest it ran when the watch began
	moving  map[string]bool
	most    int
	moved   map[string]bool
	done    chan struct{}
}

func (e *env) watchSecretMoves(names []string) *movesWatch {
	e.t.Helper()
	list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	mw := &movesWatch{started: map[string]string{}, moving: map[string]bool{}, moved: map[string]bool{}, done: make(chan struct{})}
	for _, d := range list.Items {
		if slices.Contains(names, d.Name) {
			mw.started[d.Name] = d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation]
		}
	}
	w, err := e.kube.AppsV1().Deployments(e.ns).Watch(e.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer close(mw.done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mw.observe(d)
		}
	}()
	e.t.Cleanup(func() { w.Stop(); <-mw.done })
	return mw
}

func (mw *movesWatch) observe(d *appsv1.Deployment) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	start, tracked := mw.started[d.Name]
	if !tracked {
		return
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	complete := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.ReadyReplicas == want
	moved := d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation] != start
	if moved {
		mw.moved[d.Name] = true
	}
	mw.moving[d.Name] = moved && !complete
	n := 0
	for _, m := range mw.moving {
		if m {
			n++
		}
	}
	mw.most = max(mw.most, n)
}

func (mw *movesWatch) counts() (moved, most int) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return len(mw.moved), mw.most
}

// A Secret rotation is a move like a profile edit: with
// --max-moving-sessions=1, the three sessions that read the Secret restart
// one after the other, each once its predecessor is Ready, as the API
// server's own order of Deployment events shows. All three get there.
func TestSecretRotationRespectsTheClusterBudget(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"map": "dust"}, true)
	e.createSecret("match-token", map[string][]byte{"token": []byte("first")}, true)
	e.startController(func(o *app.Options) { o.MaxMovingSessions = 1 })
	names := []string{"reader-1", "reader-2", "reader-3"}
	for _, name := range names {
		e.createSession(withSecretEnv(newSession(name, "arena", 1), "match-token"))
	}
	for _, name := range names {
		e.waitForReady(name)
	}
	e.waitForDeploymentsSettled()
	mw := e.watchSecretMoves(names)

	secret, err := e.kube.CoreV1().Secrets(e.ns).Get(e.ctx, "match-token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data["token"] = []byte("second")
	if _, err := e.kube.CoreV1().Secrets(e.ns).Update(e.ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually("every reader moved to the new digest", func() (bool, error) {
		moved, _ := mw.counts()
		return moved == len(names), fmt.Errorf("%d of %d moved", moved, len(names))
	})
	e.waitForDeploymentsSettled()
	if _, most := mw.counts(); most != 1 {
		t.Errorf("at most %d sessions moved for the rotation at once, want 1 (--max-moving-sessions=1)", most)
	}
}

// The rotation tests' known-broken Secret: its digest, under the tests' key
// in this namespace, is the one hack/kwok/pod-never-ready-secret.yaml names,
// so its readers' pods never get Ready. A fixed namespace, as the digest
// covers it.
const (
	brakeNamespace = "rotation-brake"
	brakeSecret    = "match-token"
)

var (
	brakeDigestKey = bytes.Repeat([]byte{7}, 32)
	brokenToken    = map[string][]byte{"token": []byte("broken")}
)

// secretsHash is the games.example.com/secrets-hash of a pod template that
// reads the one Secret, in brakeNamespace under brakeDigestKey.
func secretsHash(t *testing.T, data map[string][]byte) string {
	t.Helper()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: brakeNamespace, Name: brakeSecret}, Data: data}
	stored, err := controller.SecretDigester(brakeDigestKey)(secret)
	if err != nil {
		t.Fatal(err)
	}
	// The annotation the transform leaves on the cached stand-in.
	digest := stored.(*corev1.Secret).Annotations["games.example.com/data-digest"]
	if digest == "" {
		t.Fatal("the Secret digester left no digest")
	}
	sum := sha256.Sum256([]byte(brakeSecret + "\x00" + digest + "\x00"))
	return hex.EncodeToString(sum[:])[:32]
}

func TestKwokStageHashIsTheBrokenSecret(t *testing.T) {
	stage, err := os.ReadFile("../../hack/kwok/pod-never-ready-secret.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := secretsHash(t, brokenToken); !strings.Contains(string(stage), "'"+want+"'") {
		t.Errorf("hack/kwok/pod-never-ready-secret.yaml does not name %s, the secrets-hash of the broken Secret", want)
	}
}

// newEnvIn is newEnv in a namespace of that name, created for the test.
func newEnvIn(t *testing.T, namespace string) *env {
	t.Helper()
	e := newEnv(t)
	if _, err := e.kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", namespace, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.kube.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", namespace, err)
		}
	})
	e.ns = namespace
	return e
}

// A rotation that breaks game servers stops like a bad profile edit. With
// a canary of 1, max-rolling 1 and max-failed 0, the canary (the first reader
// in name order) restarts onto the broken Secret, its pods never get Ready,
// and once its Deployment exceeds its progress deadline the canary and the
// brake hold the others: the ProfileRollout records both (status.inputs)
// and Events say so. A fixed Secret moves the failed
// session again; the others wait for the halt of the profile's rollout,
// which that failure also halted, until the profile's content changes, and
// then all run the fixed Secret.
func TestSecretRotationThatBreaksHaltsAndHolds(t *testing.T) {
	e := newEnvIn(t, brakeNamespace)
	if _, err := e.kube.CoreV1().Secrets(e.ns).Create(e.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gamesession-controller-secret-digest-key"},
		Data:       map[string][]byte{"key": brakeDigestKey},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createProfile("arena", content("v0"), true)
	e.updateProfile("arena", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationMaxRolling: "1", rollout.AnnotationMaxFailed: "0",
			rollout.AnnotationCanary: "1"}
	})
	e.createSecret(brakeSecret, map[string][]byte{"token": []byte("first")}, true)
	e.startController()
	e.dumpOnFailure("arena")
	names := []string{"reader-1", "reader-2", "reader-3"}
	for _, name := range names {
		e.createSession(withSecretEnv(newSession(name, "arena", 1), brakeSecret))
	}
	for _, name := range names {
		e.waitForReady(name)
	}
	e.shortenProgressDeadline(names...)
	e.waitForDeploymentsSettled()

	rotate := func(token string) {
		t.Helper()
		secret, err := e.kube.CoreV1().Secrets(e.ns).Get(e.ctx, brakeSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		secret.Data = map[string][]byte{"token": []byte(token)}
		if _, err := e.kube.CoreV1().Secrets(e.ns).Update(e.ctx, secret, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func() map[string]string {
		t.Helper()
		hashes := map[string]string{}
		for _, name := range names {
			d, err := e.deployment(name)
			if err != nil {
				t.Fatal(err)
			}
			hashes[name] = d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation]
		}
		return hashes
	}
	broken := secretsHash(t, brokenToken)

	rotate("broken")
	e.waitForRollout("arena", "the brake of the rotation recorded", func(r *gamesv1.ProfileRollout) error {
		if in := r.Status.Inputs; in == nil || !in.Halted || in.FailedSessions != 1 ||
			len(in.Canaries) != 1 || in.Canaries[0].Name != brakeSecret || in.Canaries[0].Failed != "reader-1" {
			return fmt.Errorf("status.inputs %+v", in)
		}
		return nil
	})
	e.eventually("the InputRolloutHalted and InputCanaryFailed Events on the profile", func() (bool, error) {
		return e.hasEvent("arena", controller.EventReasonInputsHalted, "") &&
			e.hasEvent("arena", controller.EventReasonInputCanaryFailed, "reader-1"), nil
	})
	var failed string
	for name, hash := range running() {
		if hash == broken {
			if failed != "" {
				t.Fatalf("both %s and %s restarted onto the broken Secret under max-rolling 1", failed, name)
			}
			failed = name
		}
	}
	if failed != "reader-1" {
		t.Fatalf("the canary reader-1 is not the one on the broken Secret: %v", running())
	}

	// The fix moves the failed session; the others hold, as the profile's
	// rollout halted too.
	rotate("fixed")
	fixed := secretsHash(t, map[string][]byte{"token": []byte("fixed")})
	e.eventually(failed+" on the fixed Secret, Ready", func() (bool, error) {
		s := e.session(failed)
		ready := meta.IsStatusConditionTrue(s.Status.Conditions, gamesv1.ConditionReady)
		return running()[failed] == fixed && ready, fmt.Errorf("runs %s, Ready %t", running()[failed], ready)
	})
	r := e.waitForRollout("arena", "halted on its content", func(r *gamesv1.ProfileRollout) error {
		return rolloutIs(gamesv1.RolloutPhaseHalted, dataHash(content("v0")))(r)
	})
	for name, hash := range running() {
		if name != failed && hash == fixed {
			t.Errorf("%s moved to the fixed Secret while the profile's rollout is halted (%s)", name, r.Status.Message)
		}
	}

	// A new content of the profile releases the halt: every reader runs it,
	// and the fixed Secret, in one restart: a Secret change waiting for the
	// session's turn in the profile's rollout rides along with that move.
	// The move to the new content is no test of deadlines: on a loaded
	// machine (CI runs the unit tests beside these) a reader's pods took
	// 15 s to get Ready, which a 5 s deadline counted as a failure.
	for _, name := range names {
		e.setProgressDeadline(name, "60")
	}
	generations := map[string]int64{}
	for _, name := range names {
		d, err := e.deployment(name)
		if err != nil {
			t.Fatal(err)
		}
		generations[name] = d.Generation
	}
	e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data = content("v1") })
	for _, name := range names {
		e.waitForDeploymentHash(name, dataHash(content("v1")))
	}
	e.waitForDeploymentsSettled()
	for name, hash := range running() {
		if hash != fixed {
			t.Errorf("%s runs the Secret digest %s after the halt ended, want the fixed one %s", name, hash, fixed)
		}
		d, err := e.deployment(name)
		if err != nil {
			t.Fatal(err)
		}
		if d.Generation != generations[name]+1 {
			t.Errorf("Deployment %s: generation %d after the profile edit, was %d: want one restart", name, d.Generation, generations[name])
		}
	}
}
