package controller

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Secrets in the sequences: in half of them (secretsOf), users write,
// relabel and delete two Secrets, and give sessions templates that read one
// of them, or none. What the invariants then hold the controller to:
//   - a write moves a Deployment to a digest of Secrets its cache holds, all
//     of them read by the session (secret-unknown);
//   - a write that changes nothing of the template but the Secrets never
//     drops a Secret the session still reads and the cache lost: a Secret
//     gone restarts no game server (secret-gone-rolled);
//   - at rest, a session on its profile's current revision, idle, with a
//     policy that lets it move, runs the digest of the labelled Secrets it
//     reads as the server holds them (secret-digest-stale);
//   - every such move has a cause: a Secret change its cache showed, or a
//     change of the session's own (the write credits).

var (
	worldSecretNames = []string{"sec-a", "sec-b"}
	worldSecretData  = []map[string][]byte{{"token": []byte("one")}, {"token": []byte("two")}, {"token": []byte("two"), "ca": []byte("x")}}
	worldDigestKey   = bytes.Repeat([]byte{0x5e}, 32)
)

// secretsOf decides whether a sequence has Secrets, from a stream of its own,
// so that the sequences without them take the steps they took before.
func secretsOf(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x5ec7)).IntN(2) == 0
}

func (w *world) serverSecret(name string) *corev1.Secret {
	s, _ := w.server.get(secretsResource, name).(*corev1.Secret)
	return s
}

func (w *world) writeSecret() bool {
	name := pick(w, worldSecretNames)
	data := pick(w, worldSecretData)
	if s := w.serverSecret(name); s != nil {
		s.Data = maps.Clone(data)
		updated, err := w.server.update(byUser, secretsResource, s, true)
		must(err)
		w.logf("user: write secret %s data %v (rv %s)", name, slices.Sorted(maps.Keys(data)), updated.GetResourceVersion())
		return true
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNamespace}, Data: maps.Clone(data)}
	if w.rng.IntN(5) > 0 {
		s.Labels = map[string]string{gamesv1.SecretLabel: gamesv1.SecretLabelValue}
	}
	created, err := w.server.create(byUser, secretsResource, s)
	must(err)
	w.logf("user: create secret %s (%s), labelled %t", name, created.GetUID(), s.Labels != nil)
	return true
}

func (w *world) relabelSecret() bool {
	s := w.serverSecret(pick(w, worldSecretNames))
	if s == nil {
		return false
	}
	labelled := s.Labels[gamesv1.SecretLabel] == gamesv1.SecretLabelValue
	if labelled {
		delete(s.Labels, gamesv1.SecretLabel)
	} else {
		s.Labels = map[string]string{gamesv1.SecretLabel: gamesv1.SecretLabelValue}
	}
	_, err := w.server.update(byUser, secretsResource, s, true)
	must(err)
	w.logf("user: label secret %s %t", s.Name, !labelled)
	return true
}

func (w *world) deleteSecret() bool {
	s := w.serverSecret(pick(w, worldSecretNames))
	if s == nil {
		return false
	}
	must(w.server.delete(byUser, secretsResource, s.Name, metav1.DeletePropagationBackground))
	w.logf("user: delete secret %s", s.Name)
	return true
}

// editSessionSecrets gives a session a template whose volume reads one of
// the Secrets, or takes the template away.
func (w *world) editSessionSecrets() bool {
	s := w.liveSession()
	if s == nil {
		return false
	}
	choice := pick(w, append([]string{""}, worldSecretNames...))
	s.Spec.Template = nil
	if choice != "" {
		s.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{
			Name: "credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: choice}}}}}}
	}
	updated, err := w.server.update(byUser, sessionsResource, s, true)
	must(err)
	w.logf("user: gamesession %s reads secret %q (generation %d)", s.Name, choice, updated.GetGeneration())
	return true
}

// noteSecretDelivered owes each session that reads the Secret a move when its
// cache shows the Secret's data change, or the Secret come or go.
func (w *world) noteSecretDelivered(ev watchEvent, prev object) {
	digest := func(obj object) string {
		if obj == nil {
			return ""
		}
		return obj.GetAnnotations()[dataDigestAnnotation]
	}
	now := ev.obj
	if ev.kind == watch.Deleted {
		now = nil
	}
	if digest(prev) == digest(now) && (prev == nil) == (now == nil) {
		return
	}
	for _, obj := range w.caches[sessionsResource].indexer.List() {
		if s := obj.(*gamesv1.GameSession); slices.Contains(templateSecrets(s.Spec.Template), ev.obj.GetName()) {
			w.secretMoves[s.Name]++
		}
	}
}

// checkSecretsWrite is told of each controller write to an existing
// Deployment.
func (w *world) checkSecretsWrite(before, after *appsv1.Deployment) {
	if before == nil {
		return
	}
	had, has := observedSet(secretKind{}, before), observedSet(secretKind{}, after)
	if had == has {
		return
	}
	name := after.Name
	if onlySecretsDiffer(before, after) {
		w.covered["secret change rolled"]++
	}
	if w.credits[name] == 0 && w.secretMoves[name] > 0 {
		// The move a Secret change owed it.
		w.secretMoves[name]--
		w.credit(name)
	}
	for _, secret := range splitNames(has.names) {
		if !w.secretCached(secret) {
			w.violate("secret-unknown", "Patch moved Deployment %s to the digest of Secrets %q, but the controller's cache holds no Secret %s",
				name, has.names, secret)
		}
	}
	s := w.caches[sessionsResource].session(name)
	if s == nil {
		return
	}
	reads := templateSecrets(s.Spec.Template)
	for _, secret := range splitNames(has.names) {
		if !slices.Contains(reads, secret) {
			w.violate("secret-unknown", "Patch moved Deployment %s to the digest of Secrets %q, but GameSession %s reads %v", name, has.names, name, reads)
		}
	}
	if !onlySecretsDiffer(before, after) {
		return
	}
	for _, secret := range splitNames(had.names) {
		if slices.Contains(reads, secret) && !w.secretCached(secret) {
			w.violate("secret-gone-rolled", "Patch restarted Deployment %s for its Secrets (%q, now %q), while Secret %s, which it still reads, is gone from the controller's cache",
				name, had.names, has.names, secret)
		}
	}
}

func (w *world) secretCached(name string) bool {
	_, exists, err := w.caches[secretsResource].indexer.GetByKey(worldNamespace + "/" + name)
	must(err)
	return exists
}

func splitNames(names string) []string {
	if names == "" {
		return nil
	}
	return strings.Split(names, ",")
}

// onlySecretsDiffer reports whether two Deployments' pod templates differ in
// their Secret annotations and nothing else.
func onlySecretsDiffer(before, after *appsv1.Deployment) bool {
	b, a := before.Spec.Template.DeepCopy(), after.Spec.Template.DeepCopy()
	for _, t := range []*corev1.PodTemplateSpec{b, a} {
		delete(t.Annotations, gamesv1.SecretsAnnotation)
		delete(t.Annotations, gamesv1.SecretsHashAnnotation)
	}
	return equality.Semantic.DeepEqual(b, a)
}

// serverSecrets is the set a session's pods are to run with, as the server
// holds its Secrets: an account of the digests of its own, from the data.
func (w *world) serverSecrets(s *gamesv1.GameSession) inputSet {
	var names []string
	h := sha256.New()
	for _, name := range templateSecrets(s.Spec.Template) {
		secret := w.serverSecret(name)
		if secret == nil || secret.Labels[gamesv1.SecretLabel] != gamesv1.SecretLabelValue {
			continue
		}
		names = append(names, name)
		fmt.Fprintf(h, "%s\x00%s\x00", name, dataDigest(worldDigestKey, secret))
	}
	if len(names) == 0 {
		return inputSet{}
	}
	return inputSet{names: strings.Join(names, ","), hash: hex.EncodeToString(h.Sum(nil))[:32]}
}

// checkSecretsAtRest: a session on its profile's current revision, that
// nothing holds, runs the digest of the Secrets it reads.
func (w *world) checkSecretsAtRest() {
	if !w.secrets {
		return
	}
	for _, s := range w.server.sessions() {
		d := w.server.deployment(s.Name)
		profile := w.serverProfileOf(s)
		if d == nil || !controlledBy(d, s.UID) || d.Labels[worldManagedByLabel] != worldManagedByValue || profile == nil ||
			profile.Labels[gamesv1.ProfileLabel] != gamesv1.ProfileLabelValue || rolledProfileHash(d, refOf(s)) != ProfileHash(profile) ||
			isBusy(s) {
			continue
		}
		if ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady); ready != nil &&
			(ready.Reason == gamesv1.ReasonDeploymentInvalid || ready.Reason == gamesv1.ReasonContainerConflict) {
			continue
		}
		policy, err := w.ctrl.policyOf(profile)
		if err != nil || policy.Paused || policy.Window != nil && !policy.Window.Open(w.clock.Now()) {
			continue
		}
		want, has := w.serverSecrets(s), observedSet(secretKind{}, d)
		held := false
		for _, name := range splitNames(has.names) {
			held = held || slices.Contains(templateSecrets(s.Spec.Template), name) && !strings.Contains(","+want.names+",", ","+name+",")
		}
		if held {
			w.covered["secret gone, digest kept"]++
		}
		if want.names != "" {
			w.covered["secret digest at rest"]++
		}
		if !held && want != has {
			w.violate("secret-digest-stale", "GameSession %s reads Secrets %v, whose digest is %+v on the server, but its Deployment runs %+v",
				s.Name, templateSecrets(s.Spec.Template), want, has)
		}
	}
}
