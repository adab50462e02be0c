package profileack_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/example/gamesession-controller/pkg/profileack"
)

// A game server follows its mounted profile: it applies each new revision's
// files and acknowledges each on its own pod. In a pod, the profile is
// mounted at a path of the pod spec's choosing and the ack function is
// profileack.InClusterAck(); here a temporary directory and a fake API
// server stand in for both.
func Example() {
	dir, err := os.MkdirTemp("", "profile")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// What the kubelet mounts: the profile's files, and .revision.
	_ = os.WriteFile(filepath.Join(dir, "game.ini"), []byte("max_players=16\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, profileack.RevisionFile), []byte("arena-standard-5c7d9f8b"), 0o644)

	// In a pod:
	//
	//	ack, err := profileack.InClusterAck()
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "arena", Name: "arena-7d4b9-x2k8p"}})
	ack := profileack.AckFor(client, "arena", "arena-7d4b9-x2k8p")

	apply := func(ctx context.Context, revision string) error {
		settings, err := os.ReadFile(filepath.Join(dir, "game.ini"))
		if err != nil {
			return err // acknowledged as "<revision> failed: <err>"
		}
		fmt.Printf("applying %s: %s", revision, settings)
		return nil
	}
	ctx, stop := context.WithCancel(context.Background())
	// A game server follows until it shuts down; this example stops after
	// the first acknowledgment.
	_ = profileack.Follow(ctx, dir, 5*time.Second, apply, func(ctx context.Context, revision string, applyErr error) error {
		defer stop()
		return ack(ctx, revision, applyErr)
	})

	pod, err := client.CoreV1().Pods("arena").Get(context.Background(), "arena-7d4b9-x2k8p", metav1.GetOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(profileack.Annotation + ": " + pod.Annotations[profileack.Annotation])
	// Output:
	// applying arena-standard-5c7d9f8b: max_players=16
	// games.example.com/profile-ack: arena-standard-5c7d9f8b
}

// The controller reads the acknowledgments of the pods with Parse, and
// ignores values it cannot read.
func ExampleParse() {
	for _, value := range []string{
		"arena-standard-5c7d9f8b",
		`arena-standard-5c7d9f8b failed: map pool: unknown map "dust3"`,
		"arena-standard-5c7d9f8b failed:",
		"arena-standard-5c7d9f8b done",
		"",
	} {
		ack, ok := profileack.Parse(value)
		fmt.Printf("%q: %+v %v\n", value, ack, ok)
	}
	// Output:
	// "arena-standard-5c7d9f8b": {Revision:arena-standard-5c7d9f8b Failed:false Message:} true
	// "arena-standard-5c7d9f8b failed: map pool: unknown map \"dust3\"": {Revision:arena-standard-5c7d9f8b Failed:true Message:map pool: unknown map "dust3"} true
	// "arena-standard-5c7d9f8b failed:": {Revision:arena-standard-5c7d9f8b Failed:true Message:} true
	// "arena-standard-5c7d9f8b done": {Revision: Failed:false Message:} false
	// "": {Revision: Failed:false Message:} false
}
