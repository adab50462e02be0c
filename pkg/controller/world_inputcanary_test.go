package controller

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// The canary of a rotation in the sequences (inputcanary.go). Under a
// profile policy with a canary, new data of an input object moves the first
// canary-many readers of that object among the profile's members first; the
// other readers move for it only once those run it and are Ready.
//
// What must hold (input-canary), checked at each controller write that
// changes only a Deployment's inputs: a session whose profile, as the cache
// shows it, has a canary, and whose Deployment the cache shows (else it is
// its own canary), moves to new data of an object only if
//   - at some call into the controller the caches showed the object with
//     that data and the session among its first readers (a canary), or
//   - at some call into the controller the caches showed a Deployment that
//     runs the object's data, complete and Ready: the canary passed.
//
// Both are read from the caches at the start of each call into the
// controller, the states its plans read, so lagging caches lag the check
// too. Where the controller's view cannot be pinned, the check allows: the
// first readers are counted among the sessions that surely are members
// (in name order, the canary count resolved against every session the cache
// holds), and the canaries of every profile and policy seen count for every
// other, so a profile edited mid-rotation or a session that changed profiles
// keeps the canaries it had. A failed canary is not told apart: a Deployment
// Ready on the data is enough, which the gate removed still breaks, since
// the others then move with the canaries, before any of them is Ready.
//
// A pass is one the caches ever showed for those data, as a plan that saw
// it counts until the next plan: data a rotation at rest writes are fresh,
// so an earlier rotation's Ready canary is no pass for it.
//
// A Deployment's annotations hold one hash per kind over every object it
// reads; the data of each object are read back from it by trying the data
// sets the world writes and the fresh data of rotations (inputsRun).
//
// At rest (checkInputsAtRest), a canary that never passes holds the others
// for good: a ProfileRollout that lists it, with the server showing one of
// its canaries not settled, excuses their stale digests (canaryHoldsAtRest),
// and so do failed moves holding the places of max-rolling
// (failedHoldPlacesAtRest).

// canaryRotationsOf decides, from a stream of its own, whether a paced
// sequence with inputs is one of canary rotations (half of them): its
// profiles start with a canary in their policies, and every template of
// its sessions reads the first object of its first kind, so that new data
// of it has a canary and others to hold back. Its own draws come from a
// stream of its own as well (inputCanaryMemory.rng): the other sequences
// take the steps they took before it existed.
func canaryRotationsOf(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0xca9a)).IntN(2) == 0
}

// withCanary gives a paced profile's new policy a canary, in a sequence of
// canary rotations.
func (w *world) withCanary(a map[string]string) {
	if w.canary.rng != nil && a[rollout.AnnotationCanary] == "" {
		a[rollout.AnnotationCanary] = pick2(w.canary.rng, []string{"1", "1", "50%"})
	}
}

// withSharedRead makes a new template read the first object of the first
// kind, in a sequence of canary rotations.
func (w *world) withSharedRead(t *corev1.PodTemplateSpec) string {
	if w.canary.rng == nil || t == nil {
		return ""
	}
	in := w.inputs[0]
	if slices.Contains(in.readBy(t), in.names[0]) {
		return ""
	}
	way := pick2(w.canary.rng, worldReadWays)
	readInput(t, in, in.names[0], way)
	return fmt.Sprintf("%s %s by %s", in.resource, in.names[0], way)
}

// rotateAtRest ends a sequence of canary rotations that came to rest: a
// round or two of new data of the object every template reads, each
// settled and checked at rest again. Rotations during the steps are rare
// (a profile's own rollout takes them along); here the sessions stand on
// their revisions, and the canary has others to hold back.
func (w *world) rotateAtRest() {
	if w.canary.rng == nil {
		return
	}
	in := w.inputs[0]
	name := in.names[0]
	if w.canary.rng.IntN(8) > 0 && w.gatherReaders(in, name) && !w.settleAndCheck() {
		return
	}
	for range 1 + w.canary.rng.IntN(2) {
		obj := w.server.get(in.resource, name)
		if obj == nil || !in.labelled(obj) {
			// The object to rotate: new data for its readers all the same.
			if obj == nil {
				obj = in.newObject(name)
				in.setData(obj, 0)
				created, err := w.server.create(byUser, in.resource, obj)
				must(err)
				w.logf("user: create %s %s (%s) data set 0, labelled false", in.resource, name, created.GetUID())
				obj = created
			}
			obj.SetLabels(map[string]string{in.labelKey: in.labelValue})
		}
		// Data it never held: no Deployment ran them Ready before, so
		// the others wait for this rotation's canary, not an earlier one.
		w.canary.rotations++
		freshData(obj, w.canary.rotations)
		w.dataDigests(in, name) // the data sets first
		w.canary.versions[in.kind+"/"+name] = append(w.canary.versions[in.kind+"/"+name], copyOf(obj))
		clear(w.canary.runs) // hashes not told before may be told now
		updated, err := w.server.update(byUser, in.resource, obj, true)
		must(err)
		w.logf("user: rotate %s %s to fresh data %d (rv %s)", in.resource, name, w.canary.rotations, updated.GetResourceVersion())
		if !w.settleAndCheck() {
			return
		}
	}
}

// gatherReaders readies a rotation with others to hold back: the live
// sessions all use the first labelled profile whose policy has a canary,
// paused no more and with no window, and read the object; false if there
// is no such profile.
func (w *world) gatherReaders(in *worldInput, name string) bool {
	var p *corev1.ConfigMap
	for _, n := range w.profileNames() {
		q := w.server.profile(n)
		if q == nil || q.Labels[gamesv1.ProfileLabel] != gamesv1.ProfileLabelValue {
			continue
		}
		if policy, err := w.ctrl.profiles.policyOf(q); err == nil && policy.AsksForCanary() {
			p = q
			break
		}
	}
	if p == nil {
		return false
	}
	// Readers to hold back: every session name live.
	for range 10 {
		if !slices.ContainsFunc(worldSessionNames, func(name string) bool { return w.server.session(name) == nil }) {
			break
		}
		w.createSession()
	}
	if p.Annotations[rollout.AnnotationPaused] != "" || p.Annotations[rollout.AnnotationWindow] != "" {
		delete(p.Annotations, rollout.AnnotationPaused)
		delete(p.Annotations, rollout.AnnotationWindow)
		w.updatePolicy(p)
	}
	for _, s := range w.server.sessions() {
		if s.DeletionTimestamp != nil || platformSession(s) {
			continue // the platform's sessions read no inputs
		}
		ref := worldRefOf(p.Name)
		if s.Spec.ProfileRef == ref && slices.Contains(in.readBy(s.Spec.Template), name) {
			continue
		}
		s.Spec.ProfileRef = ref
		if s.Spec.Template == nil {
			s.Spec.Template = &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: worldGameServer}}},
			}
		}
		if !slices.Contains(in.readBy(s.Spec.Template), name) {
			readInput(s.Spec.Template, in, name, pick2(w.canary.rng, worldReadWays))
		}
		updated, err := w.server.update(byUser, sessionsResource, s, true)
		must(err)
		w.logf("user: gamesession %s uses %s and reads %s %s (generation %d)", s.Name, ref, in.resource, name, updated.GetGeneration())
	}
	return true
}

func pick2[T any](rng *rand.Rand, from []T) T { return from[rng.IntN(len(from))] }

// canaryData is one object's data: its kind, name and digest.
type canaryData struct{ kind, name, digest string }

// inputCanaryMemory is what input-canary remembers.
type inputCanaryMemory struct {
	// rng draws the choices of a sequence of canary rotations; nil in the
	// others. rotations counts its rotations at rest.
	rng       *rand.Rand
	rotations int
	// ranReady: data some Deployment ran, complete and Ready, in a cache
	// state the controller was called in.
	ranReady map[canaryData]bool
	// canaries: the sessions that were among the first readers of the data,
	// by name, in such a state.
	canaries map[canaryData]map[string]bool
	// runs memoizes inputsRun, by kind, names and hash.
	runs map[string]map[string]string
	// versions are the data each object can have held, by kind and name:
	// its data sets and the fresh data of rotations. Data are told by their
	// digest under the current key (dataDigests), so a new digest key
	// retells them (retellCanaryData).
	versions map[string][]object
}

// noteCanaryView is told of the start of each call into the controller: it
// records what the caches show of the canaries of rotations.
func (w *world) noteCanaryView() {
	if len(w.inputs) == 0 {
		return
	}
	c := &w.canary
	if c.ranReady == nil {
		c.ranReady, c.canaries = map[canaryData]bool{}, map[canaryData]map[string]bool{}
	}
	for _, obj := range w.caches[deploymentsResource].indexer.List() {
		d := obj.(*appsv1.Deployment)
		if !worldDeploymentReady(d) {
			continue
		}
		for _, in := range w.inputs {
			runs, _ := w.inputsRun(in, w.runs(in, d))
			for name, digest := range runs {
				c.ranReady[canaryData{in.kind, name, digest}] = true
			}
		}
	}
	var sessions []*gamesv1.GameSession
	for _, obj := range w.caches[sessionsResource].indexer.List() {
		sessions = append(sessions, obj.(*gamesv1.GameSession))
	}
	// Cross-namespace members are named "namespace/name", all of one
	// namespace: name order is the order of their plans either way.
	slices.SortFunc(sessions, func(a, b *gamesv1.GameSession) int { return strings.Compare(a.Name, b.Name) })
	for _, name := range w.profileNames() {
		p := w.caches[profilesResource].profile(name)
		if p == nil {
			continue
		}
		// Even a policy that does not parse: the plan reads what it got.
		policy, _ := w.ctrl.profiles.policyOf(p)
		if !policy.AsksForCanary() {
			continue
		}
		// Resolved against more sessions than the plan's members, never
		// fewer: as many canaries as it has, or more.
		n := policy.CanaryOf(len(sessions))
		picked := map[canaryData]int{}
		for _, s := range sessions {
			if !w.surelyCanaryMember(s, p) {
				continue
			}
			for _, in := range w.inputs {
				for _, input := range in.readBy(s.Spec.Template) {
					obj := w.caches[in.resource].cached(worldNamespace + "/" + input)
					if obj == nil {
						continue
					}
					data := canaryData{in.kind, input, w.digestOf(in, obj)}
					if picked[data] < n {
						picked[data]++
						if c.canaries[data] == nil {
							c.canaries[data] = map[string]bool{}
						}
						c.canaries[data][s.Name] = true
					}
				}
			}
		}
	}
}

// surelyCanaryMember reports whether the plan of profile p counts session s
// among the members that pick canaries, as the caches show them now: it
// uses p, is not being deleted, and its Deployment is in the cache, its own.
// Stricter than the plan where in doubt, so that no earlier reader is
// counted that the plan did not count.
func (w *world) surelyCanaryMember(s *gamesv1.GameSession, p *corev1.ConfigMap) bool {
	if s.DeletionTimestamp != nil || w.cachedProfileOf(s) != p {
		return false
	}
	d := w.caches[deploymentsResource].deployment(s.Name)
	return d != nil && d.DeletionTimestamp == nil && controlledBy(d, s.UID)
}

// checkInputCanary is told of each controller write to session s's
// Deployment that changes its inputs and nothing else.
func (w *world) checkInputCanary(s *gamesv1.GameSession, before, after *appsv1.Deployment) {
	p := w.cachedProfileOf(s)
	if p == nil {
		return
	}
	if policy, _ := w.ctrl.profiles.policyOf(p); !policy.AsksForCanary() {
		return
	}
	if d := w.caches[deploymentsResource].deployment(s.Name); d == nil || d.UID != after.UID || !controlledBy(d, s.UID) {
		// No member of the plan: its own canary.
		w.covered["input move under a canary of a Deployment out of the cache"]++
		return
	}
	for _, in := range worldInputs {
		had, known := w.inputsRun(in, w.runs(in, before))
		has, knownNow := w.inputsRun(in, w.runs(in, after))
		if !known || !knownNow {
			w.covered["input move under a canary of data not told"]++
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(has)) {
			digest := has[name]
			if old, ok := had[name]; ok && old == digest {
				continue
			}
			data := canaryData{in.kind, name, digest}
			switch {
			case w.canary.canaries[data][s.Name]:
				w.covered["input move of a canary"]++
			case w.canary.ranReady[data]:
				w.covered["input move after its canary passed"]++
			default:
				canaries := slices.Sorted(maps.Keys(w.canary.canaries[data]))
				w.violate("input-canary", "Patch moved Deployment %s to new data of %s %s (digest %s) under the canary of profile %s, "+
					"but GameSession %s was never among its canaries (%v) and no Deployment the caches showed ran those data Ready",
					s.Name, in.kind, name, digest, p.Name, s.Name, canaries)
			}
		}
	}
}

// ---- Checked at rest ----

// canaryHoldsAtRest reports whether, at rest, the canary of a rotation
// holds session s back, and its profile's ProfileRollout says so: it lists
// the canary of an object s reads, s not among them, and the server shows
// one of those canaries not on the data it wants, complete and Ready (its
// Deployment missing, paused, progressing or failed). A canary that never
// gets Ready holds the others for good (inputcanary.go); a record the
// server belies holds nothing.
func (w *world) canaryHoldsAtRest(s *gamesv1.GameSession, r *gamesv1.ProfileRollout) bool {
	if r == nil || r.Status.Inputs == nil {
		return false
	}
	for _, c := range r.Status.Inputs.Canaries {
		i := slices.IndexFunc(worldInputs, func(in *worldInput) bool { return in.kind == c.Kind })
		if i < 0 {
			continue
		}
		in := worldInputs[i]
		if c.Namespace != worldNamespace || !slices.Contains(in.readBy(s.Spec.Template), c.Name) ||
			slices.Contains(c.Sessions, s.Name) || slices.Contains(c.Sessions, worldNamespace+"/"+s.Name) {
			continue
		}
		for _, member := range c.Sessions {
			if !w.settledCanaryOnServer(member[strings.LastIndex(member, "/")+1:]) {
				w.covered["input change held by a canary"]++
				return true
			}
		}
	}
	return false
}

// failedHoldPlacesAtRest reports whether, at rest, input moves of the
// profile that failed or never end hold the places of max-rolling that
// others wait for, as its ProfileRollout says, and the server shows a
// Deployment of the profile's sessions that has not completed. A failed
// move keeps its place until new data moves it again. One that never ends:
// the Deployment controller keeps a timed-out condition naming an older
// ReplicaSet, of another revision, while the new template's pods make no
// progress, and never times out the new one (seeds 99152112, 99240276). At
// rest a rotation's canary ends up either way on content that never gets
// Ready, and the other canary waits for its place.
func (w *world) failedHoldPlacesAtRest(profile *corev1.ConfigMap, r *gamesv1.ProfileRollout) bool {
	if r.Status.Inputs == nil || r.Status.Inputs.WaitingSessions == 0 ||
		r.Status.Inputs.FailedSessions == 0 && r.Status.Inputs.MovingSessions == 0 {
		return false
	}
	for _, s := range w.server.sessions() {
		if d := w.server.deployment(s.Name); uses(s, profile.Name) && d != nil && controlledBy(d, s.UID) &&
			(timedOutCondition(d) != nil || !deploymentComplete(d)) {
			w.covered["input change held by failed or unending moves in max-rolling"]++
			return true
		}
	}
	return false
}

// unendingMovesFillTheClusterBudget reports whether, at rest, the places of
// the cluster-wide budget are all held by other sessions' moves that never
// end: Deployments whose new pods never progress while they keep the
// timed-out condition of an earlier ReplicaSet of another revision (a
// failed move would have freed its cluster place). The session's change
// waits for one of them, as the budget says it must (seed 99310449).
func (w *world) unendingMovesFillTheClusterBudget(s *gamesv1.GameSession) bool {
	if w.matchSafe.maxMoving == 0 {
		return false
	}
	unending := 0
	for _, other := range w.server.sessions() {
		d := w.server.deployment(other.Name)
		if other.Name == s.Name || d == nil || !controlledBy(d, other.UID) || d.Spec.Paused || deploymentComplete(d) {
			continue
		}
		// Timed out on an earlier ReplicaSet, not on its own template's.
		if cond := timedOutCondition(d); cond != nil && timedOutReplicaSet(cond.Message) != d.Name+"-"+w.templateHashOf(d) {
			unending++
		}
	}
	if unending < w.matchSafe.maxMoving {
		return false
	}
	w.covered["input change held by unending moves in the cluster budget"]++
	return true
}

// settledCanaryOnServer reports whether the server shows the session's
// Deployment on the data of its inputs as the server holds them, complete,
// Ready and not paused.
func (w *world) settledCanaryOnServer(name string) bool {
	s, d := w.server.session(name), w.server.deployment(name)
	if s == nil || d == nil || !controlledBy(d, s.UID) || d.Spec.Paused || !worldDeploymentReady(d) {
		return false
	}
	for _, in := range w.inputs {
		if w.serverInputs(in, s) != w.runs(in, d) {
			return false
		}
	}
	return true
}

// inputsRun is the digest of each object of the kind a Deployment's pods
// run with, read back from its set by the data sets the world writes; false
// if no data sets give its hash.
func (w *world) inputsRun(in *worldInput, set inputSet) (map[string]string, bool) {
	if set.names == "" {
		return map[string]string{}, set.hash == ""
	}
	c := &w.canary
	if c.runs == nil {
		c.runs, c.versions = map[string]map[string]string{}, map[string][]object{}
	}
	key := in.kind + "\x00" + set.names + "\x00" + set.hash
	if runs, ok := c.runs[key]; ok {
		return runs, runs != nil
	}
	names := splitNames(set.names)
	choices := make([][]string, len(names))
	for i, name := range names {
		choices[i] = w.dataDigests(in, name)
	}
	var runs map[string]string
	picked := make([]string, len(names))
	var try func(i int) bool
	try = func(i int) bool {
		if i == len(names) {
			return inputSetHash(names, picked) == set.hash
		}
		for _, d := range choices[i] {
			if picked[i] = d; try(i + 1) {
				return true
			}
		}
		return false
	}
	if try(0) {
		runs = map[string]string{}
		for i, name := range names {
			runs[name] = picked[i]
		}
	}
	c.runs[key] = runs
	return runs, runs != nil
}

// dataDigests are the digests of the data the object can have held: its
// data sets and the fresh data of rotations.
func (w *world) dataDigests(in *worldInput, name string) []string {
	c := &w.canary
	if c.runs == nil {
		c.runs, c.versions = map[string]map[string]string{}, map[string][]object{}
	}
	versions, ok := c.versions[in.kind+"/"+name]
	if !ok {
		for d := range in.dataSets {
			obj := in.newObject(name)
			in.setData(obj, d)
			versions = append(versions, obj)
		}
		c.versions[in.kind+"/"+name] = versions
	}
	digests := make([]string, len(versions))
	for i, v := range versions {
		digests[i] = w.digestOf(in, v)
	}
	return digests
}

// retellCanaryData is told of a new digest key, before the world takes it:
// what the canary memory holds of each data, told by its digest under the
// old key, it holds of the same data under the new one.
func (w *world) retellCanaryData(next SecretDigestKeys) {
	c := &w.canary
	if c.ranReady == nil {
		return
	}
	retold := map[canaryData]canaryData{}
	for _, in := range w.inputs {
		if in.resource != secretsResource {
			continue
		}
		for key, versions := range c.versions {
			kind, name, _ := strings.Cut(key, "/")
			if kind != in.kind {
				continue
			}
			for _, v := range versions {
				old := canaryData{kind, name, w.digestOf(in, v)}
				stored, err := next.Digester()(copyOf(v))
				must(err)
				retold[old] = canaryData{kind, name, stored.(object).GetAnnotations()[dataDigestAnnotation]}
			}
		}
	}
	ranReady, canaries := map[canaryData]bool{}, map[canaryData]map[string]bool{}
	for data, ran := range c.ranReady {
		if to, ok := retold[data]; ok {
			data = to
		}
		ranReady[data] = ran
	}
	for data, sessions := range c.canaries {
		if to, ok := retold[data]; ok {
			data = to
		}
		canaries[data] = sessions
	}
	c.ranReady, c.canaries = ranReady, canaries
	clear(c.runs)
}

// freshData gives an object of either kind the k-th data of rotations,
// unlike any of its data sets.
func freshData(obj object, k int) {
	switch o := obj.(type) {
	case *corev1.Secret:
		o.Data = map[string][]byte{"token": []byte(fmt.Sprintf("rotation %d", k))}
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = map[string]string{"tuning.cfg": fmt.Sprintf("tick=%d", 100+k)}, nil
	}
}

// worldDeploymentReady reports whether a Deployment's status is of its
// current template, all its replicas updated and Ready.
func worldDeploymentReady(d *appsv1.Deployment) bool {
	want := ptr.Deref(d.Spec.Replicas, 1)
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.Replicas == want && d.Status.ReadyReplicas == want
}
