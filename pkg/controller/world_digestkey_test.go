package controller

import (
	"math/rand/v2"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	gamesv1 "github.com/example/gamesession-controller/pkg/apis/games/v1"
)

// The digest key of Secrets in the world. In a quarter of the sequences
// whose sessions read Secrets, drawn from a stream of their own so that the
// others are the sequences they were before, the key is lost (the key
// Secret deleted, no replica holding it: the next process makes a new one)
// or rotated (the next process holds a new key and the one before it), and
// the controller restarts with the new keys.
//
// What must hold:
//   - key-change-restart: a new key restarts no game server by itself. The
//     write credits (sequence_ledger_test.go) hold it: a key change credits
//     each Deployment of a session that reads a Secret with a write of its
//     key record only (the label games.example.com/secrets-key), and any
//     other write needs a change of the session's desired state, as always.
//     So a new key that changed pod templates would be a duplicate-write;
//   - key-change-restart, directly: no write gives a template another
//     digest of the same data of its Secrets, under any of the keys the
//     world has had, unless it changes the template for another reason
//     too, which restarts its pods anyway (checkKeyRestart);
//   - at rest, a session runs the digest of the Secrets the server holds as
//     the current key digests them (input-digest-stale), read through its
//     Deployment's key record: an old digest standing for the same data
//     counts as the data.

// keyChangesOf decides whether a sequence loses and rotates its digest key,
// from a stream of its own.
func keyChangesOf(seed uint64) bool {
	return rand.New(rand.NewPCG(seed, 0x6e1)).IntN(4) == 0
}

// newDigestKey is a fresh key from the world's stream.
func (w *world) newDigestKey() []byte {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(w.rng.IntN(256))
	}
	return key
}

// loseDigestKey restarts the controller with a new key, the old one lost.
func (w *world) loseDigestKey() bool {
	next := SecretDigestKeys{Current: w.newDigestKey(), Created: true}
	w.retellCanaryData(next)
	w.digestKeys = next
	w.keysHad = append(w.keysHad, next.Current)
	w.logf("the digest key is lost: the controller restarts with a new one, %s", KeyFingerprint(w.digestKeys.Current))
	w.covered["digest key lost"]++
	w.keyChanged()
	return true
}

// rotateDigestKey restarts the controller with a new key and the one before.
func (w *world) rotateDigestKey() bool {
	next := SecretDigestKeys{Current: w.newDigestKey(), Previous: w.digestKeys.Current}
	w.retellCanaryData(next)
	w.digestKeys = next
	w.keysHad = append(w.keysHad, next.Current)
	w.logf("the digest key is rotated: the controller restarts with %s, and %s before it",
		KeyFingerprint(w.digestKeys.Current), KeyFingerprint(w.digestKeys.Previous))
	w.covered["digest key rotated"]++
	w.keyChanged()
	return true
}

// keyChanged credits every Deployment whose template runs a Secret with a
// write of its key record, and restarts the controller.
func (w *world) keyChanged() {
	for _, obj := range w.server.list(deploymentsResource) {
		d := obj.(*appsv1.Deployment)
		if d.Spec.Template.Annotations[gamesv1.SecretsAnnotation] != "" {
			w.keyRecords[d.Name] = true
		}
	}
	w.startController()
}

// spendKeyRecord is told of each controller write that changed a
// Deployment: a write of the key record alone spends its credit, and
// reports true; any other write is the write credits'.
func (w *world) spendKeyRecord(before, after *appsv1.Deployment) bool {
	if !w.keyRecords[after.Name] || before == nil {
		return false
	}
	b, a := before.DeepCopy(), after.DeepCopy()
	for _, d := range []*appsv1.Deployment{b, a} {
		delete(d.Labels, gamesv1.SecretsKeyLabel)
		d.ResourceVersion, d.ManagedFields = "", nil
	}
	if !equality.Semantic.DeepEqual(b.ObjectMeta, a.ObjectMeta) || !equality.Semantic.DeepEqual(b.Spec, a.Spec) {
		return false
	}
	delete(w.keyRecords, after.Name)
	w.covered["digest key record written"]++
	return true
}

// digestOf is the digest of an object's data as the kind's cache stores it
// now: a Secret's under the world's current key.
func (w *world) digestOf(in *worldInput, obj object) string {
	if in.resource != secretsResource {
		return in.digestOf(obj)
	}
	stored, err := w.digestKeys.Digester()(copyOf(obj))
	must(err)
	return stored.(object).GetAnnotations()[dataDigestAnnotation]
}

// runs is the set of the kind Deployment d runs, as the controller reads it:
// a digest made under another key, which the current key stands in for,
// counts as what its key record says.
func (w *world) runs(in *worldInput, d *appsv1.Deployment) inputSet {
	set := in.running(d)
	if in.resource != secretsResource || set.names == "" {
		return set
	}
	if r := parseKeyRecord(d.Labels[gamesv1.SecretsKeyLabel]); r.key == KeyFingerprint(w.digestKeys.Current) && r.hash != "" {
		set.hash = r.hash
	}
	return set
}

// checkKeyRestart is told of each controller write that changed a
// Deployment: a write that gives its template another Secret digest for
// the same data, as the keys the world has had tell them, restarted its game
// servers for nothing but a key (key-change-restart).
func (w *world) checkKeyRestart(before, after *appsv1.Deployment) {
	if !w.keyChanges || before == nil {
		return
	}
	for _, in := range w.inputs {
		if in.resource != secretsResource {
			continue
		}
		had, has := in.running(before), in.running(after)
		if had.names == "" || had.names != has.names || had.hash == has.hash {
			continue
		}
		ran, known := w.dataRun(in, had)
		runs, knownNow := w.dataRun(in, has)
		if !known || !knownNow {
			w.covered["Secret digest changed, data not told"]++
			continue
		}
		w.covered["Secret digest change checked against the keys"]++
		same := slices.Equal(ran, runs)
		if _, recorded := before.Labels[gamesv1.SecretsKeyLabel]; same && !recorded && len(w.keysHad) > 2 {
			// Written before the controller recorded keys (populated), and
			// through more than one key change since: which key it was
			// made under, no process can tell (docs/tenancy.md: rotate
			// once every session's Deployment records its key).
			w.covered["Secret digest of an earlier version, key unknown"]++
			continue
		}
		if same && restartsAnyway(in, before, after) {
			// The template changes for another reason (the session's
			// spec, its profile's revision): its pods restart whatever
			// the digest, and the write brings the digest to the current
			// key, as sessionInputs says. Whether it was due is the write
			// ledger's question.
			w.covered["Secret digest refreshed by a write that restarts anyway"]++
			continue
		}
		if same && w.adoptedOtherData(in, before, had, ran) {
			// The key that took the digest over took it for the data its
			// cache showed, not those the template ran (a change pending,
			// or made while no process held a key): the move is the
			// documented cost of a lost key, not a restart for a key.
			w.covered["Secret digest taken over for other data, corrected"]++
			continue
		}
		if same {
			w.violate("key-change-restart", "Deployment %s restarted with another digest of the same data of its Secrets (%v): "+
				"a new digest key restarted its game servers", after.Name, ran)
		}
	}
}

// restartsAnyway reports whether after's pod template differs from before's
// in more than the digest of the kind's objects.
func restartsAnyway(in *worldInput, before, after *appsv1.Deployment) bool {
	a, b := before.Spec.Template.DeepCopy(), after.Spec.Template.DeepCopy()
	delete(a.Annotations, in.hashAnnotation)
	delete(b.Annotations, in.hashAnnotation)
	return !equality.Semantic.DeepEqual(a, b)
}

// adoptedOtherData reports whether d's key record says a key took its
// digest over for other data than those it runs, told by ran (dataRun).
func (w *world) adoptedOtherData(in *worldInput, d *appsv1.Deployment, set inputSet, ran []int) bool {
	r := parseKeyRecord(d.Labels[gamesv1.SecretsKeyLabel])
	if r.hash == "" || r.key != KeyFingerprint(w.digestKeys.Current) {
		return false
	}
	names := splitNames(set.names)
	digests := make([]string, len(names))
	for i, name := range names {
		digests[i] = w.dataDigests(in, name)[ran[i]]
	}
	return inputSetHash(names, digests) != r.hash
}

// dataRun tells which data a template's set of Secrets runs, by the index of
// each one's data among those it can have held (dataDigests), if the digest
// of some of them under one of the keys the world has had is the set's.
func (w *world) dataRun(in *worldInput, set inputSet) ([]int, bool) {
	names := splitNames(set.names)
	versions := make([][]object, len(names))
	for i, name := range names {
		w.dataDigests(in, name) // the data sets, at least
		versions[i] = w.canary.versions[in.kind+"/"+name]
	}
	for _, key := range w.keysHad {
		digester := SecretDigestKeys{Current: key}.Digester()
		choices := make([][]string, len(names))
		for i := range names {
			for _, v := range versions[i] {
				stored, err := digester(copyOf(v))
				must(err)
				choices[i] = append(choices[i], stored.(object).GetAnnotations()[dataDigestAnnotation])
			}
		}
		picked := make([]int, len(names))
		digests := make([]string, len(names))
		var try func(i int) bool
		try = func(i int) bool {
			if i == len(names) {
				return inputSetHash(names, digests) == set.hash
			}
			for j, d := range choices[i] {
				if picked[i], digests[i] = j, d; try(i + 1) {
					return true
				}
			}
			return false
		}
		if try(0) {
			return picked, true
		}
	}
	return nil, false
}
