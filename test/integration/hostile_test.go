package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/controller"
)

// Hostile input: what users can legally write but nobody would on purpose,
// on the real control plane. Every test states what the user sees. A panic
// in the in-process controller would take the test binary down with it, so
// "no panic" is checked by every test here merely finishing.

// dnsSubdomainOfLength returns a DNS-1123 subdomain of exactly n characters
// that starts with prefix: labels of 63 characters, the most a label may
// have, joined by dots. n must not be a multiple of 64.
func dnsSubdomainOfLength(prefix string, n int) string {
	name := prefix
	for len(name) < n {
		if len(name)%64 == 63 {
			name += "."
		} else {
			name += string(rune('a' + len(name)%26))
		}
	}
	return name
}

// waitForRolledSession waits until the session's Deployment carries the
// profile hash and the session reports it, Ready with every replica.
func (e *env) waitForRolledSession(name, hash string) *gamesv1.GameSession {
	e.t.Helper()
	e.waitForDeploymentHash(name, hash)
	var s *gamesv1.GameSession
	e.eventually(fmt.Sprintf("GameSession %s Ready on profile hash %s", name, hash), func() (bool, error) {
		var err error
		if s, err = e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
		if s.Status.ProfileHash != hash || ready == nil || ready.Status != metav1.ConditionTrue || s.Status.ReadyReplicas != ptr.Deref(s.Spec.Replicas, 1) {
			return false, fmt.Errorf("status.profileHash %q, Ready %+v, %d ready replicas", s.Status.ProfileHash, ready, s.Status.ReadyReplicas)
		}
		return true, nil
	})
	return s
}

func labelled(cm *corev1.ConfigMap) *corev1.ConfigMap {
	cm.Labels = map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}
	return cm
}

func (e *env) createConfigMap(cm *corev1.ConfigMap) *corev1.ConfigMap {
	e.t.Helper()
	created, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(e.ctx, cm, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create ConfigMap %s: %v", cm.Name, err)
	}
	return created
}

// tryUpdateProfile applies mutate to the current profile and returns the
// API server's answer, refusals included.
func (e *env) tryUpdateProfile(name string, mutate func(*corev1.ConfigMap)) (*corev1.ConfigMap, error) {
	e.t.Helper()
	cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get profile %s: %v", name, err)
	}
	mutate(cm)
	return e.kube.CoreV1().ConfigMaps(e.ns).Update(e.ctx, cm, metav1.UpdateOptions{})
}

// TestHostileNamesAtLengthLimits: a 63-character session (the most a label
// value, and so the CRD, allows), dotted or not, on a 253-character profile
// (the most a ConfigMap name allows) runs, rolls, and reports like any other;
// the profile's revisions, named after it and longer by their hash, are cut
// back to a valid name. A 64-character session is refused with a message
// that says why.
func TestHostileNamesAtLengthLimits(t *testing.T) {
	e := newEnv(t)
	profileName := dnsSubdomainOfLength("profile-", 253)
	profile := e.createProfile(profileName, map[string]string{"server.cfg": "max_players=16"}, true)
	e.startController()
	names := []string{
		dnsSubdomainOfLength("plain-", 63)[:62] + "0", // no dot: 63 characters
		"arena.eu-west-1." + dnsSubdomainOfLength("x", 47),
	}
	for _, name := range names {
		if len(name) != 63 {
			t.Fatalf("test bug: name %q has %d characters", name, len(name))
		}
		e.createSession(newSession(name, profileName, 1))
	}
	// mountsRevision checks that the session's Deployment mounts the
	// revision of the profile's content hash, and that the API server holds
	// it: the name the controller cut was one a ConfigMap may have.
	mountsRevision := func(name, hash string) {
		t.Helper()
		d, err := e.deployment(name)
		if err != nil {
			t.Fatal(err)
		}
		revision := controller.RevisionName(profileName, hash)
		if v := d.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != revision {
			t.Errorf("Deployment %s volumes %+v, want the 253-character profile's revision %s", name, v, revision)
		}
		if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(e.ctx, revision, metav1.GetOptions{}); err != nil {
			t.Errorf("the revision of %d characters that Deployment %s mounts: %v", len(revision), name, err)
		}
	}
	hash := controller.ProfileHash(profile)
	for _, name := range names {
		e.waitForRolledSession(name, hash)
		d, err := e.deployment(name)
		if err != nil {
			t.Fatal(err)
		}
		if d.Labels[controller.LabelInstance] != name || d.Spec.Template.Labels[controller.LabelInstance] != name {
			t.Errorf("Deployment %s instance labels %q, %q, want the session's name", name, d.Labels[controller.LabelInstance], d.Spec.Template.Labels[controller.LabelInstance])
		}
		mountsRevision(name, hash)
	}

	// An edit rolls both, and the profile says so in `kubectl describe`,
	// though an Event named after a 253-character object cannot be.
	edited := e.updateProfile(profileName, func(cm *corev1.ConfigMap) { cm.Data["server.cfg"] = "max_players=32" })
	for _, name := range names {
		e.waitForRolledSession(name, controller.ProfileHash(edited))
		mountsRevision(name, controller.ProfileHash(edited))
	}
	e.eventually("the fan-out Event on the 253-character profile", func() (bool, error) {
		events, err := e.kube.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ConfigMap,involvedObject.name=" + profileName})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(events.Items, func(ev corev1.Event) bool {
			return ev.Reason == controller.EventReasonProfileFanOut && strings.Contains(ev.Message, "rolling 2 GameSession")
		}), fmt.Errorf("%d events, none %s for 2 sessions", len(events.Items), controller.EventReasonProfileFanOut)
	})

	tooLong := strings.Repeat("a", 64)
	_, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, newSession(tooLong, profileName, 1), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "63") {
		t.Errorf("creating a 64-character session: %v, want Invalid, saying the limit is 63 characters", err)
	}
}

// TestHostileProfileAtSizeLimit: a profile of exactly the most a ConfigMap
// may hold (1 MiB of values; keys do not count) rolls like a small one; one
// byte more is refused by the API server and leaves the game servers as they
// are.
func TestHostileProfileAtSizeLimit(t *testing.T) {
	e := newEnv(t)
	const limit = 1 << 20 // the API server's limit on a ConfigMap's values, together
	small := "max_players=16\n"
	world := make([]byte, limit-len(small))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range world {
		world[i] = byte('!' + r.IntN(94)) // printable, incompressible
	}
	profile := e.createConfigMap(labelled(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "huge"},
		Data:       map[string]string{"server.cfg": small, "world.map": string(world)},
	}))
	e.startController()
	e.createSession(newSession("big", "huge", 1))
	e.waitForRolledSession("big", controller.ProfileHash(profile))

	// One byte changed in the middle of the megabyte rolls the session.
	edited := e.updateProfile("huge", func(cm *corev1.ConfigMap) {
		b := []byte(cm.Data["world.map"])
		b[len(b)/2] ^= 0x01
		cm.Data["world.map"] = string(b)
	})
	generation := e.waitForRolledSession("big", controller.ProfileHash(edited)).Generation
	before, err := e.deployment("big")
	if err != nil {
		t.Fatal(err)
	}

	_, err = e.tryUpdateProfile("huge", func(cm *corev1.ConfigMap) { cm.Data["server.cfg"] += "!" })
	if !apierrors.IsInvalid(err) {
		t.Fatalf("a profile one byte over the ConfigMap limit: %v, want Invalid (is the test at the limit?)", err)
	}
	// Nothing reached the controller: give it time to do something wrong.
	time.Sleep(time.Second)
	after, err := e.deployment("big")
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation || e.session("big").Generation != generation {
		t.Errorf("a refused profile edit changed the Deployment (generation %d -> %d)", before.Generation, after.Generation)
	}
}

// TestHostileBinaryOnlyAndEmptyProfiles: a profile with binaryData and no
// data, every byte value in it, is hashed on its bytes; emptied, it still
// resolves and rolls the session to the empty profile's hash.
func TestHostileBinaryOnlyAndEmptyProfiles(t *testing.T) {
	e := newEnv(t)
	blob := make([]byte, 4096)
	for i := range blob {
		blob[i] = byte(i) // not UTF-8: only binaryData can hold it
	}
	profile := e.createConfigMap(labelled(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "binary"},
		BinaryData: map[string][]byte{"map.bin": blob},
	}))
	emptyHash := controller.ProfileHash(&corev1.ConfigMap{})
	hash := controller.ProfileHash(profile)
	if hash == emptyHash {
		t.Fatalf("a binaryData-only profile hashes like an empty one")
	}
	e.startController()
	e.createSession(newSession("blob", "binary", 1))
	e.waitForRolledSession("blob", hash)

	edited := e.updateProfile("binary", func(cm *corev1.ConfigMap) { cm.BinaryData["map.bin"][4095] ^= 0xff })
	e.waitForRolledSession("blob", controller.ProfileHash(edited))

	emptied := e.updateProfile("binary", func(cm *corev1.ConfigMap) { cm.BinaryData = nil })
	if got := controller.ProfileHash(emptied); got != emptyHash {
		t.Fatalf("the emptied profile as the API server returns it hashes %s, an empty one %s", got, emptyHash)
	}
	s := e.waitForRolledSession("blob", emptyHash)
	if c := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionProfileResolved); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("an empty profile: ProfileResolved %+v, want True", c)
	}
}

// TestHostileProfileKeys: keys with dots, dashes and underscores anywhere,
// upper case, 253 characters: all are files the profile can hold, and the
// session rolls on them. Keys the API server refuses (kubelet's own
// "..data", "..", a key in both data and binaryData) never reach the
// session: the user's edit fails, and the game servers stay as they are.
func TestHostileProfileKeys(t *testing.T) {
	e := newEnv(t)
	data := map[string]string{}
	for _, key := range []string{"a.b", "-dash-first", "_underscore_first", ".hidden", "trailing.", "UPPER.lower", "a..b", "9", "a-_.b", strings.Repeat("k", 253)} {
		data[key] = "value of " + key
	}
	profile := e.createProfile("odd-keys", data, true)
	e.startController()
	e.createSession(newSession("odd", "odd-keys", 1))
	hash := controller.ProfileHash(profile)
	generation := e.waitForRolledSession("odd", hash).Generation
	before, err := e.deployment("odd")
	if err != nil {
		t.Fatal(err)
	}

	for _, bad := range []struct {
		what   string
		mutate func(*corev1.ConfigMap)
	}{
		{"key ..data", func(cm *corev1.ConfigMap) { cm.Data["..data"] = "x" }},
		{"key ..", func(cm *corev1.ConfigMap) { cm.Data[".."] = "x" }},
		{"key .", func(cm *corev1.ConfigMap) { cm.Data["."] = "x" }},
		{"key with a slash", func(cm *corev1.ConfigMap) { cm.Data["maps/arena"] = "x" }},
		{"254-character key", func(cm *corev1.ConfigMap) { cm.Data[strings.Repeat("k", 254)] = "x" }},
		{"key in data and binaryData", func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"a.b": []byte("x")} }},
	} {
		if _, err := e.tryUpdateProfile("odd-keys", bad.mutate); !apierrors.IsInvalid(err) {
			t.Errorf("profile edit with a %s: %v, want Invalid", bad.what, err)
		}
	}
	time.Sleep(time.Second) // nothing should happen; give it the chance to
	after, err := e.deployment("odd")
	if err != nil {
		t.Fatal(err)
	}
	if s := e.session("odd"); after.Generation != before.Generation || s.Generation != generation || s.Status.ProfileHash != hash {
		t.Errorf("refused profile edits changed the session: Deployment generation %d -> %d, hash %s -> %s",
			before.Generation, after.Generation, hash, s.Status.ProfileHash)
	}
}

// TestHostileSessionChurn creates and deletes 200 sessions in a tight loop,
// 40 names five times each, so names come back while their predecessor's
// Deployment still waits for the garbage collector. Then ten of the names
// come back for good. Afterwards exactly those ten have a Deployment, each
// controlled by the session now of that name, no ReplicaSet of another is
// left, every one is Ready, and a profile edit reaches them all: no key is
// stuck in the queue.
func TestHostileSessionChurn(t *testing.T) {
	e := newEnv(t)
	profile := e.createProfile("arena", map[string]string{"k": "v"}, true)
	c := e.startController()
	const names, rounds, workers = 40, 5, 8
	nameOf := func(i int) string { return fmt.Sprintf("churn-%02d", i) }
	sessions := e.game.GamesV1().GameSessions(e.ns)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				for i := w; i < names; i += workers {
					// Zero replicas: the churn is about sessions and
					// Deployments, not about pods.
					if _, err := sessions.Create(e.ctx, newSession(nameOf(i), "arena", 0), metav1.CreateOptions{}); err != nil {
						errs <- fmt.Errorf("create %s: %w", nameOf(i), err)
						return
					}
					if err := sessions.Delete(e.ctx, nameOf(i), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
						errs <- fmt.Errorf("delete %s: %w", nameOf(i), err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d sessions created and deleted in %v", names*rounds, time.Since(start).Round(time.Millisecond))

	survivors := map[string]types.UID{}
	for i := 0; i < names; i += 4 {
		survivors[nameOf(i)] = e.createSession(newSession(nameOf(i), "arena", 1)).UID
	}
	hash := controller.ProfileHash(profile)
	for name := range survivors {
		e.waitForRolledSession(name, hash)
	}
	e.eventually("only the survivors' Deployments and ReplicaSets, once the garbage collector has run", func() (bool, error) {
		deployments, err := e.kube.AppsV1().Deployments(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		current := map[types.UID]bool{}
		for _, d := range deployments.Items {
			owner := metav1.GetControllerOf(&d)
			if owner == nil || owner.UID != survivors[d.Name] {
				return false, fmt.Errorf("Deployment %s controlled by %+v, not by a current session", d.Name, owner)
			}
			current[d.UID] = true
		}
		if len(deployments.Items) != len(survivors) {
			return false, fmt.Errorf("%d Deployments for %d sessions", len(deployments.Items), len(survivors))
		}
		replicaSets, err := e.kube.AppsV1().ReplicaSets(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, rs := range replicaSets.Items {
			if owner := metav1.GetControllerOf(&rs); owner == nil || !current[owner.UID] {
				return false, fmt.Errorf("ReplicaSet %s of a deleted Deployment", rs.Name)
			}
		}
		return true, nil
	})

	// The queue drained: an edit now reaches every survivor.
	edited := e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data["k"] = "v2" })
	for name := range survivors {
		e.waitForRolledSession(name, controller.ProfileHash(edited))
	}
	t.Logf("controller requests: %d Deployment creates (%d refused as existing), %d Deployment updates, %d status updates (%d conflicts)",
		c.requests.count("create deployments"), c.requests.answered("create deployments", 409),
		c.requests.count("update deployments"), c.requests.count("update gamesessions/status"),
		c.requests.answered("update gamesessions/status", 409))
}

// TestHostileProfileFlipping flips a profile between two contents twenty
// times a second for three seconds, with no change delay (every edit may
// roll). Afterwards every session runs, and reports, the final content, and
// each Deployment has at most two ReplicaSets: the Deployment controller
// reuses the one whose template a flip returns to.
func TestHostileProfileFlipping(t *testing.T) {
	e := newEnv(t)
	contentA := map[string]string{"server.cfg": "mode=classic"}
	contentB := map[string]string{"server.cfg": "mode=ranked"}
	profile := e.createProfile("flip", contentA, true)
	c := e.startController()
	const sessions = 5
	var names []string
	for i := range sessions {
		names = append(names, fmt.Sprintf("flip-%d", i))
		e.createSession(newSession(names[i], "flip", 1))
	}
	for _, name := range names {
		e.waitForRolledSession(name, controller.ProfileHash(profile))
	}
	updatesBefore := c.requests.count("update deployments")

	// At least three seconds and 21 writes, as fast as twenty a second: on
	// a busy machine a write may take longer than 50ms. An odd number of
	// flips ends on B, which is not what the sessions started on: they
	// must have rolled at least once.
	flips, start := 0, time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for flips%2 == 0 || flips < 21 || time.Since(start) < 3*time.Second {
		<-tick.C
		next := profile.DeepCopy()
		next.Data = contentA
		if flips%2 == 0 {
			next.Data = contentB
		}
		var err error
		if profile, err = e.kube.CoreV1().ConfigMaps(e.ns).Update(e.ctx, next, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("flip %d: %v", flips, err)
		}
		flips++
	}
	final := controller.ProfileHash(profile)
	if profile.Data["server.cfg"] != contentB["server.cfg"] {
		t.Fatalf("test bug: the last flip wrote %v", profile.Data)
	}
	for _, name := range names {
		e.waitForRolledSession(name, final)
	}
	most := 0
	var counts []int
	for _, name := range names {
		replicaSets, err := e.kube.AppsV1().ReplicaSets(e.ns).List(e.ctx, metav1.ListOptions{LabelSelector: controller.LabelInstance + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, len(replicaSets.Items))
		most = max(most, len(replicaSets.Items))
	}
	t.Logf("%d profile writes in %v; %d Deployment updates; ReplicaSets per Deployment: %v",
		flips, time.Since(start).Round(time.Millisecond), c.requests.count("update deployments")-updatesBefore, counts)
	if most > 2 {
		t.Errorf("ReplicaSets per Deployment %v after flipping between two contents, want at most 2", counts)
	}
}

// TestHostileSpecsTheCRDLetsThrough: sessions the CRD accepts (today) but
// from which no game server can run. Either the API server refuses them at
// once, naming the field, or the session itself tells the user what is
// wrong: never a silent "0 of 1 game servers ready".
func TestHostileSpecsTheCRDLetsThrough(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"k": "v"}, true)
	e.startController()
	cases := []struct {
		name   string
		mutate func(*gamesv1.GameSession)
		// crdField is what a refusal by the CRD must name; field is what
		// the session's Ready message must name if the CRD accepts it.
		crdField, field string
	}{
		{"digits-port", func(s *gamesv1.GameSession) { s.Spec.Ports[0].Name = "7777" }, "spec.ports", "ports[0].name"},
		{"dashes-port", func(s *gamesv1.GameSession) { s.Spec.Ports[0].Name = "game--1" }, "spec.ports", "ports[0].name"},
		{"negative-cpu", func(s *gamesv1.GameSession) {
			s.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
		}, "spec.resources", "requests[cpu]"},
		{"unqualified-resource", func(s *gamesv1.GameSession) {
			s.Spec.Resources.Requests = corev1.ResourceList{"gpu": resource.MustParse("1")}
		}, "spec.resources", "requests[gpu]"},
		{"over-limit", func(s *gamesv1.GameSession) {
			s.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
			s.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}, "spec.resources", "requests"},
		// A no-break space is not RE2's \s, so the CRD's rule lets it
		// through; the Deployment is accepted, and every pod refused.
		{"nbsp-in-tag", func(s *gamesv1.GameSession) { s.Spec.Image += "\u00a0" }, "spec.image", "image"},
	}
	pending := map[string]string{} // session name -> field its Ready message must name
	for _, tc := range cases {
		s := newSession(tc.name, "arena", 1)
		tc.mutate(s)
		_, err := e.game.GamesV1().GameSessions(e.ns).Create(e.ctx, s, metav1.CreateOptions{})
		switch {
		case err == nil:
			pending[tc.name] = tc.field
		case apierrors.IsInvalid(err) && strings.Contains(err.Error(), tc.crdField):
			t.Logf("%s: refused at once: %v", tc.name, err)
		default:
			t.Errorf("%s: create: %v, want success or an Invalid error naming %s", tc.name, err, tc.crdField)
		}
	}
	// One wait for all, so that several failing cases cost one timeout.
	last := map[string]string{}
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		for name, field := range pending {
			s, err := e.game.GamesV1().GameSessions(e.ns).Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady)
			if ready != nil && ready.Status == metav1.ConditionFalse && strings.Contains(ready.Message, field) {
				delete(pending, name)
				continue
			}
			last[name] = fmt.Sprintf("%+v", ready)
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		for name, field := range pending {
			t.Errorf("%s: the CRD accepted it, and after %v its Ready condition still does not name %s: %s", name, waitTimeout, field, last[name])
		}
	}
}

// TestHostileUnparseableQuantity: the schema controller-gen writes for a
// resource.Quantity lets "1e1.5" through, which resource.Quantity cannot
// parse, so no typed client can decode that session, nor any list holding
// it. Either the API server refuses it, or the controller goes on serving
// the namespace's other sessions: one user's typo must not stop everyone's
// rollouts.
func TestHostileUnparseableQuantity(t *testing.T) {
	e := newEnv(t)
	e.createProfile("arena", map[string]string{"k": "v"}, true)
	e.startController()
	e.createSession(newSession("healthy", "arena", 1))
	e.waitForReady("healthy")

	body := fmt.Sprintf(`{"apiVersion":"games.example.com/v1","kind":"GameSession","metadata":{"name":"typo","namespace":%q},`+
		`"spec":{"profileRef":"arena","image":"arena:1","resources":{"requests":{"cpu":"1e1.5"}}}}`, e.ns)
	err := e.game.GamesV1().RESTClient().Post().Namespace(e.ns).Resource("gamesessions").
		SetHeader("Content-Type", "application/json").Body([]byte(body)).Do(e.ctx).Error()
	if err != nil {
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.resources") {
			t.Fatalf("create with cpu 1e1.5: %v, want success or an Invalid error naming spec.resources", err)
		}
		t.Logf("refused at once: %v", err)
		return
	}
	e.createSession(newSession("after", "arena", 1))
	edited := e.updateProfile("arena", func(cm *corev1.ConfigMap) { cm.Data["k"] = "v2" })
	e.waitForRolledSession("healthy", controller.ProfileHash(edited))
	e.waitForRolledSession("after", controller.ProfileHash(edited))
}
