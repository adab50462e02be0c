package controller

import (
	"bytes"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/metrics"
)

// useDigestKeys makes the world's controller one that digests under keys,
// as a process started with them would: its Secret cache digested under
// them, the Deployments as the last process left them.
func (w *inputWorld) useDigestKeys(t *testing.T, keys SecretDigestKeys) {
	t.Helper()
	w.keys = keys
	in := &w.f.c.caches.inputs[0]
	in.inputKind = secretKind{keys: keys.fingerprints()}
	for _, obj := range in.cache.List() {
		old := obj.(*corev1.Secret)
		// The cache holds no data: the world's Secrets all hold token "one"
		// until rotated, and the tests below rotate none before this.
		secret := labelledSecret(old.Name, map[string]string{"token": "one"})
		secret.ResourceVersion = old.ResourceVersion
		cached, err := keys.Digester()(secret)
		if err != nil {
			t.Fatal(err)
		}
		w.f.setCached(cached.(*corev1.Secret))
	}
}

// templates are the pod templates of the sessions' Deployments as stored.
func (w *inputWorld) templates() map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	for _, s := range w.all() {
		out[s.Name] = w.f.storedDeployment(testNamespace, s.Name).Spec.Template
	}
	return out
}

// A new key, the old one lost (its Secret deleted, no process holding it),
// restarts no game server: the Deployments keep their digests, recorded as
// standing for the data under the new key, with one metadata write each. A
// change of the data after that rolls its readers, under the new key.
func TestNewDigestKeyRestartsNoGameServer(t *testing.T) {
	w := newSecretWorld(t)
	oldKey := KeyFingerprint(testDigestKey)
	for _, s := range []*gamesv1.GameSession{w.blue, w.green} {
		if got := w.f.storedDeployment(testNamespace, s.Name).Labels[gamesv1.SecretsKeyLabel]; got != oldKey {
			t.Fatalf("%s records key %q, want the key it was made under, %q", s.Name, got, oldKey)
		}
	}
	if _, ok := w.f.storedDeployment(testNamespace, w.none.Name).Labels[gamesv1.SecretsKeyLabel]; ok {
		t.Error("a session that reads no labelled Secret records a key")
	}
	before := w.templates()

	newKey := bytes.Repeat([]byte{9}, 32)
	w.useDigestKeys(t, SecretDigestKeys{Current: newKey})
	written := w.syncAll(t)
	if !equality.Semantic.DeepEqual(before, w.templates()) {
		t.Fatal("a new digest key changed pod templates: every game server reading a labelled Secret restarts")
	}
	for _, s := range []*gamesv1.GameSession{w.blue, w.green} {
		d := written[s.Name]
		if d == nil {
			t.Fatalf("%s: no write to record the new key", s.Name)
		}
		want, _, err := w.f.c.caches.inputs[0].wanted(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, wantRecord := d.Labels[gamesv1.SecretsKeyLabel], KeyFingerprint(newKey)+"."+want.hash; got != wantRecord {
			t.Errorf("%s records %q, want %q: the new key's digest of the data it runs", s.Name, got, wantRecord)
		}
	}
	if got := metricValue(t, w.f.c.sessions.metrics.SecretDigestsAdopted); got != 2 {
		t.Errorf("secret_digests_adopted_total %v, want 2", got)
	}
	if again := w.syncAll(t); len(again) > 0 {
		t.Errorf("synced again, the sessions wrote %v", keysOf(again))
	}

	w.rotate(t, "blue", "two")
	written = w.syncAll(t)
	if len(written) != 1 || written["blue-1"] == nil {
		t.Fatalf("a rotation under the new key wrote %v, want blue-1 only", keysOf(written))
	}
	d := written["blue-1"]
	if d.Spec.Template.Annotations[gamesv1.SecretsHashAnnotation] == before["blue-1"].Annotations[gamesv1.SecretsHashAnnotation] {
		t.Error("a rotation under the new key did not roll its reader")
	}
	if got := d.Labels[gamesv1.SecretsKeyLabel]; got != KeyFingerprint(newKey) {
		t.Errorf("moved under the new key, blue-1 records %q, want %q", got, KeyFingerprint(newKey))
	}
}

// A rotation keeps the key before in the Secret: a template made under it
// is checked under it, and moves only if its data changed meanwhile.
func TestRotatedDigestKeyChecksThePreviousDigests(t *testing.T) {
	w := newSecretWorld(t)
	before := w.templates()
	// Green's data changed while no process ran: the new process's cache
	// shows "two" under both keys.
	newKey := bytes.Repeat([]byte{9}, 32)
	keys := SecretDigestKeys{Current: newKey, Previous: testDigestKey}
	w.useDigestKeys(t, keys)
	changed, err := keys.Digester()(labelledSecret("green", map[string]string{"token": "two"}))
	if err != nil {
		t.Fatal(err)
	}
	w.f.setCached(changed.(*corev1.Secret))

	written := w.syncAll(t)
	after := w.templates()
	if !equality.Semantic.DeepEqual(before["blue-1"], after["blue-1"]) {
		t.Error("blue-1, whose Secret did not change, restarted for the rotated key")
	}
	if d := written["blue-1"]; d == nil || !strings.HasPrefix(d.Labels[gamesv1.SecretsKeyLabel], KeyFingerprint(newKey)+".") {
		t.Errorf("blue-1 records no new key standing for its digest: %v", d)
	}
	if equality.Semantic.DeepEqual(before["green-1"], after["green-1"]) {
		t.Error("green-1, whose Secret changed, kept the data it ran: checked under the previous key, the change shows")
	}
	if d := written["green-1"]; d == nil || d.Labels[gamesv1.SecretsKeyLabel] != KeyFingerprint(newKey) {
		t.Errorf("moved, green-1 records no %q: %v", KeyFingerprint(newKey), d)
	}
	if got := metricValue(t, w.f.c.sessions.metrics.SecretDigestsAdopted); got != 0 {
		t.Errorf("secret_digests_adopted_total %v, want 0: the previous key checked every digest", got)
	}
}

// A Deployment written before keys were recorded was made under the key of
// the time: the same key records it, with a metadata write, and restarts
// nothing.
func TestDigestKeyRecordedOnDeploymentsOfEarlierVersions(t *testing.T) {
	w := newSecretWorld(t)
	stored := w.f.storedDeployment(testNamespace, w.blue.Name).DeepCopy()
	delete(stored.Labels, gamesv1.SecretsKeyLabel)
	if err := w.f.kubeClient.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), stored, testNamespace); err != nil {
		t.Fatal(err)
	}
	w.f.setCached(stored)
	before := w.templates()
	written := w.syncAll(t)
	if got := written["blue-1"].Labels[gamesv1.SecretsKeyLabel]; got != KeyFingerprint(testDigestKey) {
		t.Errorf("blue-1 records %q, want %q", got, KeyFingerprint(testDigestKey))
	}
	if !equality.Semantic.DeepEqual(before, w.templates()) {
		t.Error("recording the key changed a pod template")
	}
}

// The key Secret deleted, replaced or back: /readyz, an Event on the
// Secret and the metric say so, each change once.
func TestDigestKeyWatchReportsTheKeySecret(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	recorder := record.NewFakeRecorder(10)
	m := metrics.NewControllerMetrics()
	w := &digestKeyWatch{namespace: "games-system", name: "digest-key", current: KeyFingerprint(testDigestKey),
		store: store, recorder: recorder, metrics: m, logger: logger, reported: keyPresent}
	keySecret := func(key []byte) *corev1.Secret {
		s := &corev1.Secret{Data: map[string][]byte{DigestKeyField: key}}
		s.Namespace, s.Name = "games-system", "digest-key"
		obj, err := DigestKeyStandIn(s)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*corev1.Secret)
	}
	state := func(s string) float64 { return metricValue(t, m.SecretDigestKey.WithLabelValues(s)) }

	if err := store.Add(keySecret(testDigestKey)); err != nil {
		t.Fatal(err)
	}
	w.report()
	if w.Problem() != nil || len(recorder.Events) != 0 {
		t.Fatalf("the key in place: problem %v, %d events", w.Problem(), len(recorder.Events))
	}
	if stand := keySecret(testDigestKey); len(stand.Data) != 0 || bytes.Contains([]byte(stand.String()), testDigestKey) {
		t.Error("the cached key Secret holds the key")
	}

	if err := store.Delete(keySecret(testDigestKey)); err != nil {
		t.Fatal(err)
	}
	w.report()
	w.report()
	if err := w.Problem(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("is gone")) {
		t.Errorf("deleted: problem %v", err)
	}
	if got := <-recorder.Events; !bytes.Contains([]byte(got), []byte("Warning SecretDigestKeyDeleted")) {
		t.Errorf("deleted: event %q", got)
	}
	if len(recorder.Events) != 0 || state(keyMissing) != 1 || state(keyPresent) != 0 {
		t.Errorf("deleted: %d more events, metric missing %v present %v", len(recorder.Events), state(keyMissing), state(keyPresent))
	}

	if err := store.Add(keySecret(bytes.Repeat([]byte{9}, 32))); err != nil {
		t.Fatal(err)
	}
	w.report()
	if err := w.Problem(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("another key")) {
		t.Errorf("replaced: problem %v", err)
	}
	if got := <-recorder.Events; !bytes.Contains([]byte(got), []byte("Warning SecretDigestKeyReplaced")) || state(keyReplaced) != 1 {
		t.Errorf("replaced: event %q, metric %v", got, state(keyReplaced))
	}

	if err := store.Update(keySecret(testDigestKey)); err != nil {
		t.Fatal(err)
	}
	w.report()
	if w.Problem() != nil || state(keyPresent) != 1 {
		t.Errorf("restored: problem %v, metric %v", w.Problem(), state(keyPresent))
	}
	if got := <-recorder.Events; !bytes.Contains([]byte(got), []byte("Normal SecretDigestKeyRestored")) {
		t.Errorf("restored: event %q", got)
	}
}

func keysOf(m map[string]*appsv1.Deployment) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// metricValue is the value of a gauge or counter.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Counter != nil {
		return out.GetCounter().GetValue()
	}
	return out.GetGauge().GetValue()
}

// A Deployment written before keys were recorded, under the key of the
// time, keeps its game servers when the key changes before the controller
// recorded it: a rotation checks it under the previous key, and a key this
// process made (the old one lost) takes its digest over.
func TestDeploymentsOfEarlierVersionsKeepTheirDigestUnderANewKey(t *testing.T) {
	for _, tc := range []struct {
		name        string
		keys        SecretDigestKeys
		wantAdopted float64
	}{
		{"rotated", SecretDigestKeys{Current: bytes.Repeat([]byte{9}, 32), Previous: testDigestKey}, 0},
		{"lost, a new key made", SecretDigestKeys{Current: bytes.Repeat([]byte{9}, 32), Created: true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newSecretWorld(t)
			for _, s := range []*gamesv1.GameSession{w.blue, w.green} {
				stored := w.f.storedDeployment(testNamespace, s.Name).DeepCopy()
				delete(stored.Labels, gamesv1.SecretsKeyLabel)
				if err := w.f.kubeClient.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), stored, testNamespace); err != nil {
					t.Fatal(err)
				}
				w.f.setCached(stored)
			}
			before := w.templates()
			w.useDigestKeys(t, tc.keys)
			written := w.syncAll(t)
			if !equality.Semantic.DeepEqual(before, w.templates()) {
				t.Fatal("a new key restarted game servers of Deployments written before keys were recorded")
			}
			for _, s := range []*gamesv1.GameSession{w.blue, w.green} {
				if d := written[s.Name]; d == nil || !strings.HasPrefix(d.Labels[gamesv1.SecretsKeyLabel], KeyFingerprint(tc.keys.Current)+".") {
					t.Errorf("%s records no new key standing for its digest: %v", s.Name, d)
				}
			}
			if got := metricValue(t, w.f.c.sessions.metrics.SecretDigestsAdopted); got != tc.wantAdopted {
				t.Errorf("secret_digests_adopted_total %v, want %v", got, tc.wantAdopted)
			}
		})
	}
}
