package controller

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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
	// defaultGameServerContainer is the game server container's name when
	// spec.container does not say (the CRD defaults it, fake clients do not).
	defaultGameServerContainer = "game-server"
	profileVolumeName          = "profile"
	// ProfileMountPath is where game servers find their profile's files.
	ProfileMountPath = "/etc/gamesession/profile"
	// restartedAtAnnotation is what `kubectl rollout restart` sets on a
	// Deployment's pod template. The controller keeps it when the session's
	// template does not set it, so that the restart is not undone.
	restartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"
	// defaultProgressDeadlineSeconds is the Deployment's own default, used
	// when neither the session nor its profile's rollout policy sets one.
	defaultProgressDeadlineSeconds = 600
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

// gameServerContainer is the name of the session's game server container.
func gameServerContainer(session *gamesv1.GameSession) string {
	if session.Spec.Container != "" {
		return session.Spec.Container
	}
	return defaultGameServerContainer
}

// NewDeployment returns the Deployment the session wants, given the hash of
// the profile content it is to run (whose revision it mounts): the session's
// pod template and rollout settings, with the values the API server would
// fill in already filled in, so that it compares equal to the Deployment the
// API server stores. Its progress deadline is the session's, or the
// Deployment default; the controller puts a rollout policy's in its place
// (withProgressDeadline). It is exported so that tests outside the package
// can check what it builds against a real API server.
func NewDeployment(session *gamesv1.GameSession, profileHash string) *appsv1.Deployment {
	strategy := appsv1.DeploymentStrategy{}
	if session.Spec.Strategy != nil {
		strategy = *session.Spec.Strategy.DeepCopy()
	}
	defaultDeploymentStrategy(&strategy)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:            session.Name,
			Namespace:       session.Namespace,
			Labels:          managedLabels(session),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(session, gameSessionKind)},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To(ptr.Deref(session.Spec.Replicas, 1)),
			Selector:                &metav1.LabelSelector{MatchLabels: selectorLabels(session)},
			Template:                desiredPodTemplate(session, profileHash),
			Strategy:                strategy,
			MinReadySeconds:         ptr.Deref(session.Spec.MinReadySeconds, 0),
			RevisionHistoryLimit:    ptr.To(ptr.Deref(session.Spec.RevisionHistoryLimit, 10)),
			ProgressDeadlineSeconds: ptr.To(ptr.Deref(session.Spec.ProgressDeadlineSeconds, defaultProgressDeadlineSeconds)),
		},
	}
}

// withProgressDeadline sets the progress deadline of a rollout policy on d,
// the desired Deployment of session, unless the session sets its own. A
// deadline must exceed minReadySeconds, or the API server refuses the
// Deployment: a shorter one of the policy's is stretched to just past it.
func withProgressDeadline(d *appsv1.Deployment, session *gamesv1.GameSession, policyDeadline *int32) *appsv1.Deployment {
	if session.Spec.ProgressDeadlineSeconds != nil || policyDeadline == nil {
		return d
	}
	d.Spec.ProgressDeadlineSeconds = ptr.To(max(*policyDeadline, d.Spec.MinReadySeconds+1))
	return d
}

// desiredPodTemplate is the pod template of the session's Deployment: the
// session's template, the short fields folded into its game server
// container, the controller's labels and hash annotation, the profile
// revision mounted, and the API server's defaults applied.
func desiredPodTemplate(session *gamesv1.GameSession, profileHash string) corev1.PodTemplateSpec {
	var t corev1.PodTemplateSpec
	t.Labels, t.Annotations = map[string]string{}, map[string]string{}
	if source := session.Spec.Template; source != nil {
		source.Spec.DeepCopyInto(&t.Spec)
		// Only labels and annotations of a template's metadata reach its pods.
		maps.Copy(t.Labels, source.Labels)
		maps.Copy(t.Annotations, source.Annotations)
	}
	maps.Copy(t.Labels, managedLabels(session))
	// The hash is what rolls the Deployment when the profile's data change:
	// a new template means a new ReplicaSet.
	t.Annotations[gamesv1.ProfileHashAnnotation] = profileHash

	name := gameServerContainer(session)
	i := slices.IndexFunc(t.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		// A session of short fields only, or a template of sidecars: the
		// game server comes first, as it always has.
		t.Spec.Containers = slices.Insert(t.Spec.Containers, 0, corev1.Container{Name: name})
		i = 0
	}
	gs := &t.Spec.Containers[i]
	if session.Spec.Image != "" {
		gs.Image = session.Spec.Image
	}
	if len(session.Spec.Ports) > 0 {
		gs.Ports = make([]corev1.ContainerPort, 0, len(session.Spec.Ports))
		for _, p := range session.Spec.Ports {
			// The CRD defaults the protocol to UDP; repeated here for
			// objects that bypassed defaulting (fake clients in tests).
			protocol := cmp.Or(p.Protocol, corev1.ProtocolUDP)
			gs.Ports = append(gs.Ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: protocol})
		}
	}
	if len(session.Spec.Resources.Requests) > 0 {
		gs.Resources.Requests = session.Spec.Resources.Requests.DeepCopy()
	}
	if len(session.Spec.Resources.Limits) > 0 {
		gs.Resources.Limits = session.Spec.Resources.Limits.DeepCopy()
	}
	gs.VolumeMounts = append(gs.VolumeMounts, corev1.VolumeMount{
		Name:      profileVolumeName,
		MountPath: ProfileMountPath,
		ReadOnly:  true,
	})
	t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{
		Name: profileVolumeName,
		VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{
				// The immutable revision, never the live profile: see revision.go.
				LocalObjectReference: corev1.LocalObjectReference{Name: RevisionName(refOf(session), profileHash)},
			},
		},
	})
	if t.Spec.AutomountServiceAccountToken == nil {
		// Game servers have no business with the Kubernetes API, unless
		// their template says so (an SDK sidecar, say).
		t.Spec.AutomountServiceAccountToken = ptr.To(false)
	}
	defaultPodTemplate(&t)
	return t
}

// mountedProfileHash returns the hash of the profile's revision that the
// Deployment's profile volume mounts, whatever its pod template's hash
// annotation says, or "" if it mounts none.
func mountedProfileHash(d *appsv1.Deployment, profile string) string {
	v := findByName(d.Spec.Template.Spec.Volumes, profileVolumeName)
	if v == nil || v.ConfigMap == nil {
		return ""
	}
	name := v.ConfigMap.Name
	hash := name[strings.LastIndexByte(name, '-')+1:]
	if !isRevisionName(name, profile, hash) {
		return ""
	}
	return hash
}

// rolledProfileHash returns the profile hash in the Deployment's pod template
// if the Deployment mounts the revision of that profile and hash, else "".
func rolledProfileHash(d *appsv1.Deployment, profile string) string {
	if hash := mountedProfileHash(d, profile); hash != "" && hash == d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] {
		return hash
	}
	return ""
}

// What the controller owns in its Deployments, and so compares and writes:
//   - its labels on the Deployment;
//   - gamesv1.MoveStartsAnnotation, which only a move writes (its desired
//     Deployment alone carries it), and nothing compares otherwise;
//   - the whole spec but paused: replicas, the pod template, the strategy,
//     minReadySeconds, revisionHistoryLimit and progressDeadlineSeconds, each
//     from the session (or its Deployment default; the progress deadline from
//     the profile's rollout policy when the session sets none).
//
// The pod template is the session's, as a Deployment's is its ReplicaSets':
// a hand edit of it (an env var, a renamed container, an extra label) is
// undone at the next sync. Two things survive: the restartedAt annotation of
// `kubectl rollout restart`, and paused (`kubectl rollout pause`), which the
// profile rollout reads. Everything outside the spec (other labels and
// annotations of the Deployment, its status) belongs to whoever sets it.
//
// Desired values come with the API server's defaults filled in
// (defaultPodTemplate), so a Deployment the controller wrote compares equal
// to what it wants, and an idle resync writes nothing.

// deploymentNeedsUpdate reports whether the observed Deployment differs from
// the desired one in a field the controller owns.
func deploymentNeedsUpdate(observed, desired *appsv1.Deployment) bool {
	return deploymentChanges(observed, desired) != (deploymentDiff{})
}

// deploymentDiff says which of the controller's fields of a Deployment differ
// from the desired ones; deploymentPatch sends exactly those.
type deploymentDiff struct {
	labels, annotations, replicas, settings bool
	// profile: the template differs in the profile hash annotation and the
	// revision its volume mounts, and nothing else, as after a profile edit.
	// template: it differs in anything else, and is written whole.
	profile, template bool
}

// templateChange reports whether the diff changes the pod template, which
// gives the Deployment a new generation.
func (d deploymentDiff) templateChange() bool { return d.profile || d.template }

// String names the parts that differ, for logs.
func (d deploymentDiff) String() string {
	var parts []string
	for _, p := range []struct {
		name string
		set  bool
	}{{"labels", d.labels}, {"annotations", d.annotations}, {"replicas", d.replicas}, {"settings", d.settings}, {"profile", d.profile}, {"template", d.template}} {
		if p.set {
			parts = append(parts, p.name)
		}
	}
	return strings.Join(parts, ",")
}

// deploymentUpdate is observed with the controller's fields that diff names
// set to desired's: the object of an update. Everything else is observed's,
// so another writer's labels, annotations and paused flag, and the restart
// annotation of the template, are kept as a patch would keep them.
//
// It is a shallow copy: the request only encodes it, so it shares what it
// does not change with the cached object and with desired (built for this
// sync), and copies only the labels it changes. A deep copy of the cache's
// Deployment would copy the pod template a profile change then replaces.
func deploymentUpdate(observed, desired *appsv1.Deployment, diff deploymentDiff) *appsv1.Deployment {
	d := *observed
	if diff.labels {
		d.Labels = maps.Clone(observed.Labels)
		if d.Labels == nil {
			d.Labels = make(map[string]string, len(desired.Labels))
		}
		maps.Copy(d.Labels, desired.Labels)
	}
	if diff.annotations {
		d.Annotations = maps.Clone(observed.Annotations)
		if d.Annotations == nil {
			d.Annotations = make(map[string]string, len(desired.Annotations))
		}
		maps.Copy(d.Annotations, desired.Annotations)
	}
	des := &desired.Spec
	if diff.replicas {
		d.Spec.Replicas = ptr.To(ptr.Deref(des.Replicas, 1))
	}
	if diff.settings {
		d.Spec.Strategy = des.Strategy
		d.Spec.MinReadySeconds = des.MinReadySeconds
		d.Spec.RevisionHistoryLimit = des.RevisionHistoryLimit
		if des.ProgressDeadlineSeconds != nil {
			d.Spec.ProgressDeadlineSeconds = des.ProgressDeadlineSeconds
		}
	}
	if diff.templateChange() {
		d.Spec.Template = keepRestart(&des.Template, &observed.Spec.Template)
	}
	return &d
}

func deploymentChanges(observed, desired *appsv1.Deployment) deploymentDiff {
	obs, des := &observed.Spec, &desired.Spec
	diff := deploymentDiff{
		labels:      !hasAll(observed.Labels, desired.Labels),
		annotations: !hasAll(observed.Annotations, desired.Annotations),
		replicas:    ptr.Deref(obs.Replicas, 1) != ptr.Deref(des.Replicas, 1),
		settings: !equality.Semantic.DeepEqual(obs.Strategy, des.Strategy) ||
			obs.MinReadySeconds != des.MinReadySeconds ||
			!equality.Semantic.DeepEqual(obs.RevisionHistoryLimit, des.RevisionHistoryLimit) ||
			des.ProgressDeadlineSeconds != nil && !equality.Semantic.DeepEqual(obs.ProgressDeadlineSeconds, des.ProgressDeadlineSeconds),
	}
	want := keepRestart(&des.Template, &obs.Template)
	// One comparison of the whole template, the costliest step of a sync:
	// when the profile hash or volume differs, the rest is compared with
	// observed's in their place, which tells a profile change alone (the
	// fan-out's write) from one that comes with other changes.
	hash, volumeAt := want.Annotations[gamesv1.ProfileHashAnnotation], profileVolumeIndex(&want)
	observedHash, observedVolume := obs.Template.Annotations[gamesv1.ProfileHashAnnotation], findByName(obs.Template.Spec.Volumes, profileVolumeName)
	profileOnly := volumeAt >= 0 && observedVolume != nil && observedVolume.ConfigMap != nil && observedHash != ""
	if profileOnly && (hash != observedHash || !equality.Semantic.DeepEqual(observedVolume, &want.Spec.Volumes[volumeAt])) {
		want.Annotations = maps.Clone(want.Annotations)
		want.Annotations[gamesv1.ProfileHashAnnotation] = observedHash
		want.Spec.Volumes = slices.Clone(want.Spec.Volumes)
		want.Spec.Volumes[volumeAt] = *observedVolume
		if sameTemplate(&obs.Template, &want) {
			diff.profile = true
		} else {
			diff.template = true
		}
		return diff
	}
	diff.template = !sameTemplate(&obs.Template, &want)
	return diff
}

// sameTemplate reports whether two pod templates are semantically equal.
//
// Equal protobuf encodings imply it: the encoding writes every field,
// orders map keys, and writes nil and empty alike, as the comparison treats
// them. Encoding both and comparing bytes costs a fraction of the reflective
// walk, which was a sync's costliest step and its largest allocation, and
// in most syncs the templates are equal (every sync after the one that
// wrote). Where the encodings differ the reflective comparison decides, as
// its equality is wider: a Quantity spelt another way, say.
func sameTemplate(a, b *corev1.PodTemplateSpec) bool {
	if encodedA, err := a.Marshal(); err == nil {
		if encodedB, err := b.Marshal(); err == nil && bytes.Equal(encodedA, encodedB) {
			return true
		}
	}
	return equality.Semantic.DeepEqual(a, b)
}

// keepRestart returns desired, a pod template, with the restart annotation
// of observed if desired has none: a shallow copy, for comparing and writing.
func keepRestart(desired, observed *corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	want := *desired
	if at, ok := observed.Annotations[restartedAtAnnotation]; ok {
		if _, own := desired.Annotations[restartedAtAnnotation]; !own {
			want.Annotations = maps.Clone(desired.Annotations)
			want.Annotations[restartedAtAnnotation] = at
		}
	}
	return want
}

// profileVolumeIndex is the index of the profile volume in t, or -1.
func profileVolumeIndex(t *corev1.PodTemplateSpec) int {
	return slices.IndexFunc(t.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == profileVolumeName })
}

// deploymentPatch returns a patch, and its type, that sets the controller's
// fields of observed that diff names to desired: for a profile change alone
// profilePatch, else a strategic merge patch.
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
// Only the parts that differ are sent. A profile change replaces the hash
// annotation and the profile volume, and sets the move's start when it
// records one (profilePatch). Any other difference of the template replaces
// it whole ($patch: replace), which is what undoes a hand edit, a renamed
// container included.
func deploymentPatch(observed, desired *appsv1.Deployment, diff deploymentDiff) (types.PatchType, []byte, error) {
	if diff == (deploymentDiff{profile: true, annotations: diff.annotations}) {
		patch, err := profilePatch(observed, desired, diff.annotations)
		return types.JSONPatchType, patch, err
	}
	obs, des := &observed.Spec, &desired.Spec
	metadata := map[string]any{"resourceVersion": observed.ResourceVersion}
	spec := map[string]any{}
	if diff.labels {
		metadata["labels"] = desired.Labels
	}
	if diff.annotations {
		metadata["annotations"] = desired.Annotations
	}
	if diff.replicas {
		spec["replicas"] = des.Replicas
	}
	if diff.settings {
		strategy := toMap(des.Strategy)
		// The strategy is one value: a Recreate must not keep the
		// rollingUpdate of a RollingUpdate before it.
		strategy["$patch"] = "replace"
		spec["strategy"] = strategy
		spec["minReadySeconds"] = des.MinReadySeconds
		spec["revisionHistoryLimit"] = des.RevisionHistoryLimit
		if des.ProgressDeadlineSeconds != nil {
			spec["progressDeadlineSeconds"] = des.ProgressDeadlineSeconds
		}
	}
	switch {
	case diff.template:
		template := toMap(keepRestart(&des.Template, &obs.Template))
		template["$patch"] = "replace"
		spec["template"] = template
	case diff.profile:
		volume := &des.Template.Spec.Volumes[profileVolumeIndex(&des.Template)]
		spec["template"] = map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{
				gamesv1.ProfileHashAnnotation: des.Template.Annotations[gamesv1.ProfileHashAnnotation],
			}},
			"spec": map[string]any{"volumes": []any{itemPatch(findByName(obs.Template.Spec.Volumes, profileVolumeName), volume)}},
		}
	}
	patch := map[string]any{"metadata": metadata}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	data, err := json.Marshal(patch)
	return types.StrategicMergePatchType, data, err
}

// profilePatch is the write of a profile fan-out, thousands at a time: a
// JSON patch (RFC 6902) that replaces the hash annotation and the profile
// volume, with annotations also sets the Deployment's annotations desired
// carries (the move's start, see seedLedger), and nothing else. The API
// server applies it to the stored JSON along those paths only, where a
// strategic merge patch converts the whole Deployment and walks it with the
// type's merge keys, which on a full pod template costs markedly more
// (docs/performance.md). Its first operation
// sets the resourceVersion it was computed from, which makes it as
// conditional as the strategic merge patch: a Deployment changed since the
// read (the volume's index included) is refused with a Conflict.
func profilePatch(observed, desired *appsv1.Deployment, annotations bool) ([]byte, error) {
	volume := &desired.Spec.Template.Spec.Volumes[profileVolumeIndex(&desired.Spec.Template)]
	ops := []map[string]any{
		{"op": "replace", "path": "/metadata/resourceVersion", "value": observed.ResourceVersion},
		{"op": "replace", "path": "/spec/template/metadata/annotations/" + jsonPointerEscape(gamesv1.ProfileHashAnnotation),
			"value": desired.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]},
		{"op": "replace", "path": fmt.Sprintf("/spec/template/spec/volumes/%d", profileVolumeIndex(&observed.Spec.Template)), "value": volume},
	}
	switch {
	case !annotations:
	case observed.Annotations == nil:
		// An add into a missing object fails: the map goes whole.
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": desired.Annotations})
	default:
		// An add replaces a member that exists.
		for _, k := range slices.Sorted(maps.Keys(desired.Annotations)) {
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + jsonPointerEscape(k), "value": desired.Annotations[k]})
		}
	}
	return json.Marshal(ops)
}

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901).
var jsonPointerEscape = strings.NewReplacer("~", "~0", "/", "~1").Replace

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
