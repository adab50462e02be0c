package integration

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Scenario 1: the CRD's schema and CEL rules reject bad objects with
// messages a user can act on.
func TestCRDValidation(t *testing.T) {
	e := newEnv(t)
	valid := func() *gamesv1.GameSession { return newSession("s", "arena", 1) }
	cases := []struct {
		name   string
		mutate func(*gamesv1.GameSession)
		want   []string // substrings of the API server's message
	}{
		{"missing profileRef", func(s *gamesv1.GameSession) { s.Spec.ProfileRef = "" }, []string{"spec.profileRef"}},
		{"invalid profileRef", func(s *gamesv1.GameSession) { s.Spec.ProfileRef = "Not_A-Name!" },
			[]string{"spec.profileRef", "profileRef must be a ConfigMap name"}},
		{"missing image", func(s *gamesv1.GameSession) { s.Spec.Image = "" }, []string{"spec.image"}},
		{"image with whitespace", func(s *gamesv1.GameSession) { s.Spec.Image = "arena server" }, []string{"image must not contain whitespace"}},
		{"negative replicas", func(s *gamesv1.GameSession) { s.Spec.Replicas = ptr.To[int32](-1) },
			[]string{"spec.replicas", "should be greater than or equal to 0"}},
		{"too many replicas", func(s *gamesv1.GameSession) { s.Spec.Replicas = ptr.To[int32](101) },
			[]string{"spec.replicas", "should be less than or equal to 100"}},
		{"port out of range", func(s *gamesv1.GameSession) { s.Spec.Ports[0].ContainerPort = 70000 }, []string{"containerPort"}},
		{"duplicate port", func(s *gamesv1.GameSession) {
			s.Spec.Ports = append(s.Spec.Ports, gamesv1.GameServerPort{Name: "other", ContainerPort: 7777, Protocol: "UDP"})
			s.Spec.Ports[0].Protocol = "UDP"
		}, []string{"each containerPort and protocol pair may appear only once"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := valid()
			tc.mutate(s)
			_, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, s, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: got %v, want an Invalid error", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}

	// The defaults fill in what the user left out.
	s := valid()
	s.Spec.Replicas = nil
	s.Spec.Ports[0].Protocol = ""
	created, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create valid GameSession: %v", err)
	}
	if got := ptr.Deref(created.Spec.Replicas, -1); got != 1 {
		t.Errorf("defaulted replicas = %d, want 1", got)
	}
	if got := created.Spec.Ports[0].Protocol; got != "UDP" {
		t.Errorf("defaulted protocol = %q, want UDP", got)
	}
}
