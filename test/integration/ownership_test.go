package integration

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/example/gamesession-controller/cmd/gamesession-controller/app"
	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
)

// What users may do to what the controller owns, on the real control plane.
//
// The session owns its Deployment's labels and its whole spec but paused:
// replicas, the pod template and the rollout settings
// (pkg/controller/deployment.go). An edit of those is put back, but for the
// restart annotation of `kubectl rollout restart`; an edit of anything else
// (other labels and annotations, paused) is kept, through every later write.
// The Deployment's life follows the session's through its ownerReference
// and the garbage collector, whichever propagation policy the user picks.
// Each test says what the user does, then what the controller must do.
// TestPodTemplateHandEditsRestored covers each class of pod template field.

// TestOwnershipOwnedFieldsPutBack: an edit of a field the controller owns is
// put back on the same Deployment, and the session ends Ready.
func TestOwnershipOwnedFieldsPutBack(t *testing.T) {
	const tampered = "registry.example.com/arena-server:tampered"
	for _, tc := range []struct {
		name string
		// edit is what the user does; it returns the field's value in the
		// API server's answer, which proves the edit landed.
		edit func(e *env, name string) string
		// field reads the owned field from a Deployment.
		field func(d *appsv1.Deployment) string
	}{{
		name: "kubectl set image",
		edit: func(e *env, name string) string {
			patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"game-server","image":%q}]}}}}`, tampered)
			return gameServerImage(e.patchDeployment(name, types.StrategicMergePatchType, patch))
		},
		field: gameServerImage,
	}, {
		name: "kubectl scale deploy",
		edit: func(e *env, name string) string {
			deployments := e.kube.AppsV1().Deployments(e.ns)
			scale, err := deployments.GetScale(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				e.t.Fatal(err)
			}
			scale.Spec.Replicas = 4
			if scale, err = deployments.UpdateScale(e.ctx, name, scale, metav1.UpdateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			return fmt.Sprint(scale.Spec.Replicas)
		},
		field: func(d *appsv1.Deployment) string { return fmt.Sprint(ptr.Deref(d.Spec.Replicas, 1)) },
	}, {
		name: "edit the profile-hash annotation",
		edit: func(e *env, name string) string {
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"tampered"}}}}}`, gamesv1.ProfileHashAnnotation)
			return profileHashOf(e.patchDeployment(name, types.StrategicMergePatchType, patch))
		},
		field: profileHashOf,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			_, _, before := e.startReadySession("arena-1")
			want := tc.field(before)
			if got := tc.edit(e, "arena-1"); got == want {
				t.Fatalf("test bug: the edit left the field at %q", got)
			}
			e.waitForDeployment("arena-1", "the controller's value back", func(d *appsv1.Deployment) error {
				if got := tc.field(d); got != want {
					return fmt.Errorf("field is %q, want %q", got, want)
				}
				if d.UID != before.UID {
					return fmt.Errorf("the Deployment was replaced (UID %s, was %s), not repaired", d.UID, before.UID)
				}
				return nil
			})
			e.waitForReadyAtGeneration("arena-1")
		})
	}
}

// TestOwnershipManagedByLabelPutBack: removing the managed-by label takes the
// Deployment out of the controller's label-filtered cache. The controller
// finds it again through a create answered AlreadyExists and one live GET,
// sees it controls it, and patches the label back; `kubectl scale gs` then
// still reaches the Deployment.
func TestOwnershipManagedByLabelPutBack(t *testing.T) {
	e := newEnv(t)
	c, _, before := e.startReadySession("arena-1")
	refused := c.requests.answered("create deployments", 409)
	gets := c.requests.count("get deployments arena-1")

	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, controller.LabelManagedBy)
	if d := e.patchDeployment("arena-1", types.MergePatchType, patch); d.Labels[controller.LabelManagedBy] != "" {
		t.Fatalf("test bug: the label survived its removal: %v", d.Labels)
	}
	e.waitForDeployment("arena-1", "the managed-by label back", func(d *appsv1.Deployment) error {
		if d.UID != before.UID {
			return fmt.Errorf("the Deployment was replaced (UID %s, was %s), not repaired", d.UID, before.UID)
		}
		if got := d.Labels[controller.LabelManagedBy]; got != controller.ManagedByValue {
			return fmt.Errorf("label %s=%q", controller.LabelManagedBy, got)
		}
		return nil
	})
	// The label is back, so this Deployment is in the cache again and the
	// controller need not ask again: each refused create cost one live GET.
	refused = c.requests.answered("create deployments", 409) - refused
	gets = c.requests.count("get deployments arena-1") - gets
	if refused < 1 || gets != refused {
		t.Errorf("the controller found its unlabelled Deployment with %d creates answered AlreadyExists and %d GETs, want at least one, and one GET each", refused, gets)
	}

	e.scaleSession("arena-1", 2)
	e.waitForDeployment("arena-1", "the session's scale in the Deployment", func(d *appsv1.Deployment) error {
		if got := ptr.Deref(d.Spec.Replicas, 1); got != 2 {
			return fmt.Errorf("replicas %d", got)
		}
		return nil
	})
	e.waitForReadyAtGeneration("arena-1")
}

// TestOwnershipUserEditsSurvive: what the controller does not own stays,
// through both kinds of write the controller makes to a Deployment: a profile
// edit patches the hash annotation and the revision alone, a new image
// replaces the pod template whole. A `kubectl rollout restart` is kept, so it
// is neither undone nor restarted again.
func TestOwnershipUserEditsSurvive(t *testing.T) {
	e := newEnv(t)
	e.startReadySession("arena-1")
	// What a user would do with kubectl annotate, label and rollout restart.
	for _, edit := range []string{
		`{"metadata":{"annotations":{"example.com/owner":"ops-team"}}}`,
		`{"metadata":{"labels":{"example.com/tier":"gold"}}}`,
		`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-12-01T10:00:00Z"}}}}}`,
	} {
		e.patchDeployment("arena-1", types.MergePatchType, edit)
	}
	d, err := e.deployment("arena-1")
	if err != nil {
		t.Fatal(err)
	}
	if missing := missingUserEdits(&d.Spec.Template, d); len(missing) > 0 {
		t.Fatalf("right after the edits, the Deployment lacks %v", missing)
	}
	// After each roll, the Deployment still carries every edit, and so does
	// the roll's ReplicaSet: the game servers run them too.
	checkEdits := func(roll string, ofRoll func(*corev1.PodTemplateSpec) bool) {
		t.Helper()
		d, err := e.deployment("arena-1")
		if err != nil {
			t.Fatal(err)
		}
		if missing := missingUserEdits(&d.Spec.Template, d); len(missing) > 0 {
			t.Errorf("after the %s, the Deployment lacks %v", roll, missing)
		}
		rs := e.replicaSetWhere("arena-1", "of the "+roll, ofRoll)
		if missing := missingUserEdits(&rs.Spec.Template, nil); len(missing) > 0 {
			t.Errorf("the %s's ReplicaSet %s lacks %v", roll, rs.Name, missing)
		}
	}

	edited := e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data["server.cfg"] = "max_players=32" })
	hash := controller.ProfileHash(edited)
	e.waitForRolledSession("arena-1", hash)
	checkEdits("profile roll", func(pt *corev1.PodTemplateSpec) bool { return pt.Annotations[gamesv1.ProfileHashAnnotation] == hash })

	const image = "registry.example.com/arena-server:1.1.0"
	e.updateSession("arena-1", func(s *gamesv1.GameSession) { s.Spec.Image = image })
	e.waitForReadyAtGeneration("arena-1")
	checkEdits("image roll", func(pt *corev1.PodTemplateSpec) bool {
		return slices.ContainsFunc(pt.Spec.Containers, func(c corev1.Container) bool { return c.Image == image })
	})
}

// missingUserEdits lists the edits of TestOwnershipUserEditsSurvive that the
// pod template, and the Deployment d if not nil, do not carry.
func missingUserEdits(template *corev1.PodTemplateSpec, d *appsv1.Deployment) []string {
	var missing []string
	if d != nil {
		if d.Annotations["example.com/owner"] != "ops-team" {
			missing = append(missing, "annotation example.com/owner")
		}
		if d.Labels["example.com/tier"] != "gold" {
			missing = append(missing, "label example.com/tier")
		}
	}
	if template.Annotations["kubectl.kubernetes.io/restartedAt"] != "2026-12-01T10:00:00Z" {
		missing = append(missing, "the restart annotation of kubectl rollout restart")
	}
	if !slices.ContainsFunc(template.Spec.Containers, func(c corev1.Container) bool {
		return c.Name == "game-server" && slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == controller.ProfileMountPath })
	}) {
		missing = append(missing, "the profile mount of game-server") // the controller's own, to be sure
	}
	return missing
}

// TestOwnershipRenamedContainer: the session owns the pod template, so a
// renamed game-server container is put back under its name on the same
// Deployment, in place of the renamed one: no second container on the game
// port (two could not both run).
func TestOwnershipRenamedContainer(t *testing.T) {
	e := newEnv(t)
	_, _, before := e.startReadySession("arena-1")

	// kubectl patch --type json, with a test op so it renames the game server.
	renamed := e.patchDeployment("arena-1", types.JSONPatchType, `[
		{"op":"test","path":"/spec/template/spec/containers/0/name","value":"game-server"},
		{"op":"replace","path":"/spec/template/spec/containers/0/name","value":"server"}]`)
	d := e.waitForDeployment("arena-1", "the game server's name back", func(d *appsv1.Deployment) error {
		if d.UID != before.UID {
			return fmt.Errorf("the Deployment was replaced (UID %s, was %s), not repaired", d.UID, before.UID)
		}
		if d.Generation <= renamed.Generation {
			return fmt.Errorf("generation %d, the rename's", d.Generation)
		}
		return nil
	})
	var onGamePort []string
	for _, c := range d.Spec.Template.Spec.Containers {
		if slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == 7777 }) {
			onGamePort = append(onGamePort, c.Name)
		}
	}
	if names := containerNames(d); len(names) != 1 || len(onGamePort) != 1 || onGamePort[0] != "game-server" {
		t.Errorf("after the rename: containers %v, on the game port %v; want game-server alone", names, onGamePort)
	}
	e.waitForReadyAtGeneration("arena-1")
}

// TestOwnershipDeletedDeploymentRecreated: `kubectl delete deploy` of a
// session's Deployment gets the session a new one.
func TestOwnershipDeletedDeploymentRecreated(t *testing.T) {
	e := newEnv(t)
	_, session, before := e.startReadySession("arena-1")
	if err := e.kube.AppsV1().Deployments(e.ns).Delete(e.ctx, "arena-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitForDeployment("arena-1", "a new Deployment controlled by the session", func(d *appsv1.Deployment) error {
		if d.UID == before.UID {
			return fmt.Errorf("still the deleted Deployment %s", d.UID)
		}
		if !metav1.IsControlledBy(d, session) {
			return fmt.Errorf("Deployment %s controlled by %+v", d.UID, metav1.GetControllerOf(d))
		}
		return nil
	})
	e.waitForReadyAtGeneration("arena-1")
}

// TestOwnershipSpecEditDuringProfileDelay: a profile edit waits out the
// change delay, but a spec edit in that window writes the Deployment anyway,
// and takes the new profile along: the game servers restart once for both
// changes, and the end of the delay finds nothing left to write.
func TestOwnershipSpecEditDuringProfileDelay(t *testing.T) {
	const delay = 10 * time.Second
	e := newEnv(t)
	_, _, before := e.startReadySession("arena-1", func(o *app.Options) { o.ProfileChangeDelay = delay })

	start := time.Now()
	edited := e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data["server.cfg"] = "max_players=32" })
	hash := controller.ProfileHash(edited)
	// The controller has seen the edit (and started the delay) once it says so.
	e.eventually("the controller's Event on the profile", func() (bool, error) {
		return e.hasEvent("arena", controller.EventReasonProfileFanOut, hash), nil
	})
	s := e.updateSession("arena-1", func(s *gamesv1.GameSession) {
		s.Spec.Image = "registry.example.com/arena-server:1.1.0"
	})
	since := time.Since(start)
	t.Logf("the image edit came %s after the profile edit", since.Round(time.Millisecond))
	if since >= delay/2 {
		t.Fatalf("the image edit came %s after the profile edit, too late in the %s delay for this test", since, delay)
	}

	d := e.waitForDeployment("arena-1", "the new image", func(d *appsv1.Deployment) error {
		if got := gameServerImage(d); got != s.Spec.Image {
			return fmt.Errorf("image %q", got)
		}
		return nil
	})
	if d.Generation != before.Generation+1 || profileHashOf(d) != hash {
		t.Fatalf("the image write: generation %d -> %d, hash %q; want one generation more, with the new hash %q",
			before.Generation, d.Generation, profileHashOf(d), hash)
	}

	// Asserting an absence needs time: the end of the delay plus a margin.
	// The watch fails the test as soon as a write shows.
	quietUntil := start.Add(delay + 5*time.Second)
	w := e.watchDeployments(metav1.ListOptions{FieldSelector: "metadata.name=arena-1", ResourceVersion: d.ResourceVersion})
	timer := time.NewTimer(time.Until(quietUntil))
	defer timer.Stop()
	for quiet := true; quiet; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the Deployment watch closed early")
			}
			if got, isDeployment := ev.Object.(*appsv1.Deployment); !isDeployment || got.Generation != d.Generation {
				t.Fatalf("after the image write, a %s event: %+v (generation was %d)", ev.Type, ev.Object, d.Generation)
			}
		case <-timer.C:
			quiet = false
		}
	}
	// One write, so one new ReplicaSet, once kube-controller-manager has
	// made it (under CI's load it can take it seconds); never a third.
	e.eventually("the original ReplicaSet and one new", func() (bool, error) {
		rss, err := e.kube.AppsV1().ReplicaSets(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=arena-1"})
		if err != nil {
			return false, err
		}
		var hashes []string
		for _, rs := range rss.Items {
			hashes = append(hashes, rs.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]+" "+rs.Spec.Template.Spec.Containers[0].Image)
		}
		if len(rss.Items) > 2 {
			t.Fatalf("ReplicaSets (hash, image) %v, want the original and one new", hashes)
		}
		return len(rss.Items) == 2, fmt.Errorf("ReplicaSets (hash, image) %v", hashes)
	})
	e.waitForRolledSession("arena-1", hash)
}

// TestOwnershipScaleWithoutProfile: a session scaled while its profile is
// deleted gets the scale applied with the revision its pods mount, which
// outlives the profile; once that revision is gone too, the Deployment is
// left as it is, and the session says it waits for the profile.
func TestOwnershipScaleWithoutProfile(t *testing.T) {
	e := newEnv(t)
	_, _, before := e.startReadySession("arena-1")
	revision := mountedRevision(before)
	if err := e.kube.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, "arena", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Scale only once the controller knows the profile is gone.
	e.waitForCondition("arena-1", gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound)

	// The revision the pods mount still exists, so the scale is applied
	// with it: the new pods mount what the running ones do.
	e.scaleSession("arena-1", 3)
	e.waitForDeployment("arena-1", "the scale applied with the revision it runs", func(d *appsv1.Deployment) error {
		if got := ptr.Deref(d.Spec.Replicas, 1); got != 3 || mountedRevision(d) != revision {
			return fmt.Errorf("replicas %d, mounting %q; want 3 mounting %q", got, mountedRevision(d), revision)
		}
		return nil
	})
	// The status written for the scaled spec: a status read before the
	// controller wrote it still says Ready for the generation before.
	var s *gamesv1.GameSession
	e.eventually("Ready for the scaled generation", func() (bool, error) {
		var err error
		if s, err = e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, "arena-1", metav1.GetOptions{}); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
		ok := c != nil && c.Status == metav1.ConditionTrue && c.Reason == gamesv1.ReasonDeploymentReady &&
			s.Status.ObservedGeneration == s.Generation
		return ok, fmt.Errorf("status.observedGeneration %d of generation %d, Ready %+v", s.Status.ObservedGeneration, s.Generation, c)
	})
	if c := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileResolved); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("ProfileResolved %+v, want False while the profile is missing", c)
	}
	if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, revision, metav1.GetOptions{}); err != nil {
		t.Errorf("revision %s, which the pods mount: %v", revision, err)
	}

	// Without the revision, nothing is applied: a scale would start pods
	// that cannot mount their profile.
	if err := e.kube.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, revision, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.scaleSession("arena-1", 1)
	e.waitForCondition("arena-1", gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonWaitingForProfile)
	if d, err := e.deployment("arena-1"); err != nil || ptr.Deref(d.Spec.Replicas, 1) != 3 {
		t.Errorf("the Deployment changed without its profile and revision: %v, %v", err, d)
	}
}

// The next three tests need the garbage collector to act on GameSessions. It
// does so only once its periodic discovery (every 30 s in
// kube-controller-manager) has found the CRD, so in the first 30 s after the
// CRD's installation a session's deletion waits up to that long.

// TestOwnershipForegroundDeletion: a session deleted in the foreground stays,
// with a deletionTimestamp, until the garbage collector has deleted its
// Deployment (and that one its ReplicaSets and pods). Meanwhile the
// controller must not create another Deployment, which the garbage collector
// would only have to delete again.
func TestOwnershipForegroundDeletion(t *testing.T) {
	e := newEnv(t)
	_, session, original := e.startReadySession("arena-1")
	// Watched from before the delete: every Deployment of the namespace.
	deployments := e.watchDeployments(metav1.ListOptions{})
	sessions, err := e.game.GamesV1().GameSessions(e.ns).Watch(e.ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=arena-1", ResourceVersion: session.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer sessions.Stop()

	start := time.Now()
	err = e.game.GamesV1().GameSessions(e.ns).Delete(e.ctx, "arena-1", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	if err != nil {
		t.Fatal(err)
	}
	lingered := false
	e.watchUntil("the session gone", sessions, func(ev watch.Event) bool {
		if s, ok := ev.Object.(*gamesv1.GameSession); ok && ev.Type == watch.Modified && s.DeletionTimestamp != nil {
			lingered = true
		}
		return ev.Type == watch.Deleted
	})
	took := time.Since(start)
	t.Logf("foreground deletion of the session took %s", took.Round(time.Millisecond))
	if !lingered {
		t.Errorf("the session never showed a deletionTimestamp: was it deleted in the foreground?")
	}

	// A barrier: the watch delivers events in order, so once it shows this
	// Deployment, created after the session was gone, it has shown every
	// Deployment created while the session lingered.
	barrier := foreignDeployment("watch-barrier", false)
	barrier.Spec.Replicas = ptr.To[int32](0)
	if _, err := e.kube.AppsV1().Deployments(e.ns).Create(e.ctx, barrier, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uids, originalDeleted := map[types.UID]bool{}, false
	e.watchUntil("the barrier Deployment", deployments, func(ev watch.Event) bool {
		d, ok := ev.Object.(*appsv1.Deployment)
		if !ok {
			return false
		}
		if d.Name == "arena-1" {
			uids[d.UID] = true
			originalDeleted = originalDeleted || (ev.Type == watch.Deleted && d.UID == original.UID)
		}
		return d.Name == barrier.Name
	})
	if len(uids) != 1 || !uids[original.UID] {
		t.Errorf("Deployments named arena-1 seen during the foreground deletion: %v, want only the original %s", slices.Collect(maps.Keys(uids)), original.UID)
	}
	if !originalDeleted {
		t.Errorf("the session went before its Deployment %s was deleted", original.UID)
	}
	if _, err := e.deployment("arena-1"); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment arena-1 after the session's foreground deletion: %v, want NotFound", err)
	}
}

// TestOwnershipOrphanedDeployment: `kubectl delete gs --cascade=orphan`
// leaves the Deployment running without its ownerReference. A new session of
// the same name does not adopt it (it might be anything by now): it reports
// DeploymentNotControlled with a Warning until the user deletes the orphan,
// then creates its own.
func TestOwnershipOrphanedDeployment(t *testing.T) {
	e := newEnv(t)
	_, _, original := e.startReadySession("arena-1")
	err := e.game.GamesV1().GameSessions(e.ns).Delete(e.ctx, "arena-1", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)})
	if err != nil {
		t.Fatal(err)
	}
	// The garbage collector removes the ownerReference before it lets the
	// session go.
	e.eventually("the session gone", func() (bool, error) {
		_, err := e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, "arena-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	orphan, err := e.deployment("arena-1")
	if err != nil {
		t.Fatalf("the orphaned Deployment: %v", err)
	}
	if orphan.UID != original.UID || len(orphan.OwnerReferences) != 0 || orphan.Generation != original.Generation {
		t.Fatalf("orphaned Deployment: UID %s (was %s), owners %v, generation %d (was %d); want the original, unchanged, without owners",
			orphan.UID, original.UID, orphan.OwnerReferences, orphan.Generation, original.Generation)
	}

	session := e.createSession(newSession("arena-1", "arena", 1))
	e.waitForCondition("arena-1", gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentNotControlled)
	e.waitForWarning("arena-1", gamesv1.ReasonDeploymentNotControlled)
	d, err := e.deployment("arena-1")
	if err != nil {
		t.Fatal(err)
	}
	if d.UID != orphan.UID || len(d.OwnerReferences) != 0 || d.Generation != orphan.Generation {
		t.Errorf("the new session touched the orphan: UID %s, owners %v, generation %d -> %d", d.UID, d.OwnerReferences, orphan.Generation, d.Generation)
	}

	if err := e.kube.AppsV1().Deployments(e.ns).Delete(e.ctx, "arena-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitForDeployment("arena-1", "the new session's own Deployment", func(d *appsv1.Deployment) error {
		if !metav1.IsControlledBy(d, session) {
			return fmt.Errorf("Deployment %s controlled by %+v", d.UID, metav1.GetControllerOf(d))
		}
		return nil
	})
	e.waitForReadyAtGeneration("arena-1")
}

// TestOwnershipRecreatedSessions: 40 sessions deleted and at once created
// again under the same names find their predecessors' Deployments still
// there, waiting for the garbage collector. Those go away by themselves, so
// the sessions may say DeploymentDeleting meanwhile, but never warn of a
// Deployment they do not control; then each gets its own and becomes Ready.
func TestOwnershipRecreatedSessions(t *testing.T) {
	e := newEnv(t)
	const count, finalizer = 40, "example.com/hold"
	e.createProfile("arena", map[string]string{"server.cfg": "max_players=16"}, true)
	e.startController()
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("again-%02d", i)
	}
	err := inParallel(names, func(name string) error {
		_, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, newSession(name, "arena", 1), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		e.waitForReadyAtGeneration(name)
	}
	// Whether a new session syncs before the garbage collector has deleted
	// its predecessor's Deployment is a race. A finalizer, as another
	// controller's cleanup might hold, keeps every fourth one terminating
	// until the test lets go, so that those sessions meet it for certain.
	var held []string
	for i := 0; i < count; i += 4 {
		held = append(held, names[i])
		e.patchDeployment(names[i], types.MergePatchType, fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, finalizer))
	}

	// Every status the new sessions ever report, in order.
	statuses := e.recordSessionStatuses()
	sessions := e.game.GamesV1().GameSessions(e.ns)
	var mu sync.Mutex
	recreated := map[string]types.UID{}
	err = inParallel(names, func(name string) error {
		if err := sessions.Delete(e.ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			return err
		}
		s, err := sessions.Create(e.ctx, newSession(name, "arena", 1), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		recreated[name] = s.UID
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range held {
		e.waitForCondition(name, gamesv1.ConditionReady, metav1.ConditionFalse, gamesv1.ReasonDeploymentDeleting)
	}
	for _, name := range held {
		release := fmt.Sprintf(`[{"op":"test","path":"/metadata/finalizers","value":[%q]},{"op":"remove","path":"/metadata/finalizers"}]`, finalizer)
		e.patchDeployment(name, types.JSONPatchType, release)
	}

	for _, name := range names {
		e.waitForReadyAtGeneration(name)
	}
	e.eventually("every Deployment controlled by the new session of its name", func() (bool, error) {
		for _, name := range names {
			d, err := e.deployment(name)
			if err != nil {
				return false, err
			}
			if owner := metav1.GetControllerOf(d); owner == nil || owner.UID != recreated[name] {
				return false, fmt.Errorf("Deployment %s controlled by %+v", name, owner)
			}
		}
		return true, nil
	})
	// Events are sent in the order they are recorded; a new session's
	// DeploymentCreated comes after any warning it recorded before.
	e.eventually("a DeploymentCreated Event for every new session", func() (bool, error) {
		created := e.eventUIDs(controller.EventReasonCreated)
		for name, uid := range recreated {
			if !created[uid] {
				return false, fmt.Errorf("none yet for %s", name)
			}
		}
		return true, nil
	})
	if warned := e.eventUIDs(gamesv1.ReasonDeploymentNotControlled); len(warned) > 0 {
		t.Errorf("Warning %s Events on %d sessions", gamesv1.ReasonDeploymentNotControlled, len(warned))
	}

	reasons := statuses.stop(t)
	deleting := 0
	for name, uid := range recreated {
		if slices.Contains(reasons[uid], gamesv1.ReasonDeploymentNotControlled) {
			t.Errorf("session %s reported Ready reasons %v", name, reasons[uid])
		}
		if slices.Contains(reasons[uid], gamesv1.ReasonDeploymentDeleting) {
			deleting++
		}
	}
	t.Logf("%d of %d new sessions (%d held) reported %s before they got their own Deployment",
		deleting, count, len(held), gamesv1.ReasonDeploymentDeleting)
}

// inParallel calls f for each name, from a few goroutines, and returns the
// first error.
func inParallel(names []string, f func(name string) error) error {
	const workers = 8
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(names); i += workers {
				if err := f(names[i]); err != nil {
					errs <- fmt.Errorf("%s: %w", names[i], err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// startReadySession starts a controller, creates the profile "arena" and a
// session of one replica on it, and waits until the session is Ready.
func (e *env) startReadySession(name string, configure ...func(*app.Options)) (*runningController, *gamesv1.GameSession, *appsv1.Deployment) {
	e.t.Helper()
	e.createProfile("arena", map[string]string{"server.cfg": "max_players=16"}, true)
	c := e.startController(configure...)
	e.createSession(newSession(name, "arena", 1))
	s := e.waitForReadyAtGeneration(name)
	d, err := e.deployment(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return c, s, d
}

func (e *env) patchDeployment(name string, pt types.PatchType, patch string) *appsv1.Deployment {
	e.t.Helper()
	d, err := e.kube.AppsV1().Deployments(e.ns).Patch(e.ctx, name, pt, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		e.t.Fatalf("patch Deployment %s with %s: %v", name, patch, err)
	}
	return d
}

// scaleSession does what `kubectl scale gs` does: patch the scale subresource.
func (e *env) scaleSession(name string, replicas int32) {
	e.t.Helper()
	sessions := dynamic.NewForConfigOrDie(adminConfig()).Resource(gamesv1.SchemeGroupVersion.WithResource("gamesessions")).Namespace(e.ns)
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := sessions.Patch(e.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "scale"); err != nil {
		e.t.Fatalf("scale GameSession %s: %v", name, err)
	}
}

// waitForDeployment waits until the Deployment exists and check accepts it.
func (e *env) waitForDeployment(name, what string, check func(*appsv1.Deployment) error) *appsv1.Deployment {
	e.t.Helper()
	var d *appsv1.Deployment
	e.eventually(fmt.Sprintf("Deployment %s: %s", name, what), func() (bool, error) {
		var err error
		if d, err = e.deployment(name); err != nil {
			return false, err
		}
		err = check(d)
		return err == nil, err
	})
	return d
}

// watchDeployments watches the namespace's Deployments; without a
// resourceVersion in opts, from now on. It stops when the test ends.
func (e *env) watchDeployments(opts metav1.ListOptions) watch.Interface {
	e.t.Helper()
	if opts.ResourceVersion == "" {
		list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: opts.FieldSelector})
		if err != nil {
			e.t.Fatal(err)
		}
		opts.ResourceVersion = list.ResourceVersion
	}
	w, err := e.kube.AppsV1().Deployments(e.ns).Watch(e.ctx, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(w.Stop)
	return w
}

// watchUntil consumes w's events until done accepts one, failing the test
// after waitTimeout.
func (e *env) watchUntil(what string, w watch.Interface, done func(watch.Event) bool) {
	e.t.Helper()
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				e.t.Fatalf("watching for %s: the watch closed", what)
			}
			if ev.Type == watch.Error {
				e.t.Fatalf("watching for %s: %v", what, apierrors.FromObject(ev.Object))
			}
			if done(ev) {
				return
			}
		case <-timeout.C:
			e.t.Fatalf("timed out after %s watching for %s", waitTimeout, what)
		}
	}
}

// eventUIDs returns the UIDs of the objects that Events with that reason are about.
func (e *env) eventUIDs(reason string) map[types.UID]bool {
	e.t.Helper()
	events, err := e.kube.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
	if err != nil {
		e.t.Fatal(err)
	}
	uids := map[types.UID]bool{}
	for _, ev := range events.Items {
		uids[ev.InvolvedObject.UID] = true
	}
	return uids
}

// statusRecorder collects the Ready reasons of every status a watch shows.
type statusRecorder struct {
	w        watch.Interface
	stopping chan struct{} // closed by stop, before it stops the watch
	done     chan struct{} // closed when the watch has ended

	mu      sync.Mutex
	reasons map[types.UID][]string
	early   bool // the watch ended before stop: statuses may be missing
}

// recordSessionStatuses records, from now on, the Ready reason of every
// GameSession status of the namespace, by session UID.
func (e *env) recordSessionStatuses() *statusRecorder {
	e.t.Helper()
	list, err := e.game.GamesV1().GameSessions(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := e.game.GamesV1().GameSessions(e.ns).Watch(e.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(w.Stop)
	r := &statusRecorder{w: w, stopping: make(chan struct{}), done: make(chan struct{}), reasons: map[types.UID][]string{}}
	go func() {
		defer close(r.done)
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*gamesv1.GameSession)
			if !ok {
				continue
			}
			if ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady); ready != nil {
				r.mu.Lock()
				if reasons := r.reasons[s.UID]; len(reasons) == 0 || reasons[len(reasons)-1] != ready.Reason {
					r.reasons[s.UID] = append(reasons, ready.Reason)
				}
				r.mu.Unlock()
			}
		}
		select {
		case <-r.stopping:
		default:
			r.mu.Lock()
			r.early = true
			r.mu.Unlock()
		}
	}()
	return r
}

// stop ends the recording and returns it, by session UID. A watch that ended
// early fails the test, since it may have missed a status.
func (r *statusRecorder) stop(t *testing.T) map[types.UID][]string {
	t.Helper()
	close(r.stopping)
	r.w.Stop()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.early {
		t.Fatalf("the GameSession watch ended early; statuses may be missing")
	}
	return r.reasons
}

func gameServerImage(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "game-server" {
			return c.Image
		}
	}
	return ""
}

func profileHashOf(d *appsv1.Deployment) string {
	return d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation]
}

func containerNames(d *appsv1.Deployment) []string {
	var names []string
	for _, c := range d.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

// replicaSetWhere returns the Deployment's ReplicaSet whose pod template
// matches, once there is one.
func (e *env) replicaSetWhere(deployment, what string, match func(*corev1.PodTemplateSpec) bool) *appsv1.ReplicaSet {
	e.t.Helper()
	var found *appsv1.ReplicaSet
	e.eventually("ReplicaSet of "+deployment+" "+what, func() (bool, error) {
		rss, err := e.kube.AppsV1().ReplicaSets(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=" + deployment})
		if err != nil {
			return false, err
		}
		for i := range rss.Items {
			if match(&rss.Items[i].Spec.Template) {
				found = &rss.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// waitForReadyAtGeneration waits until the session reports Ready, with every
// replica ready, for its current generation. Unlike waitForReady, it waits
// out a Ready status written before the latest spec change.
func (e *env) waitForReadyAtGeneration(name string) *gamesv1.GameSession {
	e.t.Helper()
	var s *gamesv1.GameSession
	e.eventually("GameSession "+name+" Ready for its current generation", func() (bool, error) {
		var err error
		if s, err = e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
		if s.Status.ObservedGeneration != s.Generation || ready == nil || ready.Status != metav1.ConditionTrue ||
			ready.ObservedGeneration != s.Generation || s.Status.ReadyReplicas != ptr.Deref(s.Spec.Replicas, 1) {
			return false, fmt.Errorf("generation %d, observed %d, Ready %+v, %d ready replicas",
				s.Generation, s.Status.ObservedGeneration, ready, s.Status.ReadyReplicas)
		}
		return true, nil
	})
	return s
}
