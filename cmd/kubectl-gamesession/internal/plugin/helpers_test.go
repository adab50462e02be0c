package plugin

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	gamefake "github.com/example/gamesession-controller/pkg/generated/clientset/versioned/fake"
)

const ns = "games"

// t0 is the fixed "now" of the tests' clocks and timestamps.
var t0 = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

// fakes are a Clients on fake clientsets, kept typed for reactors.
type fakes struct {
	kube *kubefake.Clientset
	game *gamefake.Clientset
}

func newFakes(objs ...runtime.Object) fakes {
	var kube, game []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *corev1.ConfigMap:
			kube = append(kube, o)
		default:
			game = append(game, o)
		}
	}
	// The generated clientset has no OpenAPI schema for NewClientset's
	// field-managed tracker: the simple one it is.
	return fakes{kube: kubefake.NewClientset(kube...), game: gamefake.NewSimpleClientset(game...)}
}

func (f fakes) clients() Clients { return Clients{Kube: f.kube, Game: f.game} }

func newProfile(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, ResourceVersion: "7",
			Labels:      map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue, "team": "arena"},
			Annotations: map[string]string{"rollout.games.example.com/max-rolling": "2"},
		},
		Data: data,
	}
}

// newRevisionOf is the revision the controller would make of profile's
// content data, numbered number ("" for none), created at created.
func newRevisionOf(profile string, data map[string]string, number string, created time.Time) *corev1.ConfigMap {
	hash := controller.ProfileHash(&corev1.ConfigMap{Data: data})
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: controller.RevisionName(profile, hash), Namespace: ns,
			CreationTimestamp: metav1.NewTime(created),
			Labels:            map[string]string{controller.RevisionLabel: controller.RevisionLabelValue, gamesv1.ProfileHashAnnotation: hash},
			Annotations:       map[string]string{controller.RevisionOfAnnotation: profile},
		},
		Data: data,
	}
	if number != "" {
		cm.Annotations[controller.RevisionNumberAnnotation] = number
	}
	return cm
}

func hashOf(data map[string]string) string {
	return controller.ProfileHash(&corev1.ConfigMap{Data: data})
}

// sessionOpt shapes a test session.
type sessionOpt func(*gamesv1.GameSession)

func newSession(name, profile, hash string, opts ...sessionOpt) *gamesv1.GameSession {
	s := &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}},
		Spec:       gamesv1.GameSessionSpec{ProfileRef: profile, Image: "arena:1"},
		Status:     gamesv1.GameSessionStatus{ProfileHash: hash},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func ready(since time.Time) sessionOpt {
	return func(s *gamesv1.GameSession) {
		s.Status.Conditions = []metav1.Condition{{Type: gamesv1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: gamesv1.ReasonDeploymentReady, LastTransitionTime: metav1.NewTime(since)}}
	}
}

func notReady(reason string) sessionOpt {
	return func(s *gamesv1.GameSession) {
		s.Status.Conditions = []metav1.Condition{{Type: gamesv1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: reason, LastTransitionTime: metav1.NewTime(t0)}}
	}
}

func busy(s *gamesv1.GameSession) { s.Labels[gamesv1.BusyLabel] = gamesv1.BusyLabelValue }

// newRollout is a ProfileRollout of profile targeting target, in phase.
func newRollout(profile, target, stable string, phase gamesv1.RolloutPhase, complete bool) *gamesv1.ProfileRollout {
	status := metav1.ConditionFalse
	if complete {
		status = metav1.ConditionTrue
	}
	start := metav1.NewTime(t0.Add(-time.Minute))
	return &gamesv1.ProfileRollout{
		ObjectMeta: metav1.ObjectMeta{Name: profile, Namespace: ns},
		Status: gamesv1.ProfileRolloutStatus{
			TargetHash: target, TargetRevision: controller.RevisionName(profile, target),
			StableHash: stable, StableRevision: controller.RevisionName(profile, stable),
			Phase: phase, Message: "message of " + string(phase), StartTime: &start,
			Conditions: []metav1.Condition{{Type: gamesv1.ConditionComplete, Status: status, Reason: "R", LastTransitionTime: start}},
		},
	}
}

func names(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func mustNot(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
