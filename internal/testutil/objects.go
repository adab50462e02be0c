package testutil

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// GameSession is a minimal valid session of one replica and one game port,
// named name and using profile: what tests that only need "a session" create.
func GameSession(name, profile string) *gamesv1.GameSession {
	return &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: profile,
			Image:      "registry.example.com/arena-server:1.0.0",
			Replicas:   ptr.To[int32](1),
			Ports:      []gamesv1.GameServerPort{{Name: "game", ContainerPort: 7777}},
		},
	}
}
