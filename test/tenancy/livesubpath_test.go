package tenancy

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
	"github.com/example/gamesession-controller/pkg/rollout"
)

const liveSubPathPolicy = "gamesession-live-subpath"

// createProfileDelivered creates a profile whose rollout delivers as
// delivery says ("": no annotation, so by restart), and its ProfileRollout
// as the controller would write it, which the policy reads.
func (e *env) createProfileDelivered(namespace, name string, delivery rollout.Delivery) {
	e.t.Helper()
	defer e.setDelivery(namespace, name, delivery)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}},
		Data: dataOf("1"),
	}
	if delivery != "" {
		cm.Annotations = map[string]string{rollout.AnnotationDelivery: string(delivery)}
	}
	if _, err := e.kube.CoreV1().ConfigMaps(namespace).Create(e.ctx, cm, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create profile %s/%s: %v", namespace, name, err)
	}
}

// setDelivery writes how the ProfileRollout of a profile says it delivers,
// creating it first if need be, as the controller does.
func (e *env) setDelivery(namespace, name string, delivery rollout.Delivery) {
	e.t.Helper()
	rollouts := e.game.GamesV1().ProfileRollouts(namespace)
	r, err := rollouts.Get(e.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r, err = rollouts.Create(e.ctx, &gamesv1.ProfileRollout{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{controller.LabelManagedBy: controller.ManagedByValue}}}, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatalf("ProfileRollout %s/%s: %v", namespace, name, err)
	}
	r.Status.Delivery = string(cmp.Or(delivery, rollout.DeliveryRestart))
	if _, err := rollouts.UpdateStatus(e.ctx, r, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("ProfileRollout %s/%s status: %v", namespace, name, err)
	}
}

// profileSubPath and profileDir are mounts of the volume the controller
// mounts the profile in: one file of it by subPath, and all of it.
var (
	profileSubPath = corev1.VolumeMount{Name: "profile", MountPath: "/srv/server.cfg", SubPath: "server.cfg"}
	profileDir     = corev1.VolumeMount{Name: "profile", MountPath: "/srv/profile"}
)

// mounting is a podSession edit: the game server container mounts m.
func mounting(m corev1.VolumeMount) func(*corev1.PodSpec) {
	return func(p *corev1.PodSpec) { p.Containers[0].VolumeMounts = append(p.Containers[0].VolumeMounts, m) }
}

// sessionOf is podSession of the profile ref.
func sessionOf(name, profileRef string, edit func(*corev1.PodSpec)) *gamesv1.GameSession {
	s := podSession(name, edit)
	s.Spec.ProfileRef = profileRef
	return s
}

// refusedAsInvalid checks that err is the live subPath policy's refusal, a
// 422, and that its message holds every part.
func refusedAsInvalid(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	refusedWith(t, what, err, liveSubPathPolicy, http.StatusUnprocessableEntity, parts...)
}

// TestLiveSubPathRefused: with artifacts/admission installed, a namespace
// has the profile arena, delivered live, and classic, delivered by restart.
// As the admin (the policy asks no rights; it judges the session against its
// profile):
//   - a session of arena whose template mounts the profile volume by subPath
//     is refused with a 422 that names the container and the mount path and
//     says what to change; so is one that spells the profile
//     "<namespace>/arena", and one whose init container mounts it by
//     subPathExpr;
//   - the same session of classic is admitted, as is a session of arena that
//     mounts the profile volume as a directory;
//   - an update that adds a subPath mount to the arena session is refused, as
//     is moving the classic session, which mounts by subPath, to arena;
//   - once classic is switched to live, its stored subPath session takes a
//     status write and a label-only update (the matchmaker's busy label),
//     which the policy does not judge, while a template edit of it is
//     refused.
func TestLiveSubPathRefused(t *testing.T) {
	e := newEnv(t)
	ns := e.namespace()
	begin := time.Now()
	e.installAdmissionPolicies()
	typeChecked := time.Since(begin)
	e.createProfileDelivered(ns, "arena", rollout.DeliveryLive)
	e.createProfileDelivered(ns, "classic", "")
	sessions := e.game.GamesV1().GameSessions(ns)

	// The policy is enforced once the API server's informers have it and
	// the profiles: wait for its first refusal, a dry run.
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	e.eventually("the policy enforced", func() (bool, error) {
		_, err := sessions.Create(e.ctx, sessionOf("probe", "arena", mounting(profileSubPath)), dryRun)
		return apierrors.IsInvalid(err) && strings.Contains(err.Error(), liveSubPathPolicy), fmt.Errorf("a dry run answered %v", err)
	})
	enforced := time.Since(begin)
	work := time.Now()

	advice := []string{"Mount the profile volume as a directory (no subPath or subPathExpr) and read the file from it",
		`or deliver profile "arena" by restart`}
	refusal := append([]string{`profile "arena" is delivered live`,
		`container "game-server" mounts volume profile at /srv/server.cfg by subPath server.cfg`}, advice...)

	// Creates.
	_, err := sessions.Create(e.ctx, sessionOf("arena-subpath", "arena", mounting(profileSubPath)), metav1.CreateOptions{})
	refusedAsInvalid(t, "a session of arena mounting the profile by subPath", err, refusal...)
	_, err = sessions.Create(e.ctx, sessionOf("arena-qualified", ns+"/arena", mounting(profileSubPath)), metav1.CreateOptions{})
	refusedAsInvalid(t, "a session of "+ns+"/arena mounting the profile by subPath", err, refusal...)
	initSubPathExpr := func(p *corev1.PodSpec) {
		p.InitContainers = []corev1.Container{{Name: "fetch-maps", Image: "registry.example.com/fetch-maps:1",
			Env:          []corev1.EnvVar{{Name: "MAP", Value: "dust"}},
			VolumeMounts: []corev1.VolumeMount{{Name: "profile", MountPath: "/maps/pool.cfg", SubPathExpr: "$(MAP).cfg"}}}}
	}
	_, err = sessions.Create(e.ctx, sessionOf("arena-init", "arena", initSubPathExpr), metav1.CreateOptions{})
	refusedAsInvalid(t, "a session of arena whose init container mounts the profile by subPathExpr", err,
		append([]string{`init container "fetch-maps" mounts volume profile at /maps/pool.cfg by subPathExpr $(MAP).cfg`}, advice...)...)
	for _, name := range []string{"arena-subpath", "arena-qualified", "arena-init"} {
		if _, err := sessions.Get(e.ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("session %s after its refusal: %v, want NotFound", name, err)
		}
	}

	classic, err := sessions.Create(e.ctx, sessionOf("classic-subpath", "classic", mounting(profileSubPath)), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a session of classic, delivered by restart, mounting the profile by subPath: %v", err)
	}
	arena, err := sessions.Create(e.ctx, sessionOf("arena-dir", "arena", mounting(profileDir)), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a session of arena mounting the profile as a directory: %v", err)
	}

	// Updates that write the template or the profile.
	withSubPath := arena.DeepCopy()
	mounting(profileSubPath)(&withSubPath.Spec.Template.Spec)
	_, err = sessions.Update(e.ctx, withSubPath, metav1.UpdateOptions{})
	refusedAsInvalid(t, "adding a subPath mount to the session of arena", err, refusal...)
	toArena := classic.DeepCopy()
	toArena.Spec.ProfileRef = "arena"
	_, err = sessions.Update(e.ctx, toArena, metav1.UpdateOptions{})
	refusedAsInvalid(t, "moving the subPath session of classic to arena", err, refusal...)
	for name, want := range map[string]string{"arena-dir": "arena", "classic-subpath": "classic"} {
		got, err := sessions.Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.ProfileRef != want || len(got.Spec.Template.Spec.Containers[0].VolumeMounts) != 1 {
			t.Errorf("session %s after refused updates: profileRef %s, mounts %+v; want %s and one mount",
				name, got.Spec.ProfileRef, got.Spec.Template.Spec.Containers[0].VolumeMounts, want)
		}
	}

	// classic turns live: its stored subPath session would now be refused if
	// written, which a template edit shows once the API server's cache has
	// the ProfileRollout saying so; its status and label writes are not
	// judged.
	profile, err := e.kube.CoreV1().ConfigMaps(ns).Get(e.ctx, "classic", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	profile.Annotations = map[string]string{rollout.AnnotationDelivery: string(rollout.DeliveryLive)}
	if _, err := e.kube.CoreV1().ConfigMaps(ns).Update(e.ctx, profile, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.setDelivery(ns, "classic", rollout.DeliveryLive)
	e.eventually("the policy judging classic live", func() (bool, error) {
		edited := classic.DeepCopy()
		edited.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MOTD", Value: "hello"}}
		_, err := sessions.Update(e.ctx, edited, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err) && strings.Contains(err.Error(), liveSubPathPolicy), fmt.Errorf("a dry run answered %v", err)
	})
	classic.Status.ObservedGeneration = classic.Generation
	classic.Status.ProfileHash = hashOf(dataOf("1"))
	written, err := sessions.UpdateStatus(e.ctx, classic, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("a status write of the subPath session of a live profile: %v", err)
	}
	if written.Status.ProfileHash != classic.Status.ProfileHash {
		t.Errorf("the status write was not kept: %+v", written.Status)
	}
	written.Labels = map[string]string{gamesv1.BusyLabel: gamesv1.BusyLabelValue}
	labelled, err := sessions.Update(e.ctx, written, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("a label-only update of the subPath session of a live profile: %v", err)
	}
	if labelled.Labels[gamesv1.BusyLabel] != gamesv1.BusyLabelValue {
		t.Errorf("the label write was not kept: %v", labelled.Labels)
	}
	t.Logf("policies type-checked after %s, enforced after %s; the cases took %s", typeChecked, enforced, time.Since(work))
}
