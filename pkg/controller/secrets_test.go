package controller

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	core "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

var testDigestKey = bytes.Repeat([]byte{7}, 32)

// labelledSecret is a Secret with the controller's label, as the API server
// holds it.
func labelledSecret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, UID: types.UID("secret-" + name), ResourceVersion: "5",
			Labels: map[string]string{gamesv1.SecretLabel: gamesv1.SecretLabelValue}},
		Data: map[string][]byte{},
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// cachedSecret is the Secret as the controller's cache holds it.
func cachedSecret(t testing.TB, key []byte, s *corev1.Secret) *corev1.Secret {
	t.Helper()
	obj, err := SecretDigester(key)(s.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*corev1.Secret)
}

func TestSecretDigesterKeepsNoData(t *testing.T) {
	secret := labelledSecret("match-service", map[string]string{"token": "s3cr3t-value", "ca.crt": "-----BEGIN-----"})
	secret.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"token":"czNjcjN0LXZhbHVl"}}`}
	secret.StringData = map[string]string{"extra": "plain-s3cr3t"}
	secret.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}

	slim := cachedSecret(t, testDigestKey, secret)
	encoded, err := json.Marshal(slim)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"s3cr3t", "czNjcjN0", "BEGIN", "plain", "last-applied", "kubectl"} {
		if bytes.Contains(encoded, []byte(leak)) {
			t.Errorf("the cached Secret holds %q: %s", leak, encoded)
		}
	}
	if slim.Name != secret.Name || slim.Namespace != secret.Namespace || slim.UID != secret.UID || slim.ResourceVersion != secret.ResourceVersion {
		t.Errorf("the cached Secret lost its identity: %+v", slim.ObjectMeta)
	}
	digest := slim.Annotations[dataDigestAnnotation]
	if len(digest) != 64 {
		t.Fatalf("digest %q, want 64 hex digits", digest)
	}

	// Idempotent: a stand-in stays as it is.
	again := cachedSecret(t, testDigestKey, slim)
	if again.Annotations[dataDigestAnnotation] != digest {
		t.Errorf("a second transform changed the digest")
	}

	// Every byte of the data counts, StringData included, and nothing else.
	relabelled := secret.DeepCopy()
	relabelled.Labels["team"] = "blue"
	relabelled.ResourceVersion = "6"
	if d := cachedSecret(t, testDigestKey, relabelled).Annotations[dataDigestAnnotation]; d != digest {
		t.Errorf("a metadata edit changed the digest")
	}
	for name, change := range map[string]func(s *corev1.Secret){
		"value":       func(s *corev1.Secret) { s.Data["token"] = []byte("s3cr3t-valuf") },
		"key renamed": func(s *corev1.Secret) { s.Data["token2"] = s.Data["token"]; delete(s.Data, "token") },
		// Length prefixes: moving a byte from a key to its value differs.
		"boundary":   func(s *corev1.Secret) { s.Data = map[string][]byte{"tokens": []byte("3cr3t-value")} },
		"stringData": func(s *corev1.Secret) { s.StringData["extra"] = "other" },
	} {
		changed := secret.DeepCopy()
		change(changed)
		if d := cachedSecret(t, testDigestKey, changed).Annotations[dataDigestAnnotation]; d == digest {
			t.Errorf("%s: the digest did not change", name)
		}
	}
	// Keyed: another key, another digest, for the same data.
	if d := cachedSecret(t, bytes.Repeat([]byte{8}, 32), secret).Annotations[dataDigestAnnotation]; d == digest {
		t.Errorf("the digest does not depend on the key")
	}
}

func TestTemplateSecrets(t *testing.T) {
	env := func(secret string) corev1.EnvVar {
		return corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "k"}}}
	}
	template := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
		InitContainers:   []corev1.Container{{Name: "init", Env: []corev1.EnvVar{env("init-token")}}},
		Containers: []corev1.Container{
			{Name: "game-server", Env: []corev1.EnvVar{env("match-token"), {Name: "PLAIN", Value: "1"}},
				EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env-bundle"}}},
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "not-a-secret"}}}}},
			{Name: "sidecar", Env: []corev1.EnvVar{env("match-token")}},
		},
		Volumes: []corev1.Volume{
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls"}}},
			{Name: "bundle", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "projected"}}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
			}}}},
		},
	}}
	want := []string{"env-bundle", "init-token", "match-token", "projected", "tls"}
	if got := templateSecrets(template); !slices.Equal(got, want) {
		t.Errorf("templateSecrets = %v, want %v", got, want)
	}
	if got := templateSecrets(nil); got != nil {
		t.Errorf("templateSecrets(nil) = %v", got)
	}
}

// withSecretVolume makes the session's game servers mount the Secret.
func withSecretVolume(s *gamesv1.GameSession, secret string) *gamesv1.GameSession {
	s.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "game-server",
			VolumeMounts: []corev1.VolumeMount{{Name: "credentials", MountPath: "/var/run/credentials"}}}},
		Volumes: []corev1.Volume{{Name: "credentials", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: secret}}}},
	}}
	return s
}

// inputWorld is sessions of one profile, each with its Deployment created
// and cached. newSecretWorld's are three: one mounts the Secret "blue", one
// "green", one none.
type inputWorld struct {
	f                 *fixture
	blue, green, none *gamesv1.GameSession
	extra             []*gamesv1.GameSession
	profile           *corev1.ConfigMap
	// keys are the digest keys the Secret cache digests under; zero for
	// testDigestKey, as the fixture's informers say.
	keys SecretDigestKeys
}

// newSecretWorld is the three sessions, and extra readers of "blue".
func newSecretWorld(t *testing.T, extraBlue ...string) *inputWorld {
	t.Helper()
	return newSecretWorldWithOptions(t, Options{}, extraBlue...)
}

// newSecretWorldWithOptions is newSecretWorld with the controller's options.
func newSecretWorldWithOptions(t *testing.T, opts Options, extraBlue ...string) *inputWorld {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	w := &inputWorld{
		blue:    withSecretVolume(newSession(testNamespace, "blue-1", "classic"), "blue"),
		green:   withSecretVolume(newSession(testNamespace, "green-1", "classic"), "green"),
		none:    newSession(testNamespace, "plain-1", "classic"),
		profile: newProfile(testNamespace, "classic", classicData),
	}
	objects := []runtime.Object{w.blue, w.green, w.none, w.profile,
		cachedSecret(t, testDigestKey, labelledSecret("blue", map[string]string{"token": "one"})),
		cachedSecret(t, testDigestKey, labelledSecret("green", map[string]string{"token": "one"}))}
	for _, name := range extraBlue {
		s := withSecretVolume(newSession(testNamespace, name, "classic"), "blue")
		w.extra = append(w.extra, s)
		objects = append(objects, s)
	}
	w.f = newFixtureWithOptions(ctx, t, opts, objects...)
	for _, s := range w.all() {
		kube, game := w.sync(t, sessionKey(s))
		w.f.observe(append(kube, game...)...)
	}
	w.f.events()
	return w
}

// sync syncs the key and returns its requests, whatever they are: the tests
// here look at what the Deployments run.
func (w *inputWorld) sync(t *testing.T, key string) (kube, game []core.Action) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	w.f.kubeClient.ClearActions()
	w.f.gameClient.ClearActions()
	before := w.f.snapshotCaches()
	if err := w.f.c.sessions.syncHandler(ctx, key); err != nil {
		t.Fatalf("sync %s: %v", key, err)
	}
	if after := w.f.snapshotCaches(); !reflect.DeepEqual(before, after) {
		t.Errorf("sync %s modified objects in the informer cache", key)
	}
	return filterInformerActions(w.f.kubeClient.Actions()), filterInformerActions(w.f.gameClient.Actions())
}

// all is every session of the world, the Secret world's three first.
func (w *inputWorld) all() []*gamesv1.GameSession {
	all := append([]*gamesv1.GameSession{w.blue, w.green, w.none}, w.extra...)
	return slices.DeleteFunc(all, func(s *gamesv1.GameSession) bool { return s == nil })
}

// rotate changes the data of a Secret, as its informer delivers it.
func (w *inputWorld) rotate(t *testing.T, name, token string) {
	t.Helper()
	old := cachedSecretNamed(t, w.f.c, name)
	secret := labelledSecret(name, map[string]string{"token": token})
	secret.ResourceVersion = bumpVersion(old.ResourceVersion)
	keys := w.keys
	if keys.Current == nil {
		keys.Current = testDigestKey
	}
	cached, err := keys.Digester()(secret)
	if err != nil {
		t.Fatal(err)
	}
	w.f.setCached(cached.(*corev1.Secret))
	w.f.c.sessions.inputEventHandlers(w.f.c.caches.inputs[0]).OnUpdate(old, cached)
}

// syncAll syncs every session and returns the Deployment writes, by session.
func (w *inputWorld) syncAll(t *testing.T) map[string]*appsv1.Deployment {
	t.Helper()
	written := map[string]*appsv1.Deployment{}
	for _, s := range w.all() {
		kube, game := w.sync(t, sessionKey(s))
		for _, a := range kube {
			if v := a.GetVerb(); (v == "update" || v == "patch") && a.GetResource().Resource == "deployments" {
				written[s.Name] = w.f.storedDeployment(testNamespace, s.Name)
			}
		}
		w.f.observe(append(kube, game...)...)
	}
	return written
}

func TestSecretRotationRollsOnlyItsSessions(t *testing.T) {
	w := newSecretWorld(t)
	before := map[string]inputSet{}
	for _, s := range []*gamesv1.GameSession{w.blue, w.green, w.none} {
		before[s.Name] = observedSet(secretKind{}, w.f.storedDeployment(testNamespace, s.Name))
	}
	if before["blue-1"].names != "blue" || before["blue-1"].hash == "" || before["green-1"].names != "green" {
		t.Fatalf("created Deployments carry %+v, want each its Secret's digest", before)
	}
	if before["blue-1"].hash == before["green-1"].hash {
		t.Errorf("two Secrets of the same data, under other names, carry the same digest")
	}
	// Upgrades roll nothing: a template of no labelled Secret carries no
	// annotation at all, exactly as before Secrets were tracked.
	if (before["plain-1"] != inputSet{}) {
		t.Errorf("a session without Secrets carries %+v", before["plain-1"])
	}

	// The rotation queues the sessions of that Secret only.
	for w.f.c.sessions.queue.Len() > 0 {
		key, _ := w.f.c.sessions.queue.Get()
		w.f.c.sessions.queue.Done(key)
	}
	w.rotate(t, "blue", "two")
	if n := w.f.c.sessions.queue.Len(); n != 1 {
		t.Errorf("the rotation queued %d sessions, want 1", n)
	}
	if key, _ := w.f.c.sessions.queue.Get(); key != sessionKey(w.blue) {
		t.Errorf("the rotation queued %q, want %q", key, sessionKey(w.blue))
	}

	written := w.syncAll(t)
	if len(written) != 1 || written["blue-1"] == nil {
		t.Fatalf("the rotation wrote the Deployments of %v, want blue-1's only", slices.Sorted(maps.Keys(written)))
	}
	after := observedSet(secretKind{}, written["blue-1"])
	if after.names != "blue" || after.hash == before["blue-1"].hash {
		t.Errorf("blue-1 runs %+v after the rotation, want a new digest of blue", after)
	}
	if d := written["blue-1"]; d.Spec.Template.Spec.Volumes[0].Secret.SecretName != "blue" {
		t.Errorf("the pods do not mount the live Secret: %+v", d.Spec.Template.Spec.Volumes)
	}
	// And then it is in order: no more writes.
	if written := w.syncAll(t); len(written) != 0 {
		t.Errorf("a second pass wrote %v", slices.Sorted(maps.Keys(written)))
	}
}

func TestSecretChangeWaitsForThePolicy(t *testing.T) {
	tests := []struct {
		name string
		// configure changes the session blue-1 or the profile, once the
		// Deployments run.
		configure func(s *gamesv1.GameSession, profile *corev1.ConfigMap)
		// release lets the change go; nil for a change that must wait.
		release func(w *inputWorld)
	}{{
		name: "busy session",
		configure: func(s *gamesv1.GameSession, _ *corev1.ConfigMap) {
			s.Labels = map[string]string{gamesv1.BusyLabel: gamesv1.BusyLabelValue}
		},
		release: func(w *inputWorld) {
			w.blue = w.blue.DeepCopy()
			w.blue.Labels = nil
			w.f.setCached(w.blue)
		},
	}, {
		name: "paused rollout",
		configure: func(_ *gamesv1.GameSession, p *corev1.ConfigMap) {
			p.Annotations = map[string]string{rollout.AnnotationPaused: "true"}
		},
		release: func(w *inputWorld) {
			w.profile = w.profile.DeepCopy()
			w.profile.Annotations = nil
			w.f.setCached(w.profile)
		},
	}, {
		name: "outside the window",
		configure: func(_ *gamesv1.GameSession, p *corev1.ConfigMap) {
			// Closed at any time but one minute a day.
			now := time.Now().UTC()
			open := now.Add(12 * time.Hour)
			p.Annotations = map[string]string{rollout.AnnotationWindow: fmt.Sprintf("%02d:%02d-%02d:%02d UTC",
				open.Hour(), open.Minute(), open.Add(time.Minute).Hour(), open.Add(time.Minute).Minute())}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newSecretWorld(t)
			session, profile := w.blue.DeepCopy(), w.profile.DeepCopy()
			tt.configure(session, profile)
			w.blue, w.profile = session, profile
			w.f.setCached(session)
			w.f.setCached(profile)
			before := observedSet(secretKind{}, w.f.storedDeployment(testNamespace, "blue-1"))
			w.rotate(t, "blue", "two")
			if written := w.syncAll(t); written["blue-1"] != nil {
				t.Fatalf("the change did not wait: blue-1 runs %+v", observedSet(secretKind{}, written["blue-1"]))
			}
			if tt.release == nil {
				return
			}
			tt.release(w)
			written := w.syncAll(t)
			if written["blue-1"] == nil || observedSet(secretKind{}, written["blue-1"]) == before {
				t.Errorf("once released, the change did not roll")
			}
		})
	}
}

// A busy session's rotation waits for max-defer of the window's open time,
// as a profile's rollout does: a week of closed window spends none of it.
func TestSecretChangeMaxDeferCountsTheOpenWindow(t *testing.T) {
	monday := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(monday)
	w := newSecretWorldWithOptions(t, Options{Clock: clk})
	w.blue = w.blue.DeepCopy()
	w.blue.Labels = map[string]string{gamesv1.BusyLabel: gamesv1.BusyLabelValue}
	w.f.setCached(w.blue)
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationWindow: "Mon 03:00-04:00", rollout.AnnotationMaxDefer: "90m"}
	w.f.setCached(w.profile)
	before := observedSet(secretKind{}, w.f.storedDeployment(testNamespace, "blue-1"))
	w.rotate(t, "blue", "two")

	// An hour of Monday's window, then a week closed, then ten minutes of
	// the next Monday's: 70 minutes of the 90.
	for _, now := range []time.Time{monday, monday.Add(59 * time.Minute), monday.AddDate(0, 0, 7).Add(10 * time.Minute)} {
		clk.SetTime(now)
		if written := w.syncAll(t); written["blue-1"] != nil {
			t.Fatalf("at %v, busy blue-1 moved to %+v", now, observedSet(secretKind{}, written["blue-1"]))
		}
	}
	clk.SetTime(monday.AddDate(0, 0, 7).Add(30 * time.Minute))
	written := w.syncAll(t)
	if written["blue-1"] == nil || observedSet(secretKind{}, written["blue-1"]) == before {
		t.Errorf("after 90 minutes of open window, busy blue-1 did not move")
	}
}

func TestSecretGoneKeepsTheGameServers(t *testing.T) {
	w := newSecretWorld(t)
	secret := cachedSecretNamed(t, w.f.c, "blue")
	handlers := w.f.c.sessions.inputEventHandlers(w.f.c.caches.inputs[0])
	// Deleted, or its label removed: the cache cannot tell.
	w.f.deleteCached(secret)
	handlers.OnDelete(secret)
	if written := w.syncAll(t); len(written) != 0 {
		t.Fatalf("a Secret gone from the cache rolled %v", slices.Sorted(maps.Keys(written)))
	}
	// Back, rotated: the session rolls once.
	secret = labelledSecret("blue", map[string]string{"token": "three"})
	w.f.setCached(cachedSecret(t, testDigestKey, secret))
	handlers.OnAdd(secret, false)
	if written := w.syncAll(t); written["blue-1"] == nil {
		t.Errorf("the Secret's return did not roll its session")
	}
}

func TestSecretTrackingOffKeepsWhatRuns(t *testing.T) {
	w := newSecretWorld(t)
	before := observedSet(secretKind{}, w.f.storedDeployment(testNamespace, "blue-1"))
	// The same Deployments, under a controller without a Secret informer.
	w.f.c.caches.inputs[0].cache = nil
	w.rotateUnseen(t)
	if written := w.syncAll(t); len(written) != 0 {
		t.Errorf("turning Secrets off rolled %v", slices.Sorted(maps.Keys(written)))
	}
	if got := observedSet(secretKind{}, w.f.storedDeployment(testNamespace, "blue-1")); got != before {
		t.Errorf("blue-1 runs %+v, want %+v kept", got, before)
	}
}

// rotateUnseen changes blue in the cache behind a controller that does not read
// it.
func (w *inputWorld) rotateUnseen(t *testing.T) {
	t.Helper()
	secret := labelledSecret("blue", map[string]string{"token": "two"})
	w.f.setCached(cachedSecret(t, testDigestKey, secret))
}

// complete makes the session's Deployment, as stored, rolled out and Ready,
// or failed, and puts it in the cache.
func (w *inputWorld) complete(t *testing.T, name string, failed bool) {
	t.Helper()
	d := w.f.storedDeployment(testNamespace, name).DeepCopy()
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = replicas, replicas, replicas, replicas
	if failed {
		d.Status.ReadyReplicas, d.Status.AvailableReplicas = 0, 0
	} else {
		// The Deployment controller ends a progress deadline it reported
		// once the new pods are available.
		d.Status.Conditions = slices.DeleteFunc(d.Status.Conditions, func(c appsv1.DeploymentCondition) bool {
			return c.Reason == "ProgressDeadlineExceeded"
		})
	}
	w.f.setCached(d)
}

func TestSecretRotationPacedByMaxRolling(t *testing.T) {
	w := newSecretWorld(t, "blue-2", "blue-3", "blue-4")
	for _, name := range []string{"blue-1", "blue-2", "blue-3", "blue-4"} {
		w.complete(t, name, false)
	}
	// Paced now that the Deployments run: 2 of the profile's 6 sessions.
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "2"}
	w.f.setCached(w.profile)
	w.rotate(t, "blue", "two")

	moved := func(written map[string]*appsv1.Deployment) []string { return slices.Sorted(maps.Keys(written)) }
	first := moved(w.syncAll(t))
	if len(first) != 2 {
		t.Fatalf("max-rolling 2 moved %v", first)
	}
	if again := moved(w.syncAll(t)); len(again) != 0 {
		t.Fatalf("with two rolling, a second pass moved %v", again)
	}
	// One Ready, one failed: the failed one keeps its place, as a brake.
	w.complete(t, first[0], false)
	w.complete(t, first[1], true)
	second := moved(w.syncAll(t))
	if len(second) != 1 || slices.Contains(first, second[0]) {
		t.Fatalf("one place freed, moved %v (first %v)", second, first)
	}
	w.complete(t, second[0], true)
	if stuck := moved(w.syncAll(t)); len(stuck) != 0 {
		t.Fatalf("with two failed, the rotation went on: moved %v", stuck)
	}
	// Fixed: a new digest moves the failed ones again, in their places,
	// and the last one once one of them is Ready.
	w.rotate(t, "blue", "three")
	fixed := moved(w.syncAll(t))
	if !slices.Equal(fixed, []string{first[1], second[0]}) {
		t.Fatalf("the fix moved %v, want the failed %v and %v", fixed, first[1], second[0])
	}
}

// cachedSecretNamed is the stand-in of a Secret of the test namespace in the
// controller's Secret cache.
func cachedSecretNamed(t *testing.T, c *Controller, name string) *corev1.Secret {
	t.Helper()
	if c.caches.inputs[0].kind() != "Secret" {
		t.Fatalf("the first input is %s, want Secret", c.caches.inputs[0].kind())
	}
	obj, found, err := c.caches.inputs[0].cache.GetByKey(testNamespace + "/" + name)
	if err != nil || !found {
		t.Fatalf("Secret %s not cached: %v", name, err)
	}
	return obj.(*corev1.Secret)
}

// Max-rolling as a percentage counts the sessions that may use the profile,
// as a plan counts its members: 20% of the 6 sessions of its namespace and
// the 4 of a namespace it grants the profile to is 2 at a time. The 14 of a
// namespace that names it without a grant are none of its sessions (with
// them, 20% of 24 let 4 move at once).
func TestSecretRotationPacedOverThePermittedSessions(t *testing.T) {
	w := newSecretWorld(t, "blue-2", "blue-3", "blue-4")
	for _, name := range []string{"blue-1", "blue-2", "blue-3", "blue-4"} {
		w.complete(t, name, false)
	}
	for i := range 4 {
		w.f.setCached(newSession("tenant-c", fmt.Sprintf("granted-%d", i), "arena/classic"))
	}
	for i := range 14 {
		w.f.setCached(newSession("tenant-d", fmt.Sprintf("refused-%d", i), "arena/classic"))
	}
	withGrants(t, w.f, referenceGrant(testNamespace, []interface{}{sessionsOf("tenant-c")}, []interface{}{configMaps("")}))
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "20%"}
	w.f.setCached(w.profile)
	w.rotate(t, "blue", "two")

	if moved := slices.Sorted(maps.Keys(w.syncAll(t))); len(moved) != 2 {
		t.Errorf("max-rolling 20%% of 10 sessions moved %v, want 2", moved)
	}
}

// A session whose Deployment its user paused moves nothing until resumed: it
// gives its place back, and the rotation goes on with the others (issue 30,
// bug 1: the paused session held the only place of max-rolling 1 for good).
func TestSecretRotationPausedSessionGivesItsPlaceBack(t *testing.T) {
	w := newSecretWorld(t, "blue-2")
	for _, name := range []string{"blue-1", "blue-2"} {
		w.complete(t, name, false)
	}
	w.profile = w.profile.DeepCopy()
	w.profile.Annotations = map[string]string{rollout.AnnotationMaxRolling: "1"}
	w.f.setCached(w.profile)
	w.rotate(t, "blue", "two")

	first := slices.Sorted(maps.Keys(w.syncAll(t)))
	if len(first) != 1 {
		t.Fatalf("max-rolling 1 moved %v", first)
	}
	paused := w.f.storedDeployment(testNamespace, first[0]).DeepCopy()
	paused.Spec.Paused = true
	w.f.setCached(paused)
	second := slices.Sorted(maps.Keys(w.syncAll(t)))
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("with %s paused, the rotation moved %v, want the other session", first[0], second)
	}
}
