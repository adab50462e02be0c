package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// What one step of a sequence can be. Names and values come from small pools,
// so that sessions are deleted and recreated under the same name, profiles
// come and go under the names sessions reference, and edits often undo each
// other.

var (
	worldSessionNames = []string{"gs-a", "gs-b", "gs-c"}
	worldProfileNames = []string{"pf-x", "pf-y"}
	worldImages       = []string{"arena:1", "arena:2", "arena:3"}
	worldPortSets     = [][]gamesv1.GameServerPort{
		nil,
		{{Name: "game", ContainerPort: 7777}},
		{{Name: "game", ContainerPort: 7777, Protocol: corev1.ProtocolUDP}, {Name: "query", ContainerPort: 27015, Protocol: corev1.ProtocolTCP}},
	}
	worldResources = []gamesv1.GameServerResources{
		{},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
	}
	worldProfileData = []map[string]string{
		{"server.cfg": "max_players = 16"},
		{"server.cfg": "max_players = 32"},
		{"server.cfg": "max_players = 16", "motd.txt": "Season 2!"},
	}
)

// action is one kind of step; run reports false when it cannot happen now
// (nothing to deliver, no session to delete, ...).
type action struct {
	weight int
	run    func() bool
}

func (w *world) stepActions() []action {
	actions := []action{
		// The controller's side: informer deliveries, syncs, time.
		{30, w.deliverOne},
		{24, w.syncOne},
		{8, w.syncProfileOne},
		{8, w.passTime},
		// Users.
		{4, w.createSession},
		{4, w.editSession},
		{2, w.deleteSession},
		{2, w.createProfile},
		{3 + 5*b2i(w.paced), w.editProfile},
		{1, w.relabelProfile},
		{1, w.deleteProfile},
		{3, w.editOwnedDeploymentField},
		{2, w.editOtherDeploymentField},
		{1, w.deleteDeployment},
		{1, w.createForeignDeployment},
		{1, w.deleteRevisionByUser},
		{3, w.editProfilePolicy},
		{1, w.pauseDeployment},
		{1, w.toggleRevisionQuota},
		// The rest of the control plane.
		{4, w.collectGarbage},
		{6, w.writeDeploymentStatus},
		// Trouble.
		{2, w.armFault},
		{1, w.restartController},
		{1, w.failover},
		{1, w.relistCache},
		{1, w.resyncCache},
	}
	if w.matchSafe.on {
		// Moves are what busy sessions, windows and the budget hold back:
		// more profile edits make more of them.
		// Restarts rebuild the budget from the caches.
		actions = append(actions, action{4, w.flipBusy}, action{2, w.editMatchSafePolicy}, action{6, w.editProfile},
			action{2, w.restartController})
	}
	if w.tenancy {
		actions = append(actions, action{2, w.createGrant}, action{2, w.deleteGrant})
	}
	if w.platformSessions {
		// Edits of pf-z move both namespaces' sessions at once.
		actions = append(actions, action{4, w.editPlatformProfile})
	}
	for _, in := range w.inputs {
		actions = append(actions, action{8, func() bool { return w.writeInput(in) }}, action{1, func() bool { return w.annotateInput(in) }},
			action{2, func() bool { return w.relabelInput(in) }}, action{2, func() bool { return w.deleteInput(in) }})
	}
	if len(w.inputs) > 0 {
		actions = append(actions, action{6, w.editSessionInputs})
	}
	if w.keyChanges {
		actions = append(actions, action{1, w.loseDigestKey}, action{1, w.rotateDigestKey})
	}
	if w.live.on {
		// Game servers acknowledge, users switch deliveries and edit live
		// content (world_live_test.go).
		actions = append(actions, action{10, w.ackLive}, action{4, w.lateAckDue}, action{3, w.editProfileDelivery},
			action{3, w.editProfile}, action{1, w.deleteLiveProfile})
	}
	return actions
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// act takes one step.
func (w *world) act() {
	w.live.steps++
	total := 0
	for _, a := range w.actions {
		total += a.weight
	}
	for range 100 {
		n := w.rng.IntN(total)
		for _, a := range w.actions {
			if n -= a.weight; n < 0 {
				if a.run() {
					return
				}
				break
			}
		}
	}
	w.passTime()
}

func pick[T any](w *world, from []T) T { return from[w.rng.IntN(len(from))] }

// ---- The controller's side ----

func (w *world) deliverOne() bool {
	var ready []*informerCache
	for _, c := range w.caches {
		if len(c.pending) > 0 {
			ready = append(ready, c)
		}
	}
	if len(ready) == 0 {
		return false
	}
	w.deliver(pick(w, ready))
	return true
}

func (w *world) deliver(c *informerCache) {
	w.logf("deliver %s", c.pending[0])
	w.call(func() { c.deliver() })
}

func (w *world) syncOne() bool {
	if !w.queue.hasReady() {
		return false
	}
	w.sync()
	return true
}

func (w *world) syncProfileOne() bool {
	if !w.profileQueue.hasReady() {
		return false
	}
	w.syncProfile()
	return true
}

func (w *world) passTime() bool {
	w.advance(time.Duration(10+w.rng.IntN(600)) * time.Millisecond)
	return true
}

// advance moves the clock and releases the delayed keys of both queues whose
// time has come.
func (w *world) advance(d time.Duration) {
	w.clock.Step(d)
	if w.live.on {
		// A live delivery fails at its deadline without an event.
		w.pruneLiveMoves()
	}
	ready := w.queue.release()
	if profiles := w.profileQueue.release(); len(profiles) > 0 {
		w.logf("time +%v: ready %v, profiles %v", d, ready, profiles)
		return
	}
	w.logf("time +%v: ready %v", d, ready)
}

// ---- Users: GameSessions ----

func (w *world) createSession() bool {
	name := pick(w, w.sessionNames())
	if w.server.session(name) != nil {
		return false
	}
	s := &gamesv1.GameSession{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNamespaceOf(name)},
		Spec: gamesv1.GameSessionSpec{
			ProfileRef: pick(w, w.refsFor(name)),
			Image:      pick(w, worldImages),
			Replicas:   ptr.To(w.rng.Int32N(4)),
			Ports:      pick(w, worldPortSets),
			Resources:  pick(w, worldResources),
		},
	}
	created, err := w.server.create(byUser, sessionsResource, s)
	must(err)
	w.logf("user: create gamesession %s (%s) %s", name, created.GetUID(), describeSpec(created.(*gamesv1.GameSession)))
	return true
}

func (w *world) editSession() bool {
	s := w.liveSession()
	if s == nil {
		return false
	}
	switch w.rng.IntN(5) {
	case 0:
		s.Spec.Image = pick(w, worldImages)
	case 1:
		s.Spec.Replicas = ptr.To(w.rng.Int32N(4))
	case 2:
		s.Spec.Ports = pick(w, worldPortSets)
	case 3:
		s.Spec.ProfileRef = pick(w, w.refsFor(s.Name))
	case 4:
		s.Spec.Resources = pick(w, worldResources)
	}
	updated, err := w.server.update(byUser, sessionsResource, s, true)
	must(err)
	w.logf("user: edit gamesession %s: %s (generation %d, rv %s)", s.Name, describeSpec(updated.(*gamesv1.GameSession)),
		updated.GetGeneration(), updated.GetResourceVersion())
	return true
}

func (w *world) deleteSession() bool {
	s := w.liveSession()
	if s == nil {
		return false
	}
	propagation := pick(w, []metav1.DeletionPropagation{
		metav1.DeletePropagationBackground, metav1.DeletePropagationBackground,
		metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan,
	})
	must(w.server.delete(byUser, sessionsResource, s.Name, propagation))
	w.logf("user: delete gamesession %s (%s), propagation %s", s.Name, s.UID, propagation)
	return true
}

func (w *world) liveSession() *gamesv1.GameSession {
	var live []*gamesv1.GameSession
	for _, s := range w.server.sessions() {
		if s.DeletionTimestamp == nil {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return pick(w, live)
}

// ---- Users: profiles ----

func (w *world) createProfile() bool {
	name := pick(w, w.profileNames())
	if w.server.profile(name) != nil {
		return false
	}
	p := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNamespaceOf(name)},
		Data:       pick(w, worldProfileData),
	}
	if w.rng.IntN(5) > 0 {
		p.Labels = map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}
	}
	if w.paced {
		p.Annotations = w.randomPolicy()
	}
	w.withDelivery(p)
	created, err := w.server.create(byUser, profilesResource, p)
	must(err)
	w.logf("user: create configmap %s (%s), labelled %t, hash %s, rollout policy %s", name, created.GetUID(), p.Labels != nil,
		ProfileHash(p), describePolicy(p.Annotations))
	return true
}

func (w *world) editProfile() bool { return w.editProfileData(w.someProfile()) }

// editProfileData gives profile p other data, if it exists.
func (w *world) editProfileData(p *corev1.ConfigMap) bool {
	if p == nil {
		return false
	}
	p.Data = pick(w, worldProfileData)
	updated, err := w.server.update(byUser, profilesResource, p, true)
	must(err)
	w.logf("user: edit configmap %s data, hash %s (rv %s)", p.Name, ProfileHash(p), updated.GetResourceVersion())
	return true
}

func (w *world) relabelProfile() bool {
	p := w.someProfile()
	if p == nil {
		return false
	}
	labelled := p.Labels[gamesv1.ProfileLabel] == gamesv1.ProfileLabelValue
	if labelled {
		delete(p.Labels, gamesv1.ProfileLabel)
	} else {
		p.Labels = map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}
	}
	_, err := w.server.update(byUser, profilesResource, p, true)
	must(err)
	w.logf("user: configmap %s labelled %t", p.Name, !labelled)
	return true
}

func (w *world) deleteProfile() bool {
	p := w.someProfile()
	if p == nil {
		return false
	}
	must(w.server.delete(byUser, profilesResource, p.Name, metav1.DeletePropagationBackground))
	w.logf("user: delete configmap %s (%s)", p.Name, p.UID)
	return true
}

func (w *world) someProfile() *corev1.ConfigMap {
	profiles := listAs[*corev1.ConfigMap](w.server.list(profilesResource))
	if len(profiles) == 0 {
		return nil
	}
	return pick(w, profiles)
}

// ---- Users: Deployments ----

// editOwnedDeploymentField changes a field the controller owns, which it
// must put back.
func (w *world) editOwnedDeploymentField() bool {
	d := w.someDeployment()
	if d == nil {
		return false
	}
	pod := &d.Spec.Template.Spec
	gameServer := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == worldGameServer })
	var what string
	switch w.rng.IntN(10) {
	case 8:
		d.Spec.MinReadySeconds = 1 + w.rng.Int32N(30)
		what = fmt.Sprintf("set minReadySeconds %d", d.Spec.MinReadySeconds)
	case 9:
		if gameServer < 0 {
			return false
		}
		pod.Containers[gameServer].Env = append(pod.Containers[gameServer].Env, corev1.EnvVar{Name: "EDITED", Value: "by hand"})
		what = "add an env var to the game server"
	case 0:
		d.Spec.Replicas = ptr.To(w.rng.Int32N(4))
		what = fmt.Sprintf("scale to %d", *d.Spec.Replicas)
	case 1:
		if gameServer < 0 {
			return false
		}
		pod.Containers[gameServer].Image = pick(w, worldImages)
		what = "set image " + pod.Containers[gameServer].Image
	case 2:
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation] = "edited"
		what = "set the profile-hash annotation"
	case 3:
		delete(d.Labels, worldManagedByLabel)
		what = "remove the managed-by label"
	case 4:
		if gameServer < 0 {
			return false
		}
		pod.Containers[gameServer].Name = "server"
		what = "rename container game-server to server"
	case 5:
		pod.Containers = append(pod.Containers, corev1.Container{Name: "sidecar", Image: "sidecar:1"})
		what = "add a sidecar container"
	case 6:
		pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == worldProfileVolume })
		for i := range pod.Containers {
			pod.Containers[i].VolumeMounts = slices.DeleteFunc(pod.Containers[i].VolumeMounts,
				func(m corev1.VolumeMount) bool { return m.Name == worldProfileVolume })
		}
		what = "remove the profile volume and its mount"
	case 7:
		for i := range pod.Volumes {
			if cm := pod.Volumes[i].ConfigMap; pod.Volumes[i].Name == worldProfileVolume && cm != nil {
				cm.Name = pick(w, worldProfileNames)
				what = "point the profile volume at " + cm.Name
			}
		}
		if what == "" {
			return false
		}
	}
	w.userUpdateDeployment(d, what)
	return true
}

// editOtherDeploymentField changes a field the controller does not own, which
// it must keep.
func (w *world) editOtherDeploymentField() bool {
	d := w.someDeployment()
	if d == nil {
		return false
	}
	var what string
	if w.rng.IntN(2) == 0 {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[worldNoteAnnotation] = fmt.Sprintf("step %d", w.step)
		what = "annotate " + worldNoteAnnotation
	} else {
		// kubectl rollout restart: the one template field that is not the
		// session's.
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations[restartedAtAnnotation] = fmt.Sprintf("step %d", w.step)
		what = "restart (annotate " + restartedAtAnnotation + ")"
	}
	if updated := w.userUpdateDeployment(d, what); updated != nil {
		w.nonOwned[updated.UID] = nonOwnedOf(updated)
	}
	return true
}

func (w *world) userUpdateDeployment(d *appsv1.Deployment, what string) *appsv1.Deployment {
	updated, err := w.server.update(byUser, deploymentsResource, d, true)
	if err != nil {
		w.logf("user: deployment %s: %s: rejected: %v", d.Name, what, err)
		return nil
	}
	w.logf("user: deployment %s: %s (rv %s)", d.Name, what, updated.GetResourceVersion())
	return updated.(*appsv1.Deployment)
}

func (w *world) deleteDeployment() bool {
	d := w.someDeployment()
	if d == nil {
		return false
	}
	propagation := pick(w, []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground})
	must(w.server.delete(byUser, deploymentsResource, d.Name, propagation))
	w.logf("user: delete deployment %s (%s), propagation %s", d.Name, d.UID, propagation)
	return true
}

// createForeignDeployment takes a session's name for a Deployment the
// session does not control, with or without the managed-by label.
func (w *world) createForeignDeployment() bool {
	name := pick(w, w.sessionNames())
	if w.server.deployment(name) != nil {
		return false
	}
	labels := map[string]string{"app": "foreign-" + name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNamespaceOf(name), Labels: map[string]string{"app": "foreign-" + name}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1"}}},
			},
		},
	}
	if w.rng.IntN(2) == 0 {
		d.Labels[worldManagedByLabel] = worldManagedByValue
	}
	created, err := w.server.create(byUser, deploymentsResource, d)
	must(err)
	w.logf("user: create foreign deployment %s (%s), managed-by label %t", name, created.GetUID(), len(d.Labels) > 1)
	return true
}

func (w *world) someDeployment() *appsv1.Deployment {
	var live []*appsv1.Deployment
	for _, d := range w.server.deployments() {
		if d.DeletionTimestamp == nil {
			live = append(live, d)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return pick(w, live)
}

// ---- The rest of the control plane ----

func (w *world) collectGarbage() bool {
	return w.doWork(w.gcWork())
}

func (w *world) writeDeploymentStatus() bool {
	return w.doWork(w.kcmWork())
}

func (w *world) doWork(items []work) bool {
	if len(items) == 0 {
		return false
	}
	item := pick(w, items)
	w.logf("%s", item.what)
	item.do()
	return true
}

// ---- Trouble ----

func (w *world) armFault() bool {
	f := fault{
		request: pick(w, []string{"create", "patch", "updateStatus", "delete", "createRevision"}),
		kind:    pick(w, []faultKind{faultServerError, faultConflict, faultLostResponse}),
	}
	switch {
	case f.request == "createRevision":
		// A quota or an admission webhook refusing one revision.
		f.kind = pick(w, []faultKind{faultForbidden, faultInvalid})
	case f.request == "delete" && w.rng.IntN(3) == 0:
		f.kind = faultForbidden
	}
	if f.request == "delete" && f.kind == faultConflict {
		// A delete answers Conflict only when its preconditions fail, which
		// the controller rightly takes for "someone else changed it": an
		// injected one would strand the revision for no reason.
		f.kind = faultServerError
	}
	w.faults = append(w.faults, f)
	w.logf("fault: the next %s answers %s", f.request, f.kind)
	return true
}

func (w *world) restartController() bool {
	w.logf("restart the controller")
	w.startController()
	return true
}

func (w *world) relistCache() bool {
	c := pick(w, w.pickableCaches())
	w.logf("relist the %s cache, dropping %d pending event(s)", c.resource, len(c.pending))
	w.call(func() { w.creditMissed(c.relist(w.server.list(c.resource))) })
	return true
}

func (w *world) resyncCache() bool {
	c := pick(w, w.pickableCaches())
	w.logf("resync the %s cache", c.resource)
	w.call(c.resync)
	return true
}

func describeSpec(s *gamesv1.GameSession) string {
	return fmt.Sprintf("{profile %s, image %s, replicas %d, %d port(s), resources %s}",
		s.Spec.ProfileRef, s.Spec.Image, ptr.Deref(s.Spec.Replicas, 1), len(s.Spec.Ports),
		describeResources(s.Spec.Resources.Requests, s.Spec.Resources.Limits))
}

func describeResources(requests, limits corev1.ResourceList) string {
	var parts []string
	for _, list := range []struct {
		what string
		list corev1.ResourceList
	}{{"requests", requests}, {"limits", limits}} {
		for _, name := range slices.Sorted(maps.Keys(list.list)) {
			q := list.list[name]
			parts = append(parts, fmt.Sprintf("%s.%s=%s", list.what, name, q.String()))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// populate creates the world the first controller finds.
func (w *world) populate() {
	profiles, sessions := w.rng.IntN(3), w.rng.IntN(4)
	if w.paced {
		// A paced sequence starts with a rollout to pace: sessions running
		// a profile, which the steps edit.
		profiles, sessions = 1+w.rng.IntN(2), 2+w.rng.IntN(2)
	}
	for range profiles {
		w.createProfile()
	}
	for range sessions {
		w.createSession()
	}
	w.populateInputs()
	if w.paced {
		// Both profiles exist and are labelled, so each session has one.
		for range 10 {
			w.createProfile()
			if len(w.server.sessions()) < sessions {
				w.createSession()
			}
		}
		for _, p := range listAs[*corev1.ConfigMap](w.server.list(profilesResource)) {
			if p.Labels[gamesv1.ProfileLabel] != gamesv1.ProfileLabelValue {
				p.Labels = map[string]string{gamesv1.ProfileLabel: gamesv1.ProfileLabelValue}
				_, err := w.server.update(byUser, profilesResource, p, true)
				must(err)
			}
		}
	}
	if w.platformSessions {
		w.populatePlatform()
	}
	if w.paced || w.platformSessions {
		w.populateRunning()
	}
}

// populateRunning gives each session of a labelled profile what an earlier
// controller would have left it: the revision of its profile's content, its
// Deployment mounting it, rolled out and Ready, so that the steps' edits
// move sessions rather than create their Deployments.
func (w *world) populateRunning() {
	for _, s := range w.server.sessions() {
		p := w.serverProfileOf(s)
		if p == nil || p.Labels[gamesv1.ProfileLabel] != gamesv1.ProfileLabelValue || w.server.deployment(s.Name) != nil {
			continue
		}
		hash := ProfileHash(p)
		if w.server.revision(worldRevisionName(s.Namespace, s.Spec.ProfileRef, hash)) == nil {
			_, err := w.server.create(byController, revisionsResource, newRevision(p, hash, s.Namespace))
			must(err)
		}
		d := NewDeployment(s, hash)
		if w.live.on && worldPolicyLive(p) == "live" {
			d = w.populateLive(s, p, hash)
		}
		_, err := w.server.create(byController, deploymentsResource, w.withServerInputs(d, s))
		must(err)
	}
	for range 100 {
		items := w.kcmWork()
		if len(items) == 0 {
			break
		}
		for _, item := range items {
			item.do()
		}
	}
	if w.live.on {
		w.ackAll()
	}
	w.logf("populated: %d deployment(s) running, %d replicaset(s)", len(w.server.deployments()), len(w.server.replicaSets()))
}
