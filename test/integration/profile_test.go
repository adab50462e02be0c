package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
)

// Scenario 5: a ConfigMap without the profile label is never listed, watched
// or cached by the controller, and a session naming it says how to fix it;
// adding the label resolves the session by itself.
func TestUnlabelledProfileIsIgnoredUntilLabelled(t *testing.T) {
	e := newEnv(t)
	e.createProfile("plain", map[string]string{"k": "v"}, false)
	c := e.startController()
	e.createSession(newSession("waiting", "plain", 1))

	s := e.waitForCondition("waiting", gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound)
	cond := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileResolved)
	if !strings.Contains(cond.Message, "games.example.com/profile=true") || !strings.Contains(cond.Message, "add the label") {
		t.Errorf("ProfileResolved message %q does not tell the user to add the label", cond.Message)
	}
	if _, err := e.deployment("waiting"); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment for a session without a usable profile: got %v, want NotFound", err)
	}
	e.waitForWarning("waiting", gamesv1.ReasonProfileNotFound)
	// Every ConfigMap the controller read, it read through one of its four
	// label selectors: profiles, its own revisions, session configs, or its
	// sessions' live profiles. So the API server never sent it an unlabelled
	// ConfigMap. And with no
	// profile to copy, it wrote no ConfigMap either: no revision of an
	// unlabelled one.
	selectors := map[string]int{
		gamesv1.ProfileLabel + "=" + gamesv1.ProfileLabelValue: 0,
		controller.RevisionSelector():                          0,
		controller.SessionConfigSelector():                     0,
		controller.LiveProfileSelector():                       0,
	}
	for _, request := range c.requests.requestURIs() {
		method, uri, _ := strings.Cut(request, " ")
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatalf("request %q: %v", request, err)
		}
		if !strings.HasSuffix(u.Path, "/configmaps") && !strings.Contains(u.Path, "/configmaps/") {
			continue
		}
		if method != http.MethodGet {
			t.Errorf("ConfigMap write while no labelled profile exists: %s", request)
			continue
		}
		selector := u.Query().Get("labelSelector")
		if _, ok := selectors[selector]; !ok {
			t.Errorf("ConfigMap request without the profile, revision, session-config or live-profile label selector: %s", request)
			continue
		}
		selectors[selector]++
	}
	for selector, n := range selectors {
		if n == 0 {
			t.Errorf("the controller made no ConfigMap request with the selector %s", selector)
		}
	}

	profile := e.updateProfile("plain", func(cm *corev1.ConfigMap) {
		cm.Labels = map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}
	})
	e.waitForCondition("waiting", gamesv1.ConditionProfileResolved, metav1.ConditionTrue, gamesv1.ReasonProfileResolved)
	e.waitForDeploymentHash("waiting", controller.ProfileHash(profile))
	e.waitForReady("waiting")
}

// Scenario 6: deleting the profile leaves the running Deployment exactly as
// it is and reports the problem on the session.
func TestDeletedProfileKeepsDeploymentRunning(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"k": "v"}, true)
	e.startController()
	e.createSession(newSession("survivor", "arena", 2))
	e.waitForReady("survivor")
	before, err := e.deployment("survivor")
	if err != nil {
		t.Fatal(err)
	}

	if err := e.kube.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, "arena", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := e.waitForCondition("survivor", gamesv1.ConditionProfileResolved, metav1.ConditionFalse, gamesv1.ReasonProfileNotFound)
	e.waitForWarning("survivor", gamesv1.ReasonProfileNotFound)
	after, err := e.deployment("survivor")
	if err != nil {
		t.Fatalf("the Deployment is gone after its profile was deleted: %v", err)
	}
	if after.Generation != before.Generation {
		t.Errorf("Deployment spec changed (generation %d -> %d) after the profile was deleted", before.Generation, after.Generation)
	}
	if after.Status.ReadyReplicas != 2 || s.Status.ReadyReplicas != 2 {
		t.Errorf("ready replicas: Deployment %d, session %d, want 2", after.Status.ReadyReplicas, s.Status.ReadyReplicas)
	}
}

// Scenario 7: changing spec.profileRef moves the session to the new profile:
// the index follows the object.
func TestProfileRefChangeMovesSession(t *testing.T) {
	e := newEnv(t)
	e.createProfile("old", map[string]string{"mode": "classic"}, true)
	newProfile := e.createProfile("new", map[string]string{"mode": "ranked"}, true)
	e.startController()
	e.createSession(newSession("mover", "old", 1))
	e.waitForReady("mover")

	e.updateSession("mover", func(s *gamesv1.GameSession) {
		s.Spec.ProfileRef = "new"
	})
	d := e.waitForDeploymentHash("mover", controller.ProfileHash(newProfile))
	if got, want := d.Spec.Template.Spec.Volumes[0].ConfigMap.Name, controller.RevisionName("new", controller.ProfileHash(newProfile)); got != want {
		t.Errorf("profile volume names ConfigMap %q, want %s, the revision of profile new", got, want)
	}
	// Now an edit of the new profile rolls the session, and one of the old does not.
	edited := e.updateProfile("new", func(cm *corev1.ConfigMap) { cm.Data["mode"] = "ranked-v2" })
	e.waitForDeploymentHash("mover", controller.ProfileHash(edited))
	generation := e.waitForReady("mover").Generation
	e.updateProfile("old", func(cm *corev1.ConfigMap) { cm.Data["mode"] = "classic-v2" })
	time.Sleep(2 * time.Second)
	if got := e.session("mover"); got.Status.ProfileHash != controller.ProfileHash(edited) || got.Generation != generation {
		t.Errorf("an edit of the old profile reached the session: hash %s", got.Status.ProfileHash)
	}
}

// Scenarios 3 and 4: a profile edit rolls every session that references it,
// and only those; a label- or annotation-only edit rolls nothing.
func TestProfileEditRollsExactlyItsSessions(t *testing.T) {
	e := newEnv(t)
	const profiles, perProfile = 3, 12
	for p := range profiles {
		e.createProfile(fmt.Sprintf("profile-%d", p), map[string]string{"map": "dust", "seed": fmt.Sprint(p)}, true)
	}
	c := e.startController()
	sessionsOf := func(p int) []string {
		var names []string
		for i := range perProfile {
			names = append(names, fmt.Sprintf("p%d-s%d", p, i))
		}
		return names
	}
	for p := range profiles {
		for _, name := range sessionsOf(p) {
			e.createSession(newSession(name, fmt.Sprintf("profile-%d", p), 1))
		}
	}
	for p := range profiles {
		for _, name := range sessionsOf(p) {
			e.waitForReady(name)
		}
	}
	e.waitForDeploymentsSettled()
	before := e.deploymentVersions()
	updatesBefore := c.requests.count("update deployments")

	// Scenario 4 first: metadata-only edits must roll nothing.
	e.updateProfile("profile-0", func(cm *corev1.ConfigMap) { cm.Labels["team"] = "blue" })
	e.updateProfile("profile-0", func(cm *corev1.ConfigMap) { cm.Annotations = map[string]string{"note": "reviewed"} })
	time.Sleep(2 * time.Second)
	if got := c.requests.count("update deployments") - updatesBefore; got != 0 {
		t.Fatalf("label/annotation-only profile edits caused %d Deployment updates, want 0", got)
	}
	if changed := changedKeys(before, e.deploymentVersions()); len(changed) != 0 {
		t.Fatalf("label/annotation-only profile edits changed Deployments %v", changed)
	}

	// Scenario 3: a data edit of profile-0 rolls exactly profile-0's sessions.
	edited := e.updateProfile("profile-0", func(cm *corev1.ConfigMap) { cm.Data["map"] = "harbor" })
	hash := controller.ProfileHash(edited)
	for _, name := range sessionsOf(0) {
		d := e.waitForDeploymentHash(name, hash)
		e.waitForNewReplicaSet(d.Name, hash)
	}
	for _, name := range sessionsOf(0) {
		if s := e.waitForReady(name); s.Status.ProfileHash != hash {
			t.Errorf("session %s status.profileHash %q, want %q", name, s.Status.ProfileHash, hash)
		}
	}
	if got := c.requests.count("update deployments") - updatesBefore; got != perProfile {
		t.Errorf("%d Deployment updates for a profile with %d sessions, want exactly one each", got, perProfile)
	}
	after := e.deploymentVersions()
	for p := 1; p < profiles; p++ {
		for _, name := range sessionsOf(p) {
			if before[name] != after[name] {
				t.Errorf("Deployment %s of profile-%d changed (resourceVersion %s -> %s) after an edit of profile-0", name, p, before[name], after[name])
			}
		}
	}
	events, err := e.kube.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ConfigMap,involvedObject.name=profile-0"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events.Items, func(ev corev1.Event) bool {
		return ev.Reason == controller.EventReasonProfileFanOut && strings.Contains(ev.Message, fmt.Sprintf("rolling %d GameSession", perProfile))
	}) {
		t.Errorf("no %s event on the profile naming %d sessions; events: %v", controller.EventReasonProfileFanOut, perProfile, events.Items)
	}
}

// waitForNewReplicaSet waits until the Deployment has a ReplicaSet whose pod
// template carries the hash: the rollout really started.
func (e *env) waitForNewReplicaSet(deployment, hash string) {
	e.t.Helper()
	e.eventually("ReplicaSet of "+deployment+" with hash "+hash, func() (bool, error) {
		rss, err := e.kube.AppsV1().ReplicaSets(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=" + deployment})
		if err != nil {
			return false, err
		}
		for _, rs := range rss.Items {
			if rs.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] == hash {
				return true, nil
			}
		}
		return false, nil
	})
}

// deploymentVersions maps each Deployment in the namespace to its resourceVersion.
func (e *env) deploymentVersions() map[string]string {
	e.t.Helper()
	list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	v := make(map[string]string, len(list.Items))
	for _, d := range list.Items {
		v[d.Name] = d.ResourceVersion
	}
	return v
}

// waitForDeploymentsSettled waits until kube-controller-manager has nothing
// left to write on any Deployment of the namespace (rollout complete, its
// Progressing condition final), so resourceVersions stay put unless
// something changes a Deployment.
func (e *env) waitForDeploymentsSettled() {
	e.t.Helper()
	e.eventually("Deployments settled", func() (bool, error) {
		list, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range list.Items {
			progressing := false
			for _, c := range d.Status.Conditions {
				if c.Type == "Progressing" && c.Reason == "NewReplicaSetAvailable" {
					progressing = true
				}
			}
			if !progressing || d.Status.ObservedGeneration != d.Generation || d.Status.ReadyReplicas != d.Status.Replicas {
				return false, fmt.Errorf("deployment %s not settled", d.Name)
			}
		}
		return true, nil
	})
}

func changedKeys(before, after map[string]string) []string {
	var changed []string
	for k, v := range before {
		if after[k] != v {
			changed = append(changed, k)
		}
	}
	return changed
}
