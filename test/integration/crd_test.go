package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
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
		{"profileRef with a dot in its namespace", func(s *gamesv1.GameSession) { s.Spec.ProfileRef = "a.b/arena" },
			[]string{"spec.profileRef", "optionally after a namespace and a slash"}},
		{"profileRef with two slashes", func(s *gamesv1.GameSession) { s.Spec.ProfileRef = "a/b/arena" },
			[]string{"spec.profileRef", "optionally after a namespace and a slash"}},
		{"profileRef with a namespace too long", func(s *gamesv1.GameSession) { s.Spec.ProfileRef = strings.Repeat("n", 64) + "/arena" },
			[]string{"spec.profileRef", "a namespace is at most 63 characters"}},
		{"profileRef with a name too long", func(s *gamesv1.GameSession) { s.Spec.ProfileRef = strings.Repeat("p", 254) },
			[]string{"spec.profileRef", "a ConfigMap name at most 253"}},
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
		// What the whole pod template would let through to fail later.
		{"image not a reference", func(s *gamesv1.GameSession) { s.Spec.Image = "registry.example.com/Arena:1.0" },
			[]string{"spec.image", "should match"}},
		{"image set twice", func(s *gamesv1.GameSession) { s.Spec.Template = templateOf(gameServer("arena:2")) },
			[]string{"image is set twice"}},
		{"no image anywhere", func(s *gamesv1.GameSession) {
			s.Spec.Image, s.Spec.Template = "", templateOf(corev1.Container{Name: "metrics", Image: "metrics:1"})
		}, []string{"needs an image", "a container named game-server"}},
		{"no container of spec.container's name", func(s *gamesv1.GameSession) {
			s.Spec.Image, s.Spec.Container, s.Spec.Template = "", "server", templateOf(gameServer("arena:2"))
		}, []string{"a container named server"}},
		{"ports set twice", func(s *gamesv1.GameSession) {
			gs := gameServer("")
			gs.Ports = []corev1.ContainerPort{{ContainerPort: 7000}}
			s.Spec.Template = templateOf(gs)
		}, []string{"ports are set twice"}},
		{"resources set twice", func(s *gamesv1.GameSession) {
			s.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			gs := gameServer("")
			gs.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			s.Spec.Template = templateOf(gs)
		}, []string{"resources are set twice"}},
		{"a template image not a reference", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(corev1.Container{Name: "metrics", Image: "Metrics:1"})
		}, []string{"spec.template.spec.containers[0].image", "should match"}},
		{"a sidecar without an image", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(corev1.Container{Name: "metrics"})
		}, []string{"other than the game server's needs an image"}},
		{"the controller's selector label", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""))
			s.Spec.Template.Labels = map[string]string{controller.LabelInstance: "other"}
		}, []string{"must not set app.kubernetes.io/name, app.kubernetes.io/instance or app.kubernetes.io/managed-by"}},
		{"the profile-hash annotation", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""))
			s.Spec.Template.Annotations = map[string]string{gamesv1.ProfileHashAnnotation: "x"}
		}, []string{"must not set games.example.com/profile-hash"}},
		{"a volume named profile", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""))
			s.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "profile", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, []string{"must not have a volume named profile"}},
		{"a mount over the profile", func(s *gamesv1.GameSession) {
			gs := gameServer("")
			gs.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: controller.ProfileMountPath + "/maps"}}
			s.Spec.Template = templateOf(gs)
			s.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, []string{"must not mount anything at or below /etc/gamesession/profile"}},
		{"restartPolicy Never", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""))
			s.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
		}, []string{"restartPolicy must be Always"}},
		{"activeDeadlineSeconds", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""))
			s.Spec.Template.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
		}, []string{"activeDeadlineSeconds must not be set"}},
		{"duplicate container names", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(corev1.Container{Name: "metrics", Image: "m:1"}, corev1.Container{Name: "metrics", Image: "m:2"})
		}, []string{"spec.template.spec.containers[1]", "Duplicate value"}},
		{"ephemeralContainers", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""))
			s.Spec.Template.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox:1"}}}
		}, []string{"spec.template.spec.ephemeralContainers", "ephemeralContainers must not be set"}},
		{"overhead", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""))
			s.Spec.Template.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
		}, []string{"spec.template.spec.overhead", "overhead must not be set"}},
		{"an init container without an image", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""))
			s.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "setup"}}
		}, []string{"each init container in spec.template.spec.initContainers needs an image"}},
		{"an init container named as a container", func(s *gamesv1.GameSession) {
			s.Spec.Template = templateOf(gameServer(""), corev1.Container{Name: "metrics", Image: "m:1"})
			s.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "metrics", Image: "m:1"}}
		}, []string{"a container name may appear only once across spec.template.spec.containers and initContainers"}},
		{"duplicate port names", func(s *gamesv1.GameSession) {
			gs := gameServer("")
			gs.Ports = []corev1.ContainerPort{{Name: "game", ContainerPort: 7000}, {Name: "game", ContainerPort: 7001}}
			s.Spec.Template = templateOf(gs)
		}, []string{"port names must be unique within each container"}},
		{"progress deadline within minReadySeconds", func(s *gamesv1.GameSession) {
			s.Spec.ProgressDeadlineSeconds, s.Spec.MinReadySeconds = ptr.To[int32](10), ptr.To[int32](10)
		}, []string{"progressDeadlineSeconds must be greater than minReadySeconds"}},
		{"Recreate with rollingUpdate", func(s *gamesv1.GameSession) {
			one := intstr.FromInt32(1)
			s.Spec.Strategy = &appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one}}
		}, []string{"rollingUpdate may be set only when strategy.type is RollingUpdate"}},
		{"no surge and no unavailability", func(s *gamesv1.GameSession) {
			zero, none := intstr.FromInt32(0), intstr.FromString("0%")
			s.Spec.Strategy = &appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &none}}
		}, []string{"must not both be 0"}},
		{"maxUnavailable above 100%", func(s *gamesv1.GameSession) {
			over := intstr.FromString("150%")
			s.Spec.Strategy = &appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &over}}
		}, []string{"maxUnavailable must be at most 100%"}},
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

	// Another namespace's profile, and names of the greatest lengths.
	for _, ref := range []string{"platform/arena", strings.Repeat("n", 63) + "/" + strings.Repeat("p", 253), strings.Repeat("p", 253)} {
		s := valid()
		s.Name = ""
		s.GenerateName = "ref-"
		s.Spec.ProfileRef = ref
		if _, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("profileRef %q refused: %v", ref, err)
		}
	}
}

// gameServer is a game server container of that image ("" leaves the image
// to spec.image).
func gameServer(image string) corev1.Container {
	return corev1.Container{Name: "game-server", Image: image}
}

// templateOf is a pod template of those containers.
func templateOf(containers ...corev1.Container) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers}}
}

// A session's name becomes the value of the app.kubernetes.io/instance label
// on its Deployment and pods, and a label value is at most 63 characters:
// the CRD refuses a longer name when the session is created, rather than
// accept a session whose Deployment can never be created.
func TestCRDNameLength(t *testing.T) {
	e := newEnv(t)
	sessions := e.game.GamesV1().GameSessions(e.ns)

	if _, err := sessions.Create(e.ctx, newSession(strings.Repeat("a", 63), "arena", 1), metav1.CreateOptions{}); err != nil {
		t.Errorf("create with a 63-character name: %v", err)
	}

	_, err := sessions.Create(e.ctx, newSession(strings.Repeat("a", 64), "arena", 1), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("create with a 64-character name: got %v, want an Invalid error", err)
	}
	for _, want := range []string{"at most 63 characters", "app.kubernetes.io/instance"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	t.Logf("64 characters: %v", err)

	// A generated name never exceeds 63 characters: the API server cuts a
	// longer generateName down to 58 before it appends its 5 random
	// characters, and only then validates the object.
	long := newSession("", "arena", 1)
	long.GenerateName = strings.Repeat("b", 70) + "-"
	created, err := sessions.Create(e.ctx, long, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create with a 71-character generateName: %v", err)
	}
	if len(created.Name) != 63 || !strings.HasPrefix(created.Name, strings.Repeat("b", 58)) {
		t.Errorf("generated name %q (%d characters), want 58 b's and 5 random characters", created.Name, len(created.Name))
	}
	t.Logf("generateName of 71 characters: created %q", created.Name)
}

// TestCRDWidePrinterColumns: `kubectl get gs` asks the API server for a
// Table and shows the columns of priority 0; `-o wide` adds those of
// priority 1. The default columns say which profile revision the session
// runs and whether its rollout has reached it; the wide ones add what it
// runs and why it is not ready.
func TestCRDWidePrinterColumns(t *testing.T) {
	e := newEnv(t)
	s := e.createSession(newSession("wide", "arena", 1))
	// No controller runs here: the test writes the status the columns read.
	s.Status.ProfileHash = "0123456789abcdef0123"
	s.Status.ProfileRevision = controller.RevisionName("arena", s.Status.ProfileHash)
	message := `Deployment "wide" is rolling out: 0 of 1 replicas ready`
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: gamesv1.ConditionReady,
		Status: metav1.ConditionFalse, Reason: gamesv1.ReasonDeploymentProgressing, Message: message})
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: gamesv1.ConditionProfileUpToDate,
		Status: metav1.ConditionFalse, Reason: gamesv1.ReasonWaitingForTurn, Message: "waiting for its turn"})
	if _, err := e.game.GamesV1().GameSessions(e.ns).UpdateStatus(e.ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	raw, err := e.game.GamesV1().RESTClient().Get().Namespace(e.ns).Resource("gamesessions").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(e.ctx)
	if err != nil {
		t.Fatalf("get a Table of GameSessions: %v", err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatalf("decoding the Table: %v\n%s", err, raw)
	}
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, fmt.Sprintf("%s/%d", c.Name, c.Priority))
	}
	want := []string{"Name/0", "Profile/0", "Desired/0", "Current/0", "Ready/0", "Up-to-date/0", "Status/0", "Rollout/0", "Revision/0", "Age/0",
		"Image/1", "Template-Image/1", "Message/1"}
	if !slices.Equal(columns, want) {
		t.Fatalf("columns (name/priority) %q, want %q", columns, want)
	}
	if len(table.Rows) != 1 || len(table.Rows[0].Cells) != len(columns) {
		t.Fatalf("rows %v, want one of %d cells", table.Rows, len(columns))
	}
	cells := table.Rows[0].Cells
	for i, want := range map[int]string{7: gamesv1.ReasonWaitingForTurn, 8: s.Status.ProfileRevision, 10: s.Spec.Image, 12: message} {
		if cells[i] != want {
			t.Errorf("column %s = %v, want %q", table.ColumnDefinitions[i].Name, cells[i], want)
		}
	}
}
