package controller

import (
	"crypto/sha256"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The ConfigMap kind of referenced input (see inputs.go): ConfigMaps labelled
// gamesv1.SessionConfigLabel that a pod template reads, the way Reloader's
// users expect a ConfigMap edit to restart what reads it. A profile is
// different: the controller owns its history (revisions) and paces its
// rollouts; a session config is the tenant's own object, read live.

// SessionConfigSelector is the label selector of the session-config
// ConfigMap informer. It is not the profile selector: a profile informer
// must not share a factory with it (see Informers).
func SessionConfigSelector() string {
	return labels.SelectorFromSet(labels.Set{gamesv1.SessionConfigLabel: gamesv1.SessionConfigLabelValue}).String()
}

// SessionConfigDigester returns the transform of the session-config
// informer: each ConfigMap becomes a stand-in with its identity and a
// SHA-256 of its data, and nothing else, so that tens of thousands of
// labelled ConfigMaps cost the cache their names. It is idempotent.
//
// Unkeyed, unlike a Secret's digest: a ConfigMap's data is not secret, and
// whoever may read the Deployment's digest may read the ConfigMaps of its
// namespace in most clusters; a key would tie ConfigMaps to the Secret
// digest key's lifecycle for no gain.
func SessionConfigDigester() cache.TransformFunc {
	return func(obj interface{}) (interface{}, error) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return obj, nil
		}
		if _, slim := cm.Annotations[dataDigestAnnotation]; slim && len(cm.Data) == 0 && len(cm.BinaryData) == 0 {
			return obj, nil
		}
		data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
		for k, v := range cm.Data {
			data[k] = []byte(v)
		}
		// A key moved from data to binaryData with the same bytes leaves a
		// file as it was but takes an env var away: it is a change. A
		// prefix no key can hold (keys are [-._a-zA-Z0-9]+) tells them
		// apart.
		for k, v := range cm.BinaryData {
			data["\x00"+k] = v
		}
		return &corev1.ConfigMap{
			TypeMeta:   cm.TypeMeta,
			ObjectMeta: standInMeta(&cm.ObjectMeta, digestData(sha256.New(), cm.Namespace, cm.Name, data)),
		}, nil
	}
}

// templateConfigMaps returns the names of the ConfigMaps a pod template's
// containers read: ConfigMap volumes and projected ConfigMap sources, env
// configMapKeyRefs and envFrom configMapRefs, of every container. Sorted,
// without repeats.
func templateConfigMaps(t *corev1.PodTemplateSpec) []string {
	return templateReferences(t).configMaps
}

// configMapKind is the ConfigMap kind of referenced input.
type configMapKind struct{}

func (configMapKind) kind() string { return "ConfigMap" }

func (configMapKind) label() string {
	return gamesv1.SessionConfigLabel + "=" + gamesv1.SessionConfigLabelValue
}

func (configMapKind) read(t *corev1.PodTemplateSpec) []string { return templateConfigMaps(t) }

func (configMapKind) digest(obj interface{}) string { return metaDigest(obj) }

func (configMapKind) previousDigest(interface{}) string { return "" }

// digestKeys: none, a ConfigMap's data is not secret.
func (configMapKind) digestKeys() (digestKeys, string) { return digestKeys{}, "" }

func (configMapKind) annotations() (names, digest string) {
	return gamesv1.ConfigMapsAnnotation, gamesv1.ConfigMapsHashAnnotation
}
