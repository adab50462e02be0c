package integration

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/fuzzinput"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
)

// templateFuzzSeedEnv reruns TestDryRunRandomTemplates with the sample of a
// failed run.
const templateFuzzSeedEnv = "GAMESESSION_TEMPLATE_FUZZ_SEED"

// templateHazards are mistakes a user can make in a session's pod template
// (or beside it) that Deployment or Pod validation refuses, or that would
// fail later: the CRD must refuse each of them itself.
var templateHazards = []struct {
	name  string
	apply func(r *rand.Rand, s *gamesv1.GameSession)
}{
	{"uppercase repository", func(_ *rand.Rand, s *gamesv1.GameSession) { gameServerOf(s).Image = "registry.example.com/Arena:1" }},
	// These two set and clear both places, so that drawn together, in
	// either order, they remain a mistake.
	{"image set twice", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Image = "registry.example.com/arena:2"
		if gs := gameServerOf(s); gs.Image == "" {
			gs.Image = "registry.example.com/arena:3"
		}
	}},
	{"no image at all", func(_ *rand.Rand, s *gamesv1.GameSession) { gameServerOf(s).Image, s.Spec.Image = "", "" }},
	{"sidecar without image", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Template.Spec.Containers = append(s.Spec.Template.Spec.Containers, corev1.Container{Name: "bare"})
	}},
	{"duplicate container", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Template.Spec.Containers = append(s.Spec.Template.Spec.Containers, *gameServerOf(s).DeepCopy())
	}},
	{"init container named like a container", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Template.Spec.InitContainers = append(s.Spec.Template.Spec.InitContainers, corev1.Container{Name: "game-server", Image: "busybox:1"})
	}},
	{"volume named profile", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Template.Spec.Volumes = append(s.Spec.Template.Spec.Volumes, corev1.Volume{Name: "profile", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}},
	{"mount over the profile", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Template.Spec.Volumes = append(s.Spec.Template.Spec.Volumes, corev1.Volume{Name: "maps", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		gs := gameServerOf(s)
		gs.VolumeMounts = append(gs.VolumeMounts, corev1.VolumeMount{Name: "maps", MountPath: controller.ProfileMountPath})
	}},
	{"restartPolicy", func(r *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Template.Spec.RestartPolicy = []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure}[r.IntN(2)]
	}},
	{"activeDeadlineSeconds", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Template.Spec.ActiveDeadlineSeconds = ptr.To[int64](600)
	}},
	{"selector label", func(_ *rand.Rand, s *gamesv1.GameSession) {
		if s.Spec.Template.Labels == nil {
			s.Spec.Template.Labels = map[string]string{}
		}
		s.Spec.Template.Labels[controller.LabelInstance] = "someone-else"
	}},
	{"ports set twice", func(_ *rand.Rand, s *gamesv1.GameSession) {
		gs := gameServerOf(s)
		if len(gs.Ports) == 0 {
			gs.Ports = []corev1.ContainerPort{{ContainerPort: 7000, Protocol: corev1.ProtocolUDP}}
		}
		s.Spec.Ports = []gamesv1.GameServerPort{{Name: "game", ContainerPort: 7777, Protocol: corev1.ProtocolUDP}}
	}},
	{"duplicate port name", func(_ *rand.Rand, s *gamesv1.GameSession) {
		gs := gameServerOf(s)
		gs.Ports = append(gs.Ports, corev1.ContainerPort{Name: "dup", ContainerPort: 7101}, corev1.ContainerPort{Name: "dup", ContainerPort: 7102})
	}},
	{"overhead", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.Template.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	}},
	{"deadline within minReadySeconds", func(_ *rand.Rand, s *gamesv1.GameSession) {
		s.Spec.MinReadySeconds, s.Spec.ProgressDeadlineSeconds = ptr.To[int32](30), ptr.To[int32](30)
	}},
	{"Recreate with rollingUpdate", func(_ *rand.Rand, s *gamesv1.GameSession) {
		one := intstr.FromInt32(1)
		s.Spec.Strategy = &appsv1.DeploymentStrategy{Type: "Recreate", RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one}}
	}},
	{"maxUnavailable over 100%", func(_ *rand.Rand, s *gamesv1.GameSession) {
		over := intstr.FromString("101%")
		s.Spec.Strategy = &appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &over}}
	}},
}

// TestDryRunRandomTemplates: random pod templates, some with one or two of
// the hazards above, either are refused by the CRD, or give a session whose
// Deployment, and a Pod of its template, the API server accepts (server-side
// dry runs that store nothing). A session the CRD takes whose game servers
// could never run is a hole in the CRD's validation; every hazard must be
// drawn, and refused, in the sample.
func TestDryRunRandomTemplates(t *testing.T) {
	e := newEnv(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(templateFuzzSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", templateFuzzSeedEnv, s, err)
		}
	}
	t.Logf("seed %d (rerun: %s=%d go test -run TestDryRunRandomTemplates ./test/integration/)", seed, templateFuzzSeedEnv, seed)
	r := rand.New(rand.NewPCG(seed, 1))
	e.eventually("the default ServiceAccount", func() (bool, error) {
		_, err := e.kube.CoreV1().ServiceAccounts(e.ns).Get(e.ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
	// What the random templates name, so that a Pod's admission checks its
	// validity, not whether the cluster has them: the CRD cannot know that,
	// and a ReplicaSet reports a missing one (FailedCreate) as for any pod.
	for _, name := range []string{"arena", "arena-legacy"} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := e.kube.CoreV1().ServiceAccounts(e.ns).Create(e.ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"game-critical", "low"} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: 1000}
		if _, err := e.kube.SchedulingV1().PriorityClasses().Create(e.ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	imageReference := regexp.MustCompile(gamesv1.ImageReferencePattern)
	cfg := adminConfig()
	cfg.WarningHandler = &warningLog{counts: map[string]int{}}
	kube, game := kubernetes.NewForConfigOrDie(cfg), clientset.NewForConfigOrDie(cfg)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	const sample = 400
	accepted, refusedHazards := 0, map[string]int{}
	for i := range sample {
		template := fuzzinput.RandomPodTemplate(r)
		session := &gamesv1.GameSession{
			ObjectMeta: metav1.ObjectMeta{Name: "fuzz-" + strconv.Itoa(i), Namespace: e.ns},
			Spec:       gamesv1.GameSessionSpec{ProfileRef: "arena", Replicas: ptr.To[int32](1), Template: &template},
		}
		var hazards []string
		// The generator draws references Kubernetes takes and a registry
		// would not (an uppercase repository): a hazard of its own.
		for _, c := range slices.Concat(template.Spec.InitContainers, template.Spec.Containers) {
			if !imageReference.MatchString(c.Image) {
				hazards = append(hazards, "generated image not a reference")
				break
			}
		}
		if template.Spec.Overhead != nil {
			hazards = append(hazards, "generated overhead")
		}
		if r.IntN(3) == 0 {
			for range 1 + r.IntN(2) {
				h := templateHazards[r.IntN(len(templateHazards))]
				h.apply(r, session)
				hazards = append(hazards, h.name)
			}
		}
		created, err := game.GamesV1().GameSessions(e.ns).Create(e.ctx, session, dryRun)
		if err != nil {
			if !apierrors.IsInvalid(err) {
				t.Fatalf("creating session %d: %v, want an Invalid error or none", i, err)
			}
			if len(hazards) == 0 {
				t.Errorf("the CRD refuses a template without hazards: %v\n%s", err, asJSON(session))
			}
			for _, h := range hazards {
				refusedHazards[h]++
			}
			continue
		}
		if len(hazards) > 0 {
			t.Errorf("the CRD accepts a template with %v:\n%s", hazards, asJSON(session))
		}
		accepted++
		created.UID = uuid.NewUUID()
		d := controller.NewDeployment(created, controller.ProfileHash(&corev1.ConfigMap{Data: map[string]string{"i": strconv.Itoa(i)}}))
		if _, err := kube.AppsV1().Deployments(e.ns).Create(e.ctx, d, dryRun); err != nil {
			t.Errorf("the CRD accepts a session whose Deployment is refused: %v\n%s", err, asJSON(session))
			continue
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: d.Name + "-", Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations},
			Spec:       d.Spec.Template.Spec,
		}
		if _, err := kube.CoreV1().Pods(e.ns).Create(e.ctx, pod, dryRun); err != nil {
			t.Errorf("the CRD accepts a session whose pods are refused: %v\n%s", err, asJSON(session))
		}
	}
	t.Logf("%d of %d sessions accepted; hazards refused: %v", accepted, sample, refusedHazards)
	if accepted < sample/4 {
		t.Errorf("only %d of %d sessions accepted: the sample proves little", accepted, sample)
	}
	for _, h := range templateHazards {
		if refusedHazards[h.name] == 0 {
			t.Errorf("hazard %q was never drawn and refused", h.name)
		}
	}
}

// gameServerOf is the session's game server container in its template.
func gameServerOf(s *gamesv1.GameSession) *corev1.Container {
	for i := range s.Spec.Template.Spec.Containers {
		if c := &s.Spec.Template.Spec.Containers[i]; c.Name == "game-server" {
			return c
		}
	}
	panic("the random template has no game-server container")
}

func asJSON(v any) string {
	data, _ := json.MarshalIndent(v, "", "  ")
	return string(data)
}
