package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestDeploymentNeedsUpdateAndUpdatedDeployment(t *testing.T) {
	profile := newProfile(testNamespace, "classic", classicData)
	session := newSession(testNamespace, "arena-1", "classic")
	desired := newDeployment(session, ProfileHash(profile))
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
		{name: "someone's imagePullPolicy", modify: func(d *appsv1.Deployment) { gameServer(d).ImagePullPolicy = corev1.PullAlways }},
		{name: "game server container renamed", modify: func(d *appsv1.Deployment) { gameServer(d).Name = "server" }, wantUpdate: true},
		{name: "sidecar first", modify: func(d *appsv1.Deployment) {
			cs := d.Spec.Template.Spec.Containers
			d.Spec.Template.Spec.Containers = append([]corev1.Container{{Name: "envoy", Image: "envoy:1"}}, cs...)
		}},
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
		{name: "volume mode changed", modify: func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Volumes[0].ConfigMap.DefaultMode = ptr.To[int32](0o600)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			observed := apiServerDeployment(session, ProfileHash(profile))
			tc.modify(observed)
			before := observed.DeepCopy()

			if got := deploymentNeedsUpdate(observed, desired); got != tc.wantUpdate {
				t.Fatalf("deploymentNeedsUpdate = %v, want %v", got, tc.wantUpdate)
			}
			if !tc.wantUpdate {
				return
			}
			updated := updatedDeployment(observed, desired)
			if !equality.Semantic.DeepEqual(observed, before) {
				t.Error("updatedDeployment modified the observed Deployment")
			}
			// One update converges: the next sync finds nothing to do.
			if deploymentNeedsUpdate(updated, desired) {
				t.Errorf("still needs an update after updatedDeployment:\n%+v", updated.Spec.Template.Spec)
			}
			// Status and resourceVersion are kept: the update is conditional on
			// the version it was computed from.
			if updated.ResourceVersion != before.ResourceVersion || !equality.Semantic.DeepEqual(updated.Status, before.Status) {
				t.Error("updatedDeployment dropped the resourceVersion or status")
			}
			// Whatever the API server defaulted outside the controller's fields stays.
			if !equality.Semantic.DeepEqual(updated.Spec.Strategy, before.Spec.Strategy) ||
				updated.Spec.Template.Spec.DNSPolicy != before.Spec.Template.Spec.DNSPolicy ||
				updated.Spec.Template.Spec.SchedulerName != before.Spec.Template.Spec.SchedulerName {
				t.Error("updatedDeployment dropped server-defaulted Deployment fields")
			}
			if c := findContainer(before.Spec.Template.Spec.Containers, gameServerContainerName); c != nil {
				u := findContainer(updated.Spec.Template.Spec.Containers, gameServerContainerName)
				if u.TerminationMessagePath != c.TerminationMessagePath || u.ImagePullPolicy != c.ImagePullPolicy {
					t.Errorf("updatedDeployment dropped the game server container's defaulted fields: %+v", u)
				}
			}
			if v := findVolume(before.Spec.Template.Spec.Volumes, profileVolumeName); v != nil && v.ConfigMap != nil {
				u := findVolume(updated.Spec.Template.Spec.Volumes, profileVolumeName)
				if !equality.Semantic.DeepEqual(u.ConfigMap.DefaultMode, v.ConfigMap.DefaultMode) {
					t.Errorf("updatedDeployment dropped the profile volume's defaultMode: %+v", u.ConfigMap)
				}
			}
			// No container or volume of someone else's is lost.
			for _, c := range before.Spec.Template.Spec.Containers {
				if findContainer(updated.Spec.Template.Spec.Containers, c.Name) == nil {
					t.Errorf("updatedDeployment dropped container %q", c.Name)
				}
			}
			for _, v := range before.Spec.Template.Spec.Volumes {
				if findVolume(updated.Spec.Template.Spec.Volumes, v.Name) == nil {
					t.Errorf("updatedDeployment dropped volume %q", v.Name)
				}
			}
		})
	}
}

func TestManagedDeploymentSelector(t *testing.T) {
	if got, want := ManagedDeploymentSelector(), "app.kubernetes.io/managed-by=gamesession-controller"; got != want {
		t.Errorf("ManagedDeploymentSelector() = %q, want %q", got, want)
	}
}
