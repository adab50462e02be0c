package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// brokenData is the profile content whose pods never become Ready: the
// project's kwok stage hack/kwok/pod-never-ready.yaml matches its hash
// (test/integration checks that it does).
var brokenData = map[string]string{"game.cfg": "crash-on-start"}

// haltSessions is the number of sessions of the halt tests: the first is the
// canary, the others wait.
const haltSessions = 4

// newHaltEnv creates a namespace with a profile under a canary of one and a
// brake at the first failure, and haltSessions sessions of one replica each.
// No controller runs yet.
func newHaltEnv(t *testing.T) *env {
	t.Helper()
	installCRD.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		crdErr = manifests.InstallCRDs(ctx, adminConfig(), manifests.CRDPaths("../..")...)
	})
	if crdErr != nil {
		t.Fatalf("installing the CRDs: %v", crdErr)
	}
	e := &env{
		t:        t,
		ctx:      t.Context(),
		size:     sizes(),
		kube:     kubernetes.NewForConfigOrDie(adminConfig()),
		game:     clientset.NewForConfigOrDie(adminConfig()),
		replicas: map[string]int32{},
	}
	ns, err := e.kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.ToLower(strings.TrimPrefix(t.Name(), "TestFault")) + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	e.ns = ns.Name
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(e.ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:   profile,
			Labels: map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue},
			Annotations: map[string]string{
				rollout.AnnotationCanary: "1", rollout.AnnotationMaxFailed: "0",
			},
		},
		Data: map[string]string{"server.cfg": "revision=0"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create profile: %v", err)
	}
	e.hashes = []string{controller.ProfileHash(cm)}
	for i := range haltSessions {
		e.createSession(fmt.Sprintf("s-%04d", i))
	}
	return e
}

func (e *env) createSession(name string) {
	e.t.Helper()
	e.names = append(e.names, name)
	e.replicas[name] = 1
	_, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: profile,
			Image:      "registry.example.com/arena-server:1.0.0",
			Replicas:   ptr.To[int32](1),
			Ports:      []gamesv1.GameServerPort{{Name: "game", ContainerPort: 7777}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create GameSession %s: %v", name, err)
	}
}

// waitRollout waits until the profile's ProfileRollout passes check.
func (e *env) waitRollout(what string, check func(*gamesv1.ProfileRollout) error) *gamesv1.ProfileRollout {
	e.t.Helper()
	var r *gamesv1.ProfileRollout
	var last error
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, e.size.converge, true, func(ctx context.Context) (bool, error) {
		var err error
		if r, err = e.game.GamesV1().ProfileRollouts(e.ns).Get(ctx, profile, metav1.GetOptions{}); err != nil {
			last = err
			return false, nil
		}
		last = check(r)
		return last == nil, nil
	})
	if err != nil {
		e.t.Fatalf("ProfileRollout %s: timed out waiting for %s: %v (status %+v)", profile, what, last, r)
	}
	return r
}

// haltedOn checks that the rollout is halted on the broken content, with
// moved sessions moved (-1: any).
func haltedOn(broken string, moved int32) func(*gamesv1.ProfileRollout) error {
	return func(r *gamesv1.ProfileRollout) error {
		s := r.Status
		if s.Phase != gamesv1.RolloutPhaseHalted || s.TargetHash != broken || s.HaltedHash != broken {
			return fmt.Errorf("phase %s towards %s, haltedHash %q", s.Phase, s.TargetHash, s.HaltedHash)
		}
		if moved >= 0 && s.MovedSessions != moved {
			return fmt.Errorf("%d moved, want %d", s.MovedSessions, moved)
		}
		return nil
	}
}

// haltOnBrokenContent seeds the sessions Ready, shortens their progress
// deadlines and edits the profile to the broken content: the canary fails and
// the rollout halts. It returns the broken hash.
func (e *env) haltOnBrokenContent() string {
	e.t.Helper()
	e.waitConverged("seeding", e.hashes[0])
	for _, name := range e.names {
		// The session's deadline, which the controller puts on its Deployment.
		_, err := e.game.GamesV1().GameSessions(e.ns).Patch(e.ctx, name, types.MergePatchType,
			[]byte(`{"spec":{"progressDeadlineSeconds":5}}`), metav1.PatchOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
	}
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, profile, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cm.Data = brokenData
	if cm, err = e.kube.CoreV1().ConfigMaps(e.ns).Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	broken := controller.ProfileHash(cm)
	e.hashes = append(e.hashes, broken)
	e.waitRollout("halted on the broken content", haltedOn(broken, 1))
	return broken
}

// haltWatch records every status of the ProfileRollout that a watch sees
// towards the broken content that is not Halted.
type haltWatch struct {
	mu       sync.Mutex
	released []gamesv1.ProfileRolloutStatus
}

func (e *env) watchHalt(broken string) *haltWatch {
	e.t.Helper()
	w, err := e.game.GamesV1().ProfileRollouts(e.ns).Watch(e.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + profile})
	if err != nil {
		e.t.Fatal(err)
	}
	hw := &haltWatch{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*gamesv1.ProfileRollout)
			if !ok || ev.Type == watch.Error || r.Status.TargetHash != broken {
				continue
			}
			if r.Status.Phase != gamesv1.RolloutPhaseHalted || r.Status.HaltedHash != broken {
				hw.mu.Lock()
				hw.released = append(hw.released, r.Status)
				hw.mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(func() { w.Stop(); <-done })
	return hw
}

func (hw *haltWatch) check(t *testing.T) {
	t.Helper()
	hw.mu.Lock()
	defer hw.mu.Unlock()
	if len(hw.released) > 0 {
		t.Errorf("the ProfileRollout was recorded other than Halted on the broken content %d time(s), first: %+v", len(hw.released), hw.released[0])
	}
}

// deleteCanary deletes the failed canary's session, the mitigation a user
// tries first, and waits until the garbage collector has deleted its
// Deployment: no session of the profile has failed any more.
func (e *env) deleteCanary() {
	e.t.Helper()
	canary := e.names[0]
	if err := e.game.GamesV1().GameSessions(e.ns).Delete(e.ctx, canary, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.names = e.names[1:]
	delete(e.replicas, canary)
	// The garbage collector deletes it at kube-controller-manager's pace,
	// not the controller's: once in CI, sharing 2 cores with the other
	// fault tests' control planes, it took over a minute.
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.kube.AppsV1().Deployments(e.ns).Get(ctx, canary, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		e.t.Fatalf("the failed canary's Deployment %s was not garbage-collected: %v", canary, err)
	}
}

// checkHaltHolds checks what the controller in charge does after the
// mitigation: a session created now starts on the stable content, the
// ProfileRollout it records (the canary gone, the new session counted) is
// still Halted on the broken content, the waiting sessions say RolloutHalted,
// and no Deployment moved. generations are those of the Deployments at the
// halt.
func (e *env) checkHaltHolds(broken string, generations map[string]int64) {
	e.t.Helper()
	late := "s-late"
	e.createSession(late)
	e.waitConverged("the waiting sessions and the late one on the stable content", e.hashes[0])
	r := e.waitRollout("the halt recorded by the controller in charge, the canary gone and the late session counted",
		func(r *gamesv1.ProfileRollout) error {
			if err := haltedOn(broken, 0)(r); err != nil {
				return err
			}
			if r.Status.TotalSessions != haltSessions || r.Status.FailedSessions != 0 {
				return fmt.Errorf("%d sessions, %d failed; want %d, none failed", r.Status.TotalSessions, r.Status.FailedSessions, haltSessions)
			}
			return nil
		})
	if r.Status.StableHash != e.hashes[0] {
		e.t.Errorf("stableHash %q, want %q", r.Status.StableHash, e.hashes[0])
	}
	deployments := e.deployments()
	for name, g := range generations {
		d := deployments[name]
		if d == nil || templateHash(d) != e.hashes[0] || d.Generation != g {
			e.t.Errorf("Deployment %s moved during the halt: %+v", name, d)
		}
	}
	for _, name := range e.names {
		s, err := e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileUpToDate); name != late &&
			(c == nil || c.Reason != gamesv1.ReasonRolloutHalted) {
			e.t.Errorf("session %s: ProfileUpToDate %+v, want RolloutHalted", name, c)
		}
	}
}

// waitingGenerations returns the Deployments' generations, but the canary's.
func (e *env) waitingGenerations() map[string]int64 {
	e.t.Helper()
	g := e.generations()
	delete(g, e.names[0])
	return g
}

// TestFaultHaltSurvivesRestart halts a rollout at a failed canary, SIGKILLs
// the controller, and deletes the failed canary while no controller runs.
// The new process's caches show no failed session, but the halt is in the
// ProfileRollout: it holds, nothing moves, and a new session starts on the
// stable revision. Recomputed from the caches alone, as before 49bebe3, the
// next session in name order would have become the canary and moved to the
// broken content.
func TestFaultHaltSurvivesRestart(t *testing.T) {
	t.Parallel() // leaves the control plane alone: see the package doc
	e := newHaltEnv(t)
	first := e.startController("first")
	broken := e.haltOnBrokenContent()
	generations := e.waitingGenerations()
	hw := e.watchHalt(broken)

	first.Kill()
	e.deleteCanary()
	second := e.startController("second")
	e.waitReadyz(second)
	e.checkHaltHolds(broken, generations)
	hw.check(t)
	if state := second.ExitState(); state != "" {
		t.Errorf("%s exited: %s", second.Name, state)
	}
}

// TestFaultHaltSurvivesFailover does the same across a leader failover: the
// leader is killed, the failed canary deleted while no one leads, and the
// new leader keeps the halt.
func TestFaultHaltSurvivesFailover(t *testing.T) {
	t.Parallel() // leaves the control plane alone: see the package doc
	e := newHaltEnv(t)
	const leaseID = "halt-leader"
	flags := leaderElectionFlags(e.ns, leaseID)
	replicas := []*testutil.ControllerProcess{e.startController("replica-a", flags...), e.startController("replica-b", flags...)}
	leader := e.waitLeader(leaseID, replicas, "")
	broken := e.haltOnBrokenContent()
	generations := e.waitingGenerations()
	hw := e.watchHalt(broken)

	leader.Kill()
	killed := time.Now()
	e.deleteCanary()
	next := e.waitLeader(leaseID, replicas, leader.Identity())
	t.Logf("killed %s; %s leads %s later", leader.Name, next.Name, time.Since(killed).Round(100*time.Millisecond))
	e.checkHaltHolds(broken, generations)
	hw.check(t)
	if state := next.ExitState(); state != "" {
		t.Errorf("%s exited: %s", next.Name, state)
	}
}
