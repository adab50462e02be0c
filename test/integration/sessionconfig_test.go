package integration

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// withConfigVolume makes the session's game server mount the ConfigMap as a
// volume, beside what its template reads already.
func withConfigVolume(s *gamesv1.GameSession, config string) *gamesv1.GameSession {
	if s.Spec.Template == nil {
		s.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "game-server"}}}}
	}
	spec := &s.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: config, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: config}}}})
	spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: config, MountPath: "/etc/" + config})
	return s
}

// createSessionConfig creates a ConfigMap, labelled as a session config if
// labelled.
func (e *env) createSessionConfig(name string, data map[string]string, labelled bool) {
	e.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
	if labelled {
		cm.Labels = map[string]string{gamesv1.SessionConfigLabel: gamesv1.SessionConfigLabelValue}
	}
	if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(e.ctx, cm, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create ConfigMap %s: %v", name, err)
	}
}

// configDigest is the session-config digest the session's Deployment
// carries, "" if none.
func (e *env) configDigest(name string) (string, error) {
	d, err := e.kube.AppsV1().Deployments(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return d.Spec.Template.Annotations[gamesv1.ConfigMapsHashAnnotation], nil
}

func TestSessionConfigEditRollsExactlyItsReaders(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"map": "dust"}, true)
	e.createSessionConfig("tuning", map[string]string{"drop-rate": "0.25"}, true)
	e.createSessionConfig("untracked", map[string]string{"motd": "hello"}, false)
	e.createSecret("match-token", map[string][]byte{"token": []byte("first")}, true)
	c := e.startController()

	// Two readers of tuning (one also reads a labelled Secret), one reader
	// of an unlabelled ConfigMap, one that reads none.
	readers := []string{"reads-tuning", "reads-tuning-and-secret"}
	e.createSession(withConfigVolume(newSession("reads-tuning", "arena", 1), "tuning"))
	e.createSession(withConfigVolume(withSecretEnv(newSession("reads-tuning-and-secret", "arena", 1), "match-token"), "tuning"))
	e.createSession(withConfigVolume(newSession("reads-untracked", "arena", 1), "untracked"))
	e.createSession(newSession("reads-none", "arena", 1))
	all := append(slices.Clone(readers), "reads-untracked", "reads-none")
	for _, name := range all {
		e.waitForReady(name)
	}
	e.waitForDeploymentsSettled()
	digests := map[string]string{}
	for _, name := range all {
		digest, err := e.configDigest(name)
		if err != nil {
			t.Fatal(err)
		}
		digests[name] = digest
	}
	if digests["reads-tuning"] == "" || digests["reads-tuning"] != digests["reads-tuning-and-secret"] {
		t.Fatalf("the readers of tuning carry the digests %q and %q, want one and the same",
			digests["reads-tuning"], digests["reads-tuning-and-secret"])
	}
	if digests["reads-untracked"] != "" || digests["reads-none"] != "" {
		t.Fatalf("sessions reading no labelled ConfigMap carry digests %q and %q", digests["reads-untracked"], digests["reads-none"])
	}
	before := e.deploymentVersions()
	updatesBefore := c.requests.count("update deployments")
	getsBefore := c.requests.count("get configmaps")

	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, "tuning", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["drop-rate"] = "0.5"
	if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range readers {
		e.eventually("a new ConfigMap digest on "+name, func() (bool, error) {
			digest, err := e.configDigest(name)
			return err == nil && digest != "" && digest != digests[name], err
		})
	}
	for _, name := range readers {
		e.waitForReady(name)
	}
	// An edit of the unlabelled one rolls nothing.
	untracked, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, "untracked", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	untracked.Data["motd"] = "changed"
	if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Update(e.ctx, untracked, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitForDeploymentsSettled()
	if got := c.requests.count("update deployments") - updatesBefore; got != len(readers) {
		t.Errorf("%d Deployment updates for an edit read by %d sessions, want exactly one each", got, len(readers))
	}
	after := e.deploymentVersions()
	for _, name := range []string{"reads-untracked", "reads-none"} {
		if before[name] != after[name] {
			t.Errorf("Deployment %s changed (resourceVersion %s -> %s) after an edit of a ConfigMap it does not read through the label",
				name, before[name], after[name])
		}
	}
	// The fan-out reads its caches: no ConfigMap is read live.
	if got := c.requests.count("get configmaps") - getsBefore; got != 0 {
		t.Errorf("the controller read %d ConfigMaps live during the edits", got)
	}
}
