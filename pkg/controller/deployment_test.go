package controller

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"
)

func TestDeploymentNeedsUpdateAndPatch(t *testing.T) {
	profile := newProfile(testNamespace, "classic", classicData)
	session := newSession(testNamespace, "arena-1", "classic")
	desired := NewDeployment(session, ProfileHash(profile))
	gameServer := func(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }

	tests := []struct {
		name       string
		modify     func(d *appsv1.Deployment)
		wantUpdate bool
	}{
		{name: "as the API server returns it", modify: func(*appsv1.Deployment) {}},
		{name: "others' additions", modify: addOthersChanges},
		{name: "replicas unset means 1, not 3", modify: func(d *appsv1.Deployment) { d.Spec.Replicas = nil }, wantUpdate: true},
		{name: "replicas differ", modify: func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](2) }, wantUpdate: true},
		{name: "managed-by label removed", modify: func(d *appsv1.Deployment) { delete(d.Labels, LabelManagedBy) }, wantUpdate: true},
		{name: "pod label changed", modify: func(d *appsv1.Deployment) { d.Spec.Template.Labels[LabelName] = "x" }, wantUpdate: true},
		{name: "hash annotation stale", modify: func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations["games.example.com/profile-hash"] = "stale"
		}, wantUpdate: true},
		{name: "hash annotation removed", modify: func(d *appsv1.Deployment) { d.Spec.Template.Annotations = nil }, wantUpdate: true},
		// Unset means the pods get a token.
		{name: "token automount unset", modify: func(d *appsv1.Deployment) { d.Spec.Template.Spec.AutomountServiceAccountToken = nil }, wantUpdate: true},
		{name: "image differs", modify: func(d *appsv1.Deployment) { gameServer(d).Image = "arena:old" }, wantUpdate: true},
		{name: "ports reordered", modify: func(d *appsv1.Deployment) {
			p := gameServer(d).Ports
			p[0], p[1] = p[1], p[0]
		}, wantUpdate: true},
		{name: "port protocol differs", modify: func(d *appsv1.Deployment) { gameServer(d).Ports[0].Protocol = corev1.ProtocolTCP }, wantUpdate: true},
		{name: "port added", modify: func(d *appsv1.Deployment) {
			gameServer(d).Ports = append(gameServer(d).Ports, corev1.ContainerPort{Name: "debug", ContainerPort: 9000, Protocol: corev1.ProtocolTCP})
		}, wantUpdate: true},
		{name: "request in another notation", modify: func(d *appsv1.Deployment) {
			gameServer(d).Resources.Requests[corev1.ResourceCPU] = resource.MustParse("0.5")
		}},
		{name: "limit removed", modify: func(d *appsv1.Deployment) { gameServer(d).Resources.Limits = nil }, wantUpdate: true},
		// The template is the session's whole: hand edits are undone.
		{name: "someone's imagePullPolicy", modify: func(d *appsv1.Deployment) { gameServer(d).ImagePullPolicy = corev1.PullAlways }, wantUpdate: true},
		{name: "hand edits of the template", modify: addHandEdits, wantUpdate: true},
		{name: "pod label added", modify: func(d *appsv1.Deployment) { d.Spec.Template.Labels["team"] = "blue" }, wantUpdate: true},
		{name: "grace period changed", modify: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
		}, wantUpdate: true},
		{name: "paused", modify: func(d *appsv1.Deployment) { d.Spec.Paused = true }},
		{name: "strategy changed", modify: func(d *appsv1.Deployment) {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		}, wantUpdate: true},
		{name: "minReadySeconds changed", modify: func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 10 }, wantUpdate: true},
		{name: "revisionHistoryLimit changed", modify: func(d *appsv1.Deployment) { d.Spec.RevisionHistoryLimit = ptr.To[int32](2) }, wantUpdate: true},
		{name: "progress deadline changed", modify: func(d *appsv1.Deployment) { d.Spec.ProgressDeadlineSeconds = ptr.To[int32](60) }, wantUpdate: true},
		{name: "game server container renamed", modify: func(d *appsv1.Deployment) { gameServer(d).Name = "server" }, wantUpdate: true},
		{name: "game server container gone", modify: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers = nil }, wantUpdate: true},
		{name: "sidecar first", modify: func(d *appsv1.Deployment) {
			cs := d.Spec.Template.Spec.Containers
			d.Spec.Template.Spec.Containers = append([]corev1.Container{{Name: "envoy", Image: "envoy:1"}}, cs...)
		}, wantUpdate: true},
		{name: "mount read-write", modify: func(d *appsv1.Deployment) { gameServer(d).VolumeMounts[0].ReadOnly = false }, wantUpdate: true},
		{name: "mount moved", modify: func(d *appsv1.Deployment) { gameServer(d).VolumeMounts[0].MountPath = "/profile" }, wantUpdate: true},
		{name: "mount of one file", modify: func(d *appsv1.Deployment) { gameServer(d).VolumeMounts[0].SubPath = "game.cfg" }, wantUpdate: true},
		{name: "mount removed", modify: func(d *appsv1.Deployment) { gameServer(d).VolumeMounts = nil }, wantUpdate: true},
		{name: "volume of another ConfigMap", modify: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes[0].ConfigMap.Name = "hardcore"
		}, wantUpdate: true},
		{name: "volume replaced by emptyDir", modify: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}, wantUpdate: true},
		{name: "volume removed", modify: func(d *appsv1.Deployment) { d.Spec.Template.Spec.Volumes = nil }, wantUpdate: true},
		// The profile volume is the controller's whole.
		{name: "volume mode changed", modify: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes[0].ConfigMap.DefaultMode = ptr.To[int32](0o600)
		}, wantUpdate: true},
		// The API server always fills the mode in: unset, someone else wrote it.
		{name: "volume with the default mode unset", modify: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes[0].ConfigMap.DefaultMode = nil
		}, wantUpdate: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			observed := apiServerDeployment(session, ProfileHash(profile))
			addOthersChanges(observed)
			tc.modify(observed)

			if got := deploymentNeedsUpdate(observed, desired); got != tc.wantUpdate {
				t.Fatalf("deploymentNeedsUpdate = %v, want %v", got, tc.wantUpdate)
			}
			if !tc.wantUpdate {
				return
			}
			patched := applyPatch(t, observed, desired)
			// One write converges: the next sync finds nothing to do.
			if deploymentNeedsUpdate(patched, desired) {
				t.Errorf("still needs an update after the patch:\n%+v", patched.Spec.Template.Spec)
			}
			// What is not the controller's survives the patch: the
			// Deployment's other labels and annotations, a restart, a pause.
			if patched.Labels["team"] != observed.Labels["team"] ||
				patched.Annotations["team.example.com/owner"] != observed.Annotations["team.example.com/owner"] ||
				patched.Spec.Template.Annotations[restartedAtAnnotation] != observed.Spec.Template.Annotations[restartedAtAnnotation] ||
				patched.Spec.Paused != observed.Spec.Paused {
				t.Errorf("the patch lost others' labels, annotations, restart or pause:\n%+v", patched)
			}
			// The rest of the spec is the session's, whatever was there.
			if want := keepRestart(&desired.Spec.Template, &observed.Spec.Template); !equality.Semantic.DeepEqual(patched.Spec.Template, want) {
				t.Errorf("patched template\n%+v\nwant the session's\n%+v", patched.Spec.Template, want)
			}
			if names := containerNames(patched); !slices.Equal(names, []string{defaultGameServerContainer}) {
				t.Errorf("containers after the patch: %v, want the game server alone", names)
			}
		})
	}
}

// applyPatch applies deploymentPatch(observed, desired) to observed as the API
// server does, with the same strategic merge code.
func applyPatch(t *testing.T, observed, desired *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	patch, err := deploymentPatch(observed, desired)
	if err != nil {
		t.Fatal(err)
	}
	original, err := json.Marshal(observed)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(original, patch, appsv1.Deployment{})
	if err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	patched := &appsv1.Deployment{}
	if err := json.Unmarshal(merged, patched); err != nil {
		t.Fatal(err)
	}
	return patched
}

// The patch names the resourceVersion it was computed from, so the API
// server applies it to exactly that version of the Deployment, or refuses it.
func TestDeploymentPatchIsConditional(t *testing.T) {
	session := newSession(testNamespace, "arena-1", "classic")
	observed := apiServerDeployment(session, "old")
	patch, err := deploymentPatch(observed, NewDeployment(session, "new"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &got); err != nil || got.Metadata.ResourceVersion != observed.ResourceVersion || observed.ResourceVersion == "" {
		t.Errorf("patch %s does not carry the observed resourceVersion %q", patch, observed.ResourceVersion)
	}
}

// A profile change is the fan-out's write, thousands at a time: it patches the
// annotation and the revision the profile volume mounts, and nothing else.
func TestDeploymentPatchOfProfileChangeIsMinimal(t *testing.T) {
	session := newSession(testNamespace, "arena-1", "classic")
	observed := apiServerDeployment(session, "old")
	patch, err := deploymentPatch(observed, NewDeployment(session, "new"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"template":{"metadata":{"annotations":{"games.example.com/profile-hash":"new"}},`+
		`"spec":{"volumes":[{"configMap":{"defaultMode":420,"name":"classic-new"},"name":"profile"}]}}}}`, observed.ResourceVersion)
	if string(patch) != want {
		t.Errorf("patch:\n got %s\nwant %s", patch, want)
	}
}

func containerNames(d *appsv1.Deployment) []string {
	var names []string
	for _, c := range d.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

func TestManagedDeploymentSelector(t *testing.T) {
	if got, want := ManagedDeploymentSelector(), "app.kubernetes.io/managed-by=gamesession-controller"; got != want {
		t.Errorf("ManagedDeploymentSelector() = %q, want %q", got, want)
	}
}
