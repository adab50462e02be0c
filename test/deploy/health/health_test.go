// Package health checks that GitOps tools read the health of GameSessions and
// ProfileRollouts right: kstatus's own Compute (what Flux and kstatus-based
// waiters run) and the Argo CD health scripts the chart ships, on objects the
// real controller put in each state on a real control plane.
//
// It lives in the test/deploy module because cli-utils requires
// controller-runtime, which must stay out of the controller's module graph.
package health

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/controlplane"
	"github.com/example/gamesession-controller/internal/manifests"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	clientset "github.com/example/gamesession-controller/pkg/generated/clientset/versioned"
	"github.com/example/gamesession-controller/pkg/rollout"
)

const (
	argoHealthLua = "../../../charts/gamesession-controller/files/argocd-health.lua"
	// argoRolloutHealthLua is the check of ProfileRollouts.
	argoRolloutHealthLua = "../../../charts/gamesession-controller/files/argocd-health-profilerollout.lua"
	// waitTimeout bounds each wait for a state. The slowest, a halted
	// rollout, needs kwok pods, a 5 s progress deadline and the Deployment
	// controller's resync: about 20 s here, alone.
	waitTimeout = 2 * time.Minute
)

// brokenData is the profile content whose pods the project's kwok stage
// (hack/kwok/pod-never-ready.yaml) keeps unready.
var brokenData = map[string]string{"game.cfg": "crash-on-start"}

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	controlplane.RunTestMain(m, controlplane.Options{Nodes: 2, ControllerManager: true},
		func(c *controlplane.ControlPlane) { cp = c })
}

// TestHealth puts sessions, and their profiles' rollouts, in each state and
// reads them back as Flux (kstatus) and Argo CD (the chart's Lua scripts) do.
func TestHealth(t *testing.T) {
	ctx := t.Context()
	cfg := cp.RESTConfig()
	if err := manifests.InstallCRDs(ctx, cfg, manifests.CRDPaths("../../..")...); err != nil {
		t.Fatalf("installing the CRD: %v", err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	game := clientset.NewForConfigOrDie(cfg)
	ns := controlplane.CreateNamespace(t, kube)
	h := &harness{t: t, ctx: ctx, ns: ns, kube: kube, game: game, dynamic: dynamic.NewForConfigOrDie(cfg)}
	h.rejectDeploymentsNamed("rejected")
	h.startController()

	h.createProfile("good", map[string]string{"game.cfg": "v0"}, nil)
	h.createSession("ready", "good")
	h.createSession("missing", "no-such-profile")
	h.createSession("rejected", "good")

	// A paused rollout, and one held by a canary that never gets Ready.
	h.createProfile("paused", map[string]string{"game.cfg": "v0"}, map[string]string{rollout.AnnotationPaused: "true"})
	h.createProfile("canary", map[string]string{"game.cfg": "v0"}, map[string]string{rollout.AnnotationCanary: "1"})
	// A rollout whose canary fails: the brake halts it.
	h.createProfile("halting", map[string]string{"game.cfg": "v0"},
		map[string]string{rollout.AnnotationCanary: "1", rollout.AnnotationMaxFailed: "0"})
	for _, name := range []string{"paused-a", "canary-a", "canary-b", "halting-a", "halting-b"} {
		h.createSession(name, name[:len(name)-2])
	}
	for _, name := range []string{"ready", "paused-a", "canary-a", "canary-b", "halting-a", "halting-b"} {
		h.waitFor(name, gamesv1.ConditionReady, gamesv1.ReasonDeploymentReady)
	}
	// Fail the halting profile's canary fast: the session's own deadline,
	// which the controller puts on its Deployment.
	h.patchSession("halting-a", `{"spec":{"progressDeadlineSeconds":5}}`)
	h.updateProfileData("paused", map[string]string{"game.cfg": "v1"})
	h.updateProfileData("canary", brokenData)
	h.updateProfileData("halting", brokenData)

	script, err := os.ReadFile(argoHealthLua)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		session string
		// what the controller reports: condition type and reason
		conditionType, reason string
		kstatus               status.Status
		argo                  string
	}{
		{"ready", gamesv1.ConditionReady, gamesv1.ReasonDeploymentReady, status.CurrentStatus, "Healthy"},
		{"missing", gamesv1.ConditionStalled, gamesv1.ReasonProfileNotFound, status.FailedStatus, "Degraded"},
		{"rejected", gamesv1.ConditionStalled, gamesv1.ReasonDeploymentInvalid, status.FailedStatus, "Degraded"},
		{"paused-a", gamesv1.ConditionReconciling, gamesv1.ReasonRolloutPaused, status.InProgressStatus, "Suspended"},
		{"canary-a", gamesv1.ConditionReconciling, gamesv1.ReasonDeploymentProgressing, status.InProgressStatus, "Progressing"},
		{"canary-b", gamesv1.ConditionReconciling, gamesv1.ReasonWaitingForTurn, status.InProgressStatus, "Progressing"},
		{"halting-a", gamesv1.ConditionStalled, gamesv1.ReasonProgressDeadlineExceeded, status.FailedStatus, "Degraded"},
		{"halting-b", gamesv1.ConditionStalled, gamesv1.ReasonRolloutHalted, status.FailedStatus, "Degraded"},
	}
	for _, tc := range tests {
		t.Run(tc.session, func(t *testing.T) {
			h.t = t
			h.waitFor(tc.session, tc.conditionType, tc.reason)
			checkHealth(ctx, t, h.dynamic, "gamesessions", ns, tc.session, string(script), tc.kstatus, tc.argo)
		})
	}

	// The profiles' rollouts, in the states the sessions above are in:
	// complete (good), in its canary (canary: its canary never gets Ready),
	// paused, and halted by the brake (halting). Each is checked for the
	// profile's current content, so that a rollout recorded for the content
	// before the edit does not pass.
	rolloutScript, err := os.ReadFile(argoRolloutHealthLua)
	if err != nil {
		t.Fatal(err)
	}
	rollouts := []struct {
		profile               string
		phase                 gamesv1.RolloutPhase
		conditionType, reason string
		kstatus               status.Status
		argo                  string
	}{
		{"good", gamesv1.RolloutPhaseComplete, gamesv1.ConditionComplete, gamesv1.ReasonRolloutComplete, status.CurrentStatus, "Healthy"},
		{"canary", gamesv1.RolloutPhaseCanary, gamesv1.ConditionReconciling, gamesv1.ReasonRolloutProgressing, status.InProgressStatus, "Progressing"},
		{"paused", gamesv1.RolloutPhasePaused, gamesv1.ConditionReconciling, gamesv1.ReasonRolloutPaused, status.InProgressStatus, "Suspended"},
		{"halting", gamesv1.RolloutPhaseHalted, gamesv1.ConditionStalled, gamesv1.ReasonRolloutHalted, status.FailedStatus, "Degraded"},
	}
	for _, tc := range rollouts {
		t.Run("ProfileRollout "+tc.profile, func(t *testing.T) {
			h.t = t
			h.waitForRollout(tc.profile, tc.phase, tc.conditionType, tc.reason)
			checkHealth(ctx, t, h.dynamic, "profilerollouts", ns, tc.profile, string(rolloutScript), tc.kstatus, tc.argo)
		})
	}
	h.t = t

	// A ProfileRollout the controller created but has not written a status
	// to yet (it creates, then writes the status) is Progressing for the
	// script. kstatus cannot tell it from a settled one: an object of an
	// unknown kind without conditions is Current to it.
	obj, err := h.dynamic.Resource(gamesv1.SchemeGroupVersion.WithResource("profilerollouts")).Namespace(ns).
		Get(ctx, "good", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(obj.Object, "status")
	if health, _, err := argoHealth(string(rolloutScript), obj); err != nil || health != "Progressing" {
		t.Errorf("Argo CD health of a ProfileRollout without status: got %s (%v), want Progressing", health, err)
	}
	// The other stalls, which need more than this test sets up: sessions
	// that hold the rollout up, and a revision that cannot be created, which
	// is Degraded even while the rollout is paused: it needs someone to act.
	for _, stall := range []struct{ phase, reason string }{
		{string(gamesv1.RolloutPhaseRolling), gamesv1.ReasonSessionsBlocked},
		{string(gamesv1.RolloutPhasePaused), gamesv1.ReasonRevisionCreateFailed},
	} {
		obj := obj.DeepCopy()
		obj.Object["status"] = map[string]any{"phase": stall.phase, "conditions": []any{
			map[string]any{"type": gamesv1.ConditionComplete, "status": "False", "reason": stall.reason, "message": "m"},
			map[string]any{"type": gamesv1.ConditionStalled, "status": "True", "reason": stall.reason, "message": "m"},
		}}
		health, _, err := argoHealth(string(rolloutScript), obj)
		if err != nil || health != "Degraded" {
			t.Errorf("Argo CD health of a ProfileRollout %s and Stalled (%s): got %s (%v), want Degraded", stall.phase, stall.reason, health, err)
		}
		if res, err := status.Compute(obj); err != nil || res.Status != status.FailedStatus {
			t.Errorf("kstatus of a ProfileRollout %s and Stalled (%s): got %v (%v), want Failed", stall.phase, stall.reason, res, err)
		}
	}

	// A newer generation the controller has not observed yet is in progress
	// for both, whatever the conditions say: the script's own check.
	obj, err = h.dynamic.Resource(gamesv1.SchemeGroupVersion.WithResource("gamesessions")).Namespace(ns).
		Get(ctx, "ready", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.SetGeneration(obj.GetGeneration() + 1)
	if health, _, err := argoHealth(string(script), obj); err != nil || health != "Progressing" {
		t.Errorf("Argo CD health of an unobserved generation: got %s (%v), want Progressing", health, err)
	}
	if res, err := status.Compute(obj); err != nil || res.Status != status.InProgressStatus {
		t.Errorf("kstatus of an unobserved generation: got %v (%v), want InProgress", res, err)
	}
}

// argoHealth runs the health script as Argo CD does: the object as the global
// obj, and a table with status and message as the result.
// checkHealth reads the object name of resource (games.example.com/v1) and
// checks what kstatus and the Argo CD health script make of it.
func checkHealth(ctx context.Context, t *testing.T, client dynamic.Interface, resource, ns, name, script string,
	wantKstatus status.Status, wantArgo string) {
	t.Helper()
	obj, err := client.Resource(gamesv1.SchemeGroupVersion.WithResource(resource)).Namespace(ns).
		Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(obj)
	if err != nil {
		t.Fatalf("kstatus Compute: %v", err)
	}
	if res.Status != wantKstatus {
		t.Errorf("kstatus: got %s (%s), want %s", res.Status, res.Message, wantKstatus)
	}
	health, message, err := argoHealth(script, obj)
	if err != nil {
		t.Fatalf("Argo CD health script: %v", err)
	}
	if health != wantArgo {
		t.Errorf("Argo CD health: got %s (%s), want %s", health, message, wantArgo)
	}
	t.Logf("kstatus %s %q; Argo CD %s %q", res.Status, res.Message, health, message)
}

func argoHealth(script string, obj *unstructured.Unstructured) (health, message string, err error) {
	state := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer state.Close()
	// Argo CD opens the base, table and string libraries to health scripts.
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}} {
		if err := state.CallByParam(lua.P{Fn: state.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return "", "", err
		}
	}
	state.SetGlobal("obj", toLua(state, obj.Object))
	if err := state.DoString(script); err != nil {
		return "", "", err
	}
	result, ok := state.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the script returned %s, not a table", state.Get(-1).Type())
	}
	return result.RawGetString("status").String(), result.RawGetString("message").String(), nil
}

// toLua converts decoded JSON into Lua values: objects and arrays become
// tables (arrays from index 1), numbers LNumber.
func toLua(state *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case map[string]any:
		table := state.NewTable()
		for key, item := range v {
			table.RawSetString(key, toLua(state, item))
		}
		return table
	case []any:
		table := state.NewTable()
		for i, item := range v {
			table.RawSetInt(i+1, toLua(state, item))
		}
		return table
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	}
	panic(fmt.Sprintf("unexpected JSON value %T", value))
}

type harness struct {
	t       *testing.T
	ctx     context.Context
	ns      string
	kube    kubernetes.Interface
	game    clientset.Interface
	dynamic dynamic.Interface
}

// startController runs the real controller in-process, as the binary does,
// scoped to the test's namespace.
func (h *harness) startController() {
	o := app.NewOptions()
	o.RESTConfig = cp.RESTConfig()
	o.Namespace = h.ns
	o.ProfileChangeDelay = 0
	o.MetricsBindAddress, o.HealthProbeBindAddress = "0", "0"
	ctx, cancel := context.WithCancel(context.Background())
	logger := ktesting.NewLogger(h.t, ktesting.NewConfig(ktesting.Verbosity(2)))
	done := make(chan error, 1)
	go func() { done <- app.Run(klog.NewContext(ctx, logger), o) }()
	t := h.t
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("controller: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("controller did not stop within 30s")
		}
	})
}

// rejectDeploymentsNamed installs a ValidatingAdmissionPolicy that refuses
// the test namespace's Deployment of that name, as a platform's policy
// might: the controller's create is answered Invalid.
func (h *harness) rejectDeploymentsNamed(name string) {
	policyName := "health-test-" + h.ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("object.metadata.name != %q", name),
				Message:    "the platform's policy refuses this Deployment",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: h.ns}},
			},
		},
	}
	policies := h.kube.AdmissionregistrationV1()
	if _, err := policies.ValidatingAdmissionPolicies().Create(h.ctx, policy, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	if _, err := policies.ValidatingAdmissionPolicyBindings().Create(h.ctx, binding, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx := context.Background()
		_ = policies.ValidatingAdmissionPolicyBindings().Delete(ctx, policyName, metav1.DeleteOptions{})
		_ = policies.ValidatingAdmissionPolicies().Delete(ctx, policyName, metav1.DeleteOptions{})
	})
	// The policy takes effect once the API server has loaded it: probe with
	// a dry-run create until it refuses.
	h.eventually("the admission policy to take effect", func() (bool, error) {
		_, err := h.kube.AppsV1().Deployments(h.ns).Create(h.ctx, probeDeployment(name), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, fmt.Errorf("dry-run create answered %v", err)
	})
}

func (h *harness) createProfile(name string, data, annotations map[string]string) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: h.ns, Annotations: annotations,
			Labels: map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue},
		},
		Data: data,
	}
	if _, err := h.kube.CoreV1().ConfigMaps(h.ns).Create(h.ctx, cm, metav1.CreateOptions{}); err != nil {
		h.t.Fatalf("create profile %s: %v", name, err)
	}
}

func (h *harness) updateProfileData(name string, data map[string]string) {
	cm, err := h.kube.CoreV1().ConfigMaps(h.ns).Get(h.ctx, name, metav1.GetOptions{})
	if err == nil {
		cm.Data = data
		_, err = h.kube.CoreV1().ConfigMaps(h.ns).Update(h.ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		h.t.Fatalf("update profile %s: %v", name, err)
	}
}

func (h *harness) createSession(name, profile string) {
	if _, err := h.game.GamesV1().GameSessions(h.ns).Create(h.ctx, testutil.GameSession(name, profile), metav1.CreateOptions{}); err != nil {
		h.t.Fatalf("create GameSession %s: %v", name, err)
	}
}

func (h *harness) patchSession(name, patch string) {
	_, err := h.game.GamesV1().GameSessions(h.ns).Patch(h.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
}

// waitFor waits until the session reports the condition True with reason,
// for its current generation.
func (h *harness) waitFor(name, conditionType, reason string) {
	h.eventually(fmt.Sprintf("GameSession %s %s=True (%s)", name, conditionType, reason), func() (bool, error) {
		s, err := h.game.GamesV1().GameSessions(h.ns).Get(h.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, conditionType)
		if c == nil {
			return false, fmt.Errorf("no %s condition; conditions: %v", conditionType, s.Status.Conditions)
		}
		ok := c.Status == metav1.ConditionTrue && c.Reason == reason && s.Status.ObservedGeneration == s.Generation
		return ok, fmt.Errorf("%s is %s/%s: %s", conditionType, c.Status, c.Reason, c.Message)
	})
}

// waitForRollout waits until the profile's ProfileRollout is in phase, for
// the profile's current content, with the condition True with reason.
func (h *harness) waitForRollout(profile string, phase gamesv1.RolloutPhase, conditionType, reason string) {
	h.eventually(fmt.Sprintf("ProfileRollout %s in phase %s with %s=True (%s)", profile, phase, conditionType, reason), func() (bool, error) {
		cm, err := h.kube.CoreV1().ConfigMaps(h.ns).Get(h.ctx, profile, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		r, err := h.game.GamesV1().ProfileRollouts(h.ns).Get(h.ctx, profile, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if hash := controller.ProfileHash(cm); r.Status.TargetHash != hash {
			return false, fmt.Errorf("target %q (phase %s), the profile's content is %q", r.Status.TargetHash, r.Status.Phase, hash)
		}
		c := meta.FindStatusCondition(r.Status.Conditions, conditionType)
		if c == nil {
			return false, fmt.Errorf("phase %s, no %s condition; conditions: %v", r.Status.Phase, conditionType, r.Status.Conditions)
		}
		ok := r.Status.Phase == phase && c.Status == metav1.ConditionTrue && c.Reason == reason
		return ok, fmt.Errorf("phase %s, %s is %s/%s: %s", r.Status.Phase, conditionType, c.Status, c.Reason, c.Message)
	})
}

func (h *harness) eventually(what string, cond func() (bool, error)) {
	h.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(h.ctx, 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		h.t.Fatalf("timed out after %v waiting for %s (last: %v)", waitTimeout, what, last)
	}
}

// probeDeployment is a valid Deployment of that name, for dry runs.
func probeDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			},
		},
	}
}
