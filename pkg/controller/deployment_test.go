package controller

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/internal/testutil"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
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
// server does, with the same strategic merge and JSON patch code, and checks
// that the update the controller sends instead (deploymentUpdate) makes the
// same Deployment: the two write paths differ in cost, never in result.
func applyPatch(t *testing.T, observed, desired *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	diff := deploymentChanges(observed, desired)
	patchType, patch, err := deploymentPatch(observed, desired, diff)
	if err != nil {
		t.Fatal(err)
	}
	original, err := json.Marshal(observed)
	if err != nil {
		t.Fatal(err)
	}
	var merged []byte
	switch patchType {
	case types.StrategicMergePatchType:
		merged, err = strategicpatch.StrategicMergePatch(original, patch, appsv1.Deployment{})
	case types.JSONPatchType:
		var ops jsonpatch.Patch
		if ops, err = jsonpatch.DecodePatch(patch); err == nil {
			merged, err = ops.Apply(original)
		}
	default:
		t.Fatalf("patch type %s", patchType)
	}
	if err != nil {
		t.Fatalf("applying %s: %v", patch, err)
	}
	patched := &appsv1.Deployment{}
	if err := json.Unmarshal(merged, patched); err != nil {
		t.Fatal(err)
	}
	// The API server drops the resourceVersion precondition from the stored
	// object, and so from the comparison.
	updated, comparable := deploymentUpdate(observed, desired, diff), patched.DeepCopy()
	updated.ResourceVersion, comparable.ResourceVersion = "", ""
	if !equality.Semantic.DeepEqual(updated, comparable) {
		t.Errorf("the update and the patch (%s) make different Deployments:\nupdate %+v\npatch  %+v", diff, updated.Spec, comparable.Spec)
	}
	return patched
}

// The patch names the resourceVersion it was computed from, so the API
// server applies it to exactly that version of the Deployment, or refuses it.
func TestDeploymentPatchIsConditional(t *testing.T) {
	session := newSession(testNamespace, "arena-1", "classic")
	observed := apiServerDeployment(session, "old")
	for name, desired := range map[string]*appsv1.Deployment{
		"profile change": NewDeployment(session, "new"),
		"image change":   NewDeployment(withImage(session, "registry.example.com/arena:2"), "old"),
	} {
		patchType, patch, err := deploymentPatch(observed, desired, deploymentChanges(observed, desired))
		if err != nil {
			t.Fatal(err)
		}
		var rv string
		switch patchType {
		case types.JSONPatchType:
			var ops []struct{ Op, Path, Value any }
			if err := json.Unmarshal(patch, &ops); err == nil && len(ops) > 0 && ops[0].Op == "replace" && ops[0].Path == "/metadata/resourceVersion" {
				rv, _ = ops[0].Value.(string)
			}
		default:
			var got struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patch, &got); err == nil {
				rv = got.Metadata.ResourceVersion
			}
		}
		if rv != observed.ResourceVersion || rv == "" {
			t.Errorf("%s: %s patch %s does not carry the observed resourceVersion %q", name, patchType, patch, observed.ResourceVersion)
		}
	}
}

func withImage(session *gamesv1.GameSession, image string) *gamesv1.GameSession {
	s := session.DeepCopy()
	s.Spec.Image = image
	return s
}

// A profile change is the fan-out's write, thousands at a time: it patches the
// annotation and the revision the profile volume mounts, and nothing else.
func TestDeploymentPatchOfProfileChangeIsMinimal(t *testing.T) {
	session := newSession(testNamespace, "arena-1", "classic")
	observed := apiServerDeployment(session, "old")
	patchType, patch, err := deploymentPatch(observed, NewDeployment(session, "new"), deploymentChanges(observed, NewDeployment(session, "new")))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`[{"op":"replace","path":"/metadata/resourceVersion","value":%q},`+
		`{"op":"replace","path":"/spec/template/metadata/annotations/games.example.com~1profile-hash","value":"new"},`+
		`{"op":"replace","path":"/spec/template/spec/volumes/0","value":{"name":"profile","configMap":{"name":"classic-new","defaultMode":420}}}]`, observed.ResourceVersion)
	if patchType != types.JSONPatchType || string(patch) != want {
		t.Errorf("patch:\n got %s\nwant %s", patch, want)
	}
}

// A move under a budget per minute records its start in its own write: the
// JSON patch of a profile change gains one operation, whether the
// Deployment has annotations or none, and the patch and the update make the
// same Deployment, its other annotations kept.
func TestDeploymentPatchOfAMoveRecordsItsStart(t *testing.T) {
	session := newSession(testNamespace, "arena-1", "classic")
	const start = "2026-03-01T12:00:00.5Z"
	desired := NewDeployment(session, "new")
	desired.Annotations = map[string]string{gamesv1.MoveStartsAnnotation: start}
	annotated := apiServerDeployment(session, "old")
	bare := annotated.DeepCopy()
	bare.Annotations = nil
	for name, observed := range map[string]*appsv1.Deployment{"annotated": annotated, "no annotations": bare} {
		patchType, patch, err := deploymentPatch(observed, desired, deploymentChanges(observed, desired))
		if err != nil {
			t.Fatal(err)
		}
		var ops []struct{ Op, Path string }
		if err := json.Unmarshal(patch, &ops); err != nil || patchType != types.JSONPatchType || len(ops) != 4 {
			t.Errorf("%s: %s patch %s, want 4 operations: the resourceVersion, the hash, the volume and the start", name, patchType, patch)
		}
		patched := applyPatch(t, observed, desired)
		if got := patched.Annotations[gamesv1.MoveStartsAnnotation]; got != start {
			t.Errorf("%s: the patch records the start as %q, want %q", name, got, start)
		}
		if got, want := patched.Annotations["deployment.kubernetes.io/revision"], observed.Annotations["deployment.kubernetes.io/revision"]; got != want {
			t.Errorf("%s: the revision annotation is %q after the patch, want %q", name, got, want)
		}
		if deploymentNeedsUpdate(patched, desired) {
			t.Errorf("%s: the patched Deployment still differs from the desired one", name)
		}
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

// With a full pod template too, a profile change sends the hash annotation
// and the profile volume, and nothing else; and one patch undoes any mix of
// hand edits, from which the next sync finds nothing to write.
func TestDeploymentPatchOfRealisticTemplate(t *testing.T) {
	session := testutil.RealisticGameSession("arena-1", "classic")
	session.Namespace, session.UID = testNamespace, "session-uid"
	observed := NewDeployment(session, "old")
	observed.ResourceVersion = "7"
	patchType, patch, err := deploymentPatch(observed, NewDeployment(session, "new"), deploymentChanges(observed, NewDeployment(session, "new")))
	if err != nil {
		t.Fatal(err)
	}
	var ops []struct{ Op, Path string }
	if err := json.Unmarshal(patch, &ops); err != nil || patchType != types.JSONPatchType || len(ops) != 3 || len(patch) > 400 {
		t.Errorf("profile change: %s patch of %d bytes, want 3 operations: the resourceVersion, the annotation and the volume: %s", patchType, len(patch), patch)
	}
	if patched := applyPatch(t, observed, NewDeployment(session, "new")); deploymentNeedsUpdate(patched, NewDeployment(session, "new")) {
		t.Errorf("the profile patch did not bring the Deployment to the new revision:\n%+v", patched.Spec.Template)
	}

	desired := NewDeployment(session, "old")
	edited := observed.DeepCopy()
	addHandEdits(edited)
	edited.Spec.Template.Spec.Containers[1].Name = "renamed"
	edited.Spec.Template.Spec.SecurityContext = nil
	edited.Spec.Template.Labels["extra"] = "x"
	patched := applyPatch(t, edited, desired)
	if deploymentNeedsUpdate(patched, desired) {
		t.Errorf("one patch did not undo the hand edits:\n%+v", patched.Spec.Template)
	}
}
