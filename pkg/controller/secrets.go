package controller

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The Secret kind of referenced input (see inputs.go): Secrets labelled
// gamesv1.SecretLabel that a pod template reads.
//
// The controller never holds Secret data: the informer's transform
// (SecretDigester) replaces each Secret by its name and an HMAC of its data
// under a key of the controller's own, before the object enters the cache.
// Copying a Secret would mean caching its data, writing Secrets into every
// tenant's namespace and deleting them again, which is exactly the
// privilege a tenant least wants a shared controller to hold: the pods
// mount the live Secret.

// dataDigestAnnotation holds, on the cached stand-in of a referenced input
// only, the digest of its data; previousDigestAnnotation, on a Secret's
// during a rotation of the digest key, its digest under the previous key.
// They never reach the API server.
const (
	dataDigestAnnotation     = "games.example.com/data-digest"
	previousDigestAnnotation = "games.example.com/previous-data-digest"
)

// SecretDigestKeys are the keys of the Secret digests: Current, which every
// new digest is made under, and during a rotation Previous, under which
// the digests of the Deployments made before it are checked, so that the
// sessions whose Secrets did not change meanwhile keep their game servers.
//
// Created says that the controller made Current, for want of a key Secret:
// a Deployment whose digest carries no record of its key (written by a
// version before records) was then made under a key since lost.
type SecretDigestKeys struct {
	Current, Previous []byte
	Created           bool
}

// Digester is the transform of the Secret informer (see SecretDigester),
// with the digest under the previous key too during a rotation.
func (k SecretDigestKeys) Digester() cache.TransformFunc {
	return func(obj interface{}) (interface{}, error) {
		secret, ok := obj.(*corev1.Secret)
		if !ok {
			return obj, nil
		}
		if _, slim := secret.Annotations[dataDigestAnnotation]; slim && len(secret.Data) == 0 && len(secret.StringData) == 0 {
			// A stand-in already; a Secret of no data that spells the
			// annotation only names its own digest, in its own namespace.
			return obj, nil
		}
		meta := standInMeta(&secret.ObjectMeta, dataDigest(k.Current, secret))
		if len(k.Previous) > 0 {
			meta.Annotations[previousDigestAnnotation] = dataDigest(k.Previous, secret)
		}
		return &corev1.Secret{TypeMeta: secret.TypeMeta, ObjectMeta: meta}, nil
	}
}

// fingerprints names the keys in Deployments' gamesv1.SecretsKeyLabel;
// "" for a key not set.
func (k SecretDigestKeys) fingerprints() digestKeys {
	return digestKeys{current: KeyFingerprint(k.Current), previous: KeyFingerprint(k.Previous), created: k.Created}
}

// KeyFingerprint names a digest key without telling anything of it: 16 hex
// digits of a hash of the key, under a prefix of its own so that no other
// use of the key shows the same. "" for no key.
func KeyFingerprint(key []byte) string {
	if len(key) == 0 {
		return ""
	}
	sum := sha256.Sum256(append([]byte("gamesession-controller secret digest key\x00"), key...))
	return hex.EncodeToString(sum[:8])
}

// digestKeys are the fingerprints of a kind's digest keys: current, and
// previous during a rotation; zero for a kind whose digests have no key.
type digestKeys struct {
	current, previous string
	created           bool
}

// SecretSelector is the label selector of the Secret informer.
func SecretSelector() string {
	return labels.SelectorFromSet(labels.Set{gamesv1.SecretLabel: gamesv1.SecretLabelValue}).String()
}

// SecretDigester returns the transform of the Secret informer: each Secret
// becomes a stand-in with its identity and an HMAC-SHA256 of its data under
// key, and nothing else (no data, labels or annotations of its own). It is
// idempotent, as informer transforms should be: a stand-in stays as it is.
func SecretDigester(key []byte) cache.TransformFunc {
	return SecretDigestKeys{Current: key}.Digester()
}

// dataDigest is the HMAC of a Secret's namespace, name and data: each
// length-prefixed, the data in key order, so that no two different data sets
// read the same. Without the key, the digest says nothing about the data,
// not even whether a guessed password is the right one; with the Secret's
// identity in it, not even whether two tenants' Secrets hold the same.
func dataDigest(key []byte, secret *corev1.Secret) string {
	data := make(map[string][]byte, len(secret.Data)+len(secret.StringData))
	maps.Copy(data, secret.Data)
	for k, v := range secret.StringData {
		// Only set on writes, but a transform must not depend on that.
		data[k] = []byte(v)
	}
	return digestData(hmac.New(sha256.New, key), secret.Namespace, secret.Name, data)
}

// digestData writes an object's namespace, name and data into h, each
// length-prefixed and the data in key order, so that no two different data
// sets read the same, and returns the sum in hex.
func digestData(h hash.Hash, namespace, name string, data map[string][]byte) string {
	var length [8]byte
	write := func(b []byte) {
		binary.BigEndian.PutUint64(length[:], uint64(len(b)))
		h.Write(length[:])
		h.Write(b)
	}
	write([]byte(namespace))
	write([]byte(name))
	for _, k := range slices.Sorted(maps.Keys(data)) {
		write([]byte(k))
		write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// templateSecrets returns the names of the Secrets a pod template's
// containers read: Secret volumes and projected Secret sources, env
// secretKeyRefs and envFrom secretRefs, of every container. Image pull
// secrets are not among them: a new one does not change a running server.
// Sorted, without repeats.
func templateSecrets(t *corev1.PodTemplateSpec) []string {
	return templateReferences(t).secrets
}

// secretKind is the Secret kind of referenced input, its digests keyed.
type secretKind struct {
	keys digestKeys
}

func (secretKind) kind() string { return "Secret" }

func (secretKind) label() string { return gamesv1.SecretLabel + "=" + gamesv1.SecretLabelValue }

func (secretKind) read(t *corev1.PodTemplateSpec) []string { return templateSecrets(t) }

func (secretKind) digest(obj interface{}) string { return metaDigest(obj) }

func (secretKind) previousDigest(obj interface{}) string {
	return metaAnnotation(obj, previousDigestAnnotation)
}

func (k secretKind) digestKeys() (digestKeys, string) { return k.keys, gamesv1.SecretsKeyLabel }

func (secretKind) annotations() (names, digest string) {
	return gamesv1.SecretsAnnotation, gamesv1.SecretsHashAnnotation
}
