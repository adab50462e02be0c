package controller

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Referenced Secrets.
//
// A session's pod template may reference Secrets (credentials of a match
// service, a TLS certificate). Those that carry gamesv1.SecretLabel roll the
// session's game servers when their data change, the way a profile edit
// does: the pod template carries a keyed digest of their data
// (gamesv1.SecretsHashAnnotation), and a new digest is a new template.
//
// The pods mount the live Secret: no copies. A profile gets immutable
// revisions because the controller owns its content's history; copying a
// Secret would mean caching its data, writing Secrets into every tenant's
// namespace and deleting them again, which is exactly the privilege a
// tenant least wants a shared controller to hold. What the live mount costs
// is that a Secret volume's files change under the running pods (the kubelet
// refreshes them within about a minute) before the rollout restarts them;
// env and subPath mounts change only with the restart. docs/tenancy.md says
// so, and what that means for a paced rotation.
//
// The controller never holds Secret data: the informer's transform
// (SecretDigester) replaces each Secret by its name and an HMAC of its data
// under a key of the controller's own, before the object enters the cache.

// secretRefIndex maps a Secret, as "namespace/name", to the sessions whose pod
// template references it.
const secretRefIndex = "secretRef"

// secretDigestAnnotation holds, on the cached stand-in of a Secret only, the
// keyed digest of its data. It never reaches the API server.
const secretDigestAnnotation = "games.example.com/data-digest"

// SecretSelector is the label selector of the Secret informer.
func SecretSelector() string {
	return labels.SelectorFromSet(labels.Set{gamesv1.SecretLabel: gamesv1.SecretLabelValue}).String()
}

// SecretDigester returns the transform of the Secret informer: each Secret
// becomes a stand-in with its identity and an HMAC-SHA256 of its data under
// key, and nothing else (no data, labels or annotations of its own). It is
// idempotent, as informer transforms should be: a stand-in stays as it is.
func SecretDigester(key []byte) cache.TransformFunc {
	return func(obj interface{}) (interface{}, error) {
		secret, ok := obj.(*corev1.Secret)
		if !ok {
			return obj, nil
		}
		if _, slim := secret.Annotations[secretDigestAnnotation]; slim && len(secret.Data) == 0 && len(secret.StringData) == 0 {
			// A stand-in already; a Secret of no data that spells the
			// annotation only names its own digest, in its own namespace.
			return obj, nil
		}
		return &corev1.Secret{
			TypeMeta: secret.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				Name:              secret.Name,
				Namespace:         secret.Namespace,
				UID:               secret.UID,
				ResourceVersion:   secret.ResourceVersion,
				DeletionTimestamp: secret.DeletionTimestamp,
				Annotations:       map[string]string{secretDigestAnnotation: dataDigest(key, secret)},
			},
		}, nil
	}
}

// dataDigest is the HMAC of a Secret's namespace, name and data: each
// length-prefixed, the data in key order, so that no two different data sets
// read the same. Without the key, the digest says nothing about the data,
// not even whether a guessed password is the right one; with the Secret's
// identity in it, not even whether two tenants' Secrets hold the same.
func dataDigest(key []byte, secret *corev1.Secret) string {
	mac := hmac.New(sha256.New, key)
	data := make(map[string][]byte, len(secret.Data)+len(secret.StringData))
	maps.Copy(data, secret.Data)
	for k, v := range secret.StringData {
		// Only set on writes, but a transform must not depend on that.
		data[k] = []byte(v)
	}
	var length [8]byte
	write := func(b []byte) {
		binary.BigEndian.PutUint64(length[:], uint64(len(b)))
		mac.Write(length[:])
		mac.Write(b)
	}
	write([]byte(secret.Namespace))
	write([]byte(secret.Name))
	for _, k := range slices.Sorted(maps.Keys(data)) {
		write([]byte(k))
		write(data[k])
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// templateSecrets returns the names of the Secrets a pod template's
// containers read: Secret volumes and projected Secret sources, env
// secretKeyRefs and envFrom secretRefs, of every container. Image pull
// secrets are not among them: a new one does not change a running server.
// Sorted, without repeats.
func templateSecrets(t *corev1.PodTemplateSpec) []string {
	if t == nil {
		return nil
	}
	var names []string
	for _, v := range t.Spec.Volumes {
		if v.Secret != nil {
			names = append(names, v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, source := range v.Projected.Sources {
				if source.Secret != nil {
					names = append(names, source.Secret.Name)
				}
			}
		}
	}
	containers := slices.Concat(t.Spec.InitContainers, t.Spec.Containers)
	for _, c := range containers {
		for _, from := range c.EnvFrom {
			if from.SecretRef != nil {
				names = append(names, from.SecretRef.Name)
			}
		}
		for _, env := range c.Env {
			if env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil {
				names = append(names, env.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return n == "" })
	slices.Sort(names)
	return slices.Compact(names)
}

// secretRefIndexFunc indexes a session by the Secrets its pod template
// references, as "namespace/name": a pod reads Secrets of its own namespace
// only.
func secretRefIndexFunc(obj interface{}) ([]string, error) {
	session, ok := obj.(*gamesv1.GameSession)
	if !ok {
		return nil, fmt.Errorf("secretRef index: expected *GameSession, got %T", obj)
	}
	var keys []string
	for _, name := range templateSecrets(session.Spec.Template) {
		keys = append(keys, session.Namespace+"/"+name)
	}
	return keys, nil
}

// secretSet is the labelled Secrets a pod template runs with, as its
// annotations say: their names and the digest of their data. The zero set
// is a template of no labelled Secret, which carries neither annotation.
type secretSet struct {
	names string // comma-separated, sorted
	hash  string
}

// observedSecrets is the set a Deployment's pod template runs with.
func observedSecrets(d *appsv1.Deployment) secretSet {
	if d == nil {
		return secretSet{}
	}
	a := d.Spec.Template.Annotations
	return secretSet{names: a[gamesv1.SecretsAnnotation], hash: a[gamesv1.SecretsHashAnnotation]}
}

// withSecrets puts the set into d's pod template.
func withSecrets(d *appsv1.Deployment, set secretSet) {
	a := d.Spec.Template.Annotations
	delete(a, gamesv1.SecretsAnnotation)
	delete(a, gamesv1.SecretsHashAnnotation)
	if set.names != "" {
		a[gamesv1.SecretsAnnotation] = set.names
		a[gamesv1.SecretsHashAnnotation] = set.hash
	}
}

// wantedSecrets is the set the session's pods are to run with: the labelled
// Secrets of its template the cache holds, and the digest of their digests.
// A Secret the cache does not hold is either missing or has no label: the
// controller cannot tell, and must not look.
func (c *Controller) wantedSecrets(session *gamesv1.GameSession) (secretSet, error) {
	var names []string
	h := sha256.New()
	for _, name := range templateSecrets(session.Spec.Template) {
		secret, err := c.secretLister.Secrets(session.Namespace).Get(name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return secretSet{}, err
		}
		names = append(names, name)
		fmt.Fprintf(h, "%s\x00%s\x00", name, secret.Annotations[secretDigestAnnotation])
	}
	if len(names) == 0 {
		return secretSet{}, nil
	}
	return secretSet{names: strings.Join(names, ","), hash: hex.EncodeToString(h.Sum(nil))[:32]}, nil
}

// secretHold is why a session keeps the Secrets it runs with for now.
type secretHold struct {
	reason       string
	requeueAfter time.Duration
}

// secretsToRun returns the set the session's Deployment is to run with: the
// wanted one, unless a change of a Secret's data waits. desired is the
// Deployment the sync wants, without any set. A change waits
//   - while a Secret the pods run with, and the template still references,
//     is gone from the cache (deleted, or its label removed): a restart
//     would only fail, or lose the rotation's tracking;
//   - without the profile, or with a policy that does not parse: what
//     paces it is unknown;
//   - while the profile's rollout policy holds every move: paused, or
//     outside the maintenance window;
//   - while the session is busy, until the policy's max-defer has passed
//     since the controller saw the change;
//   - with a paced policy, while max-rolling of the profile's sessions move
//     for their Secrets already (secretPacer).
//
// A Deployment whose template changes anyway (a new profile revision, the
// session's own spec) takes the new set along: its game servers restart
// once, not twice. Without a Secret informer the Deployment keeps what it
// has, so turning the feature off restarts nothing.
//
// reserve takes the place a paced profile's max-rolling gives the move;
// without it, the answer only says whether there is one.
func (c *Controller) secretsToRun(session *gamesv1.GameSession, profile *corev1.ConfigMap,
	observed, desired *appsv1.Deployment, reserve bool) (secretSet, *secretHold, error) {
	have := observedSecrets(observed)
	if c.secretLister == nil {
		return have, nil, nil
	}
	want, err := c.wantedSecrets(session)
	key := cache.MetaObjectToName(session).String()
	if err != nil || observed == nil || want == have {
		if want == have {
			c.secretChanges.settled(key)
		}
		return want, nil, err
	}
	referenced := templateSecrets(session.Spec.Template)
	for _, name := range strings.Split(have.names, ",") {
		if name != "" && slices.Contains(referenced, name) && !strings.Contains(","+want.names+",", ","+name+",") {
			return have, &secretHold{reason: fmt.Sprintf("Secret %s is gone or lost the label %s=%s", name,
				gamesv1.SecretLabel, gamesv1.SecretLabelValue)}, nil
		}
	}
	unchanged := desired.DeepCopy()
	withSecrets(unchanged, have)
	if deploymentChanges(observed, unchanged).templateChange() {
		return want, nil, nil
	}
	if profile == nil {
		return have, &secretHold{reason: "the profile is missing"}, nil
	}
	policy, err := c.policyOf(profile)
	if err != nil {
		return have, &secretHold{reason: "the profile's rollout policy does not parse"}, nil
	}
	now := c.clock.Now()
	switch {
	case policy.Paused:
		return have, &secretHold{reason: "the profile's rollout is paused"}, nil
	case policy.Window != nil && !policy.Window.Open(now):
		return have, &secretHold{reason: "outside the profile's maintenance window",
			requeueAfter: policy.Window.NextOpen(now).Sub(now)}, nil
	}
	seen := c.secretChanges.seen(key, want.hash, now)
	if isBusy(session) {
		if policy.MaxDefer == nil {
			return have, &secretHold{reason: "the session is busy"}, nil
		}
		if ends := seen.Add(*policy.MaxDefer); now.Before(ends) {
			return have, &secretHold{reason: "the session is busy", requeueAfter: ends.Sub(now)}, nil
		}
	}
	if policy.Unpaced() {
		return want, nil, nil
	}
	// Paced: a place among the profile's max-rolling, counted over the
	// sessions that may use it, as a plan counts its members: those of
	// other namespaces that name it without a grant move in none of its
	// rollouts. The session's own sync frees it (settleSecretMove).
	profileKey := profileKey(profile.Namespace, profile.Name)
	sessions := c.permittedSessionKeysOf(profile.Namespace, profile.Name)
	if limit := policy.MaxRollingOf(len(sessions)); !c.secretPacer.admit(profileKey, key, want.hash, limit, reserve) {
		return have, &secretHold{reason: fmt.Sprintf("%d sessions of profile %s roll for their Secrets already, its max-rolling", limit, profileKey)}, nil
	}
	return want, nil, nil
}

// secretChanges remembers since when each session has had a change of its
// Secrets pending, for max-defer. In memory only: a restarted controller
// counts from its start, so a busy session waits longer, never less.
type secretChanges struct {
	mu    sync.Mutex
	since map[string]secretChange
}

type secretChange struct {
	hash string
	at   time.Time
}

func newSecretChanges() *secretChanges {
	return &secretChanges{since: map[string]secretChange{}}
}

// seen returns when the session's change to hash was first seen.
func (s *secretChanges) seen(key, hash string, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if change, ok := s.since[key]; ok && change.hash == hash {
		return change.at
	}
	s.since[key] = secretChange{hash: hash, at: now}
	return now
}

// settled ends the session's pending change: its Deployment runs what it
// wants, or the session is gone.
func (s *secretChanges) settled(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.since, key)
}

// secretChanged queues the sessions that reference the Secret: its data
// changed, it appeared or went, or gained or lost the label.
func (c *Controller) secretChanged(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.logger.Error(err, "Cannot tell which Secret changed")
		return
	}
	keys, err := c.sessionIndexer.IndexKeys(secretRefIndex, key)
	if err != nil {
		c.logger.Error(err, "Looking up the GameSessions of a Secret", "secret", key)
		return
	}
	// No Secret content here, nor its digest: only its name.
	c.logger.V(4).Info("Secret changed", "secret", key, "gameSessions", len(keys))
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// secretUpdated queues the Secret's sessions when its data changed; a
// resync, or an edit of its metadata only, changes nothing they run.
func (c *Controller) secretUpdated(oldObj, newObj interface{}) {
	before, after := oldObj.(*corev1.Secret), newObj.(*corev1.Secret)
	if before.Annotations[secretDigestAnnotation] != after.Annotations[secretDigestAnnotation] {
		c.secretChanged(newObj)
	}
}

// secretPacer paces the rotations of a profile's sessions by its policy's
// max-rolling: at most that many of its sessions moved to a new Secret
// digest and not yet Ready at once. A session whose Deployment fails
// (ProgressDeadlineExceeded) keeps its place, so a rotation that breaks the
// game servers stops after max-rolling of them, as a brake would; a new
// digest (the Secret fixed) moves them again, in the places they hold.
// Waiting sessions are queued again, first come first, as places free up.
//
// In memory only: a restarted controller starts with no session moving, and
// may let max-rolling more start while the old ones finish.
type secretPacer struct {
	mu      sync.Mutex
	moving  map[string]map[string]string // profile → session → digest
	profile map[string]string            // session → the profile it moves in
	waiting map[string][]string          // profile → sessions, first come first
}

func newSecretPacer() *secretPacer {
	return &secretPacer{moving: map[string]map[string]string{}, profile: map[string]string{}, waiting: map[string][]string{}}
}

// admit gives the session of profile a place to move to hash, if one of
// limit is free or it holds one already, and records it; else it waits.
// Without reserve it only says whether it would.
func (p *secretPacer) admit(profile, session, hash string, limit int, reserve bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	moving := p.moving[profile]
	_, holds := moving[session]
	if !reserve {
		return holds || len(moving) < limit
	}
	if held := p.profile[session]; held != "" && held != profile {
		p.releaseLocked(session) // its profileRef changed: moves in the new one
	}
	moving = p.moving[profile]
	if _, ok := moving[session]; ok || len(moving) < limit {
		if moving == nil {
			moving = map[string]string{}
			p.moving[profile] = moving
		}
		moving[session] = hash
		p.profile[session] = profile
		p.waiting[profile] = slices.DeleteFunc(p.waiting[profile], func(k string) bool { return k == session })
		return true
	}
	if !slices.Contains(p.waiting[profile], session) {
		p.waiting[profile] = append(p.waiting[profile], session)
	}
	return false
}

// movingTo returns the digest the session holds a place for, "" if none.
func (p *secretPacer) movingTo(session string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.moving[p.profile[session]][session]
}

// release frees the session's place, and forgets it among the waiting; it
// returns the sessions to queue again.
func (p *secretPacer) release(session string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.releaseLocked(session)
}

func (p *secretPacer) releaseLocked(session string) []string {
	profile, ok := p.profile[session]
	if !ok {
		return nil
	}
	delete(p.profile, session)
	delete(p.moving[profile], session)
	if len(p.moving[profile]) == 0 {
		delete(p.moving, profile)
	}
	// All of them: each syncs, and those without room wait again. A
	// rotation rarely has many waiting at once, and a place freed is
	// rarely taken by the first alone.
	wake := p.waiting[profile]
	delete(p.waiting, profile)
	return wake
}

// forget drops a deleted session, moving or waiting.
func (p *secretPacer) forget(session string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for profile, waiting := range p.waiting {
		p.waiting[profile] = slices.DeleteFunc(waiting, func(k string) bool { return k == session })
	}
	return p.releaseLocked(session)
}

// settleSecretMove frees the session's place once its Deployment d (as the
// cache shows it, nil if none) runs the digest it moved to and is Ready, or
// runs another one: a move refused, or superseded. One that failed keeps it.
func (c *Controller) settleSecretMove(key string, session *gamesv1.GameSession, d *appsv1.Deployment) {
	hash := c.secretPacer.movingTo(key)
	if hash == "" {
		return
	}
	if d != nil && !blocks(d, session) && observedSecrets(d).hash == hash && !deploymentComplete(d) {
		return
	}
	for _, k := range c.secretPacer.release(key) {
		c.queue.Add(k)
	}
}
