package controller

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// Referenced inputs in the sequences (inputs.go): labelled Secrets and
// session-config ConfigMaps. Each kind is in half of the sequences, chosen
// from a stream of its own (inputsOf), so a quarter have both and a quarter
// take the steps they took before either existed. Users write, annotate,
// relabel and delete two objects of each kind in the sequence, and give
// sessions templates that read some of them, each in one of the ways a pod
// reads one (a volume, a projected volume's source, an env var, envFrom),
// often both kinds in one template. The kinds share one table (worldInputs)
// and one set of checks; what the invariants hold the controller to, for
// each kind:
//   - a write moves a Deployment to a digest of objects its cache holds, all
//     of them read by the session (input-unknown);
//   - a write that changes nothing of the template but its inputs drops no
//     object the session still reads and the cache lost, of any kind: an
//     input gone restarts no game server, it holds the others' changes too
//     (input-gone-rolled);
//   - under a policy with a canary, a write moves a session to new data of
//     an object only if the caches showed it among the object's first
//     readers, or some Deployment running those data complete and Ready:
//     the others wait for the canary (input-canary,
//     world_inputcanary_test.go);
//   - at rest, a session on its profile's current revision, idle, with a
//     policy that lets it move, runs the digest of the labelled objects it
//     reads as the server holds them, unless one it runs with is gone, or
//     its ProfileRollout shows it held (a halt, the brake, a canary the
//     server shows not settled, failed moves holding the places of
//     max-rolling): no change stays stuck with nothing to say why
//     (input-digest-stale);
//   - every such move has a cause: a change of an input its cache showed, or
//     a change of the session's own, one write for each (the write credits,
//     sequence_ledger_test.go): a Secret and a ConfigMap changed together
//     restart the game servers once, not once per kind.

// worldInput is one kind of referenced input as the sequences play it.
type worldInput struct {
	// kind names the kind as the controller's inputKind does; what the
	// world expects of it is written out below, from the API.
	kind string
	// resource is the world's store of the kind, and names its cache.
	resource                        apiResource
	labelKey, labelValue            string
	namesAnnotation, hashAnnotation string
	// transform is the kind's informer transform: what its cache stores,
	// and so the digest of an object's data.
	transform cache.TransformFunc
	// names are the objects users write; newObject makes one without data,
	// and setData gives it the i-th of its dataSets.
	names     []string
	dataSets  int
	newObject func(name string) object
	setData   func(obj object, i int)
	// The ways a pod template reads an object of the kind.
	volume     func(name string) corev1.VolumeSource
	projection func(name string) corev1.VolumeProjection
	keyRef     func(name string) *corev1.EnvVarSource
	envFrom    func(name string) corev1.EnvFromSource
}

var (
	worldSecretData = []map[string][]byte{{"token": []byte("one")}, {"token": []byte("two")}, {"token": []byte("two"), "ca": []byte("x")}}
	worldDigestKey  = bytes.Repeat([]byte{0x5e}, 32)
	// worldSessionConfigData are the data sets of session configs; the last
	// has binary data, which the digest covers as well.
	worldSessionConfigData = []struct {
		data   map[string]string
		binary map[string][]byte
	}{
		{data: map[string]string{"tuning.cfg": "tick=30"}},
		{data: map[string]string{"tuning.cfg": "tick=60"}},
		{data: map[string]string{"tuning.cfg": "tick=60"}, binary: map[string][]byte{"navmesh.bin": {0x01, 0x02}}},
	}
)

// worldInputs are the kinds, in the order of Controller.inputs (and of its
// event handlers), which startController checks.
var worldInputs = []*worldInput{
	{
		kind: "Secret", resource: secretsResource,
		labelKey: gamesv1.SecretLabel, labelValue: gamesv1.SecretLabelValue,
		namesAnnotation: gamesv1.SecretsAnnotation, hashAnnotation: gamesv1.SecretsHashAnnotation,
		transform: SecretDigester(worldDigestKey),
		names:     []string{"sec-a", "sec-b"},
		dataSets:  len(worldSecretData),
		newObject: func(name string) object {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNamespace}}
		},
		setData: func(obj object, i int) { obj.(*corev1.Secret).Data = maps.Clone(worldSecretData[i]) },
		volume: func(name string) corev1.VolumeSource {
			return corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}
		},
		projection: func(name string) corev1.VolumeProjection {
			return corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: localRef(name)}}
		},
		keyRef: func(name string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: localRef(name), Key: "token"}}
		},
		envFrom: func(name string) corev1.EnvFromSource {
			return corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: localRef(name)}}
		},
	},
	{
		kind: "ConfigMap", resource: sessionConfigsResource,
		labelKey: gamesv1.SessionConfigLabel, labelValue: gamesv1.SessionConfigLabelValue,
		namesAnnotation: gamesv1.ConfigMapsAnnotation, hashAnnotation: gamesv1.ConfigMapsHashAnnotation,
		transform: SessionConfigDigester(),
		names:     []string{"cfg-a", "cfg-b"},
		dataSets:  len(worldSessionConfigData),
		newObject: func(name string) object {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: worldNamespace}}
		},
		setData: func(obj object, i int) {
			cm := obj.(*corev1.ConfigMap)
			cm.Data, cm.BinaryData = maps.Clone(worldSessionConfigData[i].data), maps.Clone(worldSessionConfigData[i].binary)
		},
		volume: func(name string) corev1.VolumeSource {
			return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: localRef(name)}}
		},
		projection: func(name string) corev1.VolumeProjection {
			return corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: localRef(name)}}
		},
		keyRef: func(name string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: localRef(name), Key: "tuning.cfg"}}
		},
		envFrom: func(name string) corev1.EnvFromSource {
			return corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: localRef(name)}}
		},
	},
}

func localRef(name string) corev1.LocalObjectReference {
	return corev1.LocalObjectReference{Name: name}
}

// inputsOf decides which kinds a sequence has, each from a stream of its
// own, so that the sequences without a kind take the steps they took before
// it existed.
func inputsOf(seed uint64) []*worldInput {
	var kinds []*worldInput
	for i, stream := range []uint64{0x5ec7, 0xc0f16} {
		if rand.New(rand.NewPCG(seed, stream)).IntN(2) == 0 {
			kinds = append(kinds, worldInputs[i])
		}
	}
	return kinds
}

// inputOf is the kind a world resource stores, nil for none.
func inputOf(r apiResource) *worldInput {
	i := slices.IndexFunc(worldInputs, func(in *worldInput) bool { return in.resource == r })
	if i < 0 {
		return nil
	}
	return worldInputs[i]
}

// plays reports whether the sequence has the kind of input r stores.
func (w *world) plays(r apiResource) bool {
	return slices.ContainsFunc(w.inputs, func(in *worldInput) bool { return in.resource == r })
}

func (in *worldInput) labelled(obj object) bool { return obj.GetLabels()[in.labelKey] == in.labelValue }

// running is the set of the kind a Deployment's pods run with, as its
// pod-template annotations say.
func (in *worldInput) running(d *appsv1.Deployment) inputSet {
	a := d.Spec.Template.Annotations
	return inputSet{names: a[in.namesAnnotation], hash: a[in.hashAnnotation]}
}

// digestOf is the digest of an object's data, as the kind's cache stores it.
func (in *worldInput) digestOf(obj object) string {
	stored, err := in.transform(copyOf(obj))
	must(err)
	return stored.(object).GetAnnotations()[dataDigestAnnotation]
}

// ---- Users ----

// writeInput creates an object of the kind, labelled or not, or gives the
// one there other data.
func (w *world) writeInput(in *worldInput) bool {
	name := pick(w, in.names)
	data := w.rng.IntN(in.dataSets)
	if obj := w.server.get(in.resource, name); obj != nil {
		in.setData(obj, data)
		updated, err := w.server.update(byUser, in.resource, obj, true)
		must(err)
		w.logf("user: write %s %s data set %d (rv %s)", in.resource, name, data, updated.GetResourceVersion())
		return true
	}
	obj := in.newObject(name)
	in.setData(obj, data)
	if w.rng.IntN(5) > 0 {
		obj.SetLabels(map[string]string{in.labelKey: in.labelValue})
	}
	created, err := w.server.create(byUser, in.resource, obj)
	must(err)
	w.logf("user: create %s %s (%s) data set %d, labelled %t", in.resource, name, created.GetUID(), data, in.labelled(obj))
	return true
}

// annotateInput changes an object's metadata and not its data: nothing its
// readers run changes.
func (w *world) annotateInput(in *worldInput) bool {
	obj := w.server.get(in.resource, pick(w, in.names))
	if obj == nil {
		return false
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[worldNoteAnnotation] = fmt.Sprintf("step %d", w.step)
	obj.SetAnnotations(annotations)
	updated, err := w.server.update(byUser, in.resource, obj, true)
	must(err)
	w.logf("user: annotate %s %s (rv %s)", in.resource, obj.GetName(), updated.GetResourceVersion())
	return true
}

func (w *world) relabelInput(in *worldInput) bool {
	obj := w.server.get(in.resource, pick(w, in.names))
	if obj == nil {
		return false
	}
	labelled := in.labelled(obj)
	labels := obj.GetLabels()
	if labelled {
		delete(labels, in.labelKey)
	} else {
		labels = map[string]string{in.labelKey: in.labelValue}
	}
	obj.SetLabels(labels)
	_, err := w.server.update(byUser, in.resource, obj, true)
	must(err)
	w.logf("user: label %s %s %t", in.resource, obj.GetName(), !labelled)
	return true
}

func (w *world) deleteInput(in *worldInput) bool {
	obj := w.server.get(in.resource, pick(w, in.names))
	if obj == nil {
		return false
	}
	must(w.server.delete(byUser, in.resource, obj.GetName(), metav1.DeletePropagationBackground))
	w.logf("user: delete %s %s", in.resource, obj.GetName())
	return true
}

// worldReadWays are the ways a template reads an object.
var worldReadWays = []string{"volume", "projected", "env", "envFrom"}

// editSessionInputs gives a session a template that reads some of the
// objects of each kind in the sequence, each in one of worldReadWays (the
// projected ones of both kinds in one volume), or takes its template away.
func (w *world) editSessionInputs() bool {
	s := w.liveSession()
	if s == nil || platformSession(s) {
		return false // the platform's sessions read no inputs
	}
	var t *corev1.PodTemplateSpec
	var reads []string
	if w.rng.IntN(4) > 0 {
		t = &corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: worldGameServer}}},
		}
		for _, in := range w.inputs {
			for _, name := range in.names {
				if w.rng.IntN(2) == 0 {
					continue
				}
				way := pick(w, worldReadWays)
				readInput(t, in, name, way)
				reads = append(reads, fmt.Sprintf("%s %s by %s", in.resource, name, way))
			}
		}
		if read := w.withSharedRead(t); read != "" {
			reads = append(reads, read)
		}
	}
	s.Spec.Template = t
	updated, err := w.server.update(byUser, sessionsResource, s, true)
	must(err)
	w.logf("user: gamesession %s template %t, reads %v (generation %d)", s.Name, t != nil, reads, updated.GetGeneration())
	return true
}

// worldReadsAnnotation on a session's template records the inputs the
// world made it read, as "resource/name" entries: the world's own account,
// not the controller's reading of the template.
const worldReadsAnnotation = "world.example.com/reads"

// readBy returns the names of the objects of the kind the template reads,
// sorted, by its worldReadsAnnotation.
func (in *worldInput) readBy(t *corev1.PodTemplateSpec) []string {
	if t == nil {
		return nil
	}
	var names []string
	for _, entry := range strings.Split(t.Annotations[worldReadsAnnotation], ",") {
		if name, ok := strings.CutPrefix(entry, in.resource.String()+"/"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// readInput makes the template read the object of the kind in that way.
func readInput(t *corev1.PodTemplateSpec, in *worldInput, name, way string) {
	reads := splitNames(t.Annotations[worldReadsAnnotation])
	t.Annotations[worldReadsAnnotation] = strings.Join(append(reads, fmt.Sprintf("%s/%s", in.resource, name)), ",")
	pod := &t.Spec
	gameServer := &pod.Containers[0]
	switch way {
	case "volume":
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: fmt.Sprintf("%s-%s", in.resource, name), VolumeSource: in.volume(name)})
	case "projected":
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Projected != nil })
		if i < 0 {
			pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "inputs", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
			i = len(pod.Volumes) - 1
		}
		pod.Volumes[i].Projected.Sources = append(pod.Volumes[i].Projected.Sources, in.projection(name))
	case "env":
		gameServer.Env = append(gameServer.Env, corev1.EnvVar{
			Name: strings.ToUpper(strings.ReplaceAll(name, "-", "_")), ValueFrom: in.keyRef(name)})
	case "envFrom":
		gameServer.EnvFrom = append(gameServer.EnvFrom, in.envFrom(name))
	}
}

// populateInputs gives the world the controller finds objects of each kind
// in the sequence, and its sessions templates that read some of them.
func (w *world) populateInputs() {
	if len(w.inputs) == 0 {
		return
	}
	for _, in := range w.inputs {
		for range in.names {
			w.writeInput(in)
		}
	}
	for range w.server.sessions() {
		w.editSessionInputs()
	}
}

// withServerInputs gives d the inputs of each kind its session reads, as an
// earlier controller would have left them.
func (w *world) withServerInputs(d *appsv1.Deployment, s *gamesv1.GameSession) *appsv1.Deployment {
	for _, in := range w.inputs {
		if set := w.serverInputs(in, s); set.names != "" {
			d.Spec.Template.Annotations[in.namesAnnotation] = set.names
			d.Spec.Template.Annotations[in.hashAnnotation] = set.hash
		}
	}
	return d
}

// ---- What the controller's caches show ----

// noteInputDelivered owes each session that reads the object a move when
// its cache shows the object's data change, or the object come or go.
func (w *world) noteInputDelivered(in *worldInput, ev watchEvent, prev object) {
	// The event's object as the server sent it, a relist's as the cache
	// stores it: each digested again, as the transform is idempotent.
	digest := func(obj object) string {
		if obj == nil {
			return ""
		}
		return w.digestOf(in, obj)
	}
	now := ev.obj
	if ev.kind == watch.Deleted {
		now = nil
	}
	if digest(prev) == digest(now) && (prev == nil) == (now == nil) {
		return
	}
	for _, obj := range w.caches[sessionsResource].indexer.List() {
		if s := obj.(*gamesv1.GameSession); w.oweInputMove(in, ev.obj.GetName(), s) {
			w.inputReaders = append(w.inputReaders, inputReader{in.kind + " " + ev.obj.GetName(), s.Name})
		}
	}
}

// inputReader is a session that reads an input ("Kind name") whose change
// the controller's cache showed.
type inputReader struct{ input, session string }

// checkInputReadersQueued is told of the end of each call into the
// controller: the sessions that read an input whose change its cache showed
// meanwhile are queued. A change that queues nothing is stuck until some
// other event syncs the session, which may be never.
func (w *world) checkInputReadersQueued() {
	for _, r := range w.inputReaders {
		if !w.queue.queued(worldKeyOf(r.session)) {
			w.violate("input-change-unqueued", "the controller's cache showed a change of %s, but GameSession %s, which reads it, is not queued",
				r.input, r.session)
		}
	}
	w.inputReaders = nil
}

// oweInputMove owes the session a move if it reads the object, and reports
// whether it does.
func (w *world) oweInputMove(in *worldInput, name string, s *gamesv1.GameSession) bool {
	if !slices.Contains(in.readBy(s.Spec.Template), name) {
		return false
	}
	w.inputMoves[s.Name]++
	return true
}

func (w *world) inputCached(in *worldInput, name string) bool {
	return w.caches[in.resource].cached(worldNamespace+"/"+name) != nil
}

// rotationWaits reports whether a session's Deployment, as the cache shows
// it, runs other data of its inputs than the caches show, none of those it
// runs and still reads gone from the cache: a rotation is due. A sync that
// leaves it so leaves it waiting (for a place among the moves, its turn,
// the window, the session to be idle), and says so with no condition and
// no Event (tenancy.md): the wait ends, not a change.
func (w *world) rotationWaits(name string) bool {
	return w.rotationDue(name, w.caches[deploymentsResource].deployment(name))
}

// rotationDue reports whether d, a Deployment of session name, runs other
// data of its inputs than the caches show, none of those it runs and still
// reads gone from the cache.
func (w *world) rotationDue(name string, d *appsv1.Deployment) bool {
	s := w.caches[sessionsResource].session(name)
	if s == nil || s.DeletionTimestamp != nil || d == nil || !controlledBy(d, s.UID) {
		return false
	}
	due := false
	for _, in := range w.inputs {
		for _, input := range splitNames(in.running(d).names) {
			if slices.Contains(in.readBy(s.Spec.Template), input) && !w.inputCached(in, input) {
				return false // an input gone holds the change of every kind
			}
		}
		cached := w.setOf(in, s, func(input string) object { return w.caches[in.resource].cached(worldNamespace + "/" + input) })
		due = due || cached != w.runs(in, d)
	}
	return due
}

// ---- Checked at each write ----

// checkInputsWrite is told of each controller write to an existing
// Deployment.
func (w *world) checkInputsWrite(before, after *appsv1.Deployment) {
	if before == nil {
		return
	}
	name := after.Name
	var changed []string
	for _, in := range worldInputs {
		if in.running(before) != in.running(after) {
			changed = append(changed, in.kind)
		}
	}
	if len(changed) == 0 {
		return
	}
	onlyInputs := onlyInputsDiffer(before, after)
	s := w.caches[sessionsResource].session(name)
	if onlyInputs {
		w.covered[strings.Join(changed, " and ")+" change rolled"]++
		if s != nil {
			// A halt holds every kind of move of its profile while the
			// profile has the content it halted on.
			profile := profileNameOf(s.Spec.ProfileRef)
			// Sessions whose game servers failed are the exception: they move
			// to new data, which may fix them.
			if h, ok := w.halts[profile]; ok && h.epoch == w.profileEpoch[profile] && timedOutCondition(before) == nil {
				w.covered["input move checked against a halt"]++
				if p := w.caches[profilesResource].profile(profile); p != nil && ProfileHash(p) == h.hash {
					w.violate("halt-moved", "Deployment %s restarted for its %ss, while the rollout of profile %s halted on its content %s",
						name, strings.Join(changed, " and "), profile, h.hash)
				}
			}
			// A move like a profile's: it takes a place in the cluster's
			// budget and rate. (One that takes along the live move its sync
			// just made is that move: world_live_test.go.)
			what := "restarted for its " + strings.Join(changed, " and ") + "s"
			if w.live.syncMoved == name {
				w.covered["input move with a live move"]++
			} else {
				w.checkClusterMove(s, after, clusterMove{uid: after.UID,
					hash: after.Spec.Template.Annotations[gamesv1.ProfileHashAnnotation], inputs: worldInputsRun(after)}, what)
				w.checkProfileBudget(after, profile, what, false, "")
			}
		}
	}
	if w.credits[name] == 0 && w.inputMoves[name] > 0 {
		// The move a change of an input owed it: one, whatever number of
		// kinds the write carries.
		w.inputMoves[name]--
		w.credit(name)
	}
	for _, in := range worldInputs {
		has := in.running(after)
		for _, input := range splitNames(has.names) {
			if !w.inputCached(in, input) {
				w.violate("input-unknown", "Patch moved Deployment %s to the digest of %ss %q, but the controller's cache holds no %s %s",
					name, in.kind, has.names, in.kind, input)
			}
			if s != nil && !slices.Contains(in.readBy(s.Spec.Template), input) {
				w.violate("input-unknown", "Patch moved Deployment %s to the digest of %ss %q, but GameSession %s reads %v",
					name, in.kind, has.names, name, in.readBy(s.Spec.Template))
			}
		}
	}
	if s == nil || !onlyInputs {
		return
	}
	w.checkInputCanary(s, before, after)
	// The hold is of every kind: an input gone keeps the others as they run.
	for _, in := range worldInputs {
		reads, had := in.readBy(s.Spec.Template), in.running(before)
		for _, input := range splitNames(had.names) {
			if slices.Contains(reads, input) && !w.inputCached(in, input) {
				w.violate("input-gone-rolled", "Patch restarted Deployment %s for a change of its %s inputs, while %s %s, which it still reads, is gone from the controller's cache",
					name, strings.Join(changed, " and "), in.kind, input)
			}
		}
	}
}

// worldInputsRun is what a Deployment's pods run with of every kind, as its
// pod-template annotations say.
func worldInputsRun(d *appsv1.Deployment) string {
	var parts []string
	for _, in := range worldInputs {
		has := in.running(d)
		parts = append(parts, has.names+"="+has.hash)
	}
	return strings.Join(parts, ";")
}

func splitNames(names string) []string {
	if names == "" {
		return nil
	}
	return strings.Split(names, ",")
}

// onlyInputsDiffer reports whether two Deployments' pod templates differ in
// the annotations of their inputs and nothing else.
func onlyInputsDiffer(before, after *appsv1.Deployment) bool {
	b, a := before.Spec.Template.DeepCopy(), after.Spec.Template.DeepCopy()
	for _, t := range []*corev1.PodTemplateSpec{b, a} {
		for _, in := range worldInputs {
			delete(t.Annotations, in.namesAnnotation)
			delete(t.Annotations, in.hashAnnotation)
		}
	}
	return equality.Semantic.DeepEqual(b, a)
}

// ---- Checked at rest ----

// serverInputs is the set of the kind a session's pods are to run with, as
// the server holds the objects: an account of the digests of its own, from
// the data.
func (w *world) serverInputs(in *worldInput, s *gamesv1.GameSession) inputSet {
	return w.setOf(in, s, func(name string) object {
		if obj := w.server.get(in.resource, name); obj != nil && in.labelled(obj) {
			return obj
		}
		return nil
	})
}

// setOf is the set of the kind a session's pods are to run with, of the
// objects it reads that labelled finds (nil: none, or not labelled).
func (w *world) setOf(in *worldInput, s *gamesv1.GameSession, labelled func(name string) object) inputSet {
	var names, digests []string
	for _, name := range in.readBy(s.Spec.Template) {
		obj := labelled(name)
		if obj == nil {
			continue
		}
		names, digests = append(names, name), append(digests, w.digestOf(in, obj))
	}
	if len(names) == 0 {
		return inputSet{}
	}
	return inputSet{names: strings.Join(names, ","), hash: inputSetHash(names, digests)}
}

// inputSetHash is the hash of a set of objects of one kind, by name with
// their digests: the world's own account of it.
func inputSetHash(names, digests []string) string {
	h := sha256.New()
	for i, name := range names {
		fmt.Fprintf(h, "%s\x00%s\x00", name, digests[i])
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// goneInput returns the kind of an input that Deployment d runs with and
// the session still reads, gone from the server or unlabelled; nil if none.
func (w *world) goneInput(s *gamesv1.GameSession, d *appsv1.Deployment) *worldInput {
	for _, in := range w.inputs {
		want := splitNames(w.serverInputs(in, s).names)
		for _, name := range splitNames(in.running(d).names) {
			if slices.Contains(in.readBy(s.Spec.Template), name) && !slices.Contains(want, name) {
				return in
			}
		}
	}
	return nil
}

// checkInputsAtRest: a session on its profile's current revision, that
// nothing holds, runs the digest of the inputs of each kind it reads.
func (w *world) checkInputsAtRest() {
	if len(w.inputs) == 0 {
		return
	}
	for _, s := range w.server.sessions() {
		d := w.server.deployment(s.Name)
		profile := w.serverProfileOf(s)
		if d == nil || !controlledBy(d, s.UID) || d.Labels[worldManagedByLabel] != worldManagedByValue || profile == nil ||
			profile.Labels[gamesv1.ProfileLabel] != gamesv1.ProfileLabelValue ||
			rolledProfileHash(d, refOf(s)) != ProfileHash(profile) && (!w.live.on || !w.runsCurrent(s, profile, d)) ||
			isBusy(s) {
			continue
		}
		if ready := meta.FindStatusCondition(s.Status.Conditions, gamesv1.ConditionReady); ready != nil &&
			(ready.Reason == gamesv1.ReasonDeploymentInvalid || ready.Reason == gamesv1.ReasonContainerConflict) {
			continue
		}
		policy, err := w.ctrl.profiles.policyOf(profile)
		if err != nil || policy.Paused || policy.Window != nil && !policy.Window.Open(w.clock.Now()) {
			continue
		}
		// A halt of the profile's rollout on its content, or the brake of
		// its input moves, holds the change, and its ProfileRollout says so.
		if r := w.server.rollout(profile.Name); r != nil && metav1.IsControlledBy(r, profile) &&
			(r.Status.HaltedHash == ProfileHash(profile) || r.Status.Inputs != nil && r.Status.Inputs.Halted) {
			w.covered["input change held by a halt"]++
			continue
		}
		// So does the canary of a rotation that does not pass, and moves
		// that failed holding the places of max-rolling the others wait for.
		if r := w.server.rollout(profile.Name); r != nil && metav1.IsControlledBy(r, profile) &&
			(w.canaryHoldsAtRest(s, r) || w.failedHoldPlacesAtRest(profile, r)) {
			continue
		}
		if w.unendingMovesFillTheClusterBudget(s) {
			continue
		}
		// An input gone that the session runs with and still reads holds
		// the change of every kind.
		if gone := w.goneInput(s, d); gone != nil {
			w.covered["input change held by a "+gone.kind+" gone"]++
			continue
		}
		for _, in := range w.inputs {
			want, has := w.serverInputs(in, s), w.runs(in, d)
			if want.names != "" {
				w.covered[in.kind+" digest at rest"]++
			}
			if want != has {
				w.violate("input-digest-stale", "GameSession %s reads %ss %v, whose digest is %+v on the server, but its Deployment runs %+v",
					s.Name, in.kind, in.readBy(s.Spec.Template), want, has)
			}
		}
	}
}
