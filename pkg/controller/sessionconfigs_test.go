package controller

import (
	"bytes"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/klog/v2/ktesting"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// labelledConfig is a ConfigMap with the session-config label, as the API
// server holds it.
func labelledConfig(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, UID: types.UID("config-" + name), ResourceVersion: "5",
			Labels: map[string]string{gamesv1.SessionConfigLabel: gamesv1.SessionConfigLabelValue}},
		Data: data,
	}
}

// cachedConfig is the ConfigMap as the controller's cache holds it.
func cachedConfig(t *testing.T, cm *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	obj, err := SessionConfigDigester()(cm.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*corev1.ConfigMap)
}

func TestTemplateConfigMaps(t *testing.T) {
	template := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init-env"}}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "not-a-configmap"}}},
		}}},
		Containers: []corev1.Container{{Name: "game-server", Env: []corev1.EnvVar{
			{Name: "WEIGHT", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "weights"}, Key: "w"}}},
			{Name: "PLAIN", Value: "x"},
		}}},
		Volumes: []corev1.Volume{
			{Name: "tuning", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "tuning"}}}},
			{Name: "bundle", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "motd"}}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "tuning"}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "not-a-configmap"}}},
			}}}},
		},
	}}
	want := []string{"init-env", "motd", "tuning", "weights"}
	if got := templateConfigMaps(template); !slices.Equal(got, want) {
		t.Errorf("templateConfigMaps = %v, want %v", got, want)
	}
	if got := templateConfigMaps(nil); got != nil {
		t.Errorf("templateConfigMaps(nil) = %v", got)
	}
}

func TestSessionConfigDigesterKeepsNoData(t *testing.T) {
	cm := labelledConfig("tuning", map[string]string{"drop-rate": "0.25-secret-looking"})
	cm.BinaryData = map[string][]byte{"blob": []byte("binary-payload")}
	cm.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"drop-rate":"0.25"}}`}

	slim := cachedConfig(t, cm)
	encoded, err := json.Marshal(slim)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"0.25", "binary-payload", "last-applied", "session-config"} {
		if bytes.Contains(encoded, []byte(leak)) {
			t.Errorf("the cached ConfigMap holds %q: %s", leak, encoded)
		}
	}
	if slim.Name != cm.Name || slim.Namespace != cm.Namespace || slim.UID != cm.UID || slim.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the cached ConfigMap lost its identity: %+v", slim.ObjectMeta)
	}
	digest := slim.Annotations[dataDigestAnnotation]
	if again := cachedConfig(t, slim); again.Annotations[dataDigestAnnotation] != digest {
		t.Errorf("the transform is not idempotent: %q, then %q", digest, again.Annotations[dataDigestAnnotation])
	}
	for name, change := range map[string]func(*corev1.ConfigMap){
		"data":        func(c *corev1.ConfigMap) { c.Data["drop-rate"] = "0.5" },
		"binary data": func(c *corev1.ConfigMap) { c.BinaryData["blob"] = []byte("other") },
		"a new key":   func(c *corev1.ConfigMap) { c.Data["motd"] = "hello" },
		"its name":    func(c *corev1.ConfigMap) { c.Name = "tuning-2" },
		// The same bytes, as binary data: env and envFrom read data only.
		"a key moved to binary data": func(c *corev1.ConfigMap) {
			c.BinaryData["drop-rate"] = []byte(c.Data["drop-rate"])
			delete(c.Data, "drop-rate")
		},
	} {
		changed := cm.DeepCopy()
		change(changed)
		if d := cachedConfig(t, changed).Annotations[dataDigestAnnotation]; d == digest {
			t.Errorf("a change of %s kept the digest", name)
		}
	}
	relabelled := cm.DeepCopy()
	relabelled.Labels["team"] = "blue"
	if d := cachedConfig(t, relabelled).Annotations[dataDigestAnnotation]; d != digest {
		t.Errorf("a change of its labels changed the digest")
	}
}

// withConfigEnv makes the session's game server read the ConfigMap as its
// environment.
func withConfigEnv(s *gamesv1.GameSession, config string) *gamesv1.GameSession {
	s.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "game-server", EnvFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: config}}}}}},
	}}
	return s
}

// newConfigWorld is four sessions of one profile: two read the ConfigMap
// "tuning" (by env and by a volume beside a Secret), one reads "motd", one
// mounts only the Secret "blue"; each with its Deployment created and cached.
func newConfigWorld(t *testing.T) *inputWorld {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	both := withSecretVolume(newSession(testNamespace, "both-1", "classic"), "blue")
	both.Spec.Template.Spec.Volumes = append(both.Spec.Template.Spec.Volumes, corev1.Volume{Name: "tuning",
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "tuning"}}}})
	w := &inputWorld{extra: []*gamesv1.GameSession{
		withConfigEnv(newSession(testNamespace, "env-1", "classic"), "tuning"),
		both,
		withConfigEnv(newSession(testNamespace, "motd-1", "classic"), "motd"),
		withSecretVolume(newSession(testNamespace, "secret-1", "classic"), "blue"),
	}}
	objects := []runtime.Object{newProfile(testNamespace, "classic", classicData),
		cachedConfig(t, labelledConfig("tuning", map[string]string{"drop-rate": "0.25"})),
		cachedConfig(t, labelledConfig("motd", map[string]string{"motd": "hello"})),
		cachedSecret(t, testDigestKey, labelledSecret("blue", map[string]string{"token": "one"}))}
	for _, s := range w.extra {
		objects = append(objects, s)
	}
	w.f = newFixture(ctx, t, objects...)
	w.syncAll(t)
	w.f.events()
	return w
}

// configInput is the controller's ConfigMap kind, with its cache.
func configInput(t *testing.T, c *Controller) input {
	t.Helper()
	for _, in := range c.caches.inputs {
		if in.kind() == "ConfigMap" {
			return in
		}
	}
	t.Fatal("the controller tracks no ConfigMaps")
	return input{}
}

// editConfig changes the data of a labelled ConfigMap, as its informer
// delivers it.
func (w *inputWorld) editConfig(t *testing.T, name string, data map[string]string) {
	t.Helper()
	in := configInput(t, w.f.c)
	old, found, err := in.cache.GetByKey(testNamespace + "/" + name)
	if err != nil || !found {
		t.Fatalf("ConfigMap %s not cached: %v", name, err)
	}
	cm := labelledConfig(name, data)
	cm.ResourceVersion = bumpVersion(old.(*corev1.ConfigMap).ResourceVersion)
	cached := cachedConfig(t, cm)
	w.f.setCached(cached)
	w.f.c.sessions.inputEventHandlers(in).OnUpdate(old, cached)
}

func TestSessionConfigChangeRollsOnlyItsReaders(t *testing.T) {
	w := newConfigWorld(t)
	before := map[string]inputSet{}
	for _, s := range w.all() {
		before[s.Name] = observedSet(configMapKind{}, w.f.storedDeployment(testNamespace, s.Name))
	}
	if before["env-1"].names != "tuning" || before["env-1"].hash == "" || before["both-1"].names != "tuning" || before["motd-1"].names != "motd" {
		t.Fatalf("created Deployments carry %+v, want each its ConfigMap's digest", before)
	}
	if (before["secret-1"] != inputSet{}) {
		t.Errorf("a session that reads no ConfigMap carries %+v", before["secret-1"])
	}
	secretsBefore := observedSet(secretKind{}, w.f.storedDeployment(testNamespace, "both-1"))

	// The edit queues the readers of that ConfigMap only.
	for w.f.c.sessions.queue.Len() > 0 {
		key, _ := w.f.c.sessions.queue.Get()
		w.f.c.sessions.queue.Done(key)
	}
	w.editConfig(t, "tuning", map[string]string{"drop-rate": "0.5"})
	var queued []string
	for w.f.c.sessions.queue.Len() > 0 {
		key, _ := w.f.c.sessions.queue.Get()
		w.f.c.sessions.queue.Done(key)
		queued = append(queued, key)
	}
	slices.Sort(queued)
	if want := []string{testNamespace + "/both-1", testNamespace + "/env-1"}; !slices.Equal(queued, want) {
		t.Errorf("the edit queued %v, want %v", queued, want)
	}

	written := w.syncAll(t)
	if got := slices.Sorted(maps.Keys(written)); !slices.Equal(got, []string{"both-1", "env-1"}) {
		t.Fatalf("the edit wrote the Deployments of %v, want both-1 and env-1", got)
	}
	for name, d := range written {
		if after := observedSet(configMapKind{}, d); after.names != "tuning" || after.hash == before[name].hash {
			t.Errorf("%s runs %+v after the edit, want a new digest of tuning", name, after)
		}
	}
	if got := observedSet(secretKind{}, written["both-1"]); got != secretsBefore {
		t.Errorf("the ConfigMap edit changed both-1's Secret set: %+v, was %+v", got, secretsBefore)
	}
	if written := w.syncAll(t); len(written) != 0 {
		t.Errorf("a second pass wrote %v", slices.Sorted(maps.Keys(written)))
	}
}

func TestSessionConfigAndSecretChangesRestartOnce(t *testing.T) {
	w := newConfigWorld(t)
	w.editConfig(t, "tuning", map[string]string{"drop-rate": "0.75"})
	w.rotate(t, "blue", "two")
	before := w.f.storedDeployment(testNamespace, "both-1")

	kube, game := w.sync(t, testNamespace+"/both-1")
	writes := 0
	for _, a := range kube {
		if v := a.GetVerb(); (v == "update" || v == "patch") && a.GetResource().Resource == "deployments" {
			writes++
		}
	}
	if writes != 1 {
		t.Fatalf("both-1's sync wrote its Deployment %d times, want once for both changes", writes)
	}
	w.f.observe(append(kube, game...)...)
	after := w.f.storedDeployment(testNamespace, "both-1")
	for _, kind := range []inputKind{secretKind{}, configMapKind{}} {
		if observedSet(kind, after).hash == observedSet(kind, before).hash {
			t.Errorf("the one write did not take the %s change along", kind.kind())
		}
	}
}

func TestUnlabelledConfigMapRollsNothing(t *testing.T) {
	w := newConfigWorld(t)
	// A ConfigMap without the label never enters the cache: the session
	// reads it, but its Deployment carries no digest of it.
	s := withConfigEnv(newSession(testNamespace, "plain-1", "classic"), "unlabelled")
	if err := w.f.gameClient.Tracker().Add(s); err != nil {
		t.Fatal(err)
	}
	w.f.setCached(s)
	w.extra = append(w.extra, s)
	w.syncAll(t)
	if got := observedSet(configMapKind{}, w.f.storedDeployment(testNamespace, "plain-1")); (got != inputSet{}) {
		t.Errorf("a session reading an unlabelled ConfigMap carries %+v", got)
	}
}

func TestSessionConfigTrackingOffKeepsWhatRuns(t *testing.T) {
	w := newConfigWorld(t)
	before := observedSet(configMapKind{}, w.f.storedDeployment(testNamespace, "env-1"))
	// The same Deployments, under a controller that tracks no ConfigMaps,
	// while the ConfigMap changes: nothing restarts.
	w.editConfig(t, "tuning", map[string]string{"drop-rate": "0.9"})
	for i := range w.f.c.caches.inputs {
		if w.f.c.caches.inputs[i].kind() == "ConfigMap" {
			w.f.c.caches.inputs[i].cache = nil
		}
	}
	if written := w.syncAll(t); len(written) != 0 {
		t.Errorf("turning ConfigMaps off rolled %v", slices.Sorted(maps.Keys(written)))
	}
	if got := observedSet(configMapKind{}, w.f.storedDeployment(testNamespace, "env-1")); got != before {
		t.Errorf("env-1 runs %+v, want %+v kept", got, before)
	}
}
