package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// The whole pod in the session, on the real control plane: every class of
// field reaches the pods, a hand edit of any of them is undone, and a
// session whose Deployment is in order costs no request, however full its
// template.

// startRealisticSession creates the Secret and profile a realistic game
// server needs, starts a controller with configure, creates the session and
// waits until it is Ready.
func (e *env) startRealisticSession(name string, mutate func(*gamesv1.GameSession), configure ...func(*app.Options)) (*runningController, *appsv1.Deployment) {
	e.t.Helper()
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: testutil.GameServerSecret},
		StringData: map[string]string{"token": "not-a-real-token"},
	}
	if _, err := e.kube.CoreV1().Secrets(e.ns).Create(e.ctx, secret, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.createProfile("arena", map[string]string{"server.cfg": "max_players=16"}, true)
	c := e.startController(configure...)
	session := testutil.RealisticGameSession(name, "arena")
	if mutate != nil {
		mutate(session)
	}
	e.createSession(session)
	e.waitForReadyAtGeneration(name)
	d, err := e.deployment(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return c, d
}

// TestPodTemplateFieldClassesReachPods: env and args, probes, lifecycle and
// grace period, scheduling, a sidecar with a Secret volume, and security
// contexts, set in the session, are on every game server pod; and resyncs
// of the settled session write nothing.
func TestPodTemplateFieldClassesReachPods(t *testing.T) {
	e := newEnv(t)
	// A host port, for UDP traffic straight to the node. Only this test
	// uses one: two pods on one port cannot share a node, and the three
	// fake nodes are shared by the tests running at once.
	withHostPort := func(s *gamesv1.GameSession) { s.Spec.Template.Spec.Containers[0].Ports[0].HostPort = 7777 }
	c, _ := e.startRealisticSession("arena-1", withHostPort, func(o *app.Options) { o.ResyncPeriod = time.Second })
	want := testutil.GameServerTemplate("arena-1")
	pods := e.livePods("arena-1")
	if len(pods) != 2 {
		t.Fatalf("%d live pods, want the session's 2", len(pods))
	}
	for _, pod := range pods {
		spec := &pod.Spec
		gs := findContainer(spec.Containers, "game-server")
		sidecar := findContainer(spec.Containers, "metrics")
		if gs == nil || sidecar == nil {
			t.Fatalf("pod %s has containers %v, want game-server and metrics", pod.Name, podContainerNames(spec))
		}
		wantGS := &want.Spec.Containers[0]
		for _, check := range []struct {
			class string
			ok    bool
		}{
			{"env", len(gs.Env) == len(wantGS.Env) && slices.ContainsFunc(gs.Env, func(v corev1.EnvVar) bool {
				return v.Name == "MATCH_TOKEN" && v.ValueFrom != nil && v.ValueFrom.SecretKeyRef != nil && v.ValueFrom.SecretKeyRef.Name == testutil.GameServerSecret
			})},
			{"args", slices.Equal(gs.Args, wantGS.Args)},
			{"readiness probe", gs.ReadinessProbe != nil && gs.ReadinessProbe.HTTPGet != nil && gs.ReadinessProbe.HTTPGet.Path == "/ready"},
			{"liveness probe", gs.LivenessProbe != nil && gs.LivenessProbe.InitialDelaySeconds == 10},
			{"preStop hook", gs.Lifecycle != nil && gs.Lifecycle.PreStop != nil && gs.Lifecycle.PreStop.Exec != nil},
			{"grace period", ptr.Deref(spec.TerminationGracePeriodSeconds, 0) == 60},
			{"host port", slices.ContainsFunc(gs.Ports, func(p corev1.ContainerPort) bool { return p.HostPort == 7777 && p.Protocol == corev1.ProtocolUDP })},
			{"anti-affinity", spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil},
			{"topology spread", len(spec.TopologySpreadConstraints) == 1},
			{"toleration", slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == "kwok.x-k8s.io/node" })},
			{"sidecar volume", slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == testutil.GameServerSecret }) &&
				slices.ContainsFunc(sidecar.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "credentials" })},
			{"pod security context", spec.SecurityContext != nil && ptr.Deref(spec.SecurityContext.RunAsNonRoot, false)},
			{"container security context", gs.SecurityContext != nil && !ptr.Deref(gs.SecurityContext.AllowPrivilegeEscalation, true)},
			{"template labels and annotations", pod.Labels["example.com/game"] == "arena" && pod.Annotations["prometheus.io/port"] == "9100"},
			{"the profile mount", slices.ContainsFunc(gs.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/gamesession/profile" })},
			{"no API token", !ptr.Deref(spec.AutomountServiceAccountToken, true)},
		} {
			if !check.ok {
				t.Errorf("pod %s lacks the session's %s", pod.Name, check.class)
			}
		}
	}

	// Several resync periods of a settled session with a full template:
	// the controller's own defaults match the API server's, so it writes
	// nothing (an idle resync costs no request at all).
	e.waitForDeploymentsSettled()
	e.waitForRollout("arena", "every session moved and Ready", func(r *gamesv1.ProfileRollout) error {
		if st := r.Status; st.Phase != gamesv1.RolloutPhaseComplete || st.ReadySessions != 1 || st.TotalSessions != 1 {
			return fmt.Errorf("not settled")
		}
		return nil
	})
	writes := c.requests.writes()
	time.Sleep(5 * time.Second)
	if after := c.requests.writes(); !equality.Semantic.DeepEqual(after, writes) {
		t.Errorf("resyncs of a settled session wrote: before %v, after %v", writes, after)
	}
}

// TestPodTemplateHandEditsRestored: a hand edit of any class of field of the
// Deployment's pod template, a renamed or removed container included, is
// undone on the same Deployment: its template is again exactly the one the
// controller wrote, with no twin of the game server.
func TestPodTemplateHandEditsRestored(t *testing.T) {
	e := newEnv(t)
	_, before := e.startRealisticSession("arena-1", nil)
	for _, edit := range []struct {
		class     string
		patchType types.PatchType
		patch     string
	}{
		{"env (kubectl set env)", types.StrategicMergePatchType,
			`{"spec":{"template":{"spec":{"containers":[{"name":"game-server","env":[{"name":"LOG_LEVEL","value":"debug"}]}]}}}}`},
		{"args", types.JSONPatchType, `[{"op":"replace","path":"/spec/template/spec/containers/0/args","value":["--port=9999"]}]`},
		{"readiness probe", types.JSONPatchType, `[{"op":"remove","path":"/spec/template/spec/containers/0/readinessProbe"}]`},
		{"lifecycle and grace period", types.JSONPatchType, `[{"op":"remove","path":"/spec/template/spec/containers/0/lifecycle"},
			{"op":"replace","path":"/spec/template/spec/terminationGracePeriodSeconds","value":1}]`},
		{"scheduling", types.MergePatchType, `{"spec":{"template":{"spec":{"nodeSelector":{"pool":"cheap"},"tolerations":null,"affinity":null}}}}`},
		{"sidecar and its volume removed", types.JSONPatchType, `[{"op":"remove","path":"/spec/template/spec/containers/1"},
			{"op":"remove","path":"/spec/template/spec/volumes/0"}]`},
		{"security context", types.MergePatchType, `{"spec":{"template":{"spec":{"securityContext":{"runAsNonRoot":false,"runAsUser":0}}}}}`},
		{"pod label", types.MergePatchType, `{"spec":{"template":{"metadata":{"labels":{"example.com/hacked":"yes"}}}}}`},
		{"game server container renamed", types.JSONPatchType, `[{"op":"test","path":"/spec/template/spec/containers/0/name","value":"game-server"},
			{"op":"replace","path":"/spec/template/spec/containers/0/name","value":"server"}]`},
		{"rollout settings", types.MergePatchType, `{"spec":{"minReadySeconds":5,"revisionHistoryLimit":1,"strategy":{"type":"Recreate","rollingUpdate":null}}}`},
	} {
		edited := e.patchDeployment("arena-1", edit.patchType, edit.patch)
		if equality.Semantic.DeepEqual(edited.Spec, before.Spec) {
			t.Fatalf("test bug: the %s edit changed nothing", edit.class)
		}
		e.waitForDeployment("arena-1", "the "+edit.class+" edit undone", func(d *appsv1.Deployment) error {
			if d.UID != before.UID {
				return fmt.Errorf("the Deployment was replaced (UID %s, was %s), not repaired", d.UID, before.UID)
			}
			if got, want := d.Spec, before.Spec; !equality.Semantic.DeepEqual(got.Template, want.Template) ||
				!equality.Semantic.DeepEqual(got.Strategy, want.Strategy) || got.MinReadySeconds != want.MinReadySeconds ||
				!equality.Semantic.DeepEqual(got.RevisionHistoryLimit, want.RevisionHistoryLimit) {
				return fmt.Errorf("spec differs from the controller's:\n%s", specDiff(got, want))
			}
			return nil
		})
	}
	d, err := e.deployment("arena-1")
	if err != nil {
		t.Fatal(err)
	}
	if names := containerNames(d); !slices.Equal(names, []string{"game-server", "metrics"}) {
		t.Errorf("containers %v at the end, want the session's game-server and metrics, no twin", names)
	}
	e.waitForReadyAtGeneration("arena-1")
}

// specDiff shows two Deployment specs as JSON, for a failure message.
func specDiff(got, want appsv1.DeploymentSpec) string {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	return fmt.Sprintf("got  %s\nwant %s", g, w)
}

// TestPodTemplateRestart: `kubectl rollout restart` keeps working (the
// controller keeps its annotation and does not roll back), and a session
// restarts its game servers by itself with an annotation of its template.
func TestPodTemplateRestart(t *testing.T) {
	e := newEnv(t)
	_, before := e.startRealisticSession("arena-1", nil)

	const restartedAt = "kubectl.kubernetes.io/restartedAt"
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"2026-12-01T12:00:00Z"}}}}}`, restartedAt)
	e.patchDeployment("arena-1", types.StrategicMergePatchType, patch)
	rs := e.replicaSetWhere("arena-1", "of the kubectl restart", func(pt *corev1.PodTemplateSpec) bool {
		return pt.Annotations[restartedAt] != ""
	})
	e.waitForReadyAtGeneration("arena-1")
	d, err := e.deployment("arena-1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Template.Annotations[restartedAt] == "" || d.Generation != before.Generation+1 {
		t.Errorf("after kubectl rollout restart (ReplicaSet %s): annotations %v, generation %d (was %d): the restart was undone or fought",
			rs.Name, d.Spec.Template.Annotations, d.Generation, before.Generation)
	}

	// The session-level restart: any change of the session's template rolls
	// the game servers, and lives in Git with the session.
	e.updateSession("arena-1", func(s *gamesv1.GameSession) {
		s.Spec.Template.Annotations["example.com/restarted-at"] = "2026-12-01T12:05:00Z"
	})
	e.replicaSetWhere("arena-1", "of the session's restart", func(pt *corev1.PodTemplateSpec) bool {
		return pt.Annotations["example.com/restarted-at"] != "" && pt.Annotations[restartedAt] != ""
	})
	e.waitForReadyAtGeneration("arena-1")
}

// TestPodTemplateRolloutSettings: a session's rollout settings reach its
// Deployment; the profile's rollout policy sets the progress deadline of
// those that set none, so that its brake fires in seconds, not ten minutes.
func TestPodTemplateRolloutSettings(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"server.cfg": "max_players=16"}, true)
	e.startController()
	own := newSession("own-settings", "arena", 1)
	own.Spec.ProgressDeadlineSeconds = ptr.To[int32](90)
	own.Spec.MinReadySeconds = ptr.To[int32](1)
	own.Spec.RevisionHistoryLimit = ptr.To[int32](2)
	own.Spec.Strategy = &appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	e.createSession(own)
	e.createSession(newSession("policy-settings", "arena", 1))
	e.waitForReadyAtGeneration("own-settings")
	e.waitForReadyAtGeneration("policy-settings")
	d, err := e.deployment("own-settings")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Spec; ptr.Deref(got.ProgressDeadlineSeconds, 0) != 90 || got.MinReadySeconds != 1 ||
		ptr.Deref(got.RevisionHistoryLimit, 0) != 2 || got.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("the session's settings did not reach its Deployment: %+v", got)
	}

	e.updateProfile("arena", func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{rollout.AnnotationProgressDeadline: "45s"}
	})
	e.waitForDeployment("policy-settings", "the policy's progress deadline", func(d *appsv1.Deployment) error {
		if got := ptr.Deref(d.Spec.ProgressDeadlineSeconds, 0); got != 45 {
			return fmt.Errorf("progressDeadlineSeconds %d", got)
		}
		return nil
	})
	if d, err := e.deployment("own-settings"); err != nil || ptr.Deref(d.Spec.ProgressDeadlineSeconds, 0) != 90 {
		t.Errorf("the policy's deadline overrode the session's own: %v, %v", d.Spec.ProgressDeadlineSeconds, err)
	}
}

func findContainer(containers []corev1.Container, name string) *corev1.Container {
	i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return &containers[i]
}

func podContainerNames(spec *corev1.PodSpec) []string {
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	return names
}
