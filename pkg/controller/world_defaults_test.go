package controller

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// applyDefaults fills in what the API server would: the CRD's defaults of a
// GameSession, and a share of a Deployment's. The controller must neither
// fight them nor count them as differences.
func applyDefaults(obj object) {
	switch o := obj.(type) {
	case *gamesv1.GameSession:
		if o.Spec.Replicas == nil {
			o.Spec.Replicas = ptr.To[int32](1)
		}
		for i := range o.Spec.Ports {
			if o.Spec.Ports[i].Protocol == "" {
				o.Spec.Ports[i].Protocol = corev1.ProtocolUDP
			}
		}
	case *appsv1.Deployment:
		defaultDeployment(o)
	}
}

func defaultDeployment(d *appsv1.Deployment) {
	spec := &d.Spec
	if spec.Replicas == nil {
		spec.Replicas = ptr.To[int32](1)
	}
	if spec.Strategy.Type == "" {
		spec.Strategy.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType && spec.Strategy.RollingUpdate == nil {
		quarter := intstr.FromString("25%")
		spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: &quarter, MaxSurge: &quarter}
	}
	if spec.RevisionHistoryLimit == nil {
		spec.RevisionHistoryLimit = ptr.To[int32](10)
	}
	if spec.ProgressDeadlineSeconds == nil {
		spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	}
	// The pod template's defaults are the controller's own copy of the API
	// server's, which TestPodTemplateDefaultsMatchAPIServer proves equal to
	// a real kube-apiserver's; here they only have to be the server's.
	defaultPodTemplate(&spec.Template)
}

// validate checks the share of a Deployment's validation that the world's
// edits and the controller's patches can get wrong. cur is nil for a create.
func validate(cur, next object) field.ErrorList {
	if cm, ok := next.(*corev1.ConfigMap); ok {
		return validateConfigMap(cur, cm)
	}
	d, ok := next.(*appsv1.Deployment)
	if !ok {
		return nil
	}
	var errs field.ErrorList
	spec := field.NewPath("spec")
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	switch {
	case err != nil || d.Spec.Selector == nil || selector.Empty():
		errs = append(errs, field.Invalid(spec.Child("selector"), d.Spec.Selector, "invalid selector"))
	case !selectorMatches(d.Spec.Selector, d.Spec.Template.Labels):
		errs = append(errs, field.Invalid(spec.Child("template", "metadata", "labels"), d.Spec.Template.Labels,
			"`selector` does not match template `labels`"))
	}
	if cur != nil && !equality.Semantic.DeepEqual(cur.(*appsv1.Deployment).Spec.Selector, d.Spec.Selector) {
		errs = append(errs, field.Invalid(spec.Child("selector"), d.Spec.Selector, "field is immutable"))
	}
	if ptr.Deref(d.Spec.Replicas, 1) < 0 {
		errs = append(errs, field.Invalid(spec.Child("replicas"), d.Spec.Replicas, "must be greater than or equal to 0"))
	}
	pod := spec.Child("template", "spec")
	if len(d.Spec.Template.Spec.Containers) == 0 {
		errs = append(errs, field.Required(pod.Child("containers"), ""))
	}
	volumes := map[string]bool{}
	for i, v := range d.Spec.Template.Spec.Volumes {
		if volumes[v.Name] {
			errs = append(errs, field.Duplicate(pod.Child("volumes").Index(i).Child("name"), v.Name))
		}
		volumes[v.Name] = true
	}
	containers := map[string]bool{}
	for i, c := range d.Spec.Template.Spec.Containers {
		path := pod.Child("containers").Index(i)
		if containers[c.Name] {
			errs = append(errs, field.Duplicate(path.Child("name"), c.Name))
		}
		containers[c.Name] = true
		if c.Image == "" {
			errs = append(errs, field.Required(path.Child("image"), ""))
		}
		for j, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				errs = append(errs, field.NotFound(path.Child("volumeMounts").Index(j).Child("name"), m.Name))
			}
		}
		portNames := map[string]bool{}
		for j, p := range c.Ports {
			port := path.Child("ports").Index(j)
			if p.ContainerPort < 1 || p.ContainerPort > 65535 {
				errs = append(errs, field.Invalid(port.Child("containerPort"), p.ContainerPort, "must be between 1 and 65535, inclusive"))
			}
			if !slices.Contains([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}, p.Protocol) {
				errs = append(errs, field.NotSupported(port.Child("protocol"), p.Protocol, []string{"SCTP", "TCP", "UDP"}))
			}
			if p.Name != "" && portNames[p.Name] {
				errs = append(errs, field.Duplicate(port.Child("name"), p.Name))
			}
			portNames[p.Name] = true
		}
	}
	return errs
}

func selectorMatches(selector *metav1.LabelSelector, labels map[string]string) bool {
	for k, v := range selector.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// validateConfigMap refuses, as the API server does, to change the data of an
// immutable ConfigMap or to make it mutable again.
func validateConfigMap(cur object, next *corev1.ConfigMap) field.ErrorList {
	old, ok := cur.(*corev1.ConfigMap)
	if !ok || !ptr.Deref(old.Immutable, false) {
		return nil
	}
	var errs field.ErrorList
	if !ptr.Deref(next.Immutable, false) {
		errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
	}
	if !equality.Semantic.DeepEqual(old.Data, next.Data) {
		errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
	}
	if !equality.Semantic.DeepEqual(old.BinaryData, next.BinaryData) {
		errs = append(errs, field.Forbidden(field.NewPath("binaryData"), "field is immutable when `immutable` is set"))
	}
	return errs
}
