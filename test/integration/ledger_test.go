package integration

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
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
