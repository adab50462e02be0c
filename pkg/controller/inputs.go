package controller

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
	"github.com/example/gamesession-controller/pkg/rollout"
)

// Referenced inputs.
//
// Besides its profile, a session's pod template may read objects of its own
// namespace whose changes should restart its game servers: credentials in a
// Secret, a tuning file in a ConfigMap. Those that carry their kind's label
// (gamesv1.SecretLabel, gamesv1.SessionConfigLabel) roll the session when
// their data change, the way a profile edit does: the pod template carries
// the names of the labelled objects it runs with and a digest of their data,
// in two annotations per kind, and a new digest is a new template.
//
// Each kind is one inputKind, in a file of its own (secrets.go,
// sessionconfigs.go): which objects a template reads, the digest its
// informer's transform leaves in the cache in place of the data, and its
// annotations. Everything else is shared, here: the index from an object to
// the sessions that read it, the event handlers, what the session's pods are
// to run with (inputsToRun) and what paces a change.
//
// The pods read the live objects: no copies. A profile gets immutable
// revisions because the controller owns its content's history; copying a
// tenant's Secret or ConfigMap would mean writing objects into every
// tenant's namespace, and deleting them again. What that costs is that a
// volume's files change under the running pods (the kubelet refreshes them
// within about a minute) before the rollout restarts them; env and subPath
// mounts change only with the restart. docs/tenancy.md says so.

// inputKind is one kind of referenced input.
type inputKind interface {
	// kind names the objects in logs and messages: "Secret", "ConfigMap".
	kind() string
	// label is the label, as key=value, that makes an object of the kind an
	// input: its informer lists only those.
	label() string
	// read returns the names of the objects of the kind that a pod
	// template reads, sorted, without repeats.
	read(t *corev1.PodTemplateSpec) []string
	// digest returns the digest of an object's data, as its informer's
	// transform left it in the cache.
	digest(obj interface{}) string
	// annotations are the pod-template annotations that name the objects
	// the pods run with, and hold the digest of their data.
	annotations() (names, digest string)
	// digestKeys are the fingerprints of the keys the kind's digests are
	// made under, and the Deployment label that records which key a
	// template's digest was made under (keyRecord); zero for a kind whose
	// digests have no key. previousDigest is an object's digest under the
	// previous key, during a rotation.
	digestKeys() (keys digestKeys, recordLabel string)
	previousDigest(obj interface{}) string
}

// input is a kind with the cache of its labelled objects.
type input struct {
	inputKind
	// cache holds the kind's labelled objects, keyed "namespace/name"; nil
	// when the kind is not tracked (its informer was not given): the pods
	// then keep what they run, so turning a kind off restarts nothing.
	cache cache.Indexer
	// index is the session informer's index from an object, as
	// "namespace/name", to the sessions whose template reads it.
	index string
}

// indexFunc indexes a session by the objects of the kind its pod template
// reads, as "namespace/name": a pod reads objects of its own namespace only.
func (in input) indexFunc(obj interface{}) ([]string, error) {
	session, ok := obj.(*gamesv1.GameSession)
	if !ok {
		return nil, fmt.Errorf("%s index: expected *GameSession, got %T", in.index, obj)
	}
	var keys []string
	for _, name := range in.read(session.Spec.Template) {
		keys = append(keys, session.Namespace+"/"+name)
	}
	return keys, nil
}

// inputIndex names the session index of a kind.
func inputIndex(k inputKind) string {
	return strings.ToLower(k.kind()) + "Ref"
}

// podReferences are the names of the Secrets and ConfigMaps a pod
// template's containers read, each sorted and without repeats.
type podReferences struct {
	secrets, configMaps []string
}

// templateReferences walks a pod template once for what its containers
// read: volumes and projected sources, env valueFrom and envFrom, of every
// container, init containers too. Image pull secrets are not among them: a
// new one does not change a running server.
func templateReferences(t *corev1.PodTemplateSpec) podReferences {
	var refs podReferences
	if t == nil {
		return refs
	}
	for i := range t.Spec.Volumes {
		v := &t.Spec.Volumes[i]
		if v.Secret != nil {
			refs.secrets = append(refs.secrets, v.Secret.SecretName)
		}
		if v.ConfigMap != nil {
			refs.configMaps = append(refs.configMaps, v.ConfigMap.Name)
		}
		if v.Projected == nil {
			continue
		}
		for _, source := range v.Projected.Sources {
			if source.Secret != nil {
				refs.secrets = append(refs.secrets, source.Secret.Name)
			}
			if source.ConfigMap != nil {
				refs.configMaps = append(refs.configMaps, source.ConfigMap.Name)
			}
		}
	}
	for _, containers := range [][]corev1.Container{t.Spec.InitContainers, t.Spec.Containers} {
		for i := range containers {
			refs.addContainer(&containers[i])
		}
	}
	refs.secrets, refs.configMaps = sortedNames(refs.secrets), sortedNames(refs.configMaps)
	return refs
}

// addContainer adds what a container reads by env valueFrom and envFrom.
// It takes the container by pointer: a plan walks the templates of
// thousands of sessions, and a Container is a large struct to copy.
func (refs *podReferences) addContainer(c *corev1.Container) {
	for _, from := range c.EnvFrom {
		if from.SecretRef != nil {
			refs.secrets = append(refs.secrets, from.SecretRef.Name)
		}
		if from.ConfigMapRef != nil {
			refs.configMaps = append(refs.configMaps, from.ConfigMapRef.Name)
		}
	}
	for _, env := range c.Env {
		switch from := env.ValueFrom; {
		case from != nil && from.SecretKeyRef != nil:
			refs.secrets = append(refs.secrets, from.SecretKeyRef.Name)
		case from != nil && from.ConfigMapKeyRef != nil:
			refs.configMaps = append(refs.configMaps, from.ConfigMapKeyRef.Name)
		}
	}
}

// sortedNames is names sorted, without repeats or empty names; nil for none.
func sortedNames(names []string) []string {
	names = slices.DeleteFunc(names, func(n string) bool { return n == "" })
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// inputSet is the labelled objects of one kind a pod template runs with, as
// its annotations say: their names and the digest of their data. The zero
// set is a template of none, which carries neither annotation.
type inputSet struct {
	names string // comma-separated, sorted
	hash  string
	// shown is what the template's digest annotation shows when that is
	// not hash: a digest made under a key since replaced or lost, which
	// hash, under the current key, stands for (keyRecord). "" when the
	// template shows hash itself.
	shown string
	// foreign marks a hash made under another key than the current one,
	// which the current one cannot stand in for: its data changed since,
	// or the session now reads other objects. Kept, it keeps the record of
	// the key it was made under.
	foreign bool
}

// inputSets are the sets of every kind, in the order of caches.inputs.
// Its string form is comparable, and what a paced move is recorded by.
type inputSets []inputSet

// key is the sets as one comparable string.
func (s inputSets) key() string {
	var b strings.Builder
	for _, set := range s {
		b.WriteString(set.names)
		b.WriteByte(0)
		b.WriteString(set.hash)
		b.WriteByte(0)
	}
	return b.String()
}

// observedInputs is the sets a Deployment's pod template runs with.
func (c *caches) observedInputs(d *appsv1.Deployment) inputSets {
	sets := make(inputSets, len(c.inputs))
	if d == nil {
		return sets
	}
	for i, in := range c.inputs {
		sets[i] = observedSet(in, d)
	}
	return sets
}

// observedSet is the set of the kind a Deployment's template runs with: its
// digest as the template shows it, or, for a template made under a key
// since replaced or lost that the current key stood in for, what that
// digest stands for (keyRecord).
func observedSet(k inputKind, d *appsv1.Deployment) inputSet {
	if d == nil {
		return inputSet{}
	}
	names, digest := k.annotations()
	a := d.Spec.Template.Annotations
	set := inputSet{names: a[names], hash: a[digest]}
	keys, record := k.digestKeys()
	if set.names == "" || record == "" {
		return set
	}
	if r := parseKeyRecord(d.Labels[record]); r.key == keys.current && r.hash != "" {
		set.shown, set.hash = set.hash, r.hash
	}
	return set
}

// keyRecord is a Deployment's gamesv1.SecretsKeyLabel: the fingerprint
// of the key its template's digest was made under, or of the key that
// stands in for it, with the digest it stands for (hash).
type keyRecord struct {
	key, hash string
}

func parseKeyRecord(value string) keyRecord {
	key, hash, _ := strings.Cut(value, ".")
	return keyRecord{key: key, hash: hash}
}

func (r keyRecord) String() string {
	if r.hash == "" {
		return r.key
	}
	return r.key + "." + r.hash
}

// withInputs puts the sets of the kinds inputs into d's pod template, and
// for a kind whose digests have a key, the record of the key into d's
// labels: a metadata write, which restarts nothing.
func withInputs(d *appsv1.Deployment, inputs []input, sets inputSets) {
	a := d.Spec.Template.Annotations
	for i, in := range inputs {
		names, digest := in.annotations()
		delete(a, names)
		delete(a, digest)
		set := sets[i]
		if set.names == "" {
			continue
		}
		a[names] = set.names
		a[digest] = cmp.Or(set.shown, set.hash)
		if keys, record := in.digestKeys(); record != "" && keys.current != "" && set.hash != "" && !set.foreign {
			r := keyRecord{key: keys.current}
			if set.shown != "" {
				r.hash = set.hash
			}
			// d may share its labels with the Deployment it was copied
			// from (withRevision): write a copy.
			d.Labels = maps.Clone(d.Labels)
			if d.Labels == nil {
				d.Labels = map[string]string{}
			}
			d.Labels[record] = r.String()
		}
	}
}

// wanted is the set of the kind the session's pods are to run with: the
// labelled objects of its template that the cache holds, and the digest of
// their digests. One the cache does not hold is either missing or has no
// label: the controller cannot tell, and must not look.
//
// During a rotation of the kind's key, previous is the digest of the same
// set under the previous key: what a template made under it shows.
func (in input) wanted(session *gamesv1.GameSession) (set inputSet, previous string, err error) {
	var names []string
	h := sha256.New()
	keys, _ := in.digestKeys()
	var p hash.Hash
	if keys.previous != "" {
		p = sha256.New()
	}
	for _, name := range in.read(session.Spec.Template) {
		obj, found, err := in.cache.GetByKey(session.Namespace + "/" + name)
		if err != nil {
			return inputSet{}, "", err
		}
		if !found {
			continue
		}
		names = append(names, name)
		fmt.Fprintf(h, "%s\x00%s\x00", name, in.digest(obj))
		if p != nil {
			fmt.Fprintf(p, "%s\x00%s\x00", name, in.previousDigest(obj))
		}
	}
	if len(names) == 0 {
		return inputSet{}, "", nil
	}
	if p != nil {
		previous = hex.EncodeToString(p.Sum(nil))[:32]
	}
	return inputSet{names: strings.Join(names, ","), hash: hex.EncodeToString(h.Sum(nil))[:32]}, previous, nil
}

// sessionInputs is what the session's Deployment d runs with of every kind
// (have) and what it is to run with (want), have read through the key
// record of a kind whose digests have a key, so that a new key restarts
// nothing:
//
//   - a template made under the current key shows its digest; one made
//     before records existed, under the key of the time: the current one,
//     or during a rotation the previous one if its digest is the data's
//     under it, or if this process made the key, one since lost;
//   - one made under the previous key, during a rotation, is checked under
//     it: if its data did not change since, it stands for the same data
//     under the current key, and keeps its digest (a move for another
//     reason writes the current one); if they did, it moves, as for any
//     change;
//   - one made under a key the controller no longer holds (the key Secret
//     deleted and no replica holding it any more) cannot be checked: it is
//     taken to run what the caches show, and keeps its digest. A change of
//     its Secrets made while no controller held a key is then not seen
//     until they change again (adopted counts these sessions).
//
// A template whose Secrets are others than the session now reads is to
// change anyway, and is taken as it shows. Where have and want agree, want
// carries have's digest as the template shows it.
func (c *caches) sessionInputs(session *gamesv1.GameSession, d *appsv1.Deployment) (have, want inputSets, adopted bool, err error) {
	have = c.observedInputs(d)
	want = make(inputSets, len(c.inputs))
	for i, in := range c.inputs {
		if in.cache == nil {
			want[i] = have[i]
			continue
		}
		set, previous, err := in.wanted(session)
		if err != nil {
			return nil, nil, false, err
		}
		want[i] = set
		keys, record := in.digestKeys()
		if d == nil || record == "" || keys.current == "" || have[i].names == "" || have[i].shown != "" {
			continue
		}
		r := parseKeyRecord(d.Labels[record])
		if have[i].names != set.names {
			// Its template changes anyway, or waits (an object gone): a
			// digest made under another key, or before records while keys
			// changed, is recorded under none until it is checked.
			have[i].foreign = r.key != keys.current && (r.key != "" || keys.previous != "" || keys.created)
			continue
		}
		switch {
		case r.key == "" && have[i].hash != set.hash && keys.previous != "" && have[i].hash == previous:
			// Written before records, under the key the rotation replaced.
			have[i] = inputSet{names: set.names, hash: set.hash, shown: have[i].hash}
		case r.key == "" && have[i].hash != set.hash && keys.created:
			// Written before records, under a key since lost.
			have[i] = inputSet{names: set.names, hash: set.hash, shown: have[i].hash}
			adopted = true
		case r.key == "" && have[i].hash != set.hash && keys.previous != "":
			// Written before records, under either key, of data changed
			// since: it moves, and until then no key is recorded for it.
			have[i].foreign = true
		case r.key == "" || r.key == keys.current:
		case r.key == keys.previous:
			if cmp.Or(r.hash, have[i].hash) == previous {
				have[i] = inputSet{names: set.names, hash: set.hash, shown: have[i].hash}
			} else {
				have[i].foreign = true // changed since: it moves
			}
		default:
			have[i] = inputSet{names: set.names, hash: set.hash, shown: have[i].hash}
			adopted = true
		}
	}
	for i := range want {
		if want[i].names == have[i].names && want[i].hash == have[i].hash {
			want[i] = have[i]
		}
	}
	return have, want, adopted, nil
}

// inputWait is why a session keeps the inputs it runs with for now.
type inputWait struct {
	reason       string
	requeueAfter time.Duration
}

// inputDecision is what a decision found of the session's referenced
// inputs: the sets its Deployment is to run with, and what it asks for.
type inputDecision struct {
	sets inputSets
	// wait says why a change waits; nil if none does.
	wait *inputWait
	// move is the input move the write makes, which the ledger must grant
	// first, with the profile's limit on it; nil for none.
	move         *move
	profileLimit int
	// noteSeen asks to remember that the change to the wanted sets was
	// seen, for max-defer.
	noteSeen bool
	// waitForPlace names the profile whose places the session waits for
	// (the brake); requestPlan asks for a plan of the profile, whose
	// ProfileRollout says how many wait.
	waitForPlace, requestPlan string
}

// withInputsToRun puts into desired (the Deployment the decision wants,
// without inputs, which it may change) the sets it is to run with, and
// says why a change waits. ask is the decision's final word: it asks the
// ledger for the move, and waits for a place when braked; otherwise the
// answer only says whether the ledger would grant it (a check whether the
// Deployment needs a write anyway).
//
// The wanted sets, unless a change of an input's data waits. It waits
//   - while an input the pods run with, and the template still reads, is
//     gone from the cache (deleted, or its label removed): a restart would
//     only fail, or lose the change's tracking;
//   - without the profile, or with a policy that does not parse: what paces
//     it is unknown;
//   - while the profile's rollout policy stops every move: paused, or
//     outside the maintenance window;
//   - while the profile's rollout is halted, or the session waits for its
//     turn in it (the change then rides along with that move);
//   - with a canary in the policy, until the canaries of the objects it
//     reads run their new data and are Ready (inputcanary.go);
//   - while the session is busy, until the policy's window has been open
//     for max-defer since the controller saw the change (all the time
//     since, without a window: rollout.Policy.Defers);
//   - while the ledger of moves has no place for it: the cluster-wide
//     budget, and with a paced policy the profile's max-rolling (moveLedger).
//
// A Deployment whose template changes anyway (a new profile revision, the
// session's own spec) takes the new sets along: its game servers restart
// once, not twice. A kind without an informer keeps its annotations as they
// are, so turning a kind off restarts nothing.
func (v *sessionView) withInputsToRun(desired *appsv1.Deployment, ask bool) (*appsv1.Deployment, inputDecision) {
	d := v.inputsToRun(desired, ask)
	withInputs(desired, v.inputs, d.sets)
	return desired, d
}

func (v *sessionView) inputsToRun(desired *appsv1.Deployment, ask bool) inputDecision {
	have, want, observed := v.have, v.want, v.deployment
	if v.inputsErr != nil {
		// A cache answers nothing but found or not; whatever else comes,
		// the pods keep what they run.
		return inputDecision{sets: have}
	}
	if observed == nil || slices.Equal(want, have) {
		return inputDecision{sets: want}
	}
	d := v.inputsChange(desired, ask)
	if ask && v.profile != nil && v.canaryPlanStale() != nil {
		// The plan picks the canaries of the new data now, whatever keeps
		// this move waiting or takes it along: the ProfileRollout names
		// every rotation under way, and an idle resync finds nothing left
		// to write.
		d.requestPlan = profileKey(v.profile.Namespace, v.profile.Name)
	}
	return d
}

// inputsChange is inputsToRun for a change of the inputs: what waits, and
// what moves.
func (v *sessionView) inputsChange(desired *appsv1.Deployment, ask bool) inputDecision {
	have, want, observed := v.have, v.want, v.deployment
	keep := v.keepInputs
	for i, in := range v.inputs {
		referenced := in.read(v.session.Spec.Template)
		for _, name := range strings.Split(have[i].names, ",") {
			if name != "" && slices.Contains(referenced, name) && !strings.Contains(","+want[i].names+",", ","+name+",") {
				return keep(fmt.Sprintf("%s %s is gone or lost the label %s", in.kind(), name, in.label()), 0)
			}
		}
	}
	withInputs(desired, v.inputs, have)
	if deploymentChanges(observed, desired).templateChange() {
		return inputDecision{sets: want}
	}
	if v.profile == nil {
		return keep("the profile is missing", 0)
	}
	if v.policyErr != nil {
		return keep("the profile's rollout policy does not parse", 0)
	}
	policy, now := v.policy, v.now
	switch {
	case policy.Paused:
		return keep("the profile's rollout is paused", 0)
	case policy.Window != nil && !policy.Window.Open(now):
		return keep("outside the profile's maintenance window", policy.Window.NextOpen(now).Sub(now))
	case v.profileHalted() && !v.deadlineExceeded:
		// A halt stops every kind of move of the profile until its content
		// changes, as for a bad edit of it; only sessions whose game servers
		// failed move, to new data that may fix them.
		return keep("the profile's rollout is halted", 0)
	case !policy.Unpaced() && v.profileMovePending():
		// Its turn in the profile's rollout comes: the change rides along
		// with that move, and the game servers restart once, not twice.
		return keep("it moves with its turn in the profile's rollout", 0)
	}
	if reason := v.canaryWait(); reason != "" {
		d := keep(reason, 0)
		d.noteSeen = true
		if ask {
			d.requestPlan = profileKey(v.profile.Namespace, v.profile.Name)
		}
		return d
	}
	return v.inputMove(ask)
}

// inputMoveLimit is the profile's max-rolling for the session's move for
// new inputs: what its paced policy allows, counted over the sessions that
// may use the profile; unlimited without a pace. The ledger counts the
// profile's moves to new content in it too.
func (v *sessionView) inputMoveLimit() int {
	if v.policyErr != nil || v.policy.Unpaced() {
		return unlimited
	}
	return v.policy.MaxRollingOf(v.permitted)
}

// keepInputs is a decision to keep the inputs the pods run with, and why.
func (v *sessionView) keepInputs(reason string, requeueAfter time.Duration) inputDecision {
	return inputDecision{sets: v.have, wait: &inputWait{reason: reason, requeueAfter: requeueAfter}}
}

// inputMove is the last part of inputsToRun: a change that nothing in the
// policy keeps waiting moves, unless the session is busy, the brake stops
// it, or the ledger of moves has no place for it.
func (v *sessionView) inputMove(ask bool) inputDecision {
	policy, now, want, keep := v.policy, v.now, v.want, v.keepInputs
	seen := v.inputChangeSeen
	if seen.IsZero() {
		seen = now
	}
	if isBusy(v.session) {
		// max-defer counts as for a profile's rollout, from the change.
		if waits, ends := policy.Defers(seen, now); waits {
			d := keep("the session is busy", 0)
			if !ends.IsZero() {
				d.wait.requeueAfter = ends.Sub(now)
			}
			d.noteSeen = true
			return d
		}
	}
	// A move: a place in the ledger, among the cluster's moves and, under a
	// paced policy, its profile's max-rolling, counted over the sessions
	// that may use it, as a plan counts its members: those of other
	// namespaces that name it without a grant move in none of its rollouts.
	// The session's own sync frees it (settleMove).
	// An unpaced policy has neither, and costs no count of the sessions.
	limit, maxFailed, brake := v.inputMoveLimit(), 0, false
	profileKey := profileKey(v.profile.Namespace, v.profile.Name)
	if !policy.Unpaced() {
		maxFailed, brake = policy.MaxFailedOf(v.permitted)
	}
	if brake && v.stalledInProfile > maxFailed && !v.hasProfilePlace && !v.deadlineExceeded {
		// The brake, as for a profile's rollout: more of the profile's input
		// moves failed than max-failed allows (a percentage of the sessions
		// that may use it); only those that failed move again, to new data
		// (a fix), in the places they hold. The others wait for the places
		// to free.
		d := keep(fmt.Sprintf("more of the profile's moves for their Secrets or ConfigMaps failed than its max-failed %s", policy.MaxFailed), 0)
		d.noteSeen = true
		if ask {
			d.waitForPlace, d.requestPlan = profileKey, profileKey
		}
		return d
	}
	switch {
	case ask && v.refused[inputMove] == notRefused:
		m := &move{kind: inputMove, to: want.key(), named: profileKey}
		if limit != unlimited {
			m.profile = profileKey
		}
		return inputDecision{sets: want, noteSeen: true, profileLimit: limit, move: m}
	case !ask && v.inputMoveWouldFit:
		return inputDecision{sets: want, noteSeen: true}
	}
	d := keep(fmt.Sprintf("no place among the moves: the cluster-wide budget (%s) or the max-rolling of profile %s (%d) is full", v.budget, profileKey, limit), 0)
	if limit == unlimited {
		d.wait.reason = fmt.Sprintf("the cluster-wide budget (%s) is full", v.budget)
	}
	d.noteSeen = true
	if ask && limit != unlimited {
		d.requestPlan = profileKey // it waits, as its ProfileRollout says
	}
	return d
}

// profileHalted reports whether the profile's rollout towards its current
// content is halted, as its latest plan or its ProfileRollout says (after a
// restart, before the first plan).
func (v *sessionView) profileHalted() bool {
	if pp := v.latest; pp != nil && pp.hash == v.target && pp.plan.Phase == rollout.PhaseHalted {
		return true
	}
	return v.stored.Halted
}

// profileMovePending reports whether the session of a paced profile waits
// for its turn in the profile's rollout: it runs another revision than the
// profile's current one, and the rollout is yet to be planned, or moves
// sessions with its revision available or on its way.
func (v *sessionView) profileMovePending() bool {
	if v.rolled == v.target {
		return false
	}
	pp := v.latest
	// A revision on its way (reason "") comes; one that cannot be had would
	// keep the change waiting for good.
	coming := pp != nil && (pp.revision.available || pp.revision.reason == "")
	return pp == nil || pp.hash != v.target ||
		coming && (pp.plan.Phase == rollout.PhaseCanary || pp.plan.Phase == rollout.PhaseRolling)
}

// inputChanges remembers since when each session has had a change of its
// inputs pending, for max-defer. In memory only: a restarted controller
// counts from its start, so a busy session waits longer, never less.
type inputChanges struct {
	mu    sync.Mutex
	since map[string]inputChange
}

type inputChange struct {
	sets string // inputSets.key
	at   time.Time
}

func newInputChanges() *inputChanges {
	return &inputChanges{since: map[string]inputChange{}}
}

// seen returns when the session's change to sets was first seen.
func (s *inputChanges) seen(key, sets string, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if change, ok := s.since[key]; ok && change.sets == sets {
		return change.at
	}
	s.since[key] = inputChange{sets: sets, at: now}
	return now
}

// seenAt returns when the session's change to sets was first seen; the zero
// time if it was not.
func (s *inputChanges) seenAt(key, sets string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if change, ok := s.since[key]; ok && change.sets == sets {
		return change.at
	}
	return time.Time{}
}

// settled ends the session's pending change: its Deployment runs what it
// wants, or the session is gone.
func (s *inputChanges) settled(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.since, key)
}

// inputEventHandlers are the event handlers of a kind's informer: each
// queues the sessions that read the object when its digest changed, it
// appeared or went, or gained or lost the label. A resync, or an edit of its
// metadata only, changes nothing they run.
func (c *sessionController) inputEventHandlers(in input) cache.ResourceEventHandlerFuncs {
	changed := func(obj interface{}) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			c.logger.Error(err, "Cannot tell which object changed", "kind", in.kind())
			return
		}
		keys, err := c.sessionIndexer.IndexKeys(in.index, key)
		if err != nil {
			c.logger.Error(err, "Looking up the GameSessions that read an object", "kind", in.kind(), "object", key)
			return
		}
		// Its name only: a Secret's content, or even its digest, never
		// reaches a log line.
		c.logger.V(4).Info("Referenced input changed", "kind", in.kind(), "object", key, "gameSessions", len(keys))
		for _, k := range keys {
			c.queue.Add(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(oldObj, newObj interface{}) {
			if in.digest(oldObj) != in.digest(newObj) {
				changed(newObj)
			}
		},
		DeleteFunc: changed,
	}
}

// standInMeta is the metadata of a referenced input's stand-in in the
// cache: its identity and the digest of its data, and nothing of its own
// labels or annotations, which may quote the data (last-applied).
func standInMeta(m *metav1.ObjectMeta, digest string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
		Annotations:       map[string]string{dataDigestAnnotation: digest},
	}
}

// metaDigest reads the digest a kind's transform left on a cached stand-in.
func metaDigest(obj interface{}) string {
	return metaAnnotation(obj, dataDigestAnnotation)
}

// metaAnnotation reads an annotation of a cached object or tombstone.
func metaAnnotation(obj interface{}, key string) string {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return ""
	}
	return m.GetAnnotations()[key]
}
