package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/fuzzinput"
	"github.com/example/gamesession-controller/internal/testutil"
	"github.com/example/gamesession-controller/pkg/controller"
)

// podDefaultsSeedEnv reruns TestPodTemplateDefaultsMatchAPIServer with the
// sample of a failed run.
const podDefaultsSeedEnv = "GAMESESSION_PODDEFAULTS_SEED"

// TestPodTemplateDefaultsMatchAPIServer checks the controller's copy of the
// API server's defaulting (pkg/controller/poddefaults.go) against the real
// kube-apiserver: for a random sample of pod templates, a server-side dry
// run of a Deployment returns the template as it would be stored, and that
// must equal what controller.DefaultPodTemplate makes of the template sent;
// the same for the strategy. The controller compares its desired
// Deployment with the stored one by plain equality, so any default it
// misses is a write on every sync, and any it invents is one too.
//
// The sample must be mostly valid, or it proves little: more than one
// template in ten refused fails the test. Each run draws a new sample; the
// seed is logged, and a failure says how to rerun it.
func TestPodTemplateDefaultsMatchAPIServer(t *testing.T) {
	e := newEnv(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(podDefaultsSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", podDefaultsSeedEnv, s, err)
		}
	}
	t.Logf("seed %d", seed)
	rerun := fmt.Sprintf("rerun: %s=%d go test -run TestPodTemplateDefaultsMatchAPIServer ./test/integration/", podDefaultsSeedEnv, seed)
	r := rand.New(rand.NewPCG(seed, 0))

	warnings := &warningLog{counts: map[string]int{}}
	cfg := adminConfig()
	cfg.WarningHandler = warnings
	kube := kubernetes.NewForConfigOrDie(cfg)

	const (
		sample        = 300
		shownFailures = 5
	)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	var refusals, mismatches []string
	refused, mismatched := 0, 0
	for i := range sample {
		template := fuzzinput.RandomPodTemplate(r)
		if err := reservedUse(&template); err != nil {
			t.Fatalf("seed %d, template %d: RandomPodTemplate %v", seed, i, err)
		}
		// The selector's label is the test's own, so no generated label can
		// make the selector miss the template.
		const caseLabel = "fuzz.example.com/case"
		if template.Labels == nil {
			template.Labels = map[string]string{}
		}
		template.Labels[caseLabel] = strconv.Itoa(i)
		sent := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("defaults-%d", i), Namespace: e.ns},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{caseLabel: strconv.Itoa(i)}},
				Template: template,
				Strategy: randomStrategy(r),
			},
		}
		created, err := kube.AppsV1().Deployments(e.ns).Create(e.ctx, sent.DeepCopy(), dryRun)
		if err != nil {
			if !apierrors.IsInvalid(err) {
				t.Fatalf("seed %d, template %d: dry-run create: %v, want success or an Invalid error", seed, i, err)
			}
			refused++
			if len(refusals) < shownFailures {
				refusals = append(refusals, fmt.Sprintf("template %d: %v", i, err))
			}
			continue
		}

		wantTemplate := sent.Spec.Template.DeepCopy()
		controller.DefaultPodTemplate(wantTemplate)
		wantStrategy := sent.Spec.Strategy.DeepCopy()
		controller.DefaultDeploymentStrategy(wantStrategy)
		var diffs []string
		if !apiequality.Semantic.DeepEqual(created.Spec.Template, *wantTemplate) {
			diffs = append(diffs, "spec.template:\n"+jsonDiff(*wantTemplate, created.Spec.Template))
		}
		if !apiequality.Semantic.DeepEqual(created.Spec.Strategy, *wantStrategy) {
			diffs = append(diffs, "spec.strategy:\n"+jsonDiff(*wantStrategy, created.Spec.Strategy))
		}
		if len(diffs) > 0 {
			mismatched++
			if len(mismatches) < shownFailures {
				mismatches = append(mismatches, fmt.Sprintf("template %d (- ours, + the API server's):\n%s", i, strings.Join(diffs, "")))
			}
		}
	}
	accepted := sample - refused
	t.Logf("seed %d: %d templates, %d accepted (%d defaulted differently), %d refused; API server warnings:\n%s",
		seed, sample, accepted, mismatched, refused, warnings)
	if len(refusals) > 0 {
		t.Logf("first refusals:\n  %s", strings.Join(refusals, "\n  "))
	}
	if mismatched > 0 {
		t.Errorf("seed %d (%s): %d of %d accepted templates defaulted otherwise than by the API server; the first:\n%s",
			seed, rerun, mismatched, accepted, strings.Join(mismatches, "\n"))
	}
	if refused*10 > sample {
		t.Errorf("seed %d (%s): the API server refused %d of %d templates, more than one in ten: RandomPodTemplate should draw valid ones",
			seed, rerun, refused, sample)
	}
}

// reservedUse reports a template that takes what the controller reserves
// (its labels, the profile volume and mount) or lacks the game server.
func reservedUse(t *corev1.PodTemplateSpec) error {
	for _, key := range []string{controller.LabelName, controller.LabelInstance, controller.LabelManagedBy} {
		if _, ok := t.Labels[key]; ok {
			return fmt.Errorf("set the controller's label %s", key)
		}
	}
	for _, v := range t.Spec.Volumes {
		if v.Name == "profile" {
			return fmt.Errorf("named a volume profile")
		}
	}
	containers := append(slices.Clone(t.Spec.InitContainers), t.Spec.Containers...)
	for _, c := range containers {
		for _, m := range c.VolumeMounts {
			if m.MountPath == controller.ProfileMountPath {
				return fmt.Errorf("mounted %s at %s", m.Name, m.MountPath)
			}
		}
	}
	if !slices.ContainsFunc(t.Spec.Containers, func(c corev1.Container) bool { return c.Name == "game-server" }) {
		return fmt.Errorf("drew no game-server container")
	}
	return nil
}

// randomStrategy returns a strategy as people write one: none, a type
// alone, a rolling update with one bound or both, a Recreate.
func randomStrategy(r *rand.Rand) appsv1.DeploymentStrategy {
	bound := func() *intstr.IntOrString {
		if r.IntN(2) == 0 {
			return ptr.To(intstr.FromInt32(int32(1 + r.IntN(3))))
		}
		return ptr.To(intstr.FromString(fmt.Sprintf("%d%%", 10*(1+r.IntN(5)))))
	}
	switch r.IntN(7) {
	case 0:
		return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}
	case 1:
		return appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	case 2:
		return appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: bound()}}
	case 3:
		// No unavailable pods: the default surge keeps the rollout moving.
		return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
	case 4:
		return appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: bound(), MaxUnavailable: bound()}}
	case 5:
		return appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{}}
	default:
		return appsv1.DeploymentStrategy{}
	}
}

// jsonDiff lists the leaves of two API objects' JSON forms that differ, one
// "- path: value" / "+ path: value" pair a line, as readable as the paths
// kubectl explain takes.
func jsonDiff(ours, theirs any) string {
	a, b := testutil.JSONLeaves(ours, true), testutil.JSONLeaves(theirs, true)
	var paths []string
	for p := range a {
		paths = append(paths, p)
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out strings.Builder
	for _, p := range paths {
		va, inA := a[p]
		vb, inB := b[p]
		if inA && inB && va == vb {
			continue
		}
		if inA {
			fmt.Fprintf(&out, "  - %s: %s\n", p, va)
		}
		if inB {
			fmt.Fprintf(&out, "  + %s: %s\n", p, vb)
		}
	}
	if out.Len() == 0 {
		// Equal JSON but not semantically equal: show both whole.
		ja, _ := json.Marshal(ours)
		jb, _ := json.Marshal(theirs)
		fmt.Fprintf(&out, "  - %s\n  + %s\n", ja, jb)
	}
	return out.String()
}
