package controller

import (
	"encoding/json"
	"slices"

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

// NewDeployment returns the Deployment the session wants, given the hash of
// the profile content it is to run (whose revision it mounts). It holds only the fields the controller owns.
// It is exported so that tests outside the package can check what it builds
// against a real API server.
func NewDeployment(session *gamesv1.GameSession, profileHash string) *appsv1.Deployment {
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
								// The immutable revision, never the live profile: see revision.go.
								LocalObjectReference: corev1.LocalObjectReference{Name: RevisionName(session.Spec.ProfileRef, profileHash)},
								// The API server's default, stated so that a
								// patch of the volume never clears it.
								DefaultMode: ptr.To(corev1.ConfigMapVolumeSourceDefaultMode),
							},
						},
					}},
				},
			},
		},
	}
}

// rolledProfileHash returns the profile hash in the Deployment's pod template
// if the Deployment mounts the revision of that profile and hash, else "".
func rolledProfileHash(d *appsv1.Deployment, profile string) string {
	hash := d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
	v := findByName(d.Spec.Template.Spec.Volumes, profileVolumeName)
	if hash == "" || v == nil || v.ConfigMap == nil || v.ConfigMap.Name != RevisionName(profile, hash) {
		return ""
	}
	return hash
}

// What the controller owns in its Deployments, and so compares and writes:
//   - its labels on the Deployment and the pod template, and its annotation on
//     the template;
//   - spec.replicas, and automountServiceAccountToken of the pod spec;
//   - in the pod spec, the container named game-server (its image, ports,
//     resources and profile mount) and the volume named profile.
//
// Everything else belongs to whoever sets it, and survives every write: other
// labels and annotations, other containers and volumes (a log shipper, say),
// other fields of the game server container (env), strategy, minReadySeconds,
// progressDeadlineSeconds, paused. The writes are strategic merge patches that
// address the controller's list items by their names and carry only values
// taken from the session, never values read back from the cache, so a write
// cannot undo a concurrent edit of anything the controller does not own.

// deploymentNeedsUpdate reports whether the observed Deployment differs from
// the desired one in a field the controller owns. Values the API server fills
// in by default are not compared, so a Deployment the controller wrote itself
// compares equal and an idle resync writes nothing.
func deploymentNeedsUpdate(observed, desired *appsv1.Deployment) bool {
	return deploymentChanges(observed, desired) != (deploymentDiff{})
}

// deploymentDiff says which of the controller's fields of a Deployment differ
// from the desired ones; deploymentPatch sends exactly those.
type deploymentDiff struct {
	labels, replicas, templateLabels, templateAnnotations, automount, container, volume bool
}

// template reports whether the diff changes the pod template, which gives
// the Deployment a new generation.
func (d deploymentDiff) template() bool {
	return d.templateLabels || d.templateAnnotations || d.automount || d.container || d.volume
}

func deploymentChanges(observed, desired *appsv1.Deployment) deploymentDiff {
	ot, dt := &observed.Spec.Template, &desired.Spec.Template
	return deploymentDiff{
		labels:              !hasAll(observed.Labels, desired.Labels),
		replicas:            ptr.Deref(observed.Spec.Replicas, 1) != ptr.Deref(desired.Spec.Replicas, 1),
		templateLabels:      !hasAll(ot.Labels, dt.Labels),
		templateAnnotations: !hasAll(ot.Annotations, dt.Annotations),
		automount:           ptr.Deref(ot.Spec.AutomountServiceAccountToken, true) != ptr.Deref(dt.Spec.AutomountServiceAccountToken, true),
		container:           !gameServerMatches(findByName(ot.Spec.Containers, gameServerContainerName), &dt.Spec.Containers[0]),
		volume:              !profileVolumeMatches(findByName(ot.Spec.Volumes, profileVolumeName), &dt.Spec.Volumes[0]),
	}
}

// gameServerMatches compares the controller's fields of the game server
// container; observed is nil if there is none.
func gameServerMatches(observed, desired *corev1.Container) bool {
	if observed == nil || observed.Image != desired.Image ||
		!equality.Semantic.DeepEqual(observed.Ports, desired.Ports) ||
		!equality.Semantic.DeepEqual(observed.Resources.Requests, desired.Resources.Requests) ||
		!equality.Semantic.DeepEqual(observed.Resources.Limits, desired.Resources.Limits) {
		return false
	}
	mount := findMount(observed.VolumeMounts, ProfileMountPath)
	return mount != nil && equality.Semantic.DeepEqual(*mount, desired.VolumeMounts[0])
}

// profileVolumeMatches compares the profile volume, setting aside the file
// mode the API server fills in by default.
func profileVolumeMatches(observed, desired *corev1.Volume) bool {
	if observed == nil || observed.ConfigMap == nil {
		return false
	}
	return observed.Name == desired.Name &&
		equality.Semantic.DeepEqual(withDefaultMode(*observed.ConfigMap), withDefaultMode(*desired.ConfigMap))
}

// withDefaultMode returns source with the file mode the API server fills in
// when none is set.
func withDefaultMode(source corev1.ConfigMapVolumeSource) corev1.ConfigMapVolumeSource {
	source.DefaultMode = ptr.To(ptr.Deref(source.DefaultMode, corev1.ConfigMapVolumeSourceDefaultMode))
	return source
}

// conflictingContainer returns the name of a container, other than the game
// server, that declares one of the game server's ports ("" if none): a
// renamed copy of the game server, say. The controller does not add its
// container next to it: two containers on one port cannot both run, and the
// API server only warns about it.
func conflictingContainer(observed, desired *appsv1.Deployment) string {
	ours := desired.Spec.Template.Spec.Containers[0].Ports
	for _, c := range observed.Spec.Template.Spec.Containers {
		if c.Name == gameServerContainerName {
			continue
		}
		for _, p := range c.Ports {
			if slices.ContainsFunc(ours, func(q corev1.ContainerPort) bool {
				return p.ContainerPort == q.ContainerPort && p.Protocol == q.Protocol
			}) {
				return c.Name
			}
		}
	}
	return ""
}

// deploymentPatch returns a strategic merge patch that sets the controller's
// fields of observed to desired.
//
// The patch carries observed's resourceVersion, which makes it conditional:
// it applies to exactly the Deployment the sync read, or the API server
// answers Conflict and the sync runs again on a fresh copy. Nothing that
// happened since the read (another writer's edit, an orphaning by the
// garbage collector, a deletion and a new Deployment of the name) can be
// written over. A profile fan-out patches Deployments that sit idle, so the
// condition costs nothing there; during a rollout kube-controller-manager's
// status writes can make it fail, and the retry is quiet and quick.
//
// Labels and annotations are patched key by key. The game server container
// and the profile volume are merged into their lists by name, leaving the
// other items alone (see gameServerPatch and itemPatch).
//
// Only the parts that differ are sent, so a profile change patches the one
// annotation: the API server applies that at about the cost of an update, and
// a patch that also rewrites the pod spec at half as much again, which a
// fan-out of thousands pays in full (docs/performance.md).
func deploymentPatch(observed, desired *appsv1.Deployment) ([]byte, error) {
	diff := deploymentChanges(observed, desired)
	dt := &desired.Spec.Template
	metadata := map[string]any{"resourceVersion": observed.ResourceVersion}
	spec, template, templateMeta, podSpec := map[string]any{}, map[string]any{}, map[string]any{}, map[string]any{}
	if diff.labels {
		metadata["labels"] = desired.Labels
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
	ot := &observed.Spec.Template
	if diff.container {
		podSpec["containers"] = []any{gameServerPatch(findByName(ot.Spec.Containers, gameServerContainerName), &dt.Spec.Containers[0])}
	}
	if diff.volume {
		podSpec["volumes"] = []any{itemPatch(findByName(ot.Spec.Volumes, profileVolumeName), &dt.Spec.Volumes[0])}
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
	patch := map[string]any{"metadata": metadata}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	return json.Marshal(patch)
}

// gameServerPatch is the game server container as a strategic merge patch
// item, merged into the containers list by name. observed is the current
// game server container, nil if there is none; then the item is the desired
// container whole. Otherwise it names only the controller's fields: the
// image, the ports (replaced whole, so a port removed from the session goes),
// the resources and the profile mount (merged into the mounts by mount path),
// so whatever else someone set on the container (env, probes, other mounts)
// stays.
func gameServerPatch(observed, desired *corev1.Container) map[string]any {
	if observed == nil {
		return toMap(desired)
	}
	ports := make([]any, 0, len(desired.Ports)+1)
	for _, p := range desired.Ports {
		ports = append(ports, p)
	}
	mount := &desired.VolumeMounts[0]
	return map[string]any{
		"name":         desired.Name,
		"image":        desired.Image,
		"ports":        append(ports, map[string]any{"$patch": "replace"}),
		"resources":    mergeTo(toMap(observed.Resources), toMap(desired.Resources)),
		"volumeMounts": []any{itemPatch(findMount(observed.VolumeMounts, mount.MountPath), mount)},
	}
}

// itemPatch is a strategic merge patch item that turns the list item observed
// into desired, or adds desired where observed is nil.
func itemPatch[T any](observed, desired *T) map[string]any {
	if observed == nil {
		return toMap(desired)
	}
	return mergeTo(toMap(observed), toMap(desired))
}

// mergeTo returns the patch that turns the object observed into desired:
// desired's values, and null (delete) for the fields only observed has,
// recursing into objects both have. Lists are set whole.
func mergeTo(observed, desired map[string]any) map[string]any {
	patch := make(map[string]any, len(desired))
	for k, v := range desired {
		inner, isObject := v.(map[string]any)
		current, hasObject := observed[k].(map[string]any)
		if isObject && hasObject {
			patch[k] = mergeTo(current, inner)
		} else {
			patch[k] = v
		}
	}
	for k := range observed {
		if _, ok := desired[k]; !ok {
			patch[k] = nil
		}
	}
	return patch
}

// toMap returns the JSON object form of v, a struct of the API.
func toMap(v any) map[string]any {
	// API structs always marshal, and to an object.
	data, _ := json.Marshal(v)
	m := map[string]any{}
	_ = json.Unmarshal(data, &m)
	return m
}

// findMount returns the mount at that path, or nil.
func findMount(mounts []corev1.VolumeMount, path string) *corev1.VolumeMount {
	i := slices.IndexFunc(mounts, func(m corev1.VolumeMount) bool { return m.MountPath == path })
	if i < 0 {
		return nil
	}
	return &mounts[i]
}

// findByName returns the item of items with that name, or nil.
func findByName[T corev1.Container | corev1.Volume](items []T, name string) *T {
	i := slices.IndexFunc(items, func(item T) bool { return itemName(item) == name })
	if i < 0 {
		return nil
	}
	return &items[i]
}

func itemName(item any) string {
	switch v := item.(type) {
	case corev1.Container:
		return v.Name
	case corev1.Volume:
		return v.Name
	}
	return ""
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
