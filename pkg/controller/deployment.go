package controller

import (
	"encoding/json"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Labels the controller puts on every Deployment and pod it manages.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"

	labelNameValue = "gamesession"
	// ManagedByValue is the managed-by label value of the controller's
	// Deployments. The Deployment informer is filtered on it, so the controller
	// caches its own Deployments and none of the cluster's others.
	ManagedByValue = "gamesession-controller"
)

// ManagedDeploymentSelector selects the Deployments this controller manages.
func ManagedDeploymentSelector() string {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue}).String()
}

const (
	gameServerContainerName = "game-server"
	profileVolumeName       = "profile"
	// ProfileMountPath is where game servers find their profile's files.
	ProfileMountPath = "/etc/gamesession/profile"
)

var gameSessionKind = gamesv1.SchemeGroupVersion.WithKind("GameSession")

// selectorLabels identify one session's pods. They are the Deployment's
// selector, which is immutable, so they must never change for a session.
func selectorLabels(session *gamesv1.GameSession) map[string]string {
	return map[string]string{
		LabelName:     labelNameValue,
		LabelInstance: session.Name,
	}
}

func managedLabels(session *gamesv1.GameSession) map[string]string {
	l := selectorLabels(session)
	l[LabelManagedBy] = ManagedByValue
	return l
}

// newDeployment returns the Deployment the session wants, given the hash of
// its profile's current data. It holds only the fields the controller owns;
// deploymentNeedsUpdate and updatedDeployment compare and merge exactly those.
func newDeployment(session *gamesv1.GameSession, profileHash string) *appsv1.Deployment {
	podLabels := managedLabels(session)
	ports := make([]corev1.ContainerPort, 0, len(session.Spec.Ports))
	for _, p := range session.Spec.Ports {
		protocol := p.Protocol
		if protocol == "" {
			// The CRD defaults it; repeat the default here so objects that
			// bypassed defaulting (fake clients in tests) compare equal.
			protocol = corev1.ProtocolUDP
		}
		ports = append(ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: protocol})
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:            session.Name,
			Namespace:       session.Namespace,
			Labels:          managedLabels(session),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(session, gameSessionKind)},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(ptr.Deref(session.Spec.Replicas, 1)),
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(session)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: podLabels,
					// The hash is what rolls the Deployment when the profile's
					// data change: a new template means a new ReplicaSet.
					Annotations: map[string]string{gamesv1.ProfileHashAnnotation: profileHash},
				},
				Spec: corev1.PodSpec{
					// Game servers have no business with the Kubernetes API.
					AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{
						Name:  gameServerContainerName,
						Image: session.Spec.Image,
						Ports: ports,
						Resources: corev1.ResourceRequirements{
							Requests: session.Spec.Resources.Requests,
							Limits:   session.Spec.Resources.Limits,
						},
						VolumeMounts: []corev1.VolumeMount{{
							Name:      profileVolumeName,
							MountPath: ProfileMountPath,
							ReadOnly:  true,
						}},
					}},
					Volumes: []corev1.Volume{{
						Name: profileVolumeName,
						VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{
								LocalObjectReference: corev1.LocalObjectReference{Name: session.Spec.ProfileRef},
							},
						},
					}},
				},
			},
		},
	}
}

// rolledProfileHash returns the profile hash in the Deployment's pod template
// if the Deployment mounts that profile, else "".
func rolledProfileHash(d *appsv1.Deployment, profile string) string {
	if d == nil {
		return ""
	}
	v := findVolume(d.Spec.Template.Spec.Volumes, profileVolumeName)
	if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != profile {
		return ""
	}
	return d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
}

// deploymentNeedsUpdate reports whether the observed Deployment differs from
// the desired one in a field the controller owns. Fields the API server
// defaults (terminationMessagePath, defaultMode, ...) and fields other actors
// set are not compared, so a Deployment the controller wrote itself compares
// equal and an idle resync writes nothing.
func deploymentNeedsUpdate(observed, desired *appsv1.Deployment) bool {
	return deploymentChanges(observed, desired) != (deploymentDiff{})
}

// deploymentDiff says which of the controller's fields of a Deployment differ
// from the desired ones; deploymentPatch sends exactly those.
type deploymentDiff struct {
	labels, replicas, templateLabels, templateAnnotations, automount, podSpec bool
}

func deploymentChanges(observed, desired *appsv1.Deployment) deploymentDiff {
	ot, dt := &observed.Spec.Template, &desired.Spec.Template
	return deploymentDiff{
		labels:              !hasAll(observed.Labels, desired.Labels),
		replicas:            ptr.Deref(observed.Spec.Replicas, 1) != ptr.Deref(desired.Spec.Replicas, 1),
		templateLabels:      !hasAll(ot.Labels, dt.Labels),
		templateAnnotations: !hasAll(ot.Annotations, dt.Annotations),
		automount:           ptr.Deref(ot.Spec.AutomountServiceAccountToken, true) != ptr.Deref(dt.Spec.AutomountServiceAccountToken, true),
		podSpec:             podSpecNeedsUpdate(ot, dt),
	}
}

// podSpecNeedsUpdate compares the game server container, its profile mount
// and the profile volume.
func podSpecNeedsUpdate(ot, dt *corev1.PodTemplateSpec) bool {
	oc := findContainer(ot.Spec.Containers, gameServerContainerName)
	dc := &dt.Spec.Containers[0]
	if oc == nil || oc.Image != dc.Image ||
		!equality.Semantic.DeepEqual(oc.Ports, dc.Ports) ||
		!equality.Semantic.DeepEqual(oc.Resources.Requests, dc.Resources.Requests) ||
		!equality.Semantic.DeepEqual(oc.Resources.Limits, dc.Resources.Limits) {
		return true
	}
	om := findVolumeMount(oc.VolumeMounts, profileVolumeName)
	if om == nil || om.MountPath != ProfileMountPath || !om.ReadOnly || om.SubPath != "" {
		return true
	}
	ov := findVolume(ot.Spec.Volumes, profileVolumeName)
	return ov == nil || ov.ConfigMap == nil || ov.ConfigMap.Name != dt.Spec.Volumes[0].ConfigMap.Name
}

// updatedDeployment returns a copy of observed with the controller's fields
// set from desired. Everything else (other containers, volumes, labels, fields
// the API server defaulted) is kept as it is.
func updatedDeployment(observed, desired *appsv1.Deployment) *appsv1.Deployment {
	d := observed.DeepCopy()
	d.Labels = mergeInto(d.Labels, desired.Labels)
	d.Spec.Replicas = desired.Spec.Replicas
	t, dt := &d.Spec.Template, &desired.Spec.Template
	t.Labels = mergeInto(t.Labels, dt.Labels)
	t.Annotations = mergeInto(t.Annotations, dt.Annotations)
	t.Spec.AutomountServiceAccountToken = dt.Spec.AutomountServiceAccountToken
	// Only the fields deploymentNeedsUpdate compares are set in the container
	// and the volume, so that their other fields (terminationMessagePath,
	// imagePullPolicy, defaultMode, ...) survive, as they do everywhere else.
	dc := &dt.Spec.Containers[0]
	if c := findContainer(t.Spec.Containers, gameServerContainerName); c != nil {
		c.Image, c.Ports = dc.Image, dc.Ports
		c.Resources.Requests, c.Resources.Limits = dc.Resources.Requests, dc.Resources.Limits
		if m := findVolumeMount(c.VolumeMounts, profileVolumeName); m != nil {
			*m = dc.VolumeMounts[0]
		} else {
			c.VolumeMounts = append(c.VolumeMounts, dc.VolumeMounts[0])
		}
	} else {
		t.Spec.Containers = append(t.Spec.Containers, *dc)
	}
	if v := findVolume(t.Spec.Volumes, profileVolumeName); v != nil && v.ConfigMap != nil {
		v.ConfigMap.Name = dt.Spec.Volumes[0].ConfigMap.Name
	} else if v != nil {
		*v = dt.Spec.Volumes[0]
	} else {
		t.Spec.Volumes = append(t.Spec.Volumes, dt.Spec.Volumes[0])
	}
	return d
}

// deploymentPatch returns a JSON merge patch that sets the controller's fields
// of observed to desired. A patch, unlike an update, carries no
// resourceVersion: kube-controller-manager writes Deployment status all through
// a rollout, and an update from the cache would often lose that race with a
// conflict and be retried. Labels and annotations are patched key by key;
// the containers and volumes lists are replaced whole (a merge patch cannot
// address list items), built from observed so nothing else in them changes.
//
// Only the parts that differ are sent, so a profile change patches the one
// annotation: the API server applies that at about the cost of an update, and
// a patch that also replaces the lists at half as much again, which a fan-out
// of thousands pays in full (docs/performance.md).
func deploymentPatch(observed, desired *appsv1.Deployment) ([]byte, error) {
	diff := deploymentChanges(observed, desired)
	dt := &desired.Spec.Template
	patch, spec, template, templateMeta, podSpec := map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}
	if diff.labels {
		patch["metadata"] = map[string]any{"labels": desired.Labels}
	}
	if diff.replicas {
		spec["replicas"] = desired.Spec.Replicas
	}
	if diff.templateLabels {
		templateMeta["labels"] = dt.Labels
	}
	if diff.templateAnnotations {
		templateMeta["annotations"] = dt.Annotations
	}
	if diff.automount {
		podSpec["automountServiceAccountToken"] = dt.Spec.AutomountServiceAccountToken
	}
	if diff.podSpec {
		t := &updatedDeployment(observed, desired).Spec.Template
		podSpec["containers"], podSpec["volumes"] = t.Spec.Containers, t.Spec.Volumes
	}
	if len(templateMeta) > 0 {
		template["metadata"] = templateMeta
	}
	if len(podSpec) > 0 {
		template["spec"] = podSpec
	}
	if len(template) > 0 {
		spec["template"] = template
	}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	return json.Marshal(patch)
}

// hasAll reports whether have contains every key of want with the same value.
func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func mergeInto(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = make(map[string]string, len(src))
	}
	maps.Copy(dst, src)
	return dst
}

func findContainer(containers []corev1.Container, name string) *corev1.Container {
	for i := range containers {
		if containers[i].Name == name {
			return &containers[i]
		}
	}
	return nil
}

func findVolumeMount(mounts []corev1.VolumeMount, name string) *corev1.VolumeMount {
	for i := range mounts {
		if mounts[i].Name == name {
			return &mounts[i]
		}
	}
	return nil
}

func findVolume(volumes []corev1.Volume, name string) *corev1.Volume {
	for i := range volumes {
		if volumes[i].Name == name {
			return &volumes[i]
		}
	}
	return nil
}
